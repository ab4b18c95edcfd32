package franz_test

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/redeliver-go/redeliver/adapters/franz"
	"github.com/redeliver-go/redeliver/stream"
)

// benchBatch is the batch size of both loops: records per poll for the raw
// loop, records per batch for the Processor.
const benchBatch = 500

// BenchmarkSuccessPath measures success-path throughput through the
// Processor and this adapter ("redeliver") against a raw franz-go group
// consumer that polls at most benchBatch records and commits them
// synchronously once per poll ("raw"), on the same kfake cluster in the same
// run. b.N is the number of records: run it with -benchtime=200000x or so.
//
// The records/s metric counts from the first record handed to the handler
// (or returned by a poll) to the commit of the last one, so the group join
// is left out of both; ns/op includes it.
func BenchmarkSuccessPath(b *testing.B) {
	cluster, err := kfake.NewCluster(kfake.NumBrokers(1))
	if err != nil {
		b.Fatal(err)
	}
	defer cluster.Close()
	addrs := cluster.ListenAddrs()
	var run atomic.Int64
	for _, loop := range []struct {
		name string
		fn   func(b *testing.B, addrs []string, topic string, partitions int32) time.Duration
	}{
		{"raw", rawLoop},
		{"redeliver", redeliverLoop},
	} {
		b.Run(loop.name, func(b *testing.B) {
			for _, partitions := range []int32{1, 8} {
				b.Run(fmt.Sprintf("partitions=%d", partitions), func(b *testing.B) {
					topic := fmt.Sprintf("bench-%d", run.Add(1))
					benchProduce(b, addrs, topic, partitions, b.N)
					b.ReportAllocs()
					b.ResetTimer()
					d := loop.fn(b, addrs, topic, partitions)
					b.StopTimer()
					b.ReportMetric(float64(b.N)/d.Seconds(), "records/s")
					benchDelete(b, addrs, topic)
				})
			}
		})
	}
}

// benchProduce creates topic and spreads n records of 100 bytes over its
// partitions.
func benchProduce(b *testing.B, addrs []string, topic string, partitions int32, n int) {
	b.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(addrs...), kgo.RecordPartitioner(kgo.ManualPartitioner()),
		kgo.ProducerLinger(0), kgo.MaxBufferedRecords(1<<20))
	if err != nil {
		b.Fatal(err)
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	if resp, err := kadm.NewClient(cl).CreateTopic(ctx, partitions, 1, nil, topic); err != nil || resp.Err != nil {
		b.Fatal(err, resp.Err)
	}
	value := make([]byte, 100)
	var (
		wg    sync.WaitGroup
		first atomic.Value
	)
	for i := range n {
		wg.Add(1)
		cl.Produce(ctx, &kgo.Record{Topic: topic, Partition: int32(i) % partitions, Value: value}, func(_ *kgo.Record, err error) {
			if err != nil {
				first.CompareAndSwap(nil, err)
			}
			wg.Done()
		})
	}
	wg.Wait()
	if err, _ := first.Load().(error); err != nil {
		b.Fatal(err)
	}
}

// benchDelete deletes topic, so that the cluster's memory does not grow
// from run to run.
func benchDelete(b *testing.B, addrs []string, topic string) {
	b.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(addrs...))
	if err != nil {
		b.Fatal(err)
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if _, err := kadm.NewClient(cl).DeleteTopics(ctx, topic); err != nil {
		b.Fatal(err)
	}
}

func benchOpts(addrs []string, topic string) []kgo.Opt {
	return []kgo.Opt{
		kgo.SeedBrokers(addrs...),
		kgo.ConsumerGroup(topic + "-group"),
		kgo.ConsumeTopics(topic),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()),
		kgo.FetchMaxWait(500 * time.Millisecond), // the adapter's default, for both
	}
}

// rawLoop is the baseline: poll at most benchBatch records, touch each,
// commit what was polled synchronously, allow rebalances, again.
func rawLoop(b *testing.B, addrs []string, topic string, _ int32) time.Duration {
	cl, err := kgo.NewClient(append(benchOpts(addrs, topic), kgo.DisableAutoCommit(), kgo.BlockRebalanceOnPoll())...)
	if err != nil {
		b.Fatal(err)
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	var (
		start time.Time
		seen  int
		sink  int
	)
	for seen < b.N {
		fs := cl.PollRecords(ctx, benchBatch)
		if err := ctx.Err(); err != nil {
			b.Fatalf("raw loop: %d of %d records: %v", seen, b.N, err)
		}
		fs.EachError(func(t string, p int32, err error) { b.Fatalf("fetch %s/%d: %v", t, p, err) })
		n := 0
		fs.EachRecord(func(r *kgo.Record) { sink += len(r.Value); n++ })
		if n > 0 && start.IsZero() {
			start = time.Now()
		}
		if err := cl.CommitUncommittedOffsets(ctx); err != nil {
			b.Fatalf("commit: %v", err)
		}
		cl.AllowRebalance()
		seen += n
	}
	_ = sink
	return time.Since(start)
}

// redeliverLoop runs the same records through the Processor and the adapter
// with a handler that touches each record, until every partition's
// checkpoint is at its end.
func redeliverLoop(b *testing.B, addrs []string, topic string, _ int32) time.Duration {
	var (
		startOnce sync.Once
		start     time.Time
		sink      atomic.Int64
		mu        sync.Mutex
		next      = make(map[int32]int64)
		total     int64
		done      = make(chan time.Time, 1)
	)
	h := stream.HandlerFunc(func(_ context.Context, bt *stream.Batch) error {
		startOnce.Do(func() { start = time.Now() })
		n := 0
		for i := range bt.Records {
			n += len(bt.Records[i].Value)
		}
		sink.Add(int64(n))
		return nil
	})
	hooks := stream.Hooks{Checkpointed: func(e stream.CheckpointEvent) {
		mu.Lock()
		defer mu.Unlock()
		total += e.Next - next[e.Partition]
		next[e.Partition] = e.Next
		if total == int64(b.N) {
			done <- time.Now()
		}
	}}
	proc, err := stream.NewProcessor(h, stream.WithHooks(hooks))
	if err != nil {
		b.Fatal(err)
	}
	c, err := franz.New(proc, franz.WithKgoOptions(benchOpts(addrs, topic)...), franz.WithMaxBatch(benchBatch))
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
		return end.Sub(start)
	case err := <-stopped:
		b.Fatalf("consumer stopped: %v", err)
	case <-time.After(5 * time.Minute):
		b.Fatal("records not all committed in 5 minutes")
	}
	return 0
}
