package kafkatest

import (
	"context"
	"errors"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redeliver-go/redeliver/checkpoint"
	"github.com/redeliver-go/redeliver/stream"
)

// LatenessBackoff is the backoff of every retry of [Lateness].
const LatenessBackoff = 20 * time.Millisecond

// Lateness measures, through an adapter, how late redeliveries start: from
// a retry's due time (the RetryScheduled hook's At) to the handler's call.
// The topic must hold one batch per partition (10 records each); every
// batch fails on every delivery but its last, LatenessBackoff apart, so the
// partitions are in backoff at once, and b.N redeliveries are spread over
// them. start runs the adapter over proc and returns a function that stops
// it and returns Run's error. It reports p50-late-µs and p99-late-µs.
func Lateness(b *testing.B, partitions int32, start func(proc *stream.Processor) (stop func() error)) {
	retries := max(1, (b.N+int(partitions)-1)/int(partitions))
	var (
		mu   sync.Mutex
		due  = map[int32]time.Time{}
		late []time.Duration
		done atomic.Int64
	)
	errLate := errors.New("kafkatest: this delivery fails")
	h := stream.HandlerFunc(func(_ context.Context, bt *stream.Batch) error {
		now := time.Now()
		if bt.Attempt.Retries > 0 {
			mu.Lock()
			late = append(late, now.Sub(due[bt.Partition]))
			mu.Unlock()
		}
		if bt.Attempt.Retries < retries {
			return errLate
		}
		return nil
	})
	proc, err := stream.NewProcessor(h,
		stream.WithPolicy(checkpoint.Policy{MaxRetries: checkpoint.Infinite, Backoff: checkpoint.Fixed(LatenessBackoff)}),
		stream.WithHooks(stream.Hooks{
			RetryScheduled: func(e stream.RetryEvent) {
				mu.Lock()
				due[e.Partition] = e.At
				mu.Unlock()
			},
			Checkpointed: func(e stream.CheckpointEvent) {
				if e.Metadata == "" {
					done.Add(1)
				}
			},
		}))
	if err != nil {
		b.Fatal(err)
	}
	b.ResetTimer()
	stop := start(proc)
	for deadline := time.Now().Add(5 * time.Minute); done.Load() < int64(partitions); time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			b.Fatalf("waited 5 minutes: %d of %d partitions handled", done.Load(), partitions)
		}
	}
	if err := stop(); err != nil {
		b.Fatalf("Run: %v", err)
	}
	b.StopTimer()
	mu.Lock()
	defer mu.Unlock()
	if want := retries * int(partitions); len(late) != want {
		b.Fatalf("%d redeliveries, want %d", len(late), want)
	}
	slices.Sort(late)
	b.ReportMetric(float64(late[len(late)/2].Microseconds()), "p50-late-µs")
	b.ReportMetric(float64(late[len(late)*99/100].Microseconds()), "p99-late-µs")
}
