package stream_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/redeliver-go/redeliver/checkpoint"
	"github.com/redeliver-go/redeliver/internal/park"
	"github.com/redeliver-go/redeliver/internal/retrystate"
	"github.com/redeliver-go/redeliver/stream"
	"github.com/redeliver-go/redeliver/stream/streamtest"
)

// parkClaim is a claim that parks its worker (park.Claim): records are
// added by the test, and an added record or the claim's end runs a parked
// worker's resume on a goroutine of its own, whose result goes to
// resumed.
type parkClaim struct {
	committed int64
	metadata  string

	mu      sync.Mutex
	recs    []stream.Record
	next    int64 // the next offset to add
	resume  park.Resume
	ended   bool
	wake    chan struct{}
	commits []int64
	// withheld is set by the test's handler while a batch of it waits
	// for a retry: the worker must not park then.
	withheld    bool
	parkedWhile bool // Park offered while withheld
	resumed     chan error
}

func newParkClaim(committed int64, md string) *parkClaim {
	return &parkClaim{committed: committed, metadata: md, next: max(committed, 0), wake: make(chan struct{}, 1), resumed: make(chan error, 16)}
}

func (c *parkClaim) Topic() string              { return "t" }
func (c *parkClaim) Partition() int32           { return 0 }
func (c *parkClaim) Committed() (int64, string) { return c.committed, c.metadata }
func (c *parkClaim) Pause()                     {}
func (c *parkClaim) Resume()                    {}
func (c *parkClaim) Commit(_ context.Context, next int64, _ string) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.commits = append(c.commits, next)
	return nil
}

func (c *parkClaim) Park(r park.Resume) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.withheld {
		c.parkedWhile = true
	}
	if len(c.recs) > 0 || c.ended {
		return false
	}
	c.resume = r
	return true
}

// wakeLocked runs a parked worker's resume; c.mu is held.
func (c *parkClaim) wakeLocked() {
	if r := c.resume; r != nil {
		c.resume = nil
		go func() { c.resumed <- r() }()
	}
	select {
	case c.wake <- struct{}{}:
	default:
	}
}

func (c *parkClaim) add(n int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for range n {
		c.recs = append(c.recs, stream.Record{Topic: "t", Offset: c.next, Value: []byte("v")})
		c.next++
	}
	c.wakeLocked()
}

// end ends the claim, after cancel ended its context.
func (c *parkClaim) end() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.ended = true
	c.wakeLocked()
}

func (c *parkClaim) Fetch(ctx context.Context) ([]stream.Record, error) {
	for {
		c.mu.Lock()
		if len(c.recs) > 0 {
			recs := c.recs
			c.recs = nil
			c.mu.Unlock()
			return recs, nil
		}
		c.mu.Unlock()
		select {
		case <-c.wake:
		case <-ctx.Done():
			return nil, context.Cause(ctx)
		}
	}
}

func (c *parkClaim) lastCommit() int64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	if len(c.commits) == 0 {
		return -1
	}
	return c.commits[len(c.commits)-1]
}

// awaitResumed waits for the next resume's result.
func (c *parkClaim) awaitResumed(t *testing.T) error {
	t.Helper()
	select {
	case err := <-c.resumed:
		return err
	case <-time.After(time.Hour): // synctest's time: every goroutine blocked
		t.Fatal("no resume returned")
		return nil
	}
}

// TestProcessParksIdleWorker: a worker whose claim parks it returns
// park.ErrParked while nothing is there, is resumed by records under the
// same claim (one Claimed, the same ClaimID on every checkpoint), is not
// offered to park while a batch waits for its retry, and is released
// once when the claim ends while it is parked.
func TestProcessParksIdleWorker(t *testing.T) {
	synctest.Test(t, testProcessParksIdleWorker)
}

