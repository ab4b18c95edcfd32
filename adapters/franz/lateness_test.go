package franz_test

import (
	"context"
	"fmt"
	"os"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redeliver-go/redeliver/checkpoint"
	"github.com/redeliver-go/redeliver/stream"
)

// BenchmarkRedeliveryLateness measures, through the adapter, how late a
// redelivery starts: from the retry's due time (the RetryScheduled hook's
// At) to the handler's call. Each of 1, 8 or 100 partitions holds one batch
// of 10 records that fails on every delivery but its last, each retry 20ms
// after the failure, so the partitions are in backoff at once; b.N is the
// number of redeliveries, spread over the partitions. p50-late-µs and
// p99-late-µs are the percentiles over every redelivery.
func BenchmarkRedeliveryLateness(b *testing.B) {
	const backoff = 20 * time.Millisecond
	for _, partitions := range []int32{1, 8, 100} {
		b.Run(fmt.Sprintf("partitions=%d", partitions), func(b *testing.B) {
			addrs := benchAddrs(b)
			topic := fmt.Sprintf("late-%d-%d", os.Getpid(), benchRun.Add(1))
			benchProduce(b, addrs, topic, partitions, int(partitions)*10, false)
			retries := max(1, (b.N+int(partitions)-1)/int(partitions))
			var (
				mu   sync.Mutex
				due  = map[int32]time.Time{}
				late []time.Duration
				done atomic.Int64
			)
			h := stream.HandlerFunc(func(_ context.Context, bt *stream.Batch) error {
				now := time.Now()
				if bt.Attempt.Retry > 0 {
					mu.Lock()
					late = append(late, now.Sub(due[bt.Partition]))
					mu.Unlock()
				}
				if bt.Attempt.Retry < retries {
					return errBench
				}
				return nil
			})
			proc, err := stream.NewProcessor(h,
				stream.WithPolicy(checkpoint.Policy{MaxRetries: checkpoint.Infinite, Backoff: checkpoint.Fixed(backoff)}),
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
			stop := runFranz(b, proc, addrs, topic)
			waitFor(b, "every partition's batch handled", func() bool { return done.Load() >= int64(partitions) })
			stop()
			b.StopTimer()
			mu.Lock()
			defer mu.Unlock()
			if want := retries * int(partitions); len(late) != want {
				b.Fatalf("%d redeliveries, want %d", len(late), want)
			}
			slices.Sort(late)
			b.ReportMetric(float64(late[len(late)/2].Microseconds()), "p50-late-µs")
			b.ReportMetric(float64(late[len(late)*99/100].Microseconds()), "p99-late-µs")
			benchDelete(b, addrs, topic)
		})
	}
}
