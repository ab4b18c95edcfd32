package redrivetest

import (
	"context"
	"errors"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/redeliver-go/redeliver/redrive"
	"github.com/redeliver-go/redeliver/stream"
	"github.com/redeliver-go/redeliver/stream/streamtest"
)

// The cases of key order (redrive.Entry.OrderKey, redrive.KeyLocker,
// redrive.ParkByKey).

// keyed returns entry(key, due) with order key ok.
func keyed(key, ok string, due time.Time) redrive.Entry {
	e := entry(key, due)
	e.OrderKey = ok
	return e
}

// claimKeys claims what is due at now and returns the claimed keys; fn
// gives the changes.
func claimKeys(t *testing.T, s redrive.Store, now time.Time, fn func(redrive.Entry) *redrive.Change) []string {
	t.Helper()
	var got []string
	_, _, err := s.Claim(ctxFor(t), now, 100, func(_ context.Context, due []redrive.Entry) []redrive.Change {
		var cs []redrive.Change
		for _, e := range due {
			got = append(got, e.Key)
			if fn != nil {
				if c := fn(e); c != nil {
					cs = append(cs, *c)
				}
			}
		}
		return cs
	})
	if err != nil {
		t.Fatalf("Claim: %v", err)
	}
	slices.Sort(got)
	return got
}

func testOrderKeyKept(t *testing.T, s redrive.Store) {
	want := keyed("a", "onboarding/device-é", t0.Add(time.Minute))
	mustPark(t, s, want, entry("b", t0))
	if d := diff(mustGet(t, s, "a"), want); d != "" {
		t.Fatalf("entry with an order key read back: %s", d)
	}
	if got := mustGet(t, s, "b"); got.OrderKey != "" {
		t.Fatalf("entry without an order key read back with %q", got.OrderKey)
	}
	es, err := s.List(ctxFor(t), redrive.Filter{})
	if err != nil || len(es) != 2 || es[0].OrderKey != want.OrderKey {
		t.Fatalf("List = %+v, %v: want the order key kept", es, err)
	}
}

// testClaimKeepsKeyOrder: a key's entries are claimed one at a time, in
// the order they were parked, each once the one before is done or timed
// out (not merely re-driven); other keys and entries without an order
// key are claimed as before.
func testClaimKeepsKeyOrder(t *testing.T, s redrive.Store) {
	now := t0.Add(time.Hour)
	// k3 is due first, yet k1 (parked first) holds it back.
	mustPark(t, s,
		keyed("k1", "orders/K", t0.Add(2*time.Minute)),
		keyed("k2", "orders/K", t0.Add(time.Minute)),
		keyed("k3", "orders/K", t0),
		keyed("l1", "orders/L", t0),
		entry("x", t0), entry("y", t0),
	)
	retry := func(e redrive.Entry) *redrive.Change {
		if e.Key != "k1" && e.Key != "k2" {
			return nil
		}
		return &redrive.Change{ID: e.ID, Status: e.Status, Version: e.Version, To: redrive.Retrying,
			StateTime: now, DueAt: now.Add(time.Minute), Redrives: e.Redrives + 1}
	}
	if got := claimKeys(t, s, now, retry); !slices.Equal(got, []string{"k1", "l1", "x", "y"}) {
		t.Fatalf("first claim took %v: want k1, l1, x, y (k2 and k3 wait behind k1)", got)
	}
	// k1 re-driven (retrying) still holds its key.
	if got := claimKeys(t, s, now.Add(2*time.Minute), nil); !slices.Equal(got, []string{"k1", "l1", "x", "y"}) {
		t.Fatalf("claim with k1 retrying took %v: want k1 again and the others, never k2 or k3", got)
	}
	if _, err := s.Complete(ctxFor(t), "k1", now.Add(3*time.Minute)); err != nil {
		t.Fatal(err)
	}
	if got := claimKeys(t, s, now.Add(3*time.Minute), retry); !slices.Equal(got, []string{"k2", "l1", "x", "y"}) {
		t.Fatalf("claim after k1 was done took %v: want k2 (not k3) and the others", got)
	}
	// k2 times out: k3 is next.
	timeout := func(e redrive.Entry) *redrive.Change {
		if e.Key != "k2" {
			return nil
		}
		return &redrive.Change{ID: e.ID, Status: e.Status, Version: e.Version, To: redrive.TimedOut,
			StateTime: now.Add(5 * time.Minute), Redrives: e.Redrives, LastError: "timed out"}
	}
	if got := claimKeys(t, s, now.Add(5*time.Minute), timeout); !slices.Equal(got, []string{"k2", "l1", "x", "y"}) {
		t.Fatalf("claim with k2 retrying took %v: want k2, l1, x, y", got)
	}
	if got := claimKeys(t, s, now.Add(5*time.Minute), nil); !slices.Equal(got, []string{"k3", "l1", "x", "y"}) {
		t.Fatalf("claim after k2 timed out took %v: want k3 and the others", got)
	}
}