func testProcessParksIdleWorker(t *testing.T) {
	c := newParkClaim(-1, "")
	var (
		mu       sync.Mutex
		claimed  []uint64
		released []stream.ReleaseEvent
		ids      = map[uint64]bool{}
		failed   bool
	)
	proc, err := stream.NewProcessor(stream.HandlerFunc(func(_ context.Context, b *stream.Batch) error {
		mu.Lock()
		defer mu.Unlock()
		if b.Records[0].Offset == 2 && !failed {
			failed = true
			c.mu.Lock()
			c.withheld = true
			c.mu.Unlock()
			return errors.New("fails once")
		}
		c.mu.Lock()
		c.withheld = false
		c.mu.Unlock()
		return nil
	}), stream.WithPolicy(checkpoint.Policy{MaxRetries: 3, Backoff: checkpoint.Fixed(5 * time.Millisecond)}),
		stream.WithHooks(stream.Hooks{
			Claimed: func(e stream.ClaimEvent) { mu.Lock(); claimed = append(claimed, e.ClaimID); mu.Unlock() },
			Released: func(e stream.ReleaseEvent) {
				mu.Lock()
				released = append(released, e)
				mu.Unlock()
			},
			Checkpointed: func(e stream.CheckpointEvent) { mu.Lock(); ids[e.ClaimID] = true; mu.Unlock() },
		}))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	if err := proc.Process(ctx, c); err != park.ErrParked {
		t.Fatalf("Process with nothing to fetch returned %v, want park.ErrParked", err)
	}
	c.add(2)
	if err := c.awaitResumed(t); err != park.ErrParked {
		t.Fatalf("a resume returned %v, want park.ErrParked once the records are done", err)
	}
	if got := c.lastCommit(); got != 2 {
		t.Fatalf("last commit %d, want 2", got)
	}
	c.add(1) // fails once, then succeeds after its backoff
	if err := c.awaitResumed(t); err != park.ErrParked {
		t.Fatalf("a resume returned %v, want park.ErrParked", err)
	}
	if got := c.lastCommit(); got != 3 {
		t.Fatalf("last commit %d, want 3", got)
	}
	cancel()
	c.end()
	if err := c.awaitResumed(t); !errors.Is(err, context.Canceled) {
		t.Fatalf("the resume at the claim's end returned %v, want the context's end", err)
	}
	mu.Lock()
	defer mu.Unlock()
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.parkedWhile {
		t.Error("the worker was offered to park while its batch waited for a retry")
	}
	if len(claimed) != 1 || len(released) != 1 || released[0].ClaimID != claimed[0] {
		t.Fatalf("claimed %v, released %+v: want one claim, released once", claimed, released)
	}
	if len(ids) != 1 || !ids[claimed[0]] {
		t.Errorf("checkpoints under claims %v, want %d only", ids, claimed[0])
	}
}

// TestParkedWorkerKeepsRestoredState: a worker that parks before its first
// batch applies the previous owner's retry state to it once resumed.
func TestParkedWorkerKeepsRestoredState(t *testing.T) {
	synctest.Test(t, testParkedWorkerKeepsRestoredState)
}

func testParkedWorkerKeepsRestoredState(t *testing.T) {
	md := retrystate.EncodeState(retrystate.State{Offset: 0, Retries: 2, FirstFailure: time.Now().Add(-time.Second), NextAt: time.Now(), Records: 1})
	c := newParkClaim(0, md)
	attempts := make(chan int, 4)
	proc, err := stream.NewProcessor(stream.HandlerFunc(func(_ context.Context, b *stream.Batch) error {
		attempts <- b.Attempt.Retries
		return nil
	}), stream.WithPolicy(checkpoint.Policy{MaxRetries: 5, Backoff: checkpoint.Fixed(time.Millisecond)}))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	if err := proc.Process(ctx, c); err != park.ErrParked {
		t.Fatalf("Process returned %v, want park.ErrParked", err)
	}
	c.add(1)
	if err := c.awaitResumed(t); err != park.ErrParked {
		t.Fatalf("a resume returned %v, want park.ErrParked", err)
	}
	if n := <-attempts; n != 2 {
		t.Fatalf("the first delivery is retry %d, want 2 (the previous owner's retry, due)", n)
	}
}

