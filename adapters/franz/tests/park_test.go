package franz_test

import (
	"context"
	"fmt"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/redeliver-go/redeliver/adapters/franz"
	"github.com/redeliver-go/redeliver/adapters/internal/kafkatest"
	"github.com/redeliver-go/redeliver/checkpoint"
	"github.com/redeliver-go/redeliver/internal/retrystate"
	"github.com/redeliver-go/redeliver/stream"
)

// workerGoroutines counts the goroutines that run a partition's worker
// (inside the Processor's batch loop).
func workerGoroutines() int {
	buf := make([]byte, 1<<20)
	for {
		n := runtime.Stack(buf, true)
		if n < len(buf) {
			buf = buf[:n]
			break
		}
		buf = make([]byte, 2*len(buf))
	}
	count := 0
	for _, g := range strings.Split(string(buf), "\n\n") {
		if strings.Contains(g, "redeliver/stream.(*partition).run") || strings.Contains(g, "redeliver/stream.(*Processor).process") {
			count++
		}
	}
	return count
}

// claims records the claim events of a processor, by partition.
type claims struct {
	mu        sync.Mutex
	claimed   map[int32][]uint64
	released  map[uint64]int
	committed map[int32][]uint64 // the ClaimID of each checkpoint
}

// releasedOnce checks that every claim was released exactly once, and
// returns how many claims there were.
func (c *claims) releasedOnce(t *testing.T) int {
	t.Helper()
	c.mu.Lock()
	defer c.mu.Unlock()
	n := 0
	for p, ids := range c.claimed {
		for _, id := range ids {
			n++
			if k := c.released[id]; k != 1 {
				t.Errorf("partition %d: claim %d released %d times, want once", p, id, k)
			}
		}
	}
	if len(c.released) != n {
		t.Errorf("%d claims released, %d claimed", len(c.released), n)
	}
	return n
}

func (c *claims) hooks() stream.Hooks {
	return stream.Hooks{
		Claimed: func(e stream.ClaimEvent) {
			c.mu.Lock()
			defer c.mu.Unlock()
			c.claimed[e.Partition] = append(c.claimed[e.Partition], e.ClaimID)
		},
		Released: func(e stream.ReleaseEvent) {
			c.mu.Lock()
			defer c.mu.Unlock()
			c.released[e.ClaimID]++
		},
		Checkpointed: func(e stream.CheckpointEvent) {
			c.mu.Lock()
			defer c.mu.Unlock()
			c.committed[e.Partition] = append(c.committed[e.Partition], e.ClaimID)
		},
	}
}

func newClaims() *claims {
	return &claims{claimed: map[int32][]uint64{}, released: map[uint64]int{}, committed: map[int32][]uint64{}}
}

func (c *claims) checkpoints() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	n := 0
	for _, ids := range c.committed {
		n += len(ids)
	}
	return n
}

// TestIdlePartitionParksAndResumes: once every partition's records are
// handled and committed, no goroutine runs a worker (each parked under
// its claim); records produced then are delivered under the same claim
// (one Claimed per partition, the same ClaimID on every checkpoint), and
// the end of Run releases every claim once.
func TestIdlePartitionParksAndResumes(t *testing.T) {
	const parts = 8
	addrs := newCluster(t, "t", parts)
	produceEach(t, addrs, "t", parts, 0, 1)
	cs := newClaims()
	proc := kafkatest.NewProcessor(t, stream.HandlerFunc(func(context.Context, *stream.Batch) error { return nil }),
		stream.WithHooks(cs.hooks()))
	r := start(t, addrs, "g", "t", proc)
	waitUntil(t, "every partition's first checkpoint", func() bool { return cs.checkpoints() >= parts })
	waitUntil(t, "no worker goroutine while idle", func() bool { return workerGoroutines() == 0 })

	produceEach(t, addrs, "t", parts, 1, 2)
	want := map[int32]int64{}
	for p := range int32(parts) {
		want[p] = 3
	}
	waitCommitted(t, addrs, "g", "t", want)
	waitUntil(t, "no worker goroutine once idle again", func() bool { return workerGoroutines() == 0 })

	if err := r.Stop(t); err != nil {
		t.Fatalf("Run: %v", err)
	}
	cs.mu.Lock()
	defer cs.mu.Unlock()
	for p := range int32(parts) {
		ids := cs.claimed[p]
		if len(ids) != 1 {
			t.Fatalf("partition %d claimed %d times (%v), want once", p, len(ids), ids)
		}
		for _, id := range cs.committed[p] {
			if id != ids[0] {
				t.Errorf("partition %d: a checkpoint under claim %d, want %d (the claim it was parked under)", p, id, ids[0])
			}
		}
		if n := cs.released[ids[0]]; n != 1 {
			t.Errorf("partition %d: claim %d released %d times, want once", p, ids[0], n)
		}
	}
}

