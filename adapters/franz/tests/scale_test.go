package franz_test

import (
	"context"
	"fmt"
	"runtime"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/redeliver-go/redeliver/adapters/franz"
	"github.com/redeliver-go/redeliver/adapters/internal/kafkatest"
	"github.com/redeliver-go/redeliver/checkpoint"
	"github.com/redeliver-go/redeliver/stream"
)

// BenchmarkScale is the success path with 1,000 partitions: b.N records
// spread over them, through the raw loop and through the adapter (the
// leaves and metrics of BenchmarkSuccessPath). Run it with
// -benchtime=1000000x.
func BenchmarkScale(b *testing.B) {
	kafkatest.RunLeaves(b, loops, []int32{1000}, false, kafkatest.Success)
}

// BenchmarkIdlePartitions measures what a consumer of many partitions
// costs while they are idle: one record per partition is consumed and
// committed, then, with the consumer still running, the heap (after a
// collection) and the goroutines are read and compared with what they were
// before the consumer started. The raw leaf is a plain franz-go group
// consumer over the same topic; heap-B/partition and goroutines/partition
// are each consumer's own. Run it with -benchtime=1x.
func BenchmarkIdlePartitions(b *testing.B) {
	for _, partitions := range []int32{1000, 10000} {
		b.Run(fmt.Sprintf("partitions=%d", partitions), func(b *testing.B) {
			profileEveryAllocation(b)
			addrs := kafkatest.BenchAddrs(b)
			for _, loop := range []struct {
				name string
				run  func(b *testing.B, addrs []string, topic string, partitions int32) (stop func())
			}{{"raw", rawIdle}, {"redeliver", redeliverIdle}} {
				b.Run(loop.name, func(b *testing.B) {
					for range b.N {
						topic := kafkatest.BenchTopic("idle")
						kafkatest.ProduceBench(b, addrs, topic, partitions, int(partitions), 100, false)
						heap0, g0 := heapAndGoroutines()
						stop := loop.run(b, addrs, topic, partitions)
						heap1, g1 := heapAndGoroutines()
						stop()
						b.ReportMetric(float64(heap1-heap0)/float64(partitions), "heap-B/partition")
						b.ReportMetric(float64(g1-g0)/float64(partitions), "goroutines/partition")
						kafkatest.DeleteTopic(b, addrs, topic)
					}
				})
			}
		})
	}
}

// BenchmarkWithheldBatchHeap measures the heap a withheld batch retains
// against the batch's bytes: 8 partitions of 500 records of 1,000 bytes each
// fail and wait in a one-hour backoff; with every batch withheld, the heap
// (after a collection) is compared with what it was before the consumer
// started. held-x is that growth over the batches' record bytes (keys,
// values and headers): 1 means each record is held once, as fetched;
// overhead-B/record is the rest per record (the client's record framing and
// the batch's Record structs). Run it with -benchtime=1x.
func BenchmarkWithheldBatchHeap(b *testing.B) {
	const (
		partitions = 8
		perBatch   = 500
		size       = 1000
	)
	profileEveryAllocation(b)
	addrs := kafkatest.BenchAddrs(b)
	for range b.N {
		topic := kafkatest.BenchTopic("held")
		kafkatest.ProduceBench(b, addrs, topic, int32(partitions), partitions*perBatch, size, false)
		heap0, _ := heapAndGoroutines()
		var withheld atomic.Int64
		var bytes atomic.Int64
		h := stream.HandlerFunc(func(_ context.Context, bt *stream.Batch) error {
			if bt.Attempt.Retry == 0 {
				var n int
				for _, r := range bt.Records {
					n += len(r.Key) + len(r.Value)
					for _, h := range r.Headers {
						n += len(h.Key) + len(h.Value)
					}
				}
				bytes.Add(int64(n))
			}
			return kafkatest.ErrBench
		})
		proc, err := stream.NewProcessor(h,
			stream.WithPolicy(checkpoint.Policy{MaxRetries: checkpoint.Infinite, Backoff: checkpoint.Fixed(time.Hour)}),
			stream.WithHooks(stream.Hooks{RetryScheduled: func(stream.RetryEvent) { withheld.Add(1) }}))
		if err != nil {
			b.Fatal(err)
		}
		stop := runFranz(b, proc, addrs, topic, franz.WithMaxBatch(perBatch))
		waitFor(b, "every partition's batch withheld", func() bool { return withheld.Load() >= partitions })
		heap1, _ := heapAndGoroutines()
		stop()
		if got := bytes.Load(); got != partitions*perBatch*size {
			b.Fatalf("the first deliveries held %d bytes, want %d (a batch per partition)", got, partitions*perBatch*size)
		}
		b.ReportMetric(float64(heap1-heap0)/float64(bytes.Load()), "held-x")
		b.ReportMetric(float64(heap1-heap0-bytes.Load())/float64(partitions*perBatch), "overhead-B/record")
		kafkatest.DeleteTopic(b, addrs, topic)
	}
}

