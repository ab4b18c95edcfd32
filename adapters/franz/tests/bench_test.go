package franz_test

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

	"github.com/redeliver-go/redeliver/adapters/franz"
	"github.com/redeliver-go/redeliver/checkpoint"
	"github.com/redeliver-go/redeliver/stream"
)

// benchBatch is the batch size of both loops: records per poll for the raw
// loop, records per batch for the Processor.
const benchBatch = 500

// benchMaxWait is the fetch max wait of both loops (the adapter's default).
const benchMaxWait = 500 * time.Millisecond

// Every benchmark here consumes b.N records of 100 bytes from a fresh topic
// of an in-process kfake cluster, or of the external broker named by
// REDELIVER_KAFKA_BROKERS (integration/kafka.sh starts one), through one
// of two loops given the same kgo options (group, start offset, 500ms fetch
// max wait):
//
//   - raw: a plain franz-go group consumer with autocommit off and
//     BlockRebalanceOnPoll: PollRecords(ctx, 500), handle each record,
//     CommitUncommittedOffsets (synchronous), AllowRebalance, again. A
//     failing poll is retried in place: sleep, handle again.
//   - redeliver: the Processor run by this adapter, batches of up to 500
//     records of a partition, a synchronous commit per batch.
//
// b.N is the number of records: run with -benchtime=1000000x or so, each
// leaf in a process of its own (scripts/bench.sh does). records/s counts
// from the first record handed out (a poll's return, a handler call) to the
// commit of the last one, so the group join is left out; ns/op includes
// it. cpu-ns/record is the CPU time of the whole process per record (the
// in-process broker included, the producing of the records not). Every
// leaf checks that every record was handled and that the commits reached
// every partition's end.

// scenario is what a benchmark's handler does with a batch.
type scenario struct {
	// failOnce makes every n-th batch (counting first deliveries) fail once;
	// it succeeds on its retry, 1ms later. 0: none.
	failOnce int
	// poison names the one record that always fails: it is given up after
	// poisonRetries retries, poisonDelay apart. poisonPartition < 0: none.
	poisonPartition int32
	poisonOffset    int64
}

const (
	failDelay     = time.Millisecond
	poisonRetries = 5
	poisonDelay   = 10 * time.Millisecond
)

var errBench = errors.New("bench: handler failed")

// leaf is one run of a loop over a topic: it handles records, counts them
// per partition, and measures.
type leaf struct {
	b          *testing.B
	sc         scenario
	partitions int32
	per        []int64  // records per partition
	handled    [][]bool // handled[p][offset]: the record succeeded or was given up
	batches    atomic.Int64
	sink       atomic.Int64

	mu          sync.Mutex
	start       time.Time
	poisonFirst time.Time // the poison record's first failure
	poisonGone  time.Time // when it was given up
	othersDone  time.Time // when the last good record of the other partitions was handled
	othersLeft  int64
	during      int64 // records of other partitions handled while the poison record retried
}

func newLeaf(b *testing.B, sc scenario, partitions int32) *leaf {
	l := &leaf{b: b, sc: sc, partitions: partitions, per: make([]int64, partitions), handled: make([][]bool, partitions)}
	for i := range int64(b.N) {
		l.per[i%int64(partitions)]++
	}
	for p := range l.handled {
		l.handled[p] = make([]bool, l.per[p])
		if int32(p) != sc.poisonPartition {
			l.othersLeft += l.per[p]
		}
	}
	return l
}

func (l *leaf) started() {
	l.mu.Lock()
	if l.start.IsZero() {
		l.start = time.Now()
	}
	l.mu.Unlock()
}

// fails reports whether a batch of partition p with these offsets fails on
// its first delivery, counting it as one batch.
func (l *leaf) failsFirst() bool {
	return l.sc.failOnce > 0 && l.batches.Add(1)%int64(l.sc.failOnce) == 0
}

// poisoned reports whether offsets [first, last] of partition p hold the
// poison record.
func (l *leaf) poisoned(p int32, first, last int64) bool {
	return p == l.sc.poisonPartition && first <= l.sc.poisonOffset && l.sc.poisonOffset <= last
}