// TestParkedClaimRevokedReleasesOnce: a second member joins while every
// claim of the first is parked; the claims it loses are released once
// each, and the partitions go on at the new member.
func TestParkedClaimRevokedReleasesOnce(t *testing.T) {
	const parts = 4
	addrs := newCluster(t, "t", parts)
	produceEach(t, addrs, "t", parts, 0, 1)
	cs := newClaims()
	h := stream.HandlerFunc(func(context.Context, *stream.Batch) error { return nil })
	r1 := start(t, addrs, "g", "t", kafkatest.NewProcessor(t, h, stream.WithHooks(cs.hooks())))
	waitUntil(t, "every partition's first checkpoint", func() bool { return cs.checkpoints() >= parts })
	waitUntil(t, "no worker goroutine while idle", func() bool { return workerGoroutines() == 0 })

	cs2 := newClaims()
	start(t, addrs, "g", "t", kafkatest.NewProcessor(t, h, stream.WithHooks(cs2.hooks())))
	waitUntil(t, "a claim released by the first member", func() bool {
		cs.mu.Lock()
		defer cs.mu.Unlock()
		return len(cs.released) > 0
	})
	produceEach(t, addrs, "t", parts, 1, 1)
	want := map[int32]int64{}
	for p := range int32(parts) {
		want[p] = 2
	}
	waitCommitted(t, addrs, "g", "t", want)
	if err := r1.Stop(t); err != nil {
		t.Fatalf("Run: %v", err)
	}
	cs.releasedOnce(t)
}

// TestParkedBeforeFirstBatchKeepsRestoredState: a retry state committed
// by a previous owner, at an offset whose record is not there yet, is
// honoured once the record arrives after the worker parked: the retry
// count goes on from it.
func TestParkedBeforeFirstBatchKeepsRestoredState(t *testing.T) {
	addrs := newCluster(t, "t", 1)
	commitPreviousOwnersState(t, addrs, 2)

	attempts := make(chan int, 10)
	cs := newClaims()
	proc := kafkatest.NewProcessor(t, stream.HandlerFunc(func(_ context.Context, b *stream.Batch) error {
		attempts <- b.Attempt.Retries
		return nil
	}), stream.WithPolicy(checkpoint.Policy{MaxRetries: 5, Backoff: checkpoint.Fixed(time.Millisecond)}),
		stream.WithHooks(cs.hooks()))
	start(t, addrs, "g", "t", proc)
	waitUntil(t, "the claim", func() bool { cs.mu.Lock(); defer cs.mu.Unlock(); return len(cs.claimed[0]) == 1 })
	waitUntil(t, "the worker parked", func() bool { return workerGoroutines() == 0 })
	produce(t, addrs, "t", 0, 0, 1)
	select {
	case n := <-attempts:
		if n != 2 {
			t.Fatalf("the first delivery after the park is retry %d, want 2 (the previous owner's second retry, due)", n)
		}
	case <-time.After(wait):
		t.Fatal("the record was not delivered")
	}
	waitCommitted(t, addrs, "g", "t", map[int32]int64{0: 1})
}