// rawIdle runs a plain franz-go group consumer until it has consumed and
// committed the topic's one record per partition, and returns its stop.
func rawIdle(b *testing.B, addrs []string, topic string, partitions int32) func() {
	cl, err := kgo.NewClient(append(benchOpts(addrs, topic), kgo.DisableAutoCommit())...)
	if err != nil {
		b.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	seen := 0
	for seen < int(partitions) {
		fs := cl.PollFetches(ctx)
		if err := ctx.Err(); err != nil {
			b.Fatalf("raw: %d of %d records: %v", seen, partitions, err)
		}
		seen += fs.NumRecords()
		if err := cl.CommitUncommittedOffsets(ctx); err != nil {
			b.Fatal(err)
		}
	}
	// Idle, as a consumer is: polling with nothing to fetch.
	polled := make(chan struct{})
	go func() {
		defer close(polled)
		for ctx.Err() == nil {
			cl.PollFetches(ctx)
		}
	}()
	return func() {
		cancel()
		<-polled
		cl.Close()
	}
}

// redeliverIdle runs the adapter until every partition's one record is
// handled and committed, and returns its stop.
func redeliverIdle(b *testing.B, addrs []string, topic string, partitions int32) func() {
	var committed atomic.Int64
	proc, err := stream.NewProcessor(stream.HandlerFunc(func(context.Context, *stream.Batch) error { return nil }),
		stream.WithHooks(stream.Hooks{Checkpointed: func(stream.CheckpointEvent) { committed.Add(1) }}))
	if err != nil {
		b.Fatal(err)
	}
	stop := runFranz(b, proc, addrs, topic)
	waitFor(b, "every partition committed", func() bool { return committed.Load() >= int64(partitions) })
	return stop
}

// runFranz runs the adapter over topic with the benchmarks' options and
// opts (franz.Option and kgo.Opt values); the function it returns stops it.
func runFranz(b *testing.B, proc *stream.Processor, addrs []string, topic string, opts ...any) func() {
	cfg := kafkatest.BenchConfig(addrs, topic, proc)
	cfg.Options = opts
	stop := kafkatest.RunBench(b, adapter, cfg)
	return func() {
		if err := stop(); err != nil {
			b.Errorf("Run: %v", err)
		}
	}
}

// waitFor waits up to 5 minutes for cond.
func waitFor(b *testing.B, what string, cond func() bool) {
	deadline := time.Now().Add(5 * time.Minute)
	for !cond() {
		if time.Now().After(deadline) {
			b.Fatalf("waited 5 minutes for %s", what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// heapAndGoroutines returns the live heap of the consumer's side (every
// allocation site but the in-process broker's, whose storage and response
// buffers a real broker keeps in its own process), after two collections,
// and the number of goroutines. It reads the heap profile: the benchmarks
// that call it set runtime.MemProfileRate to 1 first, so that every
// allocation is in the profile.
func heapAndGoroutines() (int64, int) {
	runtime.GC()
	runtime.GC()
	n, _ := runtime.MemProfile(nil, false)
	var recs []runtime.MemProfileRecord
	for {
		recs = make([]runtime.MemProfileRecord, n+64)
		var ok bool
		if n, ok = runtime.MemProfile(recs, false); ok {
			recs = recs[:n]
			break
		}
	}
	var live int64
	for i := range recs {
		if !fromBroker(recs[i].Stack()) {
			live += recs[i].InUseBytes()
		}
	}
	return live, runtime.NumGoroutine()
}

// fromBroker reports whether an allocation's stack is in kfake.
func fromBroker(stack []uintptr) bool {
	frames := runtime.CallersFrames(stack)
	for {
		f, more := frames.Next()
		if strings.HasPrefix(f.Function, "github.com/twmb/franz-go/pkg/kfake.") {
			return true
		}
		if !more {
			return false
		}
	}
}

// profileEveryAllocation sets runtime.MemProfileRate to 1 for the
// benchmark.
func profileEveryAllocation(b *testing.B) {
	rate := runtime.MemProfileRate
	runtime.MemProfileRate = 1
	b.Cleanup(func() { runtime.MemProfileRate = rate })
}
