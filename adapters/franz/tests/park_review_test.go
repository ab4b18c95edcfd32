package franz_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/redeliver-go/redeliver/adapters/franz"
	"github.com/redeliver-go/redeliver/adapters/franz/internal/engine"
	"github.com/redeliver-go/redeliver/adapters/internal/kafkatest"
	"github.com/redeliver-go/redeliver/checkpoint"
	"github.com/redeliver-go/redeliver/stream"
)

// The park tests below check what reaches an idle partition's parked
// worker by another path than records pushed to its buffer, and what
// addresses a worker that may be parked.

// gotValues records the values a handler saw, in order.
type gotValues struct {
	mu  sync.Mutex
	got []string
}

func (g *gotValues) handler() stream.Handler {
	return stream.HandlerFunc(func(_ context.Context, b *stream.Batch) error {
		g.mu.Lock()
		defer g.mu.Unlock()
		g.got = append(g.got, values(b)...)
		return nil
	})
}

func (g *gotValues) values() []string {
	g.mu.Lock()
	defer g.mu.Unlock()
	return slices.Clone(g.got)
}

// TestParkedWorkerCommitsPastTransactionMarkers: a transaction written
// while the partition's worker is parked is delivered (committed, or
// aborted under read_uncommitted), and the checkpoint goes past its
// marker, and past an aborted transaction's records under read_committed,
// where the marker is all the poll brings: the claim's position moving
// with no records wakes the parked worker, which commits it.
func TestParkedWorkerCommitsPastTransactionMarkers(t *testing.T) {
	for _, readCommitted := range []bool{true, false} {
		name := "read_uncommitted"
		if readCommitted {
			name = "read_committed"
		}
		t.Run(name, func(t *testing.T) {
			addrs := newCluster(t, "t", 1)
			produce(t, addrs, "t", 0, 0, 3) // offsets 0-2
			var g gotValues
			var opts []any
			if readCommitted {
				opts = append(opts, kgo.FetchIsolationLevel(kgo.ReadCommitted()))
			}
			start(t, addrs, "g", "t", kafkatest.NewProcessor(t, g.handler()), opts...)
			waitCommitted(t, addrs, "g", "t", map[int32]int64{0: 3})
			waitUntil(t, "the worker parked", func() bool { return workerGoroutines() == 0 })

			// Offsets 3-6 the aborted transaction's, 7 its marker.
			kafkatest.ProduceTxn(t, addrs, "t", 0, false, kafkatest.TxnValues("aborted", 4)...)
			waitCommitted(t, addrs, "g", "t", map[int32]int64{0: 8})
			waitUntil(t, "the worker parked again", func() bool { return workerGoroutines() == 0 })
			// Offsets 8-11 the committed transaction's, 12 its marker.
			kafkatest.ProduceTxn(t, addrs, "t", 0, true, kafkatest.TxnValues("committed", 4)...)
			waitCommitted(t, addrs, "g", "t", map[int32]int64{0: 13})

			want := []string{"0-0", "0-1", "0-2"}
			if !readCommitted {
				want = append(want, kafkatest.TxnValues("aborted", 4)...)
			}
			want = append(want, kafkatest.TxnValues("committed", 4)...)
			if got := g.values(); !slices.Equal(got, want) {
				t.Errorf("handler saw %q\nwant        %q", got, want)
			}
		})
	}
}

