// Package redrivetest is the conformance suite every [redrive.Store] runs,
// as Watermill's pubsub tests or River's riverdrivertest are run by each
// driver, and what tests of code that parks records need without a
// database or a broker: [MemStore], a store in memory, and [Publisher],
// which records what a scheduler publishes:
//
//	store, pub := redrivetest.NewMemStore(), &redrivetest.Publisher{}
//	sch, err := redrive.NewScheduler(store, pub, redrive.WithClock(clock))
//	...
//	sch.Sweep(ctx)
//	recs := pub.Topic("orders") // what the sweep re-published
//
// A store's own tests call [Run] with a function that returns a new, empty
// store for each case (a schema per case for PostgreSQL, a file per case for
// SQLite):
//
//	func TestConformance(t *testing.T) {
//		redrivetest.Run(t, func(t *testing.T) redrive.Store { return newStore(t) })
//	}
//
// The suite covers the store's contract (idempotent parking, faithful
// round trips, compare-and-set changes, due order, exclusive claims) and
// the time-based retry processor's flow through a [redrive.Scheduler] with a manual clock.
package redrivetest

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/redeliver-go/redeliver/redrive"
	"github.com/redeliver-go/redeliver/stream"
)

// NewStore returns a new, empty store for one case of the suite; the
// store's resources are released with t.Cleanup.
type NewStore func(t *testing.T) redrive.Store

// Run runs every case of the suite, each as a subtest with a store of its
// own.
func Run(t *testing.T, newStore NewStore) {
	if newStore == nil {
		t.Fatal("redrivetest.Run: nil NewStore: give a function that returns a new, empty store")
	}
	cases := []struct {
		name string
		fn   func(*testing.T, redrive.Store)
	}{
		{"ParkAndGet", testParkAndGet},
		{"ParkIsIdempotent", testParkIsIdempotent},
		{"GetMissing", testGetMissing},
		{"Complete", testComplete},
		{"ClaimOnlyDueInOrder", testClaimOnlyDueInOrder},
		{"ClaimAppliesChanges", testClaimAppliesChanges},
		{"ClaimCompareAndSet", testClaimCompareAndSet},
		{"CompletionDuringClaimWins", testCompletionDuringClaimWins},
		{"ConcurrentClaimsDisjoint", testConcurrentClaimsDisjoint},
		{"List", testList},
		{"Requeue", testRequeue},
		{"SeedFlow", testSeedFlow},
		{"SeedTimeout", testSeedTimeout},
		{"MaxRedrives", testMaxRedrives},
		{"IntervalRespected", testIntervalRespected},
		{"ParkActionAndCompletion", testParkActionAndCompletion},
		{"UnpublishableEntry", testUnpublishableEntry},
		{"BigSweep", testBigSweep},
		{"Repark", testRepark},
		{"PoisonRecordOneEntry", testPoisonRecordOneEntry},
		{"RedrivenWithoutEntry", testRedrivenWithoutEntry},
		{"CopiedHeaders", testCopiedHeaders},
		{"BytesKeptExactly", testBytesKeptExactly},
		{"ParkOddBatch", testParkOddBatch},
		{"WaitsHonourContext", testWaitsHonourContext},
		{"SubMicrosecond", testSubMicrosecond},
		{"LongSweep", testLongSweep},
		{"PartialPublish", testPartialPublish},
		{"OrderKeyKept", testOrderKeyKept},
		{"ClaimKeepsKeyOrder", testClaimKeepsKeyOrder},
		{"KeyLocks", testKeyLocks},
		{"ParkByKey", testParkByKey},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) { c.fn(t, newStore(t)) })
	}
}

// t0 is the suite's start of time, a whole second so that every store keeps
// it exactly.
var t0 = time.Date(2026, 3, 1, 9, 0, 0, 0, time.UTC)