// testKeyLocks: LockedKeys and KeyLocked name the order keys with a
// pending entry, by the partition of its record.
func testKeyLocks(t *testing.T, s redrive.Store) {
	kl, ok := s.(redrive.KeyLocker)
	if !ok {
		t.Skipf("%T is not a redrive.KeyLocker: redrive.ParkByKey refuses it", s)
	}
	ctx := ctxFor(t)
	other := keyed("p4", "onboarding/M", t0)
	other.Message.Partition = 4
	mustPark(t, s, keyed("a1", "onboarding/K", t0), keyed("a2", "onboarding/K", t0), keyed("b1", "onboarding/L", t0), entry("c", t0), other)
	got, err := kl.LockedKeys(ctx, "onboarding", 3)
	slices.Sort(got)
	if err != nil || !slices.Equal(got, []string{"onboarding/K", "onboarding/L"}) {
		t.Fatalf("LockedKeys(onboarding, 3) = %v, %v: want onboarding/K and onboarding/L, once each", got, err)
	}
	if got, err := kl.LockedKeys(ctx, "onboarding", 4); err != nil || !slices.Equal(got, []string{"onboarding/M"}) {
		t.Fatalf("LockedKeys(onboarding, 4) = %v, %v", got, err)
	}
	if got, err := kl.LockedKeys(ctx, "other", 3); err != nil || len(got) != 0 {
		t.Fatalf("LockedKeys(other, 3) = %v, %v: want none", got, err)
	}
	for key, want := range map[string]bool{"onboarding/K": true, "onboarding/L": true, "onboarding/N": false, "": false} {
		if got, err := kl.KeyLocked(ctx, key); err != nil || got != want {
			t.Errorf("KeyLocked(%q) = %v, %v; want %v", key, got, err, want)
		}
	}
	for _, k := range []string{"a1", "b1"} {
		if _, err := s.Complete(ctx, k, t0); err != nil {
			t.Fatal(err)
		}
	}
	if locked, err := kl.KeyLocked(ctx, "onboarding/K"); err != nil || !locked {
		t.Fatalf("KeyLocked(onboarding/K) with a2 pending = %v, %v", locked, err)
	}
	if locked, err := kl.KeyLocked(ctx, "onboarding/L"); err != nil || locked {
		t.Fatalf("KeyLocked(onboarding/L) once its entry is done = %v, %v: want released", locked, err)
	}
	if _, err := s.Complete(ctx, "a2", t0); err != nil {
		t.Fatal(err)
	}
	if got, err := kl.LockedKeys(ctx, "onboarding", 3); err != nil || len(got) != 0 {
		t.Fatalf("LockedKeys once every entry is done = %v, %v: want none", got, err)
	}
}

// logClaim is a [stream.Claim] over fixed records (which may carry
// headers, as re-driven records do), for one owner.
type logClaim struct {
	topic string
	part  int32
	recs  []stream.Record

	mu        sync.Mutex
	fetched   bool
	committed int64
	done      chan struct{}
}

func newLogClaim(topic string, part int32, recs ...stream.Record) *logClaim {
	return &logClaim{topic: topic, part: part, recs: recs, committed: -1, done: make(chan struct{})}
}

func (c *logClaim) Topic() string              { return c.topic }
func (c *logClaim) Partition() int32           { return c.part }
func (c *logClaim) Committed() (int64, string) { return -1, "" }
func (c *logClaim) Pause()                     {}
func (c *logClaim) Resume()                    {}
func (c *logClaim) Fetch(ctx context.Context) ([]stream.Record, error) {
	c.mu.Lock()
	if !c.fetched {
		c.fetched = true
		c.mu.Unlock()
		return c.recs, nil
	}
	c.mu.Unlock()
	<-ctx.Done()
	return nil, ctx.Err()
}

func (c *logClaim) Commit(_ context.Context, next int64, _ string) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if next > c.committed {
		c.committed = next
		if next > c.recs[len(c.recs)-1].Offset {
			select {
			case <-c.done:
			default:
				close(c.done)
			}
		}
	}
	return nil
}

