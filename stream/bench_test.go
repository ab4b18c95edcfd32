package stream_test

import (
	"context"
	"testing"

	"github.com/redeliver-go/redeliver/checkpoint"
	"github.com/redeliver-go/redeliver/stream"
)

// genClaim hands out n batches of size records, generated in place, and
// cancels its context after the last commit.
type genClaim struct {
	recs    []stream.Record
	n, sent int
	next    int64
	last    int64
	cancel  context.CancelFunc
}

func newGenClaim(n, size int, cancel context.CancelFunc) *genClaim {
	c := &genClaim{recs: make([]stream.Record, size), n: n, cancel: cancel}
	for i := range c.recs {
		c.recs[i] = stream.Record{Topic: "bench", Value: make([]byte, 100)}
	}
	return c
}

func (c *genClaim) Topic() string              { return "bench" }
func (c *genClaim) Partition() int32           { return 0 }
func (c *genClaim) Committed() (int64, string) { return -1, "" }
func (c *genClaim) Pause()                     {}
func (c *genClaim) Resume()                    {}
func (c *genClaim) Fetch(ctx context.Context) ([]stream.Record, error) {
	if c.sent == c.n {
		<-ctx.Done()
		return nil, ctx.Err()
	}
	c.sent++
	for i := range c.recs {
		c.recs[i].Offset = c.next
		c.next++
	}
	return c.recs, nil
}
func (c *genClaim) Commit(_ context.Context, next int64, _ string) error {
	c.last = next
	if next == c.next && c.sent == c.n {
		c.cancel()
	}
	return nil
}

// BenchmarkSuccessPath compares the Processor on the success path with the
// same fetch/handle/commit loop written by hand. Compare the records/s of
// the two sub-benchmarks.
func BenchmarkSuccessPath(b *testing.B) {
	const size = 100
	var sink int
	var h stream.Handler = stream.HandlerFunc(func(_ context.Context, bt *stream.Batch) error {
		for i := range bt.Records {
			sink += len(bt.Records[i].Value)
		}
		return nil
	})
	b.Run("direct", func(b *testing.B) {
		ctx, cancel := context.WithCancel(b.Context())
		defer cancel()
		c := newGenClaim(b.N, size, cancel)
		b.ReportAllocs()
		bt := stream.Batch{Topic: c.Topic(), Partition: c.Partition()}
		b.ResetTimer()
		for range b.N {
			recs, _ := c.Fetch(ctx)
			bt.Records = recs
			if err := h.Handle(ctx, &bt); err != nil {
				b.Fatal(err)
			}
			_ = c.Commit(ctx, recs[len(recs)-1].Offset+1, "")
		}
		b.ReportMetric(float64(b.N*size)/b.Elapsed().Seconds(), "records/s")
	})
	b.Run("processor", func(b *testing.B) {
		proc, err := stream.NewProcessor(h, stream.WithPolicy(checkpoint.Policy{MaxRetries: 10, Backoff: checkpoint.Exponential(1)}))
		if err != nil {
			b.Fatal(err)
		}
		ctx, cancel := context.WithCancel(b.Context())
		defer cancel()
		c := newGenClaim(b.N, size, cancel)
		b.ReportAllocs()
		b.ResetTimer()
		_ = proc.Process(ctx, c)
		b.StopTimer()
		if c.last != int64(b.N*size) {
			b.Fatalf("committed %d, want %d", c.last, b.N*size)
		}
		b.ReportMetric(float64(b.N*size)/b.Elapsed().Seconds(), "records/s")
	})
	_ = sink
}