// TestParkNoLostWakeup: records produced one at a time, each as the
// worker handled the one before and parks, are all delivered: a push that
// comes as the worker parks wakes it.
func TestParkNoLostWakeup(t *testing.T) {
	const parts, rounds = 2, 150
	addrs := newCluster(t, "t", parts)
	got := make(chan string, parts*rounds)
	proc := kafkatest.NewProcessor(t, stream.HandlerFunc(func(_ context.Context, b *stream.Batch) error {
		for _, r := range b.Records {
			got <- string(r.Value)
		}
		return nil
	}))
	start(t, addrs, "g", "t", proc, franz.WithCommitWindow(0, 0))
	pc, err := kgo.NewClient(kgo.SeedBrokers(addrs...), kgo.RecordPartitioner(kgo.ManualPartitioner()), kgo.ProducerLinger(0))
	if err != nil {
		t.Fatal(err)
	}
	defer pc.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 4*wait)
	defer cancel()
	for i := range rounds {
		for p := range int32(parts) {
			if err := pc.ProduceSync(ctx, &kgo.Record{Topic: "t", Partition: p, Value: fmt.Appendf(nil, "%d-%d", p, i)}).FirstErr(); err != nil {
				t.Fatal(err)
			}
		}
		seen := map[string]bool{}
		for len(seen) < parts {
			select {
			case v := <-got:
				seen[v] = true
			case <-time.After(wait):
				t.Fatalf("round %d: records not delivered (lost wake-up?), saw %v", i, seen)
			}
		}
		for p := range parts {
			if v := fmt.Sprintf("%d-%d", p, i); !seen[v] {
				t.Fatalf("round %d: got %v, want %s", i, seen, v)
			}
		}
	}
}

// TestParkChurnReleasesEveryClaimOnce: records keep coming to partitions
// whose workers park between them while members join and leave, so that
// claims end parked, resuming and running; every claim is released once,
// and every record is committed.
func TestParkChurnReleasesEveryClaimOnce(t *testing.T) {
	const parts, rounds = 4, 3
	addrs := newCluster(t, "t", parts)
	cs := newClaims()
	h := stream.HandlerFunc(func(context.Context, *stream.Batch) error { return nil })
	r1 := start(t, addrs, "g", "t", kafkatest.NewProcessor(t, h, stream.WithHooks(cs.hooks())))
	pc, err := kgo.NewClient(kgo.SeedBrokers(addrs...), kgo.RecordPartitioner(kgo.ManualPartitioner()), kgo.ProducerLinger(0))
	if err != nil {
		t.Fatal(err)
	}
	defer pc.Close()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var (
		wg      sync.WaitGroup
		mu      sync.Mutex
		written = map[int32]int64{}
	)
	wg.Go(func() {
		for i := 0; ctx.Err() == nil; i++ {
			p := int32(i % parts)
			if err := pc.ProduceSync(ctx, &kgo.Record{Topic: "t", Partition: p, Value: []byte("v")}).FirstErr(); err != nil {
				return
			}
			mu.Lock()
			written[p]++
			mu.Unlock()
			time.Sleep(time.Millisecond)
		}
	})
	// Each member's Processor numbers its own claims, so each member
	// gets its own record of them.
	n := 0
	for range rounds {
		cs2 := newClaims()
		r2 := start(t, addrs, "g", "t", kafkatest.NewProcessor(t, h, stream.WithHooks(cs2.hooks())))
		time.Sleep(300 * time.Millisecond)
		if err := r2.Stop(t); err != nil {
			t.Fatalf("second member's Run: %v", err)
		}
		n += cs2.releasedOnce(t)
		time.Sleep(200 * time.Millisecond)
	}
	cancel()
	wg.Wait()
	mu.Lock()
	want := map[int32]int64{}
	for p, n := range written {
		want[p] = n
	}
	mu.Unlock()
	waitCommitted(t, addrs, "g", "t", want)
	if err := r1.Stop(t); err != nil {
		t.Fatalf("Run: %v", err)
	}
	n += cs.releasedOnce(t)
	if n < parts+rounds {
		t.Errorf("%d claims for %d partitions over %d rounds of a member joining and leaving: the rebalances did not happen", n, parts, rounds)
	}
}

// commitPreviousOwnersState commits, for group g, a previous owner's
// retry state at offset 0 of t/0: the record there failed and is due for
// retry number retries (its first failure a second ago, one record).
func commitPreviousOwnersState(t *testing.T, addrs []string, retries int) {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(addrs...))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	md := retrystate.EncodeState(retrystate.State{Offset: 0, Retries: retries, FirstFailure: time.Now().Add(-time.Second), NextAt: time.Now(), Records: 1})
	offs := kadm.Offsets{}
	offs.Add(kadm.Offset{Topic: "t", Partition: 0, At: 0, LeaderEpoch: -1, Metadata: md})
	ctx, cancel := context.WithTimeout(context.Background(), wait)
	defer cancel()
	if err := kadm.NewClient(cl).CommitAllOffsets(ctx, "g", offs); err != nil {
		t.Fatal(err)
	}
}