// TestParkedClaimWritesCoalescedCommitAtTheEnd: a success commit
// coalesced behind a commit in flight is still pending when the worker
// parks; the revocation of the parked claim waits for the commit in
// flight and then writes it, once.
func TestParkedClaimWritesCoalescedCommitAtTheEnd(t *testing.T) {
	kc, addrs, adm := cluster(t, 3) // offsets 0-2
	var (
		mu       sync.Mutex
		requests []int64 // the offset of each commit the broker got
		release  = make(chan struct{})
	)
	kc.ControlKey(kmsg.OffsetCommit.Int16(), func(req kmsg.Request) (kmsg.Response, error, bool) {
		kc.KeepControl()
		r := req.(*kmsg.OffsetCommitRequest)
		for _, rt := range r.Topics {
			for _, rp := range rt.Partitions {
				mu.Lock()
				requests = append(requests, rp.Offset)
				mu.Unlock()
				if rp.Offset == 3 {
					// The commit of 3 (a background flush, of the
					// first records or once the worker caught up) is
					// held in the broker.
					kc.SleepControl(func() { <-release })
				}
			}
		}
		return nil, nil, false
	})
	sent := func(off int64) int {
		mu.Lock()
		defer mu.Unlock()
		n := 0
		for _, o := range requests {
			if o == off {
				n++
			}
		}
		return n
	}
	cfg := engine.DefaultConfig()
	cfg.CommitInterval, cfg.CommitRecords = time.Hour, 1_000_000
	cfg.MaxBatch = 1
	var handled atomic.Int32
	c := runConsumerWith(t, addrs, func(context.Context, *stream.Batch) error { handled.Add(1); return nil }, cfg)
	waitUntil(t, "the flush of 3 held in the broker", func() bool { return sent(3) == 1 })
	waitUntil(t, "the worker parked", func() bool { return workerGoroutines() == 0 })
	produce(t, addrs, "t", 0, 3, 1) // offset 3: its success commit, 4, waits behind the one in flight
	waitUntil(t, "the worker resumed and parked again", func() bool {
		return handled.Load() == 4 && workerGoroutines() == 0
	})
	if n := sent(4); n != 0 {
		t.Fatalf("the commit of 4 was sent while one was in flight (the test's premise: it is coalesced), requests %v", requests)
	}
	// The fourth record's commit is pending (not sent) while the worker
	// is parked: the revocation writes it after the held one.
	revokeBehindCommitInFlight(t, c, release)
	if o := fetchOffset(t, adm); o.At != 4 {
		t.Errorf("broker has offset %d after the parked claim's revocation, want 4 (its coalesced commit)", o.At)
	}
	if n := sent(4); n != 1 {
		t.Errorf("the commit of 4 was sent %d times, want once (requests %v)", n, requests)
	}
}

// TestParkedAfterOperatorSkipAndResume: a partition stopped by
// StopPartition holds its worker (it does not park); the operator's Skip
// commits past the batch and the worker parks; the next records wake it;
// a second stop is resumed by the operator, delivered again, committed,
// and the worker parks again. Stopped lists the partition while it is
// stopped only.
func TestParkedAfterOperatorSkipAndResume(t *testing.T) {
	addrs := newCluster(t, "t", 1)
	var (
		failing sync.Map // values that fail
		g       gotValues
	)
	failing.Store("0-0", true)
	failing.Store("0-2", true)
	h := stream.HandlerFunc(func(ctx context.Context, b *stream.Batch) error {
		for _, v := range values(b) {
			if _, bad := failing.Load(v); bad {
				return errors.New("bad " + v)
			}
		}
		return g.handler().Handle(ctx, b)
	})
	proc := kafkatest.NewProcessor(t, h, stream.WithExhaustionAction(stream.StopPartition))
	start(t, addrs, "g", "t", proc, franz.WithMaxBatch(1))
	waitUntil(t, "the worker parked before any record", func() bool { return workerGoroutines() == 0 })
	ctx, cancel := context.WithTimeout(context.Background(), wait)
	defer cancel()

	produce(t, addrs, "t", 0, 0, 1)
	waitUntil(t, "the partition stopped at 0-0", func() bool { return len(proc.Stopped()) == 1 })
	if n := workerGoroutines(); n != 1 {
		t.Fatalf("%d worker goroutines while the partition is stopped, want 1 (a stopped worker holds its batch)", n)
	}
	if err := proc.Skip(ctx, "t", 0); err != nil {
		t.Fatal(err)
	}
	waitCommitted(t, addrs, "g", "t", map[int32]int64{0: 1})
	waitUntil(t, "the worker parked after the skip", func() bool { return workerGoroutines() == 0 })
	if s := proc.Stopped(); len(s) != 0 {
		t.Fatalf("Stopped lists %v after the skip", s)
	}

	produce(t, addrs, "t", 0, 1, 2) // 0-1 goes through, 0-2 stops
	waitUntil(t, "the partition stopped at 0-2", func() bool {
		s := proc.Stopped()
		return len(s) == 1 && s[0].FirstOffset == 2
	})
	failing.Delete("0-2")
	if err := proc.Resume(ctx, "t", 0); err != nil {
		t.Fatal(err)
	}
	waitCommitted(t, addrs, "g", "t", map[int32]int64{0: 3})
	waitUntil(t, "the worker parked after the resume", func() bool { return workerGoroutines() == 0 })
	if err := proc.Resume(ctx, "t", 0); !errors.Is(err, stream.ErrNotStopped) {
		t.Fatalf("Resume of a parked partition: %v, want ErrNotStopped", err)
	}
	if err := proc.Skip(ctx, "t", 0); !errors.Is(err, stream.ErrNotStopped) {
		t.Fatalf("Skip of a parked partition: %v, want ErrNotStopped", err)
	}
	if got, want := g.values(), []string{"0-1", "0-2"}; !slices.Equal(got, want) {
		t.Errorf("handler succeeded with %q, want %q", got, want)
	}
}