func ctxFor(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// entry returns a parked entry with every field set.
func entry(key string, due time.Time) redrive.Entry {
	return redrive.Entry{
		Key: key, Base: "NONCE_PUBLISHED", Status: redrive.Parked,
		StateTime: t0, Created: t0, Expiry: 5 * time.Minute, DueAt: due,
		LastError: "no answer",
		Message: stream.Record{
			Topic: "onboarding", Partition: 3, Offset: 1234567890123,
			Key: []byte("device-" + key), Value: []byte{0, 1, 2, 0xff, 'v'},
			Headers: []stream.Header{
				{Key: "traceparent", Value: []byte("00-abc-def-01")},
				{Key: "binary", Value: []byte{0, 0xfe, 0xff}},
				{Key: "empty", Value: nil},
			},
			Timestamp: t0.Add(-time.Second).Add(123 * time.Microsecond),
		},
	}
}

func mustPark(t *testing.T, s redrive.Store, es ...redrive.Entry) {
	t.Helper()
	n, err := s.Park(ctxFor(t), es)
	if err != nil {
		t.Fatalf("Park: %v", err)
	}
	if n != len(es) {
		t.Fatalf("Park inserted %d of %d new entries", n, len(es))
	}
}

func mustGet(t *testing.T, s redrive.Store, key string) redrive.Entry {
	t.Helper()
	e, err := s.Get(ctxFor(t), key)
	if err != nil {
		t.Fatalf("Get(%q): %v", key, err)
	}
	return e
}

// diff describes how got differs from want, ignoring ID and Version; ""
// when they match.
func diff(got, want redrive.Entry) string {
	var d []string
	add := func(field string, g, w any) { d = append(d, fmt.Sprintf("%s = %v, want %v", field, g, w)) }
	if got.Key != want.Key {
		add("Key", got.Key, want.Key)
	}
	if got.Base != want.Base {
		add("Base", got.Base, want.Base)
	}
	if got.Status != want.Status {
		add("Status", got.Status, want.Status)
	}
	for _, f := range []struct {
		name string
		g, w time.Time
	}{{"StateTime", got.StateTime, want.StateTime}, {"Created", got.Created, want.Created}, {"DueAt", got.DueAt, want.DueAt}, {"Message.Timestamp", got.Message.Timestamp, want.Message.Timestamp}} {
		if !f.g.Equal(f.w) {
			add(f.name, f.g, f.w)
		}
	}
	if got.Expiry != want.Expiry {
		add("Expiry", got.Expiry, want.Expiry)
	}
	if got.Redrives != want.Redrives {
		add("Redrives", got.Redrives, want.Redrives)
	}
	if got.Reparks != want.Reparks {
		add("Reparks", got.Reparks, want.Reparks)
	}
	if got.OrderKey != want.OrderKey {
		add("OrderKey", got.OrderKey, want.OrderKey)
	}
	if got.LastError != want.LastError {
		add("LastError", fmt.Sprintf("%q", got.LastError), fmt.Sprintf("%q", want.LastError))
	}
	gm, wm := got.Message, want.Message
	if gm.Topic != wm.Topic || gm.Partition != wm.Partition || gm.Offset != wm.Offset {
		add("Message position", fmt.Sprintf("%s/%d/%d", gm.Topic, gm.Partition, gm.Offset), fmt.Sprintf("%s/%d/%d", wm.Topic, wm.Partition, wm.Offset))
	}
	if !bytes.Equal(gm.Key, wm.Key) || (gm.Key == nil) != (wm.Key == nil) {
		add("Message.Key", fmt.Sprintf("%#v", gm.Key), fmt.Sprintf("%#v", wm.Key))
	}
	if !bytes.Equal(gm.Value, wm.Value) || (gm.Value == nil) != (wm.Value == nil) {
		add("Message.Value", fmt.Sprintf("%#v", gm.Value), fmt.Sprintf("%#v", wm.Value))
	}
	if len(gm.Headers) != len(wm.Headers) {
		add("Message.Headers", gm.Headers, wm.Headers)
	} else {
		for i := range gm.Headers {
			g, w := gm.Headers[i], wm.Headers[i]
			if g.Key != w.Key || !bytes.Equal(g.Value, w.Value) || (g.Value == nil) != (w.Value == nil) {
				add(fmt.Sprintf("Message.Headers[%d]", i), fmt.Sprintf("%q=%#v", g.Key, g.Value), fmt.Sprintf("%q=%#v", w.Key, w.Value))
			}
		}
	}
	if len(d) == 0 {
		return ""
	}
	return fmt.Sprint(d)
}

func testParkAndGet(t *testing.T, s redrive.Store) {
	want := entry("a", t0.Add(5*time.Minute))
	mustPark(t, s, want)
	got := mustGet(t, s, "a")
	if d := diff(got, want); d != "" {
		t.Fatalf("round trip: %s", d)
	}
	if got.ID <= 0 || got.Version != 1 {
		t.Fatalf("ID %d, Version %d: want a positive ID and version 1", got.ID, got.Version)
	}
	if got.State() != "NONCE_PUBLISHED" {
		t.Fatalf("State() = %q", got.State())
	}
	// A record with no key, no value and no headers keeps them absent.
	bare := redrive.Entry{Key: "bare", Base: redrive.ParkedState, Status: redrive.Parked, StateTime: t0, Created: t0,
		Expiry: time.Minute, DueAt: t0.Add(time.Minute), Message: stream.Record{Topic: "t"}}
	mustPark(t, s, bare)
	if d := diff(mustGet(t, s, "bare"), bare); d != "" {
		t.Fatalf("bare round trip: %s", d)
	}
}

func testParkIsIdempotent(t *testing.T, s redrive.Store) {
	first := entry("k", t0.Add(time.Minute))
	mustPark(t, s, first)
	again := entry("k", t0.Add(time.Hour))
	again.LastError = "second"
	n, err := s.Park(ctxFor(t), []redrive.Entry{again, entry("other", t0), entry("other", t0.Add(time.Hour))})
	if err != nil {
		t.Fatal(err)
	}
	if n != 1 {
		t.Fatalf("parking k again, other twice: inserted %d, want 1", n)
	}
	if d := diff(mustGet(t, s, "k"), first); d != "" {
		t.Fatalf("parking again changed the entry: %s", d)
	}
	if got := mustGet(t, s, "other"); !got.DueAt.Equal(t0) {
		t.Fatalf("the first of two equal keys in one call wins: due %v, want %v", got.DueAt, t0)
	}
}

func testGetMissing(t *testing.T, s redrive.Store) {
	if _, err := s.Get(ctxFor(t), "nope"); !errors.Is(err, redrive.ErrNotFound) {
		t.Fatalf("Get of a missing key: %v, want ErrNotFound", err)
	}
	if _, err := s.Complete(ctxFor(t), "nope", t0); !errors.Is(err, redrive.ErrNotFound) {
		t.Fatalf("Complete of a missing key: %v, want ErrNotFound", err)
	}
}

func testComplete(t *testing.T, s redrive.Store) {
	mustPark(t, s, entry("c", t0.Add(time.Minute)))
	at := t0.Add(30 * time.Second)
	e, err := s.Complete(ctxFor(t), "c", at)
	if err != nil {
		t.Fatal(err)
	}
	if e.Status != redrive.Done || !e.StateTime.Equal(at) || !e.DueAt.IsZero() || e.Version != 2 || e.State() != "NONCE_PUBLISHED_DONE" {
		t.Fatalf("completed entry: status %v state time %v due %v version %d state %s", e.Status, e.StateTime, e.DueAt, e.Version, e.State())
	}
	if d := diff(mustGet(t, s, "c"), e); d != "" {
		t.Fatalf("Get after Complete differs from what Complete returned: %s", d)
	}
	again, err := s.Complete(ctxFor(t), "c", at.Add(time.Second))
	if !errors.Is(err, redrive.ErrNotPending) {
		t.Fatalf("second Complete: %v, want ErrNotPending", err)
	}
	if again.Status != redrive.Done || !again.StateTime.Equal(at) || again.Version != 2 {
		t.Fatalf("second Complete changed or misreported the entry: %+v", again)
	}
	// A done entry is never claimed.
	claimed, _, err := s.Claim(ctxFor(t), t0.Add(time.Hour), 10, func(context.Context, []redrive.Entry) []redrive.Change {
		t.Error("fn called with nothing due")
		return nil
	})
	if err != nil || claimed != 0 {
		t.Fatalf("Claim after Complete: %d claimed, %v", claimed, err)
	}
}

func testClaimOnlyDueInOrder(t *testing.T, s redrive.Store) {
	now := t0.Add(10 * time.Minute)
	mustPark(t, s,
		entry("late", now.Add(time.Microsecond)),
		entry("third", now),
		entry("first", now.Add(-3*time.Minute)),
		entry("second", now.Add(-time.Minute)),
		entry("done", now.Add(-time.Hour)),
	)
	if _, err := s.Complete(ctxFor(t), "done", t0); err != nil {
		t.Fatal(err)
	}
	var got []string
	claimed, applied, err := s.Claim(ctxFor(t), now, 2, func(_ context.Context, due []redrive.Entry) []redrive.Change {
		for _, e := range due {
			got = append(got, e.Key)
		}
		return nil
	})
	if err != nil || claimed != 2 || len(applied) != 0 || !slices.Equal(got, []string{"first", "second"}) {
		t.Fatalf("Claim(limit 2) = %d %v %v, saw %v: want the two earliest, first and second", claimed, applied, err, got)
	}
	got = nil
	claimed, _, err = s.Claim(ctxFor(t), now, 10, func(_ context.Context, due []redrive.Entry) []redrive.Change {
		for _, e := range due {
			got = append(got, e.Key)
			if d := diff(e, mustGet(t, s, e.Key)); d != "" {
				t.Errorf("claimed entry %s differs from Get: %s", e.Key, d)
			}
		}
		return nil
	})
	if err != nil || claimed != 3 || !slices.Equal(got, []string{"first", "second", "third"}) {
		t.Fatalf("Claim(limit 10) = %d %v, saw %v: want first, second, third (due at now counts, later does not)", claimed, err, got)
	}
}

func testClaimAppliesChanges(t *testing.T, s redrive.Store) {
	mustPark(t, s, entry("x", t0), entry("y", t0))
	now := t0.Add(5 * time.Minute)
	claimed, applied, err := s.Claim(ctxFor(t), now, 10, func(_ context.Context, due []redrive.Entry) []redrive.Change {
		var cs []redrive.Change
		for _, e := range due {
			if e.Key == "x" {
				cs = append(cs, redrive.Change{ID: e.ID, Status: e.Status, Version: e.Version,
					To: redrive.Retrying, StateTime: now, DueAt: now.Add(5 * time.Minute), Redrives: 1, LastError: "x1"})
			} else {
				cs = append(cs, redrive.Change{ID: e.ID, Status: e.Status, Version: e.Version,
					To: redrive.TimedOut, StateTime: now, Redrives: 0, LastError: "gave up"})
			}
		}
		return cs
	})
	if err != nil || claimed != 2 || len(applied) != 2 {
		t.Fatalf("Claim = %d claimed, %d applied, %v", claimed, len(applied), err)
	}
	x := mustGet(t, s, "x")
	if x.Status != redrive.Retrying || x.State() != "NONCE_PUBLISHED_RETRY" || !x.StateTime.Equal(now) || !x.DueAt.Equal(now.Add(5*time.Minute)) ||
		x.Redrives != 1 || x.LastError != "x1" || x.Version != 2 || !x.Created.Equal(t0) {
		t.Fatalf("x after change: %+v", x)
	}
	y := mustGet(t, s, "y")
	if y.Status != redrive.TimedOut || y.State() != "NONCE_PUBLISHED_TIMEOUT" || !y.DueAt.IsZero() || y.LastError != "gave up" || y.Version != 2 {
		t.Fatalf("y after change: %+v", y)
	}
	if _, err := s.Complete(ctxFor(t), "y", now); !errors.Is(err, redrive.ErrNotPending) {
		t.Fatalf("Complete of a timed-out entry: %v, want ErrNotPending", err)
	}
	if e, err := s.Complete(ctxFor(t), "x", now); err != nil || e.Status != redrive.Done {
		t.Fatalf("Complete of a retrying entry: %v %v", e.Status, err)
	}
}

func testClaimCompareAndSet(t *testing.T, s redrive.Store) {
	mustPark(t, s, entry("v", t0))
	now := t0.Add(time.Minute)
	_, applied, err := s.Claim(ctxFor(t), now, 10, func(_ context.Context, due []redrive.Entry) []redrive.Change {
		e := due[0]
		return []redrive.Change{
			{ID: e.ID, Status: e.Status, Version: e.Version - 1, To: redrive.TimedOut, StateTime: now},     // stale version
			{ID: e.ID, Status: redrive.Retrying, Version: e.Version, To: redrive.TimedOut, StateTime: now}, // wrong status
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(applied) != 0 {
		t.Fatalf("changes with a stale version or status were applied: %+v", applied)
	}
	if got := mustGet(t, s, "v"); got.Status != redrive.Parked || got.Version != 1 {
		t.Fatalf("entry changed by a failed compare-and-set: %+v", got)
	}
}

// testCompletionDuringClaimWins completes an entry while a claim holds it:
// whichever way the store orders the two (a claim that locks makes the
// completion wait; one that does not lets the completion in first, and
// then the sweep's compare-and-set fails), the entry ends done.
func testCompletionDuringClaimWins(t *testing.T, s redrive.Store) {
	mustPark(t, s, entry("race", t0))
	now := t0.Add(time.Minute)
	completed := make(chan error, 1)
	_, _, err := s.Claim(ctxFor(t), now, 10, func(_ context.Context, due []redrive.Entry) []redrive.Change {
		go func() {
			_, err := s.Complete(ctxFor(t), "race", now)
			completed <- err
		}()
		select { // give the completion a chance to land first
		case err := <-completed:
			completed <- err
		case <-time.After(200 * time.Millisecond):
		}
		e := due[0]
		return []redrive.Change{{ID: e.ID, Status: e.Status, Version: e.Version, To: redrive.Retrying, StateTime: now, DueAt: now.Add(time.Minute), Redrives: 1}}
	})
	if err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-completed:
		if err != nil {
			t.Fatalf("Complete during a claim: %v", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("Complete did not return after the claim ended")
	}
	if got := mustGet(t, s, "race"); got.Status != redrive.Done {
		t.Fatalf("after a completion during a claim the entry is %v (%s), want done", got.Status, got.State())
	}
}

// testConcurrentClaimsDisjoint runs a second claim while the first one
// holds its entries: the second must not get any of them (a store for
// several instances skips them; one for a single process may make the
// second wait).
func testConcurrentClaimsDisjoint(t *testing.T, s redrive.Store) {
	var es []redrive.Entry
	for i := range 20 {
		es = append(es, entry(fmt.Sprintf("e%02d", i), t0))
	}
	mustPark(t, s, es...)
	now := t0.Add(time.Minute)
	mark := func(due []redrive.Entry) []redrive.Change {
		cs := make([]redrive.Change, len(due))
		for i, e := range due {
			cs[i] = redrive.Change{ID: e.ID, Status: e.Status, Version: e.Version, To: redrive.Retrying, StateTime: now, DueAt: now.Add(time.Hour), Redrives: 1}
		}
		return cs
	}
	var mu sync.Mutex
	seen := map[string]int{}
	record := func(due []redrive.Entry) {
		mu.Lock()
		defer mu.Unlock()
		for _, e := range due {
			seen[e.Key]++
		}
	}
	second := make(chan error, 1)
	_, _, err := s.Claim(ctxFor(t), now, 10, func(_ context.Context, due []redrive.Entry) []redrive.Change {
		record(due)
		go func() {
			_, _, err := s.Claim(ctxFor(t), now, 100, func(_ context.Context, due []redrive.Entry) []redrive.Change {
				record(due)
				return mark(due)
			})
			second <- err
		}()
		select {
		case err := <-second:
			second <- err
		case <-time.After(300 * time.Millisecond):
		}
		return mark(due)
	})
	if err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-second:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("the second claim did not return")
	}
	for _, e := range es {
		if seen[e.Key] != 1 {
			t.Errorf("%s claimed %d times, want once", e.Key, seen[e.Key])
		}
	}
}

func testList(t *testing.T, s redrive.Store) {
	for i := range 5 {
		mustPark(t, s, entry(fmt.Sprintf("l%d", i), t0))
	}
	if _, err := s.Complete(ctxFor(t), "l2", t0); err != nil {
		t.Fatal(err)
	}
	all, err := s.List(ctxFor(t), redrive.Filter{})
	if err != nil || len(all) != 5 {
		t.Fatalf("List all: %d, %v", len(all), err)
	}
	for i := 1; i < len(all); i++ {
		if all[i].ID <= all[i-1].ID {
			t.Fatalf("List not by ascending ID: %d after %d", all[i].ID, all[i-1].ID)
		}
	}
	parked, err := s.List(ctxFor(t), redrive.Filter{Status: redrive.Parked})
	if err != nil || len(parked) != 4 {
		t.Fatalf("List parked: %d, %v", len(parked), err)
	}
	page, err := s.List(ctxFor(t), redrive.Filter{AfterID: all[1].ID, Limit: 2})
	if err != nil || len(page) != 2 || page[0].Key != all[2].Key || page[1].Key != all[3].Key {
		t.Fatalf("List after %d limit 2: %v, %v", all[1].ID, page, err)
	}
	if d := diff(all[0], mustGet(t, s, all[0].Key)); d != "" {
		t.Fatalf("List and Get differ: %s", d)
	}
	other := entry("elsewhere", t0)
	other.Message.Topic = "payments"
	mustPark(t, s, other)
	byTopic, err := s.List(ctxFor(t), redrive.Filter{Topic: "payments"})
	if err != nil || len(byTopic) != 1 || byTopic[0].Key != "elsewhere" {
		t.Fatalf("List of topic payments: %v, %v; want the one entry elsewhere", byTopic, err)
	}
	both, err := s.List(ctxFor(t), redrive.Filter{Topic: "onboarding", Status: redrive.Done})
	if err != nil || len(both) != 1 || both[0].Key != "l2" {
		t.Fatalf("List of topic onboarding, done: %v, %v; want l2", both, err)
	}
}

// testRequeue requeues a parked, a retrying and a timed-out entry (each
// becomes parked and due at the time given, keeping its creation, re-drives
// and last error), and refuses a done and a missing one.
func testRequeue(t *testing.T, s redrive.Store) {
	mustPark(t, s, entry("p", t0.Add(time.Hour)), entry("r", t0), entry("x", t0), entry("d", t0))
	now := t0.Add(time.Minute)
	_, applied, err := s.Claim(ctxFor(t), now, 10, func(_ context.Context, due []redrive.Entry) []redrive.Change {
		var cs []redrive.Change
		for _, e := range due {
			switch e.Key {
			case "r":
				cs = append(cs, redrive.Change{ID: e.ID, Status: e.Status, Version: e.Version, To: redrive.Retrying, StateTime: now, DueAt: now.Add(time.Hour), Redrives: 1, LastError: "r1"})
			case "x":
				cs = append(cs, redrive.Change{ID: e.ID, Status: e.Status, Version: e.Version, To: redrive.TimedOut, StateTime: now, Redrives: 2, LastError: "gave up"})
			}
		}
		return cs
	})
	if err != nil || len(applied) != 2 {
		t.Fatalf("Claim: %d applied, %v", len(applied), err)
	}
	if _, err := s.Complete(ctxFor(t), "d", now); err != nil {
		t.Fatal(err)
	}
	at := t0.Add(2 * time.Minute)
	for _, c := range []struct {
		key       string
		redrives  int
		lastError string
		version   int64
	}{{"p", 0, "no answer", 2}, {"r", 1, "r1", 3}, {"x", 2, "gave up", 3}} {
		e, err := s.Requeue(ctxFor(t), c.key, at)
		if err != nil {
			t.Fatalf("Requeue(%s): %v", c.key, err)
		}
		if e.Status != redrive.Parked || e.State() != "NONCE_PUBLISHED" || !e.StateTime.Equal(at) || !e.DueAt.Equal(at) ||
			!e.Created.Equal(t0) || e.Redrives != c.redrives || e.LastError != c.lastError || e.Version != c.version {
			t.Errorf("%s after Requeue: status %v state %s state time %v due %v created %v redrives %d last error %q version %d",
				c.key, e.Status, e.State(), e.StateTime, e.DueAt, e.Created, e.Redrives, e.LastError, e.Version)
		}
		if d := diff(mustGet(t, s, c.key), e); d != "" {
			t.Errorf("Get after Requeue(%s) differs from what Requeue returned: %s", c.key, d)
		}
	}
	done, err := s.Requeue(ctxFor(t), "d", at)
	if !errors.Is(err, redrive.ErrNotPending) || done.Status != redrive.Done || done.Version != 2 {
		t.Fatalf("Requeue of a done entry: %v (%v, version %d), want ErrNotPending and the entry unchanged", err, done.Status, done.Version)
	}
	if _, err := s.Requeue(ctxFor(t), "nope", at); !errors.Is(err, redrive.ErrNotFound) {
		t.Fatalf("Requeue of a missing key: %v, want ErrNotFound", err)
	}
	// The requeued entries are due at at, in ID order, and not before.
	var got []string
	claimed, _, err := s.Claim(ctxFor(t), at, 10, func(_ context.Context, due []redrive.Entry) []redrive.Change {
		for _, e := range due {
			got = append(got, e.Key)
		}
		return nil
	})
	if err != nil || claimed != 3 || !slices.Equal(got, []string{"p", "r", "x"}) {
		t.Fatalf("Claim at the requeue time: %d %v, saw %v; want p, r, x", claimed, err, got)
	}
	if n, _, err := s.Claim(ctxFor(t), at.Add(-time.Microsecond), 10, func(context.Context, []redrive.Entry) []redrive.Change { return nil }); err != nil || n != 0 {
		t.Fatalf("Claim before the requeue time: %d claimed, %v", n, err)
	}
}
