package kafkatest

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/redeliver-go/redeliver/checkpoint"
	"github.com/redeliver-go/redeliver/stream"
)

// Key ordering's benchmark (issue 49), through an adapter: one partition
// of b.N records of 100 bytes over KeyedBenchKeys keys (record i has key
// "k<i mod 1000>"), a handler (stream.PerRecord) that waits KeyedBenchWait
// per record, the adapter's Throughput options. Leaves:
//
//   - partition: partition ordering, batches of BenchBatch;
//   - key/concurrency=N: key ordering, N records at once (WithConcurrency);
//   - poison/concurrency=64: key ordering at 64, with one poison key:
//     the first record of key "k7" fails for KeyedPoisonFor (retried every
//     100ms), then succeeds; its key's later records wait for it, and
//     records/s counts the other keys' records only;
//   - fail/concurrency=64: key ordering at 64, every 10th record (offset 3
//     mod 10) fails once and is retried FailDelay later: retry-wait-ms and
//     retry-wait-max-ms are the median and longest time from its failing
//     call's return to its retry's call, retries how many there were;
//   - nowait/key/concurrency=256, nowait/fail/concurrency=64 and
//     nowait/partition: a handler that does not wait, to see what the
//     engine and the client can do.
//
// (No leaf's name is the start of another's, so that a leaf runs alone.)
//
// records/s runs from the first handler call to the last record handled
// (of the other keys, with the poison key); each leaf then waits until the
// group's commit is at the partition's end. md-p99-bytes and md-max-bytes
// are the commit metadata's length over every commit the processor
// reported (in key ordering, the window: docs/KEYS.md); cpu-ns/record the
// process's CPU per record; runq-threads how many of its threads waited
// for a CPU, on average (Linux's schedstat), which tells a rate held back
// by the machine's load from one held back by the process's own work.
const (
	KeyedBenchKeys = 1000
	KeyedBenchWait = 2 * time.Millisecond
	KeyedPoisonFor = 10 * time.Second
)

// BenchKeyed runs the leaves of key ordering's benchmark for the adapter;
// see [KeyedBenchKeys].
func BenchKeyed(b *testing.B, a Adapter) {
	addrs := BenchAddrs(b)
	leaf := func(name string, wait time.Duration, kind keyedKind, opts ...stream.Option) {
		b.Run(name, func(b *testing.B) { keyedLeaf(b, a, addrs, wait, kind, opts...) })
	}
	leaf("partition", KeyedBenchWait, keyedPlain)
	for _, c := range []int{16, 64, 256} {
		leaf("key/concurrency="+strconv.Itoa(c), KeyedBenchWait, keyedPlain, stream.WithOrdering(stream.ByKey), stream.WithConcurrency(c, 0))
	}
	leaf("poison/concurrency=64", KeyedBenchWait, keyedPoison, stream.WithOrdering(stream.ByKey), stream.WithConcurrency(64, 0))
	leaf("fail/concurrency=64", KeyedBenchWait, keyedFail, stream.WithOrdering(stream.ByKey), stream.WithConcurrency(64, 0))
	leaf("nowait/key/concurrency=256", 0, keyedPlain, stream.WithOrdering(stream.ByKey), stream.WithConcurrency(256, 0))
	leaf("nowait/fail/concurrency=64", 0, keyedFail, stream.WithOrdering(stream.ByKey), stream.WithConcurrency(64, 0))
	leaf("nowait/partition", 0, keyedPlain)
}

// keyedKind is what fails in a leaf of BenchKeyed.
type keyedKind uint8

const (
	keyedPlain  keyedKind = iota // nothing
	keyedPoison                  // a poison key
	keyedFail                    // every 10th record, once
)

var errPoisonKey = errors.New("bench: the poison key's record fails")