// TestKeyOrderingDoesNotPark: under key ordering (and no ordering) the
// worker never parks: an idle partition keeps its worker goroutine, and
// records produced later are delivered by it.
func TestKeyOrderingDoesNotPark(t *testing.T) {
	for _, o := range []stream.Ordering{stream.ByKey, stream.ByNone} {
		t.Run(o.String(), func(t *testing.T) {
			addrs := newCluster(t, "t", 1)
			produce(t, addrs, "t", 0, 0, 2)
			var g gotValues
			cs := newClaims()
			proc := kafkatest.NewProcessor(t, g.handler(), stream.WithOrdering(o), stream.WithHooks(cs.hooks()))
			r := start(t, addrs, "g", "t", proc)
			waitCommitted(t, addrs, "g", "t", map[int32]int64{0: 2})
			// A worker that parks does so right after its checkpoint;
			// this one must still be there a while later.
			for range 20 {
				if n := workerGoroutines(); n != 1 {
					t.Fatalf("%d worker goroutines while idle under %v, want 1 (key ordering never parks)", n, o)
				}
				time.Sleep(10 * time.Millisecond)
			}
			produce(t, addrs, "t", 0, 2, 1)
			waitCommitted(t, addrs, "g", "t", map[int32]int64{0: 3})
			if err := r.Stop(t); err != nil {
				t.Fatalf("Run: %v", err)
			}
			if n := cs.releasedOnce(t); n != 1 {
				t.Errorf("%d claims, want 1", n)
			}
		})
	}
}

// TestParkedWorkersEndAtRunsDeadline: Run's context ends by its deadline
// while every partition's worker is parked: Run returns nil (a clean
// shutdown) and every claim is released once.
func TestParkedWorkersEndAtRunsDeadline(t *testing.T) {
	const parts = 16
	addrs := newCluster(t, "t", parts)
	produceEach(t, addrs, "t", parts, 0, 1)
	cs := newClaims()
	proc := kafkatest.NewProcessor(t, streamSucceed(), stream.WithHooks(cs.hooks()))
	c, err := adapter.New(kafkatest.Config{Addrs: addrs, Group: "g", Topic: "t", Processor: proc})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- c.Run(ctx) }()
	waitUntil(t, "every partition's first checkpoint", func() bool { return cs.checkpoints() >= parts })
	waitUntil(t, "every worker parked", func() bool { return workerGoroutines() == 0 })
	if ctx.Err() != nil {
		t.Log("the deadline passed before every worker parked: the test checked less than it says")
	}
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("Run at its context's deadline: %v, want nil", err)
		}
	case <-time.After(5*time.Second + wait):
		t.Fatal("Run did not return after its context's deadline")
	}
	if n := cs.releasedOnce(t); n != parts {
		t.Errorf("%d claims, want %d", n, parts)
	}
}

