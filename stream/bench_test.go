package stream_test

import (
	"context"
	"testing"

	"github.com/redeliver-go/redeliver/checkpoint"
	"github.com/redeliver-go/redeliver/stream"
	"github.com/redeliver-go/redeliver/stream/streamtest"
)

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
		ctx := b.Context()
		c := streamtest.NewGenerator(b.N, size, 100)
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
		c := streamtest.NewGenerator(b.N, size, 100)
		go func() { <-c.Done(); cancel() }()
		b.ReportAllocs()
		b.ResetTimer()
		_ = proc.Process(ctx, c)
		b.StopTimer()
		if last, _ := c.Committed(); last != int64(b.N*size) {
			b.Fatalf("committed %d, want %d", last, b.N*size)
		}
		b.ReportMetric(float64(b.N*size)/b.Elapsed().Seconds(), "records/s")
	})
	_ = sink
}