// done marks records of partition p handled (or given up).
func (l *leaf) done(p int32, recs func(yield func(off int64, n int) bool)) {
	var sum, n int64
	for off, size := range recs {
		l.handled[p][off] = true
		sum += int64(size)
		n++
	}
	l.sink.Add(sum)
	if p == l.sc.poisonPartition || l.sc.poisonPartition < 0 {
		return
	}
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

func (l *leaf) poisonFailed(gaveUp bool) {
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

// check fails the benchmark unless every record was handled.
func (l *leaf) check() {
	for p, hs := range l.handled {
		if i := slices.Index(hs, false); i >= 0 {
			l.b.Fatalf("partition %d: record at offset %d never handled", p, i)
		}
	}
}

// report reports the leaf's metrics for a run of d.
func (l *leaf) report(d time.Duration) {
	l.b.ReportMetric(float64(l.b.N)/d.Seconds(), "records/s")
	if l.sc.poisonPartition >= 0 {
		l.b.ReportMetric(float64(l.othersDone.Sub(l.start).Milliseconds()), "others-done-ms")
		l.b.ReportMetric(float64(l.during), "others-during-retries")
	}
}

// benchAddrs returns the external broker's addresses, or starts a kfake
// cluster for the benchmark function.
func benchAddrs(b *testing.B) []string {
	addrs := strings.Split(os.Getenv("REDELIVER_KAFKA_BROKERS"), ",")
	if addrs[0] != "" {
		return addrs
	}
	cluster, err := kfake.NewCluster(kfake.NumBrokers(1))
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(cluster.Close)
	return cluster.ListenAddrs()
}

type loopFn func(l *leaf, addrs []string, topic string) time.Duration

var loops = []struct {
	name string
	fn   loopFn
}{
	{"raw", rawLoop},
	{"redeliver", redeliverLoop},
}

var benchRun atomic.Int64

// runLeaves runs every loop over every partition count with the scenario
// sc(partitions); compressed produces the records with franz-go's default
// compression (snappy) instead of none.
func runLeaves(b *testing.B, counts []int32, compressed bool, sc func(partitions int32, n int) scenario) {
	addrs := benchAddrs(b)
	for _, loop := range loops {
		b.Run(loop.name, func(b *testing.B) {
			for _, partitions := range counts {
				name := fmt.Sprintf("partitions=%d", partitions)
				if compressed {
					name += "-snappy"
				}
				b.Run(name, func(b *testing.B) {
					topic := fmt.Sprintf("bench-%d-%d", os.Getpid(), benchRun.Add(1))
					benchProduce(b, addrs, topic, partitions, b.N, compressed)
					l := newLeaf(b, sc(partitions, b.N), partitions)
					b.ReportAllocs()
					cpu0 := cpuTime()
					b.ResetTimer()
					d := loop.fn(l, addrs, topic)
					b.StopTimer()
					l.check()
					l.report(d)
					b.ReportMetric(float64(cpuTime()-cpu0)/float64(b.N), "cpu-ns/record")
					benchDelete(b, addrs, topic)
				})
			}
		})
	}
}

// BenchmarkSuccessPath: every batch succeeds. The partitions=8-snappy leaves
// produce compressed records: 100 zero bytes compress so well that one
// fetch answer holds almost a whole partition, which fills the adapter's
// buffers at once.
func BenchmarkSuccessPath(b *testing.B) {
	none := func(int32, int) scenario { return scenario{poisonPartition: -1} }
	b.Run("plain", func(b *testing.B) { runLeaves(b, []int32{1, 8}, false, none) })
	b.Run("snappy", func(b *testing.B) { runLeaves(b, []int32{8}, true, none) })
}

// BenchmarkFailurePath: every 10th batch fails once and succeeds on a retry
// 1ms later. The raw loop sleeps 1ms and handles the poll again.
func BenchmarkFailurePath(b *testing.B) {
	runLeaves(b, []int32{1, 8}, false, func(int32, int) scenario {
		return scenario{failOnce: 10, poisonPartition: -1}
	})
}

// BenchmarkPoison: one record, in the middle of partition 0, always fails
// and is given up after 5 retries 10ms apart. others-done-ms is the time
// from the first record until every record of the other partitions was
// handled; others-during-retries how many of those were handled while the
// poison record was retried. The raw loop retries the whole poll in place.
func BenchmarkPoison(b *testing.B) {
	runLeaves(b, []int32{8}, false, func(partitions int32, n int) scenario {
		return scenario{poisonPartition: 0, poisonOffset: int64(n/int(partitions)) / 2}
	})
}

// cpuTime returns the CPU time the process has used, user and system, in
// nanoseconds.
func cpuTime() int64 {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return ru.Utime.Nano() + ru.Stime.Nano()
}

// benchProduce creates topic and spreads n records of 100 bytes over its
// partitions, record i to partition i % partitions.
func benchProduce(b *testing.B, addrs []string, topic string, partitions int32, n int, compressed bool) {
	b.Helper()
	produceSized(b, addrs, topic, partitions, n, 100, compressed)
}

// benchProduceSized is benchProduce with records of size bytes, uncompressed.
func benchProduceSized(b *testing.B, addrs []string, topic string, partitions int32, n, size int) {
	b.Helper()
	produceSized(b, addrs, topic, partitions, n, size, false)
}

func produceSized(b *testing.B, addrs []string, topic string, partitions int32, n, size int, compressed bool) {
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
		kgo.FetchMaxWait(benchMaxWait),
	}
}

// checkCommitted fails the benchmark unless the group's commits reached
// every partition's end.
func checkCommitted(l *leaf, addrs []string, topic string) {
	cl, err := kgo.NewClient(kgo.SeedBrokers(addrs...))
	if err != nil {
		l.b.Fatal(err)
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	offs, err := kadm.NewClient(cl).FetchOffsets(ctx, topic+"-group")
	if err != nil {
		l.b.Fatal(err)
	}
	for p, want := range l.per {
		o, ok := offs.Lookup(topic, int32(p))
		if !ok && want == 0 {
			continue
		}
		if !ok || o.At != want {
			l.b.Fatalf("partition %d: committed %d, want %d", p, o.At, want)
		}
	}
}

// rawLoop is the baseline: poll at most benchBatch records, handle them,
// commit what was polled synchronously, allow rebalances, again. A poll
// that fails is handled again in place after the scenario's delay.
func rawLoop(l *leaf, addrs []string, topic string) time.Duration {
	b := l.b
	cl, err := kgo.NewClient(append(benchOpts(addrs, topic), kgo.DisableAutoCommit(), kgo.BlockRebalanceOnPoll())...)
	if err != nil {
		b.Fatal(err)
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	var seen int
	for seen < b.N {
		fs := cl.PollRecords(ctx, benchBatch)
		if err := ctx.Err(); err != nil {
			b.Fatalf("raw loop: %d of %d records: %v", seen, b.N, err)
		}
		fs.EachError(func(t string, p int32, err error) { b.Fatalf("fetch %s/%d: %v", t, p, err) })
		n := fs.NumRecords()
		if n == 0 {
			continue
		}
		l.started()
		// The poll is the batch: it fails as a whole.
		fail := l.failsFirst()
		poisoned := false
		fs.EachPartition(func(p kgo.FetchTopicPartition) {
			if len(p.Records) > 0 && l.poisoned(p.Partition, p.Records[0].Offset, p.Records[len(p.Records)-1].Offset) {
				poisoned = true
			}
		})
		switch {
		case poisoned:
			for retry := 0; ; retry++ {
				l.poisonFailed(retry == poisonRetries)
				if retry == poisonRetries {
					break
				}
				time.Sleep(poisonDelay)
			}
		case fail:
			time.Sleep(failDelay)
		}
		fs.EachPartition(func(p kgo.FetchTopicPartition) {
			l.done(p.Partition, func(yield func(int64, int) bool) {
				for _, r := range p.Records {
					if !yield(r.Offset, len(r.Value)) {
						return
					}
				}
			})
		})
		if err := cl.CommitUncommittedOffsets(ctx); err != nil {
			b.Fatalf("commit: %v", err)
		}
		cl.AllowRebalance()
		seen += n
	}
	l.mu.Lock()
	d := time.Since(l.start)
	l.mu.Unlock()
	checkCommitted(l, addrs, topic)
	return d
}

// redeliverLoop runs the same records through the Processor and the adapter
// until every partition's checkpoint is at its end.
func redeliverLoop(l *leaf, addrs []string, topic string) time.Duration {
	b := l.b
	var (
		mu    sync.Mutex
		next  = make(map[int32]int64)
		total int64
		done  = make(chan time.Time, 1)
	)
	h := stream.HandlerFunc(func(_ context.Context, bt *stream.Batch) error {
		l.started()
		first, last := bt.FirstOffset(), bt.LastOffset()
		if l.poisoned(bt.Partition, first, last) {
			l.poisonFailed(bt.Attempt.Last)
			return errBench
		}
		if bt.Attempt.Retry == 0 && l.failsFirst() {
			return errBench
		}
		l.done(bt.Partition, func(yield func(int64, int) bool) {
			for i := range bt.Records {
				if !yield(bt.Records[i].Offset, len(bt.Records[i].Value)) {
					return
				}
			}
		})
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
		Exhausted: func(e stream.ExhaustedEvent) {
			// The given-up batch: its poison record is gone, and the
			// records beside it in the batch count as handled too.
			l.done(e.Partition, func(yield func(int64, int) bool) {
				for off := e.FirstOffset; off <= e.LastOffset; off++ {
					if !yield(off, 0) {
						return
					}
				}
			})
		},
	}
	policy := checkpoint.Policy{MaxRetries: 3, Backoff: checkpoint.Fixed(failDelay)}
	if l.sc.poisonPartition >= 0 {
		policy = checkpoint.Policy{MaxRetries: poisonRetries, Backoff: checkpoint.Fixed(poisonDelay)}
	}
	proc, err := stream.NewProcessor(h, stream.WithHooks(hooks), stream.WithPolicy(policy))
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
	var d time.Duration
	select {
	case end := <-done:
		l.mu.Lock()
		d = end.Sub(l.start)
		l.mu.Unlock()
	case err := <-stopped:
		b.Fatalf("consumer stopped: %v", err)
	case <-time.After(5 * time.Minute):
		b.Fatal("records not all committed in 5 minutes")
	}
	cancel()
	<-stopped
	checkCommitted(l, addrs, topic)
	return d
}