// TestCloseFromAResumedWorkersHandler: a handler that runs on a worker
// resumed from its park closes the consumer: Close returns without
// waiting for that worker, and Run returns nil.
func TestCloseFromAResumedWorkersHandler(t *testing.T) {
	addrs := newCluster(t, "t", 2)
	var (
		cp       atomic.Pointer[kafkatest.Consumer]
		closed   = make(chan error, 1)
		once     sync.Once
		released = make(chan struct{})
	)
	cs := newClaims()
	h := stream.HandlerFunc(func(context.Context, *stream.Batch) error {
		once.Do(func() { closed <- (*cp.Load()).Close() })
		return nil
	})
	proc := kafkatest.NewProcessor(t, h, stream.WithHooks(cs.hooks()), stream.WithHooks(stream.Hooks{
		Released: func(stream.ReleaseEvent) {
			select {
			case released <- struct{}{}:
			default:
			}
		},
	}))
	c, err := adapter.New(kafkatest.Config{Addrs: addrs, Group: "g", Topic: "t", Processor: proc})
	if err != nil {
		t.Fatal(err)
	}
	cp.Store(&c)
	done := make(chan error, 1)
	go func() { done <- c.Run(context.Background()) }()
	waitUntil(t, "both claims", func() bool { cs.mu.Lock(); defer cs.mu.Unlock(); return len(cs.claimed) == 2 })
	waitUntil(t, "both workers parked", func() bool { return workerGoroutines() == 0 })
	produce(t, addrs, "t", 1, 0, 1)
	select {
	case err := <-closed:
		if err != nil {
			t.Fatalf("Close from the handler: %v", err)
		}
	case <-time.After(wait):
		t.Fatal("Close from the handler of a resumed worker did not return (it waits for its own worker?)")
	}
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("Run: %v, want nil", err)
		}
	case <-time.After(wait):
		t.Fatal("Run did not return after Close")
	}
	if n := cs.releasedOnce(t); n != 2 {
		t.Errorf("%d claims, want 2", n)
	}
}

func streamSucceed() stream.Handler {
	return stream.HandlerFunc(func(context.Context, *stream.Batch) error { return nil })
}

// TestParkedBeforeFirstBatchKeepsTheRetryBound: a previous owner's retry
// state at its last retry, committed at an offset whose record is not
// there yet, is honoured by a worker that parks before the record
// arrives: the record is delivered once more (the last retry), then given
// up; the count does not start over.
func TestParkedBeforeFirstBatchKeepsTheRetryBound(t *testing.T) {
	addrs := newCluster(t, "t", 1)
	commitPreviousOwnersState(t, addrs, 2)
	var (
		mu        sync.Mutex
		retries   []int
		exhausted atomic.Int32
	)
	cs := newClaims()
	proc := kafkatest.NewProcessor(t, stream.HandlerFunc(func(_ context.Context, b *stream.Batch) error {
		mu.Lock()
		defer mu.Unlock()
		retries = append(retries, b.Attempt.Retries)
		return errors.New("always fails")
	}), stream.WithPolicy(checkpoint.Policy{MaxRetries: 2, Backoff: checkpoint.Fixed(time.Millisecond)}),
		stream.WithHooks(cs.hooks()), stream.WithHooks(stream.Hooks{Exhausted: func(stream.ExhaustedEvent) { exhausted.Add(1) }}))
	start(t, addrs, "g", "t", proc)
	waitUntil(t, "the claim", func() bool { cs.mu.Lock(); defer cs.mu.Unlock(); return len(cs.claimed[0]) == 1 })
	waitUntil(t, "the worker parked", func() bool { return workerGoroutines() == 0 })
	produce(t, addrs, "t", 0, 0, 1)
	waitCommitted(t, addrs, "g", "t", map[int32]int64{0: 1})
	mu.Lock()
	defer mu.Unlock()
	if !slices.Equal(retries, []int{2}) {
		t.Errorf("deliveries at retries %v, want [2]: the previous owner's last retry, then the give-up", retries)
	}
	if n := exhausted.Load(); n != 1 {
		t.Errorf("%d give-ups, want 1", n)
	}
}

// TestDrainNamesOnlyTheHeldWorker: at Run's end one partition's handler
// ignores its context while the other partitions' workers are parked: the
// drain's error names the held partition alone (the parked workers end at
// once when their claims end, and are not named).
func TestDrainNamesOnlyTheHeldWorker(t *testing.T) {
	const parts = 6
	addrs := newCluster(t, "t", parts)
	produceEach(t, addrs, "t", parts, 0, 1)
	produce(t, addrs, "t", 0, 1, 1)
	started, release := make(chan struct{}), make(chan struct{})
	t.Cleanup(func() { close(release) })
	cs := newClaims()
	proc := kafkatest.NewProcessor(t, stream.HandlerFunc(func(_ context.Context, b *stream.Batch) error {
		if b.Partition == 0 && b.Records[0].Offset == 1 {
			close(started)
			<-release // ignores its context
		}
		return nil
	}), stream.WithHooks(cs.hooks()))
	r := start(t, addrs, "g", "t", proc, franz.WithMaxBatch(1), franz.WithDrain(time.Second))
	select {
	case <-started:
	case <-time.After(wait):
		t.Fatal("the handler was never called")
	}
	waitUntil(t, "every other partition's checkpoint", func() bool { return cs.checkpoints() >= parts })
	waitUntil(t, "every other worker parked", func() bool { return workerGoroutines() == 1 })
	err := r.Stop(t)
	if err == nil || !strings.Contains(err.Error(), "t/0") {
		t.Fatalf("Run = %v, want the drain's error naming t/0", err)
	}
	for p := 1; p < parts; p++ {
		if name := fmt.Sprintf("t/%d", p); strings.Contains(err.Error(), name) {
			t.Errorf("the drain's error names %s, a parked partition: %v", name, err)
		}
	}
}

