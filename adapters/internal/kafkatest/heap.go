package kafkatest

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"runtime/pprof"
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
// the redeliver leaf the adapter a with the Processor, and the
// redeliver-window leaf the same with the adapter's Throughput options
// (success commits coalesced in the background, as the raw client's own
// commits are, rather than each waited for); heap-B/partition and
// goroutines/partition are each consumer's own (see HeapAndGoroutines);
// stack-B/partition is what the goroutine stacks grew by, which the heap
// figure leaves out (the whole process's, the broker's included: see
// StackInUse).
// Run it with -benchtime=1x. With REDELIVER_HEAP_PROFILE_DIR set to a
// directory, it writes there the heap profile it read each figure from
// (idle-<partitions>-<leaf>.pprof; every allocation is in it, the
// broker's too: `go tool pprof -sample_index=inuse_space -ignore kfake`).
func BenchIdlePartitions(b *testing.B, a Adapter, counts []int32, raw RawIdle) {
	for _, partitions := range counts {
		b.Run(fmt.Sprintf("partitions=%d", partitions), func(b *testing.B) {
			if testing.Short() && partitions > 1000 {
				b.Skip("-short: the leaves of more than 1,000 partitions run the same code as those of 1,000, for longer")
			}
			ProfileEveryAllocation(b)
			addrs := BenchAddrs(b)
			for _, loop := range []struct {
				name string
				run  RawIdle
			}{{"raw", raw}, {"redeliver", redeliverIdle(a)}, {"redeliver-window", redeliverIdle(a, a.Throughput...)}} {
				b.Run(loop.name, func(b *testing.B) {
					for range b.N {
						topic := BenchTopic("idle")
						ProduceBench(b, addrs, topic, partitions, int(partitions), 100, false)
						heap0, g0 := HeapAndGoroutines()
						stack0 := StackInUse()
						stop := loop.run(b, addrs, topic, partitions)
						heap1, g1 := HeapAndGoroutines()
						stack1 := StackInUse()
						if dir := os.Getenv("REDELIVER_HEAP_PROFILE_DIR"); dir != "" {
							writeHeapProfile(b, filepath.Join(dir, fmt.Sprintf("idle-%d-%s.pprof", partitions, loop.name)))
						}
						stop()
						b.ReportMetric(float64(heap1-heap0)/float64(partitions), "heap-B/partition")
						b.ReportMetric(float64(stack1-stack0)/float64(partitions), "stack-B/partition")
						b.ReportMetric(float64(g1-g0)/float64(partitions), "goroutines/partition")
						DeleteTopic(b, addrs, topic)
					}
				})
			}
		})
	}
}

// redeliverIdle runs the adapter, with opts, until every partition's one
// record is handled and committed, and returns its stop.
func redeliverIdle(a Adapter, opts ...any) RawIdle {
	return func(b *testing.B, addrs []string, topic string, partitions int32) func() {
		var committed atomic.Int64
		proc, err := stream.NewProcessor(stream.HandlerFunc(func(context.Context, *stream.Batch) error { return nil }),
			stream.WithHooks(stream.Hooks{Checkpointed: func(stream.CheckpointEvent) { committed.Add(1) }}))
		if err != nil {
			b.Fatal(err)
		}
		cfg := BenchConfig(addrs, topic, proc)
		cfg.Options = append(cfg.Options, opts...)
		stop := RunBench(b, a, cfg)
		WaitFor(b, "every partition committed", func() bool { return committed.Load() >= int64(partitions) })
		if len(opts) > 0 {
			// A commit window reports its commits when it takes them,
			// before they are written: the partitions are idle once the
			// broker has every one (the raw consumer's are written too).
			want := make(map[int32]int64, partitions)
			for p := range partitions {
				want[p] = 1
			}
			WaitCommitted(b, addrs, BenchGroup(topic), topic, want)
		}
		return func() {
			if err := stop(); err != nil {
				b.Errorf("Run: %v", err)
			}
		}
	}
}

