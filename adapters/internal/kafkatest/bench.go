package kafkatest

import (
	"context"
	"errors"
	"fmt"
	"os"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/redeliver-go/redeliver/checkpoint"
	"github.com/redeliver-go/redeliver/stream"
)

// The adapters' throughput benchmarks share this harness. Each consumes b.N
// records of 100 bytes from a fresh topic of an in-process kfake cluster,
// or of the external broker named by REDELIVER_KAFKA_BROKERS
// (integration/kafka.sh starts one), through loops given the same group,
// start offset and 500ms fetch max wait: the adapter's own raw client
// loops, and [RedeliverLoop], the adapter with the Processor. Every loop
// handles batches of at most BenchBatch records of a partition and touches
// each record's value; the raw loops commit each batch synchronously, the
// adapters with their [Adapter.Throughput] options (franz-go and kafka-go
// coalesce success commits in the window their docs recommend), and a loop's time ends when the group's commits are
// at every partition's end.
//
// b.N is the number of records: run with -benchtime=1000000x or so, each
// leaf in a process of its own (scripts/bench.sh does). records/s counts
// from the first record handed out (a poll's return, a handler call) to the
// commit of the last one, so the group join is left out; ns/op includes
// it. cpu-ns/record is the CPU time of the whole process per record (the
// in-process broker included, the producing of the records not); commits
// the commits the loop made; [RedeliverLoop] also reports how long a failed
// batch waits for its retry (retry-wait-ms, the median, and
// retry-wait-max-ms). Every leaf checks that every record was
// handled (or given up) and that the commits reached every partition's
// end.
const (
	// BenchBatch is the most records a loop handles and commits at once.
	BenchBatch = 500
	// BenchMaxWait is every loop's fetch max wait (franz-go adapter's
	// default).
	BenchMaxWait = 500 * time.Millisecond
	// FailDelay is the delay of a failing batch's retry.
	FailDelay = time.Millisecond
	// PoisonRetries and PoisonDelay are the retries of the poison record.
	PoisonRetries = 5
	PoisonDelay   = 10 * time.Millisecond
)

// ErrBench is the error of a failing batch.
var ErrBench = errors.New("bench: handler failed")

// Scenario is what a benchmark's handler does with a batch.
type Scenario struct {
	// FailOnce makes every n-th batch (counting first deliveries) fail
	// once; it succeeds on its retry, FailDelay later. 0: none.
	FailOnce int
	// The poison record always fails: it is given up after PoisonRetries
	// retries, PoisonDelay apart. PoisonPartition < 0: none.
	PoisonPartition int32
	PoisonOffset    int64
}

// Success is the scenario where every batch succeeds.
func Success(int32, int) Scenario { return Scenario{PoisonPartition: -1} }

// FailEveryTenth is the scenario where every 10th batch fails once.
func FailEveryTenth(int32, int) Scenario { return Scenario{FailOnce: 10, PoisonPartition: -1} }

// PoisonInTheMiddle is the scenario of one poison record, in the middle of
// partition 0.
func PoisonInTheMiddle(partitions int32, n int) Scenario {
	return Scenario{PoisonPartition: 0, PoisonOffset: int64(n/int(partitions)) / 2}
}

// Leaf is one run of a loop over a topic: it counts the records handled
// per partition, and measures.
type Leaf struct {
	B  *testing.B
	Sc Scenario
	// Per is the number of records of each partition.
	Per     []int64
	handled [][]bool // handled[p][offset]: the record succeeded or was given up
	batches atomic.Int64
	commits atomic.Int64
	sink    atomic.Int64
	started atomic.Bool // Started was called

	mu          sync.Mutex
	start       time.Time
	poisonFirst time.Time // the poison record's first failure
	poisonGone  time.Time // when it was given up
	othersDone  time.Time // when the last good record of the other partitions was handled
	othersLeft  int64
	during      int64 // records of other partitions handled while the poison record retried
}

func newLeaf(b *testing.B, sc Scenario, partitions int32) *Leaf {
	l := &Leaf{B: b, Sc: sc, Per: make([]int64, partitions), handled: make([][]bool, partitions)}
	for i := range int64(b.N) {
		l.Per[i%int64(partitions)]++
	}
	for p := range l.handled {
		l.handled[p] = make([]bool, l.Per[p])
		if int32(p) != sc.PoisonPartition {
			l.othersLeft += l.Per[p]
		}
	}
	return l
}