// TestParkedClaimLostAndReassigned: the member's session is lost (its
// heartbeat answered with UNKNOWN_MEMBER_ID) while its workers are
// parked: franz-go reports the partitions lost and joins again, and the
// same member is assigned them again. Each lost claim is released once,
// the new claims deliver the records produced after, and commit them.
func TestParkedClaimLostAndReassigned(t *testing.T) {
	const parts = 3
	kc, addrs := kafkatest.NewCluster(t, "t", parts)
	produceEach(t, addrs, "t", parts, 0, 1)
	cs := newClaims()
	var g gotValues
	var (
		lostReleases atomic.Int32
		evMu         sync.Mutex
		events       = map[int32][]string{} // per partition: "claimed <id>", "released <id>"
	)
	note := func(p int32, what string, id uint64) {
		evMu.Lock()
		defer evMu.Unlock()
		events[p] = append(events[p], fmt.Sprintf("%s %d", what, id))
	}
	r := start(t, addrs, "g", "t", kafkatest.NewProcessor(t, g.handler(), stream.WithHooks(cs.hooks()),
		stream.WithHooks(stream.Hooks{
			Claimed: func(e stream.ClaimEvent) { note(e.Partition, "claimed", e.ClaimID) },
			Released: func(e stream.ReleaseEvent) {
				note(e.Partition, "released", e.ClaimID)
				if e.Cause != nil && strings.Contains(e.Cause.Error(), "partition lost") {
					lostReleases.Add(1)
				}
			}})),
		kgo.HeartbeatInterval(100*time.Millisecond))
	waitUntil(t, "every partition's first checkpoint", func() bool { return cs.checkpoints() >= parts })
	waitUntil(t, "every worker parked", func() bool { return workerGoroutines() == 0 })

	var lostOnce sync.Once
	kc.ControlKey(kmsg.Heartbeat.Int16(), func(req kmsg.Request) (kmsg.Response, error, bool) {
		handled := false
		var resp kmsg.Response
		lostOnce.Do(func() {
			hr := req.(*kmsg.HeartbeatRequest)
			r := hr.ResponseKind().(*kmsg.HeartbeatResponse)
			r.ErrorCode = kerr.UnknownMemberID.Code
			resp, handled = r, true
		})
		return resp, nil, handled
	})
	waitUntil(t, "every partition claimed again", func() bool {
		cs.mu.Lock()
		defer cs.mu.Unlock()
		for p := range int32(parts) {
			if len(cs.claimed[p]) < 2 {
				return false
			}
		}
		return true
	})
	if n := lostReleases.Load(); n != parts {
		t.Fatalf("%d claims released as lost, want %d (the test's premise: the session was lost)", n, parts)
	}
	produceEach(t, addrs, "t", parts, 1, 1)
	want := map[int32]int64{}
	for p := range int32(parts) {
		want[p] = 2
	}
	waitCommitted(t, addrs, "g", "t", want)
	if err := r.Stop(t); err != nil {
		t.Fatalf("Run: %v", err)
	}
	cs.releasedOnce(t)
	// A partition's lost claim is released before its next claim begins
	// (what hooks keyed by partition, such as rdotel's gauges, rely on).
	evMu.Lock()
	for p, evs := range events {
		for i, e := range evs {
			want := "claimed"
			if i%2 == 1 {
				want = "released"
			}
			if !strings.HasPrefix(e, want) {
				t.Errorf("partition %d: events %v, want each claim released before the next is claimed", p, evs)
				break
			}
		}
	}
	evMu.Unlock()
	got := g.values()
	slices.Sort(got)
	if want := []string{"0-0", "0-1", "1-0", "1-1", "2-0", "2-1"}; !slices.Equal(got, want) {
		t.Errorf("handler saw %q, want %q", got, want)
	}
}