// keyRun runs a ByKey processor with ParkByKey over s on claim until
// every record is committed, and returns the records the handler saw
// (offset order per key). fail says which records the handler fails.
type keyRun struct {
	t     *testing.T
	s     redrive.Store
	clock *streamtest.Clock

	mu   sync.Mutex
	seen []stream.Record
}

func (k *keyRun) processor(fail func(stream.Record) bool) *stream.Processor {
	k.t.Helper()
	park, err := redrive.ParkByKey(k.s, time.Minute, redrive.WithClock(k.clock), redrive.WithLogger(quiet))
	if err != nil {
		k.t.Fatal(err)
	}
	h := stream.Chain(stream.HandlerFunc(func(_ context.Context, b *stream.Batch) error {
		r := b.Records[0]
		k.mu.Lock()
		k.seen = append(k.seen, r)
		k.mu.Unlock()
		if fail(r) {
			return errors.New("poison")
		}
		return nil
	}), redrive.CompleteOnSuccess(k.s, redrive.WithClock(k.clock), redrive.WithLogger(quiet)))
	proc, err := stream.NewProcessor(h, stream.WithOrdering(stream.ByKey), park, stream.WithLogger(quiet))
	if err != nil {
		k.t.Fatal(err)
	}
	return proc
}

// run processes the claim to its end and returns the offsets handled.
func (k *keyRun) run(proc *stream.Processor, c stream.Claim, done func(ctx context.Context) error) []int64 {
	k.t.Helper()
	k.mu.Lock()
	k.seen = nil
	k.mu.Unlock()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	errc := make(chan error, 1)
	go func() {
		if p, ok := c.(*streamtest.Partition); ok {
			errc <- streamtest.Run(ctx, proc, p)
			return
		}
		errc <- proc.Process(ctx, c)
	}()
	if err := done(ctx); err != nil {
		k.t.Fatalf("the records were not all committed: %v", err)
	}
	cancel()
	<-errc
	k.mu.Lock()
	defer k.mu.Unlock()
	var offs []int64
	for _, r := range k.seen {
		offs = append(offs, r.Offset)
	}
	slices.Sort(offs)
	return offs
}

