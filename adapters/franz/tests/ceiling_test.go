package franz_test

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/redeliver-go/redeliver/adapters/internal/kafkatest"
)

// BenchmarkCeiling runs the scenarios success, failure (every 10th batch
// fails once and succeeds on a retry 1ms later) and poison (one record in
// the middle of partition 0 always fails, given up after 5 retries 10ms
// apart) at 1, 8 and 1,000 partitions through the fastest at-least-once
// loops a franz-go user writes, beside the adapter and the raw loop:
//
//   - marks: one loop with kgo.AutoCommitMarks: PollRecords(ctx, 500),
//     handle each record (a failing poll is handled again in place after
//     its delay), MarkCommitRecords; the client commits the marks in the
//     background (its default interval, 5s), and one synchronous
//     CommitMarkedOffsets once every record was handled.
//   - gpp: franz-go's goroutine-per-partition example (autocommit marks):
//     PollFetches hands each partition's records to a goroutine of the
//     partition's through a channel of 5, which handles them in batches of
//     at most 500 (a failing batch again in place after its delay) and
//     marks them; one synchronous CommitMarkedOffsets at the end.
//
// The ceiling of a scenario is the faster of marks and gpp; scripts/bench.sh
// prints each adapter's ratio to it. Leaves:
// <scenario>/<loop>/partitions=<P>.
func BenchmarkCeiling(b *testing.B) {
	loops := []kafkatest.Loop{{Name: "marks", Run: marksLoop}, {Name: "gpp", Run: gppLoop}, {Name: "raw", Run: rawLoop}, kafkatest.RedeliverLoop(adapter),
		kafkatest.RedeliverRecordLoop(adapter), kafkatest.RedeliverKeyLoop(adapter)}
	counts := []int32{1, 8, 1000}
	b.Run("success", func(b *testing.B) { kafkatest.RunLeaves(b, loops, counts, false, kafkatest.Success) })
	b.Run("failure", func(b *testing.B) { kafkatest.RunLeaves(b, loops, counts, false, kafkatest.FailEveryTenth) })
	b.Run("poison", func(b *testing.B) { kafkatest.RunLeaves(b, loops, counts, false, kafkatest.PoisonInTheMiddle) })
}

// handleInPlace handles one batch of partition p's records under the
// scenario the way a loop that retries in place does: a failing batch
// sleeps its delay and is handled again; the poison record's batch is
// retried PoisonRetries times and then given up with the rest of it.
func handleInPlace(l *kafkatest.Leaf, p int32, recs []*kgo.Record) {
	if len(recs) == 0 {
		return
	}
	first, last := recs[0].Offset, recs[len(recs)-1].Offset
	switch {
	case l.Poisoned(p, first, last):
		for retry := 0; ; retry++ {
			l.PoisonFailed(retry == kafkatest.PoisonRetries)
			if retry == kafkatest.PoisonRetries {
				break
			}
			time.Sleep(kafkatest.PoisonDelay)
		}
	case l.FailsFirst():
		time.Sleep(kafkatest.FailDelay)
	}
	n := 0
	for _, r := range recs {
		n += len(r.Value)
	}
	l.Handled(p, first, last, n)
}