// TestParkedWorkerRevokedWhileResuming: a streamtest partition parks its
// idle worker; records appended and a revocation at once (in either
// order: the claim's end races the resume), or a revocation while the
// resumed worker delivers, end the worker once: Run returns, the claim is
// released once, and the next owner delivers and commits every record,
// which the history checker accepts.
func TestParkedWorkerRevokedWhileResuming(t *testing.T) {
	for _, order := range []string{"append, revoke", "revoke, append", "revoke during the delivery"} {
		t.Run(order, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) { testParkedWorkerRevokedWhileResuming(t, order) })
		})
	}
}

func testParkedWorkerRevokedWhileResuming(t *testing.T, order string) {
	part := streamtest.NewPartition("t", 0, 2)
	part.SetParking(true)
	part.Append(time.Now(), "a", "b")
	var (
		hist     streamtest.History
		mu       sync.Mutex
		claimed  = map[string]int{} // member/ClaimID (each processor counts its own claims)
		released = map[string]int{}
	)
	delivering := make(chan struct{}, 1)
	newProc := func(member string) *stream.Processor {
		count := stream.Hooks{
			Claimed:  func(e stream.ClaimEvent) { mu.Lock(); claimed[fmt.Sprint(member, "/", e.ClaimID)]++; mu.Unlock() },
			Released: func(e stream.ReleaseEvent) { mu.Lock(); released[fmt.Sprint(member, "/", e.ClaimID)]++; mu.Unlock() },
		}
		proc, err := stream.NewProcessor(stream.Chain(stream.HandlerFunc(func(ctx context.Context, b *stream.Batch) error {
			if order == "revoke during the delivery" && b.Records[0].Offset == 2 && member == "first" {
				delivering <- struct{}{}
				<-ctx.Done()
				return ctx.Err()
			}
			return nil
		}), hist.Middleware(member)), stream.WithHooks(stream.MergeHooks(hist.Hooks(member), count)),
			stream.WithPolicy(checkpoint.Policy{MaxRetries: 2, Backoff: checkpoint.Fixed(time.Millisecond)}))
		if err != nil {
			t.Fatal(err)
		}
		return proc
	}
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	ran := make(chan error, 1)
	go func() { ran <- streamtest.Run(ctx, newProc("first"), part) }()
	if err := part.WaitCommitted(ctx, 2); err != nil {
		t.Fatal(err)
	}
	synctest.Wait()
	if now, times := part.Parked(); !now || times != 1 {
		t.Fatalf("parked %v, %d times: want the idle worker parked once", now, times)
	}
	switch order {
	case "append, revoke":
		part.Append(time.Now(), "c")
		part.Revoke()
	case "revoke, append":
		part.Revoke()
		part.Append(time.Now(), "c")
	default:
		part.Append(time.Now(), "c")
		<-delivering
		part.Revoke()
	}
	select {
	case err := <-ran:
		if err != nil {
			t.Fatalf("Run of the revoked owner returned %v", err)
		}
	case <-time.After(time.Hour): // synctest's time: every goroutine is blocked
		t.Fatal("Run of the revoked owner did not return: its worker did not end")
	}
	if now, _ := part.Parked(); now {
		t.Fatal("the revoked owner's worker is still parked")
	}
	go func() { ran <- streamtest.Run(ctx, newProc("second"), part) }()
	if err := part.WaitCommitted(ctx, 3); err != nil {
		t.Fatal(err)
	}
	cancel()
	if err := <-ran; err != nil {
		t.Fatalf("Run of the second owner returned %v", err)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(claimed) != 2 {
		t.Errorf("claims %v, want 2", claimed)
	}
	for id, n := range claimed {
		if n != 1 || released[id] != 1 {
			t.Errorf("claim %s: claimed %d times, released %d times, want once each (released: %v)", id, n, released[id], released)
		}
	}
	if r := hist.Check(map[streamtest.TopicPartition]int64{{Topic: "t", Partition: 0}: 3}); len(r.Violations) > 0 {
		t.Errorf("history: %v", r.Violations)
	}
}

// TestParkedWorkerResumedBySkippedEntries: entries that Fetch never
// returns (transaction markers), appended while a streamtest partition's
// worker is parked, resume it: it commits past them and parks again.
func TestParkedWorkerResumedBySkippedEntries(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		part := streamtest.NewPartition("t", 0, 4)
		part.SetParking(true)
		part.Append(time.Now(), "a", "b")
		proc, err := stream.NewProcessor(stream.HandlerFunc(func(context.Context, *stream.Batch) error { return nil }))
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithCancel(t.Context())
		defer cancel()
		ran := make(chan error, 1)
		go func() { ran <- streamtest.Run(ctx, proc, part) }()
		if err := part.WaitCommitted(ctx, 2); err != nil {
			t.Fatal(err)
		}
		synctest.Wait()
		if now, times := part.Parked(); !now || times != 1 {
			t.Fatalf("parked %v, %d times: want the idle worker parked once", now, times)
		}
		part.AppendSkipped(3)
		if err := part.WaitCommitted(ctx, 5); err != nil {
			t.Fatal(err)
		}
		synctest.Wait()
		if now, times := part.Parked(); !now || times != 2 {
			t.Fatalf("parked %v, %d times: want the worker parked again past the skipped entries", now, times)
		}
		cancel()
		if err := <-ran; err != nil {
			t.Fatalf("Run returned %v", err)
		}
		if now, _ := part.Parked(); now {
			t.Fatal("the worker is still parked after Run")
		}
	})
}