// RawHeld runs a client's own consumer over topic until it has polled
// want records and holds them, as a loop waiting out a backoff holds the
// batch it is to retry; it returns the held records' bytes (keys, values
// and headers) and its stop, which lets them go.
type RawHeld func(b *testing.B, addrs []string, topic string, want int) (bytes int64, stop func())

// BenchWithheldBatchHeap measures the heap a withheld batch retains
// against the batch's bytes: 8 partitions of 500 records of 1,000 bytes
// each fail and wait in a one-hour backoff; with every batch withheld, the
// heap (after a collection) is compared with what it was before the
// consumer started. held-x is that growth over the batches' record bytes
// (keys, values and headers): 1 means each record is held once, as
// fetched; overhead-B/record is the rest per record (the client's record
// framing, buffers it fetched ahead, and the batch's Record structs). When
// raw is not nil, the raw leaf measures the same for the client's own
// consumer holding the same records (raw), and the redeliver leaf the
// adapter. Run it with -benchtime=1x.
func BenchWithheldBatchHeap(b *testing.B, a Adapter, raw RawHeld, opts ...any) {
	if raw == nil {
		benchWithheld(b, a, opts)
		return
	}
	b.Run("raw", func(b *testing.B) { benchRawHeld(b, raw) })
	b.Run("redeliver", func(b *testing.B) { benchWithheld(b, a, opts) })
}

// The withheld batches of BenchWithheldBatchHeap.
const (
	heldPartitions = 8
	heldPerBatch   = 500
	heldSize       = 1000
)

func benchRawHeld(b *testing.B, raw RawHeld) {
	ProfileEveryAllocation(b)
	addrs := BenchAddrs(b)
	for range b.N {
		topic := BenchTopic("held")
		ProduceBench(b, addrs, topic, heldPartitions, heldPartitions*heldPerBatch, heldSize, false)
		heap0, _ := HeapAndGoroutines()
		bytes, stop := raw(b, addrs, topic, heldPartitions*heldPerBatch)
		heap1, _ := HeapAndGoroutines()
		stop()
		reportHeld(b, heap1-heap0, bytes)
		DeleteTopic(b, addrs, topic)
	}
}

func reportHeld(b *testing.B, grew, bytes int64) {
	if bytes != heldPartitions*heldPerBatch*heldSize {
		b.Fatalf("held %d bytes, want %d (a batch per partition)", bytes, heldPartitions*heldPerBatch*heldSize)
	}
	b.ReportMetric(float64(grew)/float64(bytes), "held-x")
	b.ReportMetric(float64(grew-bytes)/float64(heldPartitions*heldPerBatch), "overhead-B/record")
}

func benchWithheld(b *testing.B, a Adapter, opts []any) {
	ProfileEveryAllocation(b)
	addrs := BenchAddrs(b)
	for range b.N {
		topic := BenchTopic("held")
		ProduceBench(b, addrs, topic, heldPartitions, heldPartitions*heldPerBatch, heldSize, false)
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
		cfg.MaxBatch, cfg.Options = heldPerBatch, opts
		stop := RunBench(b, a, cfg)
		WaitFor(b, "every partition's batch withheld", func() bool { return withheld.Load() >= heldPartitions })
		heap1, _ := HeapAndGoroutines()
		if err := stop(); err != nil {
			b.Errorf("Run: %v", err)
		}
		reportHeld(b, heap1-heap0, bytes.Load())
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

// StackInUse returns the bytes of the process's goroutine stacks
// (runtime.MemStats.StackInuse): the heap profile HeapAndGoroutines reads
// counts a goroutine's descriptor but not its stack. It is the whole
// process's, the in-process broker's goroutines included.
func StackInUse() int64 {
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return int64(ms.StackInuse)
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

// writeHeapProfile writes the heap profile to path.
func writeHeapProfile(b *testing.B, path string) {
	f, err := os.Create(path)
	if err != nil {
		b.Fatal(err)
	}
	defer f.Close()
	if err := pprof.Lookup("heap").WriteTo(f, 0); err != nil {
		b.Fatal(err)
	}
}