// marksLoop is one loop that marks what it handled and lets the client
// commit the marks in the background.
func marksLoop(l *kafkatest.Leaf, addrs []string, topic string) time.Duration {
	b := l.B
	cl, err := kgo.NewClient(append(benchOpts(addrs, topic), kgo.AutoCommitMarks())...)
	if err != nil {
		b.Fatal(err)
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	for seen := 0; seen < b.N; {
		fs := cl.PollRecords(ctx, kafkatest.BenchBatch)
		if err := ctx.Err(); err != nil {
			b.Fatalf("marks loop: %d of %d records: %v", seen, b.N, err)
		}
		fs.EachError(func(t string, p int32, err error) { b.Fatalf("fetch %s/%d: %v", t, p, err) })
		n := fs.NumRecords()
		if n == 0 {
			continue
		}
		l.Started()
		// The poll is the batch, as in the raw loop: it fails as a whole.
		if l.FailsFirst() {
			time.Sleep(kafkatest.FailDelay)
		}
		fs.EachPartition(func(p kgo.FetchTopicPartition) {
			if len(p.Records) == 0 {
				return
			}
			first, last := p.Records[0].Offset, p.Records[len(p.Records)-1].Offset
			if l.Poisoned(p.Partition, first, last) {
				for retry := 0; ; retry++ {
					l.PoisonFailed(retry == kafkatest.PoisonRetries)
					if retry == kafkatest.PoisonRetries {
						break
					}
					time.Sleep(kafkatest.PoisonDelay)
				}
			}
			bytes := 0
			for _, r := range p.Records {
				bytes += len(r.Value)
			}
			l.Handled(p.Partition, first, last, bytes)
			cl.MarkCommitRecords(p.Records...)
		})
		seen += n
	}
	if err := cl.CommitMarkedOffsets(ctx); err != nil {
		b.Fatalf("commit: %v", err)
	}
	l.Committed()
	return time.Since(l.Start())
}

// gppLoop is franz-go's goroutine-per-partition example with autocommit
// marks: a goroutine per assigned partition handles what the poll loop
// hands it.
func gppLoop(l *kafkatest.Leaf, addrs []string, topic string) time.Duration {
	b := l.B
	type pconsumer struct {
		recs chan []*kgo.Record
		done chan struct{}
	}
	var (
		mu        sync.Mutex
		consumers = make(map[int32]*pconsumer)
		left      atomic.Int64
		all       = make(chan struct{})
		cl        *kgo.Client
	)
	left.Store(int64(b.N))
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	pollCtx, stopPolling := context.WithCancel(ctx)
	defer stopPolling()
	consume := func(p int32, pc *pconsumer) {
		defer close(pc.done)
		for recs := range pc.recs {
			for len(recs) > 0 {
				n := min(len(recs), kafkatest.BenchBatch)
				handleInPlace(l, p, recs[:n])
				cl.MarkCommitRecords(recs[:n]...)
				if left.Add(-int64(n)) == 0 {
					close(all)
					stopPolling()
				}
				recs = recs[n:]
			}
		}
	}
	stopAll := func() {
		mu.Lock()
		defer mu.Unlock()
		for p, pc := range consumers {
			close(pc.recs)
			<-pc.done
			delete(consumers, p)
		}
	}
	var err error
	cl, err = kgo.NewClient(append(benchOpts(addrs, topic), kgo.AutoCommitMarks(), kgo.BlockRebalanceOnPoll(),
		kgo.OnPartitionsAssigned(func(_ context.Context, _ *kgo.Client, assigned map[string][]int32) {
			mu.Lock()
			defer mu.Unlock()
			for _, ps := range assigned {
				for _, p := range ps {
					pc := &pconsumer{recs: make(chan []*kgo.Record, 5), done: make(chan struct{})}
					consumers[p] = pc
					go consume(p, pc)
				}
			}
		}),
		kgo.OnPartitionsRevoked(func(ctx context.Context, cl *kgo.Client, _ map[string][]int32) {
			stopAll()
			if err := cl.CommitMarkedOffsets(ctx); err != nil {
				l.B.Errorf("commit on revoke: %v", err)
			}
		}),
		kgo.OnPartitionsLost(func(context.Context, *kgo.Client, map[string][]int32) { stopAll() }),
	)...)
	if err != nil {
		b.Fatal(err)
	}
	defer cl.Close()
	defer stopAll()
	for {
		fs := cl.PollFetches(pollCtx)
		if pollCtx.Err() != nil {
			break
		}
		fs.EachError(func(t string, p int32, err error) { b.Fatalf("fetch %s/%d: %v", t, p, err) })
		fs.EachPartition(func(p kgo.FetchTopicPartition) {
			if len(p.Records) == 0 {
				return
			}
			l.Started()
			mu.Lock()
			pc := consumers[p.Partition]
			mu.Unlock()
			pc.recs <- p.Records
		})
		cl.AllowRebalance()
	}
	select {
	case <-all:
	default:
		b.Fatalf("gpp loop: %d of %d records left: %v", left.Load(), b.N, ctx.Err())
	}
	if err := cl.CommitMarkedOffsets(ctx); err != nil {
		b.Fatalf("commit: %v", err)
	}
	l.Committed()
	cl.AllowRebalance()
	return time.Since(l.Start())
}