// blockClaim is a parkClaim whose worker steps aside while it waits out a
// backoff (park.Blocker); it records when, from start.
type blockClaim struct {
	*parkClaim
	start  time.Time
	events []string
}

func (c *blockClaim) Block() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.events = append(c.events, fmt.Sprintf("block at %v", time.Since(c.start)))
}

func (c *blockClaim) Unblock() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.events = append(c.events, fmt.Sprintf("unblock at %v", time.Since(c.start)))
}

// TestWorkerStepsAsideInBackoff: a worker whose claim shares goroutines
// (park.Blocker) steps aside for exactly the wait of its batch's backoff:
// Block after the failed delivery, Unblock when the retry is due, and
// neither for a batch that succeeds.
func TestWorkerStepsAsideInBackoff(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c := &blockClaim{parkClaim: newParkClaim(-1, ""), start: time.Now()}
		var delivered []string
		proc, err := stream.NewProcessor(stream.HandlerFunc(func(_ context.Context, b *stream.Batch) error {
			c.mu.Lock()
			defer c.mu.Unlock()
			delivered = append(delivered, fmt.Sprintf("offset %d at %v", b.Records[0].Offset, time.Since(c.start)))
			if b.Records[0].Offset == 0 && b.Attempt.Retries == 0 {
				return errors.New("fails once")
			}
			return nil
		}), stream.WithPolicy(checkpoint.Policy{MaxRetries: 3, Backoff: checkpoint.Fixed(time.Second)}))
		if err != nil {
			t.Fatal(err)
		}
		c.add(1)
		if err := proc.Process(t.Context(), c); err != park.ErrParked {
			t.Fatalf("Process returned %v, want park.ErrParked once the batch is done", err)
		}
		c.add(1) // succeeds at once
		if err := c.awaitResumed(t); err != park.ErrParked {
			t.Fatalf("a resume returned %v, want park.ErrParked", err)
		}
		c.mu.Lock()
		defer c.mu.Unlock()
		wantDelivered := []string{"offset 0 at 0s", "offset 0 at 1s", "offset 1 at 1s"}
		if fmt.Sprint(delivered) != fmt.Sprint(wantDelivered) {
			t.Errorf("deliveries %q, want %q", delivered, wantDelivered)
		}
		if want := []string{"block at 0s", "unblock at 1s"}; fmt.Sprint(c.events) != fmt.Sprint(want) {
			t.Errorf("the worker stepped aside %q, want %q", c.events, want)
		}
	})
}
