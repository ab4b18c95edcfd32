package tests

import (
	"context"
	"errors"
	"fmt"
	"os"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/segmentio/kafka-go"
	"github.com/twmb/franz-go/pkg/kfake"

	"github.com/redeliver-go/redeliver/adapters/kafkago"
	"github.com/redeliver-go/redeliver/checkpoint"
	"github.com/redeliver-go/redeliver/stream"
)

// The failure-path benchmarks run the scenarios of the franz-go adapter's
// (adapters/franz/bench_test.go) through this adapter and through the
// rawconn loop of BenchmarkSuccessPath that retries in place:
//
//   - BenchmarkFailurePath: every 10th batch (counting first deliveries)
//     fails once and succeeds on a retry 1ms later;
//   - BenchmarkPoison: one record, in the middle of partition 0, always
//     fails and is given up after 5 retries 10ms apart. others-done-ms is the
//     time from the first record until every record of the other partitions
//     was handled, others-during-retries how many of those were handled
//     while the poison record was retried.
//
// Every leaf checks that every record was handled (or given up).

const (
	failDelay     = time.Millisecond
	poisonRetries = 5
	poisonDelay   = 10 * time.Millisecond
)

var errBench = errors.New("bench: handler failed")

type failScenario struct {
	failOnce        int
	poisonPartition int
	poisonOffset    int64
}

// failLeaf is one run's bookkeeping.
type failLeaf struct {
	b       *testing.B
	sc      failScenario
	handled [][]bool
	batches atomic.Int64

	mu          sync.Mutex
	start       time.Time
	poisonFirst time.Time
	poisonGone  time.Time
	othersDone  time.Time
	othersLeft  int
	during      int
}

func newFailLeaf(b *testing.B, sc failScenario, partitions int32) *failLeaf {
	l := &failLeaf{b: b, sc: sc, handled: make([][]bool, partitions)}
	for p, n := range perPartition(b.N, partitions) {
		l.handled[p] = make([]bool, n)
		if p != sc.poisonPartition {
			l.othersLeft += n
		}
	}
	return l
}

func (l *failLeaf) started() {
	l.mu.Lock()
	if l.start.IsZero() {
		l.start = time.Now()
	}
	l.mu.Unlock()
}

func (l *failLeaf) failsFirst() bool {
	return l.sc.failOnce > 0 && l.batches.Add(1)%int64(l.sc.failOnce) == 0
}

func (l *failLeaf) poisoned(p int, first, last int64) bool {
	return p == l.sc.poisonPartition && first <= l.sc.poisonOffset && l.sc.poisonOffset <= last
}

func (l *failLeaf) poisonFailed(gaveUp bool) {
	l.mu.Lock()
	if l.poisonFirst.IsZero() {
		l.poisonFirst = time.Now()
	}
	if gaveUp {
		l.poisonGone = time.Now()
	}
	l.mu.Unlock()
}

// done marks offsets [first, last] of partition p handled.
func (l *failLeaf) done(p int, first, last int64) {
	for off := first; off <= last; off++ {
		l.handled[p][off] = true
	}
	if p == l.sc.poisonPartition || l.sc.poisonPartition < 0 {
		return
	}
	n := int(last - first + 1)
	l.mu.Lock()
	if !l.poisonFirst.IsZero() && l.poisonGone.IsZero() {
		l.during += n
	}
	l.othersLeft -= n
	if l.othersLeft == 0 {
		l.othersDone = time.Now()
	}
	l.mu.Unlock()
}

func (l *failLeaf) finish(d time.Duration) {
	for p, hs := range l.handled {
		if i := slices.Index(hs, false); i >= 0 {
			l.b.Fatalf("partition %d: record at offset %d never handled", p, i)
		}
	}
	l.b.ReportMetric(float64(l.b.N)/d.Seconds(), "records/s")
	if l.sc.poisonPartition >= 0 {
		l.b.ReportMetric(float64(l.othersDone.Sub(l.start).Milliseconds()), "others-done-ms")
		l.b.ReportMetric(float64(l.during), "others-during-retries")
	}
}

func runFailLeaves(b *testing.B, counts []int32, sc func(partitions int32, n int) failScenario) {
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
	for _, loop := range []struct {
		name string
		fn   func(l *failLeaf, addrs []string, topic string, partitions int32) time.Duration
	}{
		{"rawconn", rawConnRetryLoop},
		{"redeliver", redeliverFailLoop},
	} {
		b.Run(loop.name, func(b *testing.B) {
			for _, partitions := range counts {
				b.Run(fmt.Sprintf("partitions=%d", partitions), func(b *testing.B) {
					topic := fmt.Sprintf("benchf-%d-%d", os.Getpid(), run.Add(1))
					benchProduce(b, addrs, topic, partitions, b.N)
					l := newFailLeaf(b, sc(partitions, b.N), partitions)
					b.ReportAllocs()
					cpu0 := cpuTime()
					b.ResetTimer()
					d := loop.fn(l, addrs, topic, partitions)
					b.StopTimer()
					l.finish(d)
					b.ReportMetric(float64(cpuTime()-cpu0)/float64(b.N), "cpu-ns/record")
					commitCount.Store(0)
					benchDelete(b, addrs, topic)
				})
			}
		})
	}
}