// Started notes that a loop handed out its first record.
func (l *Leaf) Started() {
	if l.started.Load() {
		return
	}
	l.started.Store(true)
	l.mu.Lock()
	if l.start.IsZero() {
		l.start = time.Now()
	}
	l.mu.Unlock()
}

// Start returns when the first record was handed out.
func (l *Leaf) Start() time.Time {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.start
}

// FailsFirst reports whether a batch's first delivery fails, counting it
// as one batch.
func (l *Leaf) FailsFirst() bool {
	return l.Sc.FailOnce > 0 && l.batches.Add(1)%int64(l.Sc.FailOnce) == 0
}

// Poisoned reports whether offsets [first, last] of partition p hold the
// poison record.
func (l *Leaf) Poisoned(p int32, first, last int64) bool {
	return p == l.Sc.PoisonPartition && first <= l.Sc.PoisonOffset && l.Sc.PoisonOffset <= last
}

// PoisonFailed notes a failure of the poison record, and whether it was
// given up.
func (l *Leaf) PoisonFailed(gaveUp bool) {
	l.mu.Lock()
	now := time.Now()
	if l.poisonFirst.IsZero() {
		l.poisonFirst = now
	}
	if gaveUp {
		l.poisonGone = now
	}
	l.mu.Unlock()
}