// testParkByKey: in key mode with ParkByKey, key K fails for good at
// offset 3; its records at 5 and 9 are parked behind it, never handled,
// and the other keys flow. A new processor on the same store (a restart)
// keeps the lock. The scheduler re-drives 3, then 5, then 9, each once
// the one before is done (completed, or timed out), not merely
// re-published; the key is released when its last entry is done.
func testParkByKey(t *testing.T, s redrive.Store) {
	if _, ok := s.(redrive.KeyLocker); !ok {
		t.Skipf("%T is not a redrive.KeyLocker: redrive.ParkByKey refuses it", s)
	}
	k := &keyRun{t: t, s: s, clock: streamtest.NewClock(t0)}
	poisonK := func(r stream.Record) bool {
		_, redriven := Header(r, redrive.HeaderKey)
		return string(r.Key) == "K" && !redriven
	}
	part := streamtest.NewPartition("orders", 0, 100)
	//                         0    1    2    3    4    5    6    7    8    9
	end := part.AppendKeyed(t0, "A", "B", "C", "K", "A", "K", "B", "C", "A", "K")
	got := k.run(k.processor(poisonK), part, func(ctx context.Context) error { return part.WaitCommitted(ctx, end) })
	if !slices.Equal(got, []int64{0, 1, 2, 3, 4, 6, 7, 8}) {
		t.Fatalf("the handler saw offsets %v: want every record but K's 5 and 9 (parked behind 3)", got)
	}
	okey := redrive.OrderKey("orders", 0, "K")
	entries := func() []redrive.Entry {
		es, err := s.List(ctxFor(t), redrive.Filter{})
		if err != nil {
			t.Fatal(err)
		}
		return es
	}
	var keys []string
	for _, e := range entries() {
		keys = append(keys, e.Key)
		if e.OrderKey != okey || e.Status != redrive.Parked {
			t.Errorf("entry %s: order key %q, %s; want %q, parked", e.Key, e.OrderKey, e.State(), okey)
		}
	}
	if !slices.Equal(keys, []string{"orders/0/3", "orders/0/5", "orders/0/9"}) {
		t.Fatalf("entries %v (by ID): want orders/0/3, orders/0/5, orders/0/9", keys)
	}

	// A restart: a new processor on the same store parks K's next record
	// behind, and handles the others.
	end = part.AppendKeyed(t0, "K", "A")
	got = k.run(k.processor(poisonK), part, func(ctx context.Context) error { return part.WaitCommitted(ctx, end) })
	if !slices.Equal(got, []int64{11}) {
		t.Fatalf("after a restart the handler saw offsets %v: want 11 only (10 is K's, parked behind)", got)
	}
	if e := mustGet(t, s, "orders/0/10"); e.OrderKey != okey {
		t.Fatalf("entry of offset 10: order key %q, want %q", e.OrderKey, okey)
	}

	h, sch := newHarness(t, s, false, redrive.WithMaxRedrives(1))
	sweep := func() []int64 {
		t.Helper()
		n := len(h.pub.Records())
		if ev := sch.Sweep(ctxFor(t)); ev.Err != nil {
			t.Fatal(ev.Err)
		}
		var offs []int64
		for _, r := range h.pub.Records()[n:] {
			if _, ok := Header(r, redrive.HeaderErrorCode); ok {
				continue // a time-out's report
			}
			o, _ := Header(r, stream.HeaderOffset)
			n, _ := strconv.ParseInt(o, 10, 64)
			offs = append(offs, n)
		}
		return offs
	}
	h.clock.Advance(time.Minute) // 3 is due; 5, 9 and 10 were due at once
	if got := sweep(); !slices.Equal(got, []int64{3}) {
		t.Fatalf("first sweep re-drove offsets %v: want 3 only", got)
	}
	if got := sweep(); len(got) != 0 {
		t.Fatalf("with 3 re-driven but not done, a sweep re-drove %v: want nothing", got)
	}
	// The re-driven record of 3 comes back on the topic: it is the key's
	// head, handled (not parked behind), and its success completes 3.
	recs := h.pub.Records()
	redriven := recs[len(recs)-1]
	redriven.Topic, redriven.Partition, redriven.Offset = "orders", 0, 20
	c := newLogClaim("orders", 0, redriven)
	got = k.run(k.processor(poisonK), c, func(ctx context.Context) error {
		select {
		case <-c.done:
			return nil
		case <-ctx.Done():
			return ctx.Err()
		}
	})
	if !slices.Equal(got, []int64{20}) {
		t.Fatalf("the re-driven record of 3: the handler saw %v, want offset 20", got)
	}
	if e := mustGet(t, s, "orders/0/3"); e.Status != redrive.Done {
		t.Fatalf("entry 3 after its re-driven record was handled: %s, want done", e.State())
	}
	if got := sweep(); !slices.Equal(got, []int64{5}) {
		t.Fatalf("with 3 done, a sweep re-drove %v: want 5 only", got)
	}
	// 5 is not completed: it times out after its expiry (one re-drive
	// at most), and only then is 9 re-driven.
	h.clock.Advance(time.Minute)
	if got := sweep(); len(got) != 0 {
		t.Fatalf("the sweep that timed 5 out re-drove %v: want nothing (5 was still pending when it claimed)", got)
	}
	if e := mustGet(t, s, "orders/0/5"); e.Status != redrive.TimedOut {
		t.Fatalf("entry 5: %s, want timed out", e.State())
	}
	if got := sweep(); !slices.Equal(got, []int64{9}) {
		t.Fatalf("with 5 timed out, a sweep re-drove %v: want 9 only", got)
	}
	if _, err := s.Complete(ctxFor(t), "orders/0/9", h.clock.Now()); err != nil {
		t.Fatal(err)
	}
	if got := sweep(); !slices.Equal(got, []int64{10}) {
		t.Fatalf("with 9 done, a sweep re-drove %v: want 10", got)
	}
	kl := s.(redrive.KeyLocker)
	if locked, err := kl.KeyLocked(ctxFor(t), okey); err != nil || !locked {
		t.Fatalf("KeyLocked with 10 retrying = %v, %v; want locked", locked, err)
	}
	if _, err := s.Complete(ctxFor(t), "orders/0/10", h.clock.Now()); err != nil {
		t.Fatal(err)
	}
	if locked, err := kl.KeyLocked(ctxFor(t), okey); err != nil || locked {
		t.Fatalf("KeyLocked once its last entry is done = %v, %v; want released", locked, err)
	}
	// Released: K's next record is handled again.
	end = part.AppendKeyed(t0, "K")
	got = k.run(k.processor(func(stream.Record) bool { return false }), part, func(ctx context.Context) error { return part.WaitCommitted(ctx, end) })
	if !slices.Equal(got, []int64{12}) {
		t.Fatalf("once K was released the handler saw %v: want 12", got)
	}
}