// BenchmarkFailurePath: every 10th batch fails once and succeeds on a retry
// 1ms later; the rawconn loop sleeps 1ms and handles the batch again.
func BenchmarkFailurePath(b *testing.B) {
	runFailLeaves(b, []int32{1, 8}, func(int32, int) failScenario {
		return failScenario{failOnce: 10, poisonPartition: -1}
	})
}

// BenchmarkPoison: one record always fails and is given up after its
// retries; the rawconn loop retries its batch in place.
func BenchmarkPoison(b *testing.B) {
	runFailLeaves(b, []int32{8}, func(partitions int32, n int) failScenario {
		return failScenario{poisonPartition: 0, poisonOffset: int64(n/int(partitions)) / 2}
	})
}

// rawConnRetryLoop is rawConnLoop with the scenario's failures retried in
// place: a failing batch is handled again after the delay, then committed.
func rawConnRetryLoop(l *failLeaf, addrs []string, topic string, partitions int32) time.Duration {
	b := l.b
	return rawJoin(b, addrs, topic, partitions, func(ctx context.Context, r *rawRun, partition int, start int64, want int) error {
		conn, err := kafka.DefaultDialer.DialLeader(ctx, "tcp", addrs[0], topic, partition)
		if err != nil {
			return err
		}
		defer conn.Close()
		if start < 0 {
			if start, err = conn.ReadFirstOffset(); err != nil {
				return err
			}
		}
		if _, err := conn.Seek(start, kafka.SeekAbsolute); err != nil {
			return err
		}
		var msgs []kafka.Message
		for seen := 0; seen < want; {
			conn.SetReadDeadline(time.Now().Add(benchMaxWait + 10*time.Second))
			batch := conn.ReadBatchWith(kafka.ReadBatchConfig{MinBytes: 1, MaxBytes: 1e6, MaxWait: benchMaxWait})
			msgs = msgs[:0]
			for {
				m, err := batch.ReadMessage()
				if err != nil {
					break
				}
				msgs = append(msgs, m)
			}
			if err := batch.Close(); err != nil {
				return err
			}
			for i := 0; i < len(msgs); {
				n := min(benchBatch, len(msgs)-i)
				r.started()
				l.started()
				first, last := msgs[i].Offset, msgs[i+n-1].Offset
				switch {
				case l.poisoned(partition, first, last):
					for retry := 0; ; retry++ {
						l.poisonFailed(retry == poisonRetries)
						if retry == poisonRetries {
							break
						}
						time.Sleep(poisonDelay)
					}
				case l.failsFirst():
					time.Sleep(failDelay)
				}
				l.done(partition, first, last)
				if err := r.commit(ctx, topic, partition, last+1); err != nil {
					return err
				}
				i += n
				seen += n
			}
			clear(msgs)
		}
		return nil
	})
}

// redeliverFailLoop runs the scenario through the Processor and the adapter
// until every partition's checkpoint is at its end.
func redeliverFailLoop(l *failLeaf, addrs []string, topic string, _ int32) time.Duration {
	b := l.b
	var (
		mu    sync.Mutex
		next  = make(map[int32]int64)
		total int64
		done  = make(chan time.Time, 1)
	)
	h := stream.HandlerFunc(func(_ context.Context, bt *stream.Batch) error {
		l.started()
		p, first, last := int(bt.Partition), bt.FirstOffset(), bt.LastOffset()
		if l.poisoned(p, first, last) {
			l.poisonFailed(bt.Attempt.Last)
			return errBench
		}
		if bt.Attempt.Retry == 0 && l.failsFirst() {
			return errBench
		}
		l.done(p, first, last)
		return nil
	})
	hooks := stream.Hooks{
		Checkpointed: func(e stream.CheckpointEvent) {
			if e.Metadata != "" {
				return // the retry state of a withheld batch
			}
			mu.Lock()
			defer mu.Unlock()
			total += e.Next - next[e.Partition]
			next[e.Partition] = e.Next
			if total == int64(b.N) {
				done <- time.Now()
			}
		},
		Exhausted: func(e stream.ExhaustedEvent) { l.done(int(e.Partition), e.FirstOffset, e.LastOffset) },
	}
	policy := checkpoint.Policy{MaxRetries: 3, Backoff: checkpoint.Fixed(failDelay)}
	if l.sc.poisonPartition >= 0 {
		policy = checkpoint.Policy{MaxRetries: poisonRetries, Backoff: checkpoint.Fixed(poisonDelay)}
	}
	proc, err := stream.NewProcessor(h, stream.WithHooks(hooks), stream.WithPolicy(policy))
	if err != nil {
		b.Fatal(err)
	}
	c, err := kafkago.New(proc, kafkago.WithGroupConfig(benchGroup(addrs, topic)), kafkago.WithMaxBatch(benchBatch),
		kafkago.WithFetchConfig(kafka.ReadBatchConfig{MaxWait: benchMaxWait}))
	if err != nil {
		b.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	stopped := make(chan error, 1)
	go func() { stopped <- c.Run(ctx) }()
	defer func() {
		cancel()
		<-stopped
	}()
	select {
	case end := <-done:
		l.mu.Lock()
		defer l.mu.Unlock()
		return end.Sub(l.start)
	case err := <-stopped:
		b.Fatalf("consumer stopped: %v", err)
	case <-time.After(5 * time.Minute):
		b.Fatal("records not all committed in 5 minutes")
	}
	return 0
}