// Handled marks offsets [first, last] of partition p handled (or given
// up); bytes is the sum of their values' lengths, which the loop read.
func (l *Leaf) Handled(p int32, first, last int64, bytes int) {
	for off := first; off <= last; off++ {
		l.handled[p][off] = true
	}
	l.sink.Add(int64(bytes))
	if p == l.Sc.PoisonPartition || l.Sc.PoisonPartition < 0 {
		return
	}
	n := last - first + 1
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

// Committed counts a commit.
func (l *Leaf) Committed() { l.commits.Add(1) }

// check fails the benchmark unless every record was handled, and reports
// the leaf's metrics for a run of d.
func (l *Leaf) check(d time.Duration) {
	for p, hs := range l.handled {
		if i := slices.Index(hs, false); i >= 0 {
			l.B.Fatalf("partition %d: record at offset %d never handled", p, i)
		}
	}
	l.B.ReportMetric(float64(l.B.N)/d.Seconds(), "records/s")
	l.B.ReportMetric(float64(l.commits.Load()), "commits")
	if l.Sc.PoisonPartition >= 0 {
		l.B.ReportMetric(float64(l.othersDone.Sub(l.start).Milliseconds()), "others-done-ms")
		l.B.ReportMetric(float64(l.during), "others-during-retries")
	}
}

// Loop is one way of consuming a benchmark's topic: Run consumes it,
// records every record handled in l, and returns the time from the first
// record handed out to the last commit.
type Loop struct {
	Name string
	Run  func(l *Leaf, addrs []string, topic string) time.Duration
	// Keyed gives the topic's records keys: record i has key "k<i mod
	// KeyedBenchKeys>" (the others have none).
	Keyed bool
}

// BenchAddrs returns the external broker's addresses, or starts a kfake
// cluster for the benchmark.
func BenchAddrs(b *testing.B) []string {
	addrs := strings.Split(os.Getenv("REDELIVER_KAFKA_BROKERS"), ",")
	if addrs[0] != "" {
		return addrs
	}
	cluster, err := kfake.NewCluster(kfake.NumBrokers(1))
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(cluster.Close)
	cluster.ControlKey(int16(kmsg.OffsetCommit), func(kmsg.Request) (kmsg.Response, error, bool) {
		cluster.KeepControl()
		offsetCommits.Add(1)
		return nil, nil, false
	})
	cluster.ControlKey(int16(kmsg.Fetch), func(req kmsg.Request) (kmsg.Response, error, bool) {
		cluster.KeepControl()
		fetches.Add(1)
		return nil, nil, false
	})
	return cluster.ListenAddrs()
}

// fetches counts the Fetch requests the kfake clusters of BenchAddrs
// received: a leaf's "fetches" (not reported on an external broker). At
// 1,000 partitions a million records come in about five fetches, so the
// leaf's records/s depends on how its handling overlaps them.
var fetches atomic.Int64

// offsetCommits counts the OffsetCommit requests the kfake clusters of
// BenchAddrs received: what a leaf's "offset-commits" reports (not
// reported on an external broker).
var offsetCommits atomic.Int64

var benchRun atomic.Int64

// BenchTopic returns a topic name no other benchmark of the process or of
// an earlier run uses.
func BenchTopic(prefix string) string {
	return fmt.Sprintf("%s-%d-%d", prefix, os.Getpid(), benchRun.Add(1))
}

// BenchGroup is the group the loops consume topic in.
func BenchGroup(topic string) string { return topic + "-group" }

// RunLeaves runs every loop over every partition count with the scenario
// sc(partitions, b.N), each as a benchmark loop-name/partitions=N;
// compressed produces the records with franz-go's default compression
// (snappy) instead of none, and names the leaves partitions=N-snappy.
func RunLeaves(b *testing.B, loops []Loop, counts []int32, compressed bool, sc func(partitions int32, n int) Scenario) {
	addrs := BenchAddrs(b)
	for _, loop := range loops {
		b.Run(loop.Name, func(b *testing.B) {
			for _, partitions := range counts {
				name := fmt.Sprintf("partitions=%d", partitions)
				if compressed {
					name += "-snappy"
				}
				b.Run(name, func(b *testing.B) {
					topic := BenchTopic("bench")
					produceBench(b, addrs, topic, partitions, b.N, 100, compressed, loop.Keyed)
					l := newLeaf(b, sc(partitions, b.N), partitions)
					b.ReportAllocs()
					cpu0, sys0, faults0 := CPUTime(), sysTime(), pageFaults()
					commits0 := offsetCommits.Load()
					fetches0 := fetches.Load()
					b.ResetTimer()
					d := loop.Run(l, addrs, topic)
					b.StopTimer()
					l.check(d)
					b.ReportMetric(float64(CPUTime()-cpu0)/float64(b.N), "cpu-ns/record")
					// The kernel's share of it, and the page faults (the
					// first touches of memory): where a slow run's extra
					// CPU goes (docs/BENCHMARKS.md, "At commit 98003d8").
					b.ReportMetric(float64(sysTime()-sys0)/float64(b.N), "sys-ns/record")
					b.ReportMetric(float64(pageFaults()-faults0)/float64(b.N)*1000, "faults/1000-records")
					CheckCommitted(b, addrs, BenchGroup(topic), topic, l.Per)
					if os.Getenv("REDELIVER_KAFKA_BROKERS") == "" {
						b.ReportMetric(float64(offsetCommits.Load()-commits0), "offset-commits")
						b.ReportMetric(float64(fetches.Load()-fetches0), "fetches")
					}
					DeleteTopic(b, addrs, topic)
				})
			}
		})
	}
}

// CPUTime returns the CPU time the process has used, user and system, in
// nanoseconds.
func CPUTime() int64 {
	ru := usage()
	return ru.Utime.Nano() + ru.Stime.Nano()
}

// sysTime returns the CPU time the kernel has spent for the process, in
// nanoseconds.
func sysTime() int64 {
	ru := usage()
	return ru.Stime.Nano()
}

// pageFaults returns the page faults the process has taken without I/O
// (the first touch of memory the system handed it).
func pageFaults() int64 { return usage().Minflt }

// usage returns the process's resource usage (zero if it cannot be read).
func usage() syscall.Rusage {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return syscall.Rusage{}
	}
	return ru
}

// ProduceBench creates topic and spreads n records of size bytes over its
// partitions, record i to partition i % partitions, compressed with
// franz-go's default (snappy) or not at all.
func ProduceBench(b *testing.B, addrs []string, topic string, partitions int32, n, size int, compressed bool) {
	b.Helper()
	produceBench(b, addrs, topic, partitions, n, size, compressed, false)
}

