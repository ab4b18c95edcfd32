package tests

import (
	"context"
	"fmt"
	"os"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"

	"github.com/redeliver-go/redeliver/adapters/kafkago"
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
	addrs := strings.Split(os.Getenv("REDELIVER_KAFKA_BROKERS"), ",")
	if addrs[0] == "" {
		cluster, err := kfake.NewCluster(kfake.NumBrokers(1))
		if err != nil {
			b.Fatal(err)
		}
		defer cluster.Close()
		addrs = cluster.ListenAddrs()
	}
	var run atomic.Int64
	for _, partitions := range []int32{1, 8, 100} {
		b.Run(fmt.Sprintf("partitions=%d", partitions), func(b *testing.B) {
			topic := fmt.Sprintf("late-%d-%d", os.Getpid(), run.Add(1))
			benchProduce(b, addrs, topic, partitions, int(partitions)*10)
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
			c, err := kafkago.New(proc, kafkago.WithGroupConfig(benchGroup(addrs, topic)))
			if err != nil {
				b.Fatal(err)
			}
			ctx, cancel := context.WithCancel(context.Background())
			ran := make(chan error, 1)
			b.ResetTimer()
			go func() { ran <- c.Run(ctx) }()
			deadline := time.Now().Add(5 * time.Minute)
			for done.Load() < int64(partitions) {
				if time.Now().After(deadline) {
					b.Fatalf("waited 5 minutes: %d of %d partitions handled", done.Load(), partitions)
				}
				time.Sleep(10 * time.Millisecond)
			}
			cancel()
			if err := <-ran; err != nil {
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
			benchDelete(b, addrs, topic)
		})
	}
}
