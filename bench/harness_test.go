package bench

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
)

const (
	// benchBatch is the batch size wherever a peer has one: records per
	// poll, per batch, or per commit.
	benchBatch = 500
	// benchMaxWait is the fetch max wait of every peer (the franz-go
	// adapter's default).
	benchMaxWait = 500 * time.Millisecond
	// failEvery: one record in failEvery fails on its first delivery.
	failEvery = 5000
	// failDelay is the delay before the retry that succeeds.
	failDelay = time.Millisecond
	// benchTimeout bounds one leaf's run.
	benchTimeout = 5 * time.Minute
)

var errBench = errors.New("bench: handler failed")

// leaf is one peer's run over a topic: it decides which records fail,
// counts every record handled per partition and offset, and measures.
type leaf struct {
	b          *testing.B
	partitions int32
	per        []int64          // records per partition
	counts     [][]atomic.Int32 // counts[p][offset]: times the record was handled
	failed     []atomic.Bool    // failed[i]: the i-th failing record has failed once
	noFail     bool             // no record fails: the success path
	left       atomic.Int64     // records not handled yet
	all        chan struct{}    // closed when every record was handled once
	allAt      time.Time        // when all was closed
	sink       atomic.Int64

	mu    sync.Mutex
	start time.Time
	err   error // the first error a goroutine other than the benchmark's met
}

func newLeaf(b *testing.B, partitions int32) *leaf {
	l := &leaf{b: b, partitions: partitions, per: make([]int64, partitions),
		counts: make([][]atomic.Int32, partitions), failed: make([]atomic.Bool, b.N/failEvery+1),
		all: make(chan struct{})}
	for i := range int64(b.N) {
		l.per[i%int64(partitions)]++
	}
	for p := range l.counts {
		l.counts[p] = make([]atomic.Int32, l.per[p])
	}
	l.left.Store(int64(b.N))
	if b.N == 0 {
		close(l.all)
	}
	return l
}

// started marks the first record handed out to the peer's handling code.
func (l *leaf) started() {
	l.mu.Lock()
	if l.start.IsZero() {
		l.start = time.Now()
	}
	l.mu.Unlock()
}

// tail returns the time from the last record's handling to end, the
// commit of the last record; negative when not every record was handled.
func (l *leaf) tail(end time.Time) time.Duration {
	select {
	case <-l.all:
		return end.Sub(l.allAt)
	default:
		return -1
	}
}

// elapsed returns the time from started to end.
func (l *leaf) elapsed(end time.Time) time.Duration {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.start.IsZero() {
		return 0
	}
	return end.Sub(l.start)
}

// failsNow reports whether the record at offset off of partition p fails
// now: the records are numbered as they were produced (record i went to
// partition i % partitions), and every failEvery-th of them fails on its
// first delivery only, so every peer fails the same records once.
func (l *leaf) failsNow(p int32, off int64) bool {
	if l.noFail {
		return false
	}
	i := off*int64(l.partitions) + int64(p)
	if i%failEvery != failEvery-1 {
		return false
	}
	return l.failed[i/failEvery].CompareAndSwap(false, true)
}

// batchFails runs failsNow over a batch's records, all of them (so that a
// batch holding two failing records fails once, not twice), and reports
// whether any failed.
func (l *leaf) batchFails(recs func(yield func(p int32, off int64) bool)) bool {
	fail := false
	for p, off := range recs {
		if l.failsNow(p, off) {
			fail = true
		}
	}
	return fail
}

// handle counts the record at offset off of partition p handled, its value
// size bytes: the work every peer's handler does.
func (l *leaf) handle(p int32, off int64, size int) {
	if p < 0 || p >= l.partitions || off < 0 || off >= l.per[p] {
		l.fail(fmt.Errorf("record %d/%d: not one the benchmark produced", p, off))
		return
	}
	l.sink.Add(int64(size))
	if l.counts[p][off].Add(1) == 1 && l.left.Add(-1) == 0 {
		l.allAt = time.Now()
		close(l.all)
	}
}

// fail keeps the first error met by a goroutine of a peer's.
func (l *leaf) fail(err error) {
	l.mu.Lock()
	if l.err == nil {
		l.err = err
	}
	l.mu.Unlock()
}

// check fails the benchmark unless every record was handled, and returns
// how many were handled more than once.
func (l *leaf) check() int64 {
	l.mu.Lock()
	err := l.err
	l.mu.Unlock()
	if err != nil {
		l.b.Fatal(err)
	}
	var dup int64
	for p := range l.counts {
		for off := range l.counts[p] {
			n := l.counts[p][off].Load()
			if n == 0 {
				l.b.Fatalf("partition %d: record at offset %d never handled", p, off)
			}
			dup += int64(n - 1)
		}
	}
	for i := range l.b.N / failEvery {
		if !l.noFail && !l.failed[i].Load() {
			l.b.Fatalf("record %d never failed", (i+1)*failEvery-1)
		}
	}
	return dup
}

// waitAll waits until every record was handled once, or fails the
// benchmark after benchTimeout or once stopped is closed.
func (l *leaf) waitAll(stopped <-chan struct{}) {
	select {
	case <-l.all:
	case <-stopped:
		l.b.Fatalf("the consumer stopped with %d records not handled (%v)", l.left.Load(), l.err)
	case <-time.After(benchTimeout):
		l.b.Fatalf("%d records not handled in %v", l.left.Load(), benchTimeout)
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
// partitions, record i to partition i % partitions, uncompressed (100 zero
// bytes compress so well that one fetch would bring a whole partition).
func benchProduce(b *testing.B, addrs []string, topic string, partitions int32, n int) {
	b.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(addrs...), kgo.RecordPartitioner(kgo.ManualPartitioner()),
		kgo.ProducerLinger(0), kgo.MaxBufferedRecords(1<<20), kgo.ProducerBatchCompression(kgo.NoCompression()),
		// A new topic's partitions can take a while to get leaders on a
		// real broker: retry until they have (the context bounds it).
		kgo.UnknownTopicRetries(-1))
	if err != nil {
		b.Fatal(err)
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), benchTimeout)
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

// groupOf names the consumer group of every peer reading topic.
func groupOf(topic string) string { return topic + "-group" }

// commitGap returns "" when the group's commits reached every partition's
// end, or else the first partition that they did not.
func commitGap(ctx context.Context, adm *kadm.Client, l *leaf, topic string) (string, error) {
	offs, err := adm.FetchOffsets(ctx, groupOf(topic))
	if err != nil {
		return "", err
	}
	for p, want := range l.per {
		o, ok := offs.Lookup(topic, int32(p))
		if !ok && want == 0 {
			continue
		}
		if !ok || o.At != want {
			return fmt.Sprintf("partition %d: committed %d, want %d", p, o.At, want), nil
		}
	}
	return "", nil
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
	gap, err := commitGap(ctx, kadm.NewClient(cl), l, topic)
	if err != nil {
		l.b.Fatal(err)
	}
	if gap != "" {
		l.b.Fatal(gap)
	}
}