// produceBench is ProduceBench, with keys when keyed (record i has key
// "k<i mod KeyedBenchKeys>").
func produceBench(b *testing.B, addrs []string, topic string, partitions int32, n, size int, compressed, keyed bool) {
	b.Helper()
	opts := []kgo.Opt{kgo.SeedBrokers(addrs...), kgo.RecordPartitioner(kgo.ManualPartitioner()),
		// A new topic's partitions can take a while to get leaders on a
		// real broker: retry until they have (the context bounds it).
		kgo.ProducerLinger(0), kgo.MaxBufferedRecords(1 << 20), kgo.UnknownTopicRetries(-1)}
	if !compressed {
		opts = append(opts, kgo.ProducerBatchCompression(kgo.NoCompression()))
	}
	cl, err := kgo.NewClient(opts...)
	if err != nil {
		b.Fatal(err)
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	if resp, err := kadm.NewClient(cl).CreateTopic(ctx, partitions, 1, nil, topic); err != nil || resp.Err != nil {
		b.Fatal(err, resp.Err)
	}
	value := make([]byte, size)
	var (
		wg    sync.WaitGroup
		first atomic.Value
	)
	for i := range n {
		wg.Add(1)
		r := &kgo.Record{Topic: topic, Partition: int32(i) % partitions, Value: value}
		if keyed {
			r.Key = fmt.Appendf(nil, "k%d", i%KeyedBenchKeys)
		}
		cl.Produce(ctx, r, func(_ *kgo.Record, err error) {
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

// DeleteTopic deletes topic, so that the cluster's memory does not grow
// from run to run.
func DeleteTopic(b *testing.B, addrs []string, topic string) {
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

// CheckCommitted fails the benchmark unless group's commits reached every
// partition's end, per[p].
func CheckCommitted(b *testing.B, addrs []string, group, topic string, per []int64) {
	b.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(addrs...))
	if err != nil {
		b.Fatal(err)
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	offs, err := kadm.NewClient(cl).FetchOffsets(ctx, group)
	if err != nil {
		b.Fatal(err)
	}
	for p, want := range per {
		o, ok := offs.Lookup(topic, int32(p))
		if !ok && want == 0 {
			continue
		}
		if !ok || o.At != want {
			b.Fatalf("partition %d: committed %d, want %d", p, o.At, want)
		}
	}
}

// BenchConfig is the Config of an adapter's consumer in a benchmark: the
// topic's group, batches of BenchBatch, BenchMaxWait, the adapter's and
// the client's defaults otherwise.
func BenchConfig(addrs []string, topic string, proc *stream.Processor) Config {
	return Config{Addrs: addrs, Group: BenchGroup(topic), Topic: topic, Processor: proc, MaxBatch: BenchBatch,
		FetchMaxWait: BenchMaxWait, Defaults: true}
}

// RunBench runs the adapter's consumer of cfg until stop is called, which
// returns Run's error.
func RunBench(b *testing.B, a Adapter, cfg Config) (stop func() error) {
	c, err := a.New(cfg)
	if err != nil {
		b.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- c.Run(ctx) }()
	return func() error {
		cancel()
		select {
		case err := <-done:
			return err
		case <-time.After(time.Minute):
			b.Fatal("Run did not return")
			return nil
		}
	}
}

// RedeliverLoop is the loop of the adapter and the Processor: batches of
// up to BenchBatch records of a partition, committed as the adapter's
// defaults commit, under the scenario's failures, until the group's
// offsets are at every partition's end (read from the broker, as an
// adapter may write success commits after it reported them).
func RedeliverLoop(a Adapter) Loop { return redeliverLoop(a, "redeliver", unitBatch) }

// RedeliverRecordLoop is RedeliverLoop with the record as the unit of
// work: a stream.PerRecord handler in partition ordering, where a failure
// at a record retries the batch from that record and gives up that record
// alone. The scenario's failures fall on records: the failure scenario
// fails one record in FailOnce*BenchBatch once (as many retries per
// million records as the batch loops' every FailOnce-th batch), and the
// poison record is given up alone.
func RedeliverRecordLoop(a Adapter) Loop { return redeliverLoop(a, "record", unitRecord) }

// RedeliverKeyLoop is RedeliverRecordLoop in key ordering
// (stream.ByKey at the default concurrency, stream.DefaultConcurrency):
// the topic's records have keys (record i has key "k<i mod
// KeyedBenchKeys>"), each record is a unit of its own, and a retrying
// record holds back only the later records of its key.
func RedeliverKeyLoop(a Adapter) Loop {
	l := redeliverLoop(a, "key", unitKey)
	l.Keyed = true
	return l
}

// unit is what a redeliverLoop's Processor delivers and retries.
type unit uint8

const (
	unitBatch  unit = iota // batches, the batch retried whole
	unitRecord             // batches through stream.PerRecord
	unitKey                // records, in key ordering
)

func redeliverLoop(a Adapter, name string, u unit) Loop {
	return Loop{Name: name, Run: func(l *Leaf, addrs []string, topic string) time.Duration {
		b := l.B
		var (
			mu    sync.Mutex
			next  = make(map[int32]int64)
			total int64
			done  = make(chan time.Time, 1)
			waits retryWaits
		)
		var h stream.Handler
		if u == unitBatch {
			h = stream.HandlerFunc(func(_ context.Context, bt *stream.Batch) error {
				l.Started()
				first, last := bt.FirstOffset(), bt.LastOffset()
				if bt.Attempt.Retries > 0 {
					waits.retried(bt.Partition, first)
				}
				if l.Poisoned(bt.Partition, first, last) {
					l.PoisonFailed(bt.Attempt.Last)
					waits.failed(bt.Partition, first)
					return ErrBench
				}
				if bt.Attempt.Retries == 0 && l.FailsFirst() {
					waits.failed(bt.Partition, first)
					return ErrBench
				}
				n := 0
				for i := range bt.Records {
					n += len(bt.Records[i].Value)
				}
				l.Handled(bt.Partition, first, last, n)
				return nil
			})
		} else {
			h = recordHandler(l, &waits)
		}
		hooks := stream.Hooks{
			Checkpointed: func(e stream.CheckpointEvent) {
				l.Committed()
				if e.Metadata != "" {
					return // the retry state of a withheld batch, or key ordering's window
				}
				mu.Lock()
				defer mu.Unlock()
				total += e.Next - next[e.Partition]
				next[e.Partition] = e.Next
				if total == int64(b.N) {
					done <- time.Now()
				}
			},
			// The given-up batch: its poison record is gone, and the
			// records beside it in the batch count as handled too.
			Exhausted: func(e stream.ExhaustedEvent) { l.Handled(e.Partition, e.FirstOffset, e.LastOffset, 0) },
		}
		policy := checkpoint.Policy{MaxRetries: 3, Backoff: checkpoint.Fixed(FailDelay)}
		if l.Sc.PoisonPartition >= 0 {
			policy = checkpoint.Policy{MaxRetries: PoisonRetries, Backoff: checkpoint.Fixed(PoisonDelay)}
		}
		opts := []stream.Option{stream.WithHooks(hooks), stream.WithPolicy(policy)}
		if u == unitKey {
			opts = append(opts, stream.WithOrdering(stream.ByKey))
		}
		proc, err := stream.NewProcessor(h, opts...)
		if err != nil {
			b.Fatal(err)
		}
		cfg := BenchConfig(addrs, topic, proc)
		cfg.Options = append(cfg.Options, a.Throughput...)
		c, err := a.New(cfg)
		if err != nil {
			b.Fatal(err)
		}
		// A client to read the group's offsets, made before the records
		// flow: an adapter may write success commits after it reported
		// them (coalesced), so the run ends when the broker has them.
		adm, err := kgo.NewClient(kgo.SeedBrokers(addrs...))
		if err != nil {
			b.Fatal(err)
		}
		defer adm.Close()
		ctx, cancel := context.WithCancel(context.Background())
		stopped := make(chan error, 1)
		go func() { stopped <- c.Run(ctx) }()
		defer func() {
			cancel()
			<-stopped
		}()
		select {
		case <-done:
			wctx, wcancel := context.WithTimeout(ctx, time.Minute)
			defer wcancel()
			for {
				offs, err := kadm.NewClient(adm).FetchOffsets(wctx, BenchGroup(topic))
				if err != nil {
					b.Fatalf("the group's offsets: %v", err)
				}
				at := true
				for p, want := range l.Per {
					if o, ok := offs.Lookup(topic, int32(p)); want > 0 && (!ok || o.At != want) {
						at = false
						break
					}
				}
				if at {
					d := time.Since(l.Start())
					waits.report(b)
					return d
				}
				time.Sleep(100 * time.Microsecond)
			}
		case err := <-stopped:
			b.Fatalf("consumer stopped: %v", err)
		case <-time.After(5 * time.Minute):
			b.Fatal("records not all committed in 5 minutes")
		}
		return 0
	}}
}

// recordHandler is the handler of the record and key loops: a
// stream.PerRecord function under the leaf's scenario, the records it
// finished counted once per delivery (as the batch loops count theirs),
// so that the benchmark's own bookkeeping costs what it costs the others.
// A record fails once when its place in the partitions one after the
// other (partition 0's records, then partition 1's, and so on) is
// FailOnce*BenchBatch-1 modulo FailOnce*BenchBatch, so that the failures
// fall on every partition alike (counted by the records' place in the
// topic, record i at partition i%partitions, they would all fall on one
// partition when the partition count divides FailOnce*BenchBatch); the
// poison record always fails.
func recordHandler(l *Leaf, waits *retryWaits) stream.Handler {
	every := int64(l.Sc.FailOnce) * BenchBatch
	before := make([]int64, len(l.Per)) // the records of the partitions before each
	for p := 1; p < len(l.Per); p++ {
		before[p] = before[p-1] + l.Per[p-1]
	}
	var (
		mu      sync.Mutex
		failed  = make(map[[2]int64]bool) // the records that failed once
		poisons int                       // the poison record's failures
	)
	rec := stream.PerRecord(func(_ context.Context, r *stream.Record) error {
		if l.Poisoned(r.Partition, r.Offset, r.Offset) {
			mu.Lock()
			poisons++
			gaveUp := poisons == PoisonRetries+1
			mu.Unlock()
			l.PoisonFailed(gaveUp)
			waits.failed(r.Partition, r.Offset)
			return ErrBench
		}
		if every > 0 && (before[r.Partition]+r.Offset)%every == every-1 {
			key := [2]int64{int64(r.Partition), r.Offset}
			mu.Lock()
			again := failed[key]
			failed[key] = true
			mu.Unlock()
			if !again {
				waits.failed(r.Partition, r.Offset)
				return ErrBench
			}
		}
		return nil
	})
	return stream.HandlerFunc(func(ctx context.Context, bt *stream.Batch) error {
		l.Started()
		if bt.Attempt.Retries > 0 {
			waits.retried(bt.Partition, bt.FirstOffset())
		}
		err := rec.Handle(ctx, bt)
		done := len(bt.Records)
		if err != nil {
			done = 0
			var at *stream.BatchError
			if errors.As(err, &at) {
				done = at.Index
			}
		}
		if done > 0 {
			n := 0
			for i := range bt.Records[:done] {
				n += len(bt.Records[i].Value)
			}
			l.Handled(bt.Partition, bt.Records[0].Offset, bt.Records[done-1].Offset, n)
		}
		return err
	})
}

// retryWaits measures, for RedeliverLoop, how long each failed batch waits
// for its retry: from its failing delivery's return to the handler's call
// with the retry, which the policy's delay (FailDelay, PoisonDelay) bounds
// from below and the adapter's work between the two (the retry state's
// commit, the started mark's) stretches.
type retryWaits struct {
	mu     sync.Mutex
	failAt map[[2]int64]time.Time // partition and first offset: when it failed
	waits  []time.Duration
}

func (w *retryWaits) failed(p int32, first int64) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.failAt == nil {
		w.failAt = make(map[[2]int64]time.Time)
	}
	w.failAt[[2]int64{int64(p), first}] = time.Now()
}

func (w *retryWaits) retried(p int32, first int64) {
	now := time.Now()
	w.mu.Lock()
	defer w.mu.Unlock()
	key := [2]int64{int64(p), first}
	if at, ok := w.failAt[key]; ok {
		w.waits = append(w.waits, now.Sub(at))
		delete(w.failAt, key)
	}
}

// report reports the median and the longest wait, in ms
// (retry-wait-ms, retry-wait-max-ms), when a batch was retried.
func (w *retryWaits) report(b *testing.B) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if len(w.waits) == 0 {
		return
	}
	slices.Sort(w.waits)
	b.ReportMetric(float64(w.waits[len(w.waits)/2])/float64(time.Millisecond), "retry-wait-ms")
	b.ReportMetric(float64(w.waits[len(w.waits)-1])/float64(time.Millisecond), "retry-wait-max-ms")
}

// BenchLateness measures, through the adapter, how late a redelivery
// starts (from its due time to the handler's call) with 1, 8 or 100
// partitions in backoff at once; see [Lateness]. b.N is the number of
// redeliveries.
func BenchLateness(b *testing.B, a Adapter) {
	for _, partitions := range []int32{1, 8, 100} {
		b.Run(fmt.Sprintf("partitions=%d", partitions), func(b *testing.B) {
			addrs := BenchAddrs(b)
			topic := BenchTopic("late")
			ProduceBench(b, addrs, topic, partitions, int(partitions)*10, 100, false)
			Lateness(b, partitions, func(proc *stream.Processor) func() error {
				return RunBench(b, a, BenchConfig(addrs, topic, proc))
			})
			DeleteTopic(b, addrs, topic)
		})
	}
}