func keyedLeaf(b *testing.B, a Adapter, addrs []string, wait time.Duration, kind keyedKind, opts ...stream.Option) {
	n := b.N
	poison := kind == keyedPoison
	topic := BenchTopic("keyed")
	produceKeyedBench(b, addrs, topic, n)
	const poisonKey, poisonOffset = "k7", 7
	others := int64(n)
	if poison {
		others = 0
		for i := range n {
			if i%KeyedBenchKeys != poisonOffset {
				others++
			}
		}
	}
	var (
		handled   atomic.Int64
		started   atomic.Int64 // unix ns of the first handler call
		end       = make(chan time.Time, 1)
		failSince atomic.Int64 // unix ns of the poison record's first failure
		mu        sync.Mutex
		sizes     []int
		failed    sync.Map // the offsets failed once (keyedFail)
		waits     retryWaits
		retries   atomic.Int64
	)
	h := stream.PerRecord(func(_ context.Context, r *stream.Record) error {
		started.CompareAndSwap(0, time.Now().UnixNano())
		if kind == keyedFail && r.Offset%10 == 3 {
			if _, again := failed.Load(r.Offset); again {
				waits.retried(r.Partition, r.Offset)
				retries.Add(1)
			}
		}
		if wait > 0 {
			time.Sleep(wait)
		}
		if poison && string(r.Key) == poisonKey {
			if r.Offset == poisonOffset {
				now := time.Now().UnixNano()
				failSince.CompareAndSwap(0, now)
				if time.Duration(now-failSince.Load()) < KeyedPoisonFor {
					return errPoisonKey
				}
			}
			return nil
		}
		if kind == keyedFail && r.Offset%10 == 3 {
			if _, again := failed.LoadOrStore(r.Offset, true); !again {
				waits.failed(r.Partition, r.Offset)
				return ErrBench
			}
		}
		if handled.Add(1) == others {
			end <- time.Now()
		}
		return nil
	})
	hooks := stream.Hooks{Checkpointed: func(e stream.CheckpointEvent) {
		mu.Lock()
		sizes = append(sizes, len(e.Metadata))
		mu.Unlock()
	}}
	policy := checkpoint.Policy{MaxRetries: 3, Backoff: checkpoint.Fixed(FailDelay)}
	if poison {
		policy = checkpoint.Policy{MaxRetries: checkpoint.Infinite, Backoff: checkpoint.Fixed(100 * time.Millisecond)}
	}
	proc, err := stream.NewProcessor(h, append([]stream.Option{stream.WithHooks(hooks), stream.WithPolicy(policy)}, opts...)...)
	if err != nil {
		b.Fatal(err)
	}
	cfg := BenchConfig(addrs, topic, proc)
	cfg.Options = append(cfg.Options, a.Throughput...)
	adm, err := kgo.NewClient(kgo.SeedBrokers(addrs...))
	if err != nil {
		b.Fatal(err)
	}
	defer adm.Close()
	cpu0, wait0 := CPUTime(), runqWait()
	b.ResetTimer()
	stop := RunBench(b, a, cfg)
	var last time.Time
	select {
	case last = <-end:
	case <-time.After(10 * time.Minute):
		b.Fatalf("%d of %d records handled in 10 minutes", handled.Load(), others)
	}
	b.StopTimer()
	elapsed := last.Sub(time.Unix(0, started.Load()))
	cpu, waited := CPUTime()-cpu0, runqWait()-wait0
	// The commit at the end (with a poison key, once its record succeeds).
	deadline := time.Now().Add(KeyedPoisonFor + 2*time.Minute)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		offs, err := kadm.NewClient(adm).FetchOffsets(ctx, BenchGroup(topic))
		cancel()
		if err == nil {
			if o, ok := offs.Lookup(topic, 0); ok && o.At == int64(n) {
				break
			}
		}
		if time.Now().After(deadline) {
			b.Fatalf("the group's commit did not reach the partition's end %d", n)
		}
		time.Sleep(10 * time.Millisecond)
	}
	if err := stop(); err != nil {
		b.Fatal(err)
	}
	DeleteTopic(b, addrs, topic)
	mu.Lock()
	slices.Sort(sizes)
	p99, most := 0, 0
	if len(sizes) > 0 {
		p99, most = sizes[(len(sizes)*99)/100], sizes[len(sizes)-1]
	}
	mu.Unlock()
	b.ReportMetric(float64(others)/elapsed.Seconds(), "records/s")
	b.ReportMetric(float64(cpu)/float64(n), "cpu-ns/record")
	b.ReportMetric(float64(p99), "md-p99-bytes")
	b.ReportMetric(float64(most), "md-max-bytes")
	b.ReportMetric(float64(len(sizes)), "commits")
	if kind == keyedFail {
		b.ReportMetric(float64(retries.Load()), "retries")
		waits.report(b)
	}
	// How many of the process's threads waited for a CPU, on average, while
	// they had work: above 0.5 or so on a 2-core machine, the machine's
	// load (not this process's work) holds the rate back.
	b.ReportMetric(float64(waited)/float64(b.Elapsed()), "runq-threads")
}

// runqWait returns the time the process's threads have spent waiting for
// a CPU while runnable (the second field of /proc/self/task/*/schedstat),
// in nanoseconds; 0 where the kernel does not say.
func runqWait() int64 {
	tasks, _ := filepath.Glob("/proc/self/task/*/schedstat")
	var sum int64
	for _, f := range tasks {
		raw, err := os.ReadFile(f)
		if err != nil {
			continue
		}
		if fields := strings.Fields(string(raw)); len(fields) >= 2 {
			n, _ := strconv.ParseInt(fields[1], 10, 64)
			sum += n
		}
	}
	return sum
}

// produceKeyedBench creates topic with one partition and writes n records
// of 100 bytes to it, record i with key "k<i mod KeyedBenchKeys>".
func produceKeyedBench(b *testing.B, addrs []string, topic string, n int) {
	b.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(addrs...), kgo.RecordPartitioner(kgo.ManualPartitioner()),
		kgo.ProducerLinger(0), kgo.MaxBufferedRecords(1<<20), kgo.UnknownTopicRetries(-1),
		kgo.ProducerBatchCompression(kgo.NoCompression()))
	if err != nil {
		b.Fatal(err)
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	if resp, err := kadm.NewClient(cl).CreateTopic(ctx, 1, 1, nil, topic); err != nil || resp.Err != nil {
		b.Fatal(err, resp.Err)
	}
	value := make([]byte, 100)
	var (
		wg    sync.WaitGroup
		first atomic.Value
	)
	for i := range n {
		wg.Add(1)
		cl.Produce(ctx, &kgo.Record{Topic: topic, Partition: 0, Key: fmt.Appendf(nil, "k%d", i%KeyedBenchKeys), Value: value}, func(_ *kgo.Record, err error) {
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
