package kafkatest

import (
	"context"
	"fmt"
	"runtime"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redeliver-go/redeliver/checkpoint"
	"github.com/redeliver-go/redeliver/stream"
)

// RawIdle runs a client's own group consumer over topic until it has
// consumed and committed the topic's one record per partition, and leaves
// it running, idle (polling with nothing to fetch); stop stops it.
type RawIdle func(b *testing.B, addrs []string, topic string, partitions int32) (stop func())

// BenchIdlePartitions measures what a consumer of many partitions costs
// while they are idle: one record per partition is consumed and committed,
// then, with the consumer still running, the heap (after a collection) and
// the goroutines are read and compared with what they were before the
// consumer started. The raw leaf is the client's own group consumer (raw),
// the redeliver leaf the adapter a with the Processor; heap-B/partition and
// goroutines/partition are each consumer's own (see HeapAndGoroutines).
// Run it with -benchtime=1x.
func BenchIdlePartitions(b *testing.B, a Adapter, counts []int32, raw RawIdle) {
	for _, partitions := range counts {
		b.Run(fmt.Sprintf("partitions=%d", partitions), func(b *testing.B) {
			ProfileEveryAllocation(b)
			addrs := BenchAddrs(b)
			for _, loop := range []struct {
				name string
				run  RawIdle
			}{{"raw", raw}, {"redeliver", redeliverIdle(a)}} {
				b.Run(loop.name, func(b *testing.B) {
					for range b.N {
						topic := BenchTopic("idle")
						ProduceBench(b, addrs, topic, partitions, int(partitions), 100, false)
						heap0, g0 := HeapAndGoroutines()
						stop := loop.run(b, addrs, topic, partitions)
						heap1, g1 := HeapAndGoroutines()
						stop()
						b.ReportMetric(float64(heap1-heap0)/float64(partitions), "heap-B/partition")
						b.ReportMetric(float64(g1-g0)/float64(partitions), "goroutines/partition")
						DeleteTopic(b, addrs, topic)
					}
				})
			}
		})
	}
}

// redeliverIdle runs the adapter until every partition's one record is
// handled and committed, and returns its stop.
func redeliverIdle(a Adapter) RawIdle {
	return func(b *testing.B, addrs []string, topic string, partitions int32) func() {
		var committed atomic.Int64
		proc, err := stream.NewProcessor(stream.HandlerFunc(func(context.Context, *stream.Batch) error { return nil }),
			stream.WithHooks(stream.Hooks{Checkpointed: func(stream.CheckpointEvent) { committed.Add(1) }}))
		if err != nil {
			b.Fatal(err)
		}
		stop := RunBench(b, a, BenchConfig(addrs, topic, proc))
		WaitFor(b, "every partition committed", func() bool { return committed.Load() >= int64(partitions) })
		return func() {
			if err := stop(); err != nil {
				b.Errorf("Run: %v", err)
			}
		}
	}
}

// BenchWithheldBatchHeap measures the heap a withheld batch retains
// against the batch's bytes: 8 partitions of 500 records of 1,000 bytes
// each fail and wait in a one-hour backoff; with every batch withheld, the
// heap (after a collection) is compared with what it was before the
// consumer started. held-x is that growth over the batches' record bytes
// (keys, values and headers): 1 means each record is held once, as
// fetched; overhead-B/record is the rest per record (the client's record
// framing, buffers it fetched ahead, and the batch's Record structs). Run
// it with -benchtime=1x.
func BenchWithheldBatchHeap(b *testing.B, a Adapter, opts ...any) {
	const (
		partitions = 8
		perBatch   = 500
		size       = 1000
	)
	ProfileEveryAllocation(b)
	addrs := BenchAddrs(b)
	for range b.N {
		topic := BenchTopic("held")
		ProduceBench(b, addrs, topic, int32(partitions), partitions*perBatch, size, false)
		heap0, _ := HeapAndGoroutines()
		var withheld, bytes atomic.Int64
		h := stream.HandlerFunc(func(_ context.Context, bt *stream.Batch) error {
			if bt.Attempt.Retries == 0 {
				var n int
				for _, r := range bt.Records {
					n += len(r.Key) + len(r.Value)
					for _, h := range r.Headers {
						n += len(h.Key) + len(h.Value)
					}
				}
				bytes.Add(int64(n))
			}
			return ErrBench
		})
		proc, err := stream.NewProcessor(h,
			stream.WithPolicy(checkpoint.Policy{MaxRetries: checkpoint.Infinite, Backoff: checkpoint.Fixed(time.Hour)}),
			stream.WithHooks(stream.Hooks{RetryScheduled: func(stream.RetryEvent) { withheld.Add(1) }}))
		if err != nil {
			b.Fatal(err)
		}
		cfg := BenchConfig(addrs, topic, proc)
		cfg.MaxBatch, cfg.Options = perBatch, opts
		stop := RunBench(b, a, cfg)
		WaitFor(b, "every partition's batch withheld", func() bool { return withheld.Load() >= partitions })
		heap1, _ := HeapAndGoroutines()
		if err := stop(); err != nil {
			b.Errorf("Run: %v", err)
		}
		if got := bytes.Load(); got != partitions*perBatch*size {
			b.Fatalf("the first deliveries held %d bytes, want %d (a batch per partition)", got, partitions*perBatch*size)
		}
		b.ReportMetric(float64(heap1-heap0)/float64(bytes.Load()), "held-x")
		b.ReportMetric(float64(heap1-heap0-bytes.Load())/float64(partitions*perBatch), "overhead-B/record")
		DeleteTopic(b, addrs, topic)
	}
}

// WaitFor waits up to 5 minutes for cond.
func WaitFor(b *testing.B, what string, cond func() bool) {
	deadline := time.Now().Add(5 * time.Minute)
	for !cond() {
		if time.Now().After(deadline) {
			b.Fatalf("waited 5 minutes for %s", what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// HeapAndGoroutines returns the live heap of the consumer's side (every
// allocation site but the in-process broker's, whose storage and response
// buffers a real broker keeps in its own process), after two collections,
// and the number of goroutines. It reads the heap profile: call
// ProfileEveryAllocation first, so that every allocation is in it.
func HeapAndGoroutines() (int64, int) {
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

// ProfileEveryAllocation sets runtime.MemProfileRate to 1 for the
// benchmark.
func ProfileEveryAllocation(b *testing.B) {
	rate := runtime.MemProfileRate
	runtime.MemProfileRate = 1
	b.Cleanup(func() { runtime.MemProfileRate = rate })
}
