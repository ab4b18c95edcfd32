package redrivetest

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redeliver-go/redeliver/checkpoint"
	"github.com/redeliver-go/redeliver/redrive"
	"github.com/redeliver-go/redeliver/stream"
	"github.com/redeliver-go/redeliver/stream/streamtest"
)

// harness runs a Scheduler on a manual clock and hands over each sweep.
type harness struct {
	t     *testing.T
	clock *streamtest.Clock
	pub   *Publisher
	swept chan redrive.SweepEvent

	mu       sync.Mutex
	timedOut []redrive.EntryEvent
	failed   []redrive.EntryEvent
}

func newHarness(t *testing.T, s redrive.Store, run bool, opts ...redrive.Option) (*harness, *redrive.Scheduler) {
	return newHarnessVia(t, s, run, nil, opts...)
}

// newHarnessVia is newHarness with the scheduler publishing through
// via(the harness's publisher) when via is not nil.
func newHarnessVia(t *testing.T, s redrive.Store, run bool, via func(*harness) stream.Publisher, opts ...redrive.Option) (*harness, *redrive.Scheduler) {
	h := &harness{t: t, clock: streamtest.NewClock(t0), pub: &Publisher{}, swept: make(chan redrive.SweepEvent, 100)}
	var pub stream.Publisher = h.pub
	if via != nil {
		pub = via(h)
	}
	opts = append([]redrive.Option{redrive.WithClock(h.clock), redrive.WithLogger(quiet), redrive.WithHooks(redrive.Hooks{
		Swept: func(e redrive.SweepEvent) {
			select {
			case h.swept <- e:
			default: // a case that sweeps by itself reads none
			}
		},
		TimedOut: func(e redrive.EntryEvent) {
			h.mu.Lock()
			defer h.mu.Unlock()
			h.timedOut = append(h.timedOut, e)
		},
		Failed: func(e redrive.EntryEvent) {
			h.mu.Lock()
			defer h.mu.Unlock()
			h.failed = append(h.failed, e)
		},
	})}, opts...)
	sch, err := redrive.NewScheduler(s, pub, opts...)
	if err != nil {
		t.Fatal(err)
	}
	if run {
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan error, 1)
		go func() { done <- sch.Run(ctx) }()
		t.Cleanup(func() {
			cancel()
			select {
			case <-done:
			case <-time.After(30 * time.Second):
				t.Error("Scheduler.Run did not return after its context ended")
			}
		})
		h.next() // the sweep at start
	}
	return h, sch
}

// quiet is the suite's logger: the scheduler's warnings are the cases'
// expected outcomes.
var quiet = slog.New(slog.DiscardHandler)

// next waits for the next sweep's event.
func (h *harness) next() redrive.SweepEvent {
	h.t.Helper()
	select {
	case e := <-h.swept:
		if e.Err != nil {
			h.t.Fatalf("sweep at %v: %v", e.At, e.Err)
		}
		return e
	case <-time.After(30 * time.Second):
		h.t.Fatalf("no sweep within 30s at %v", h.clock.Now())
	}
	return redrive.SweepEvent{}
}

// advance moves the clock by d once the scheduler waits on its timer.
func (h *harness) advance(d time.Duration) {
	h.t.Helper()
	if err := h.clock.WaitTimers(ctxFor(h.t), 1); err != nil {
		h.t.Fatalf("the scheduler never waited for its next sweep: %v", err)
	}
	h.clock.Advance(d)
}

// noSweep checks that no sweep has started.
func (h *harness) noSweep() {
	h.t.Helper()
	select {
	case e := <-h.swept:
		h.t.Fatalf("a sweep at %v, before the interval had passed", e.At)
	default:
	}
	if h.clock.Timers() != 1 {
		h.t.Fatalf("the scheduler is not waiting for its next sweep")
	}
}

func (h *harness) timeouts() []redrive.EntryEvent {
	h.mu.Lock()
	defer h.mu.Unlock()
	return append([]redrive.EntryEvent(nil), h.timedOut...)
}

func (h *harness) failures() []redrive.EntryEvent {
	h.mu.Lock()
	defer h.mu.Unlock()
	return append([]redrive.EntryEvent(nil), h.failed...)
}

func await(t *testing.T, s redrive.Store, key string, at time.Time, rec stream.Record) redrive.Entry {
	t.Helper()
	e, inserted, err := redrive.Await(ctxFor(t), s, redrive.Awaiting{Key: key, State: "NONCE_PUBLISHED", Expiry: 5 * time.Minute, Record: rec, At: at})
	if err != nil || !inserted {
		t.Fatalf("Await(%s) = %v, inserted %v", key, err, inserted)
	}
	return e
}

func deviceRecord(dev string, offset int64) stream.Record {
	return stream.Record{Topic: "provision-requests", Partition: 1, Offset: offset, Key: []byte(dev),
		Value: []byte(`{"device":"` + dev + `"}`), Headers: []stream.Header{{Key: "traceparent", Value: []byte("00-" + dev)}}, Timestamp: t0}
}

// checkRedriven checks a re-driven record against the entry's original.
func checkRedriven(t *testing.T, r stream.Record, topic, key string, number int, from string, orig stream.Record) {
	t.Helper()
	want := map[string]string{
		redrive.HeaderKey: key, redrive.HeaderNumber: strconv.Itoa(number), redrive.HeaderState: from,
		stream.HeaderTopic: orig.Topic, stream.HeaderPartition: strconv.Itoa(int(orig.Partition)), stream.HeaderOffset: strconv.FormatInt(orig.Offset, 10),
	}
	for _, h := range orig.Headers {
		want[h.Key] = string(h.Value)
	}
	for k, v := range want {
		if got, ok := Header(r, k); !ok || got != v {
			t.Errorf("re-driven record header %s = %q (present %v), want %q", k, got, ok, v)
		}
	}
	if r.Topic != topic || string(r.Key) != string(orig.Key) || string(r.Value) != string(orig.Value) {
		t.Errorf("re-driven record %s key %q value %q, want %s %q %q", r.Topic, r.Key, r.Value, topic, orig.Key, orig.Value)
	}
}

// testSeedFlow is the time-based retry processor design with its own figures: a sweep every 5 minutes,
// an expiry of 5 minutes, a retry timeout of 20 minutes. One device answers
// after the first re-drive, the other never does.
func testSeedFlow(t *testing.T, s redrive.Store) {
	r1, r2 := deviceRecord("dev-1", 100), deviceRecord("dev-2", 101)
	await(t, s, "dev-1", t0, r1)
	await(t, s, "dev-2", t0, r2)
	h, _ := newHarness(t, s, true, redrive.WithInterval(5*time.Minute), redrive.WithRetryTimeout(20*time.Minute),
		redrive.WithRetryTopic("resilience"), redrive.WithReplyTopic("c2d-inbound"), redrive.WithErrorCode("E_TIMEOUT"))
	if n := len(h.pub.Records()); n != 0 {
		t.Fatalf("the sweep at 0 published %d records before any expiry", n)
	}

	h.advance(5 * time.Minute)
	if ev := h.next(); ev.Redriven != 2 || ev.Claimed != 2 {
		t.Fatalf("sweep at 5m: %+v, want both re-driven", ev)
	}
	recs := h.pub.Topic("resilience")
	if len(recs) != 2 {
		t.Fatalf("%d records on the retry topic after 5m, want 2", len(recs))
	}
	checkRedriven(t, recs[0], "resilience", "dev-1", 1, "NONCE_PUBLISHED", r1)
	checkRedriven(t, recs[1], "resilience", "dev-2", 1, "NONCE_PUBLISHED", r2)
	for _, k := range []string{"dev-1", "dev-2"} {
		e := mustGet(t, s, k)
		if e.State() != "NONCE_PUBLISHED_RETRY" || e.Redrives != 1 || !e.StateTime.Equal(t0.Add(5*time.Minute)) || !e.Created.Equal(t0) {
			t.Fatalf("%s after the first re-drive: state %s, %d re-drives, state time %v, created %v", k, e.State(), e.Redrives, e.StateTime, e.Created)
		}
	}

	// dev-1's answer comes.
	if e, err := redrive.Complete(ctxFor(t), s, "dev-1"); err != nil || e.State() != "NONCE_PUBLISHED_DONE" {
		t.Fatalf("Complete(dev-1) = %s, %v", e.State(), err)
	}

	for i, at := range []time.Duration{10 * time.Minute, 15 * time.Minute} {
		h.advance(5 * time.Minute)
		if ev := h.next(); ev.Redriven != 1 || ev.TimedOut != 0 {
			t.Fatalf("sweep at %v: %+v, want dev-2 re-driven again", at, ev)
		}
		recs := h.pub.Topic("resilience")
		checkRedriven(t, recs[len(recs)-1], "resilience", "dev-2", i+2, "NONCE_PUBLISHED_RETRY", r2)
	}
	if len(h.pub.Topic("c2d-inbound")) != 0 || len(h.timeouts()) != 0 {
		t.Fatal("reported before the retry timeout")
	}

	h.advance(5 * time.Minute)
	if ev := h.next(); ev.TimedOut != 1 || ev.Redriven != 0 {
		t.Fatalf("sweep at 20m: %+v, want dev-2 timed out", ev)
	}
	replies := h.pub.Topic("c2d-inbound")
	if len(replies) != 1 {
		t.Fatalf("%d reply records, want 1", len(replies))
	}
	if code, _ := Header(replies[0], redrive.HeaderErrorCode); code != "E_TIMEOUT" || string(replies[0].Key) != "dev-2" {
		t.Fatalf("reply record key %q error code %q, want dev-2 E_TIMEOUT", replies[0].Key, code)
	}
	if reason, _ := Header(replies[0], stream.HeaderError); !strings.Contains(reason, "retry timeout") {
		t.Fatalf("reply reason %q does not name the retry timeout", reason)
	}
	to := h.timeouts()
	if len(to) != 1 || to[0].Entry.Key != "dev-2" || to[0].Entry.State() != "NONCE_PUBLISHED_TIMEOUT" {
		t.Fatalf("TimedOut hook calls: %+v", to)
	}
	e2 := mustGet(t, s, "dev-2")
	if e2.State() != "NONCE_PUBLISHED_TIMEOUT" || e2.Redrives != 3 || !e2.StateTime.Equal(t0.Add(20*time.Minute)) {
		t.Fatalf("dev-2 at the end: %s, %d re-drives, state time %v", e2.State(), e2.Redrives, e2.StateTime)
	}
	if e1 := mustGet(t, s, "dev-1"); e1.State() != "NONCE_PUBLISHED_DONE" || e1.Redrives != 1 {
		t.Fatalf("dev-1 at the end: %s, %d re-drives", e1.State(), e1.Redrives)
	}
	if n := len(h.pub.Topic("resilience")); n != 4 {
		t.Fatalf("%d re-driven records in all, want 4 (dev-1 once, dev-2 three times)", n)
	}
	h.advance(5 * time.Minute)
	if ev := h.next(); ev.Claimed != 0 {
		t.Fatalf("sweep after the end claimed %d", ev.Claimed)
	}
}

// testSeedTimeout: the retry timeout counts from creation, not from the
// last re-drive, and cuts a re-drive's wait short.
func testSeedTimeout(t *testing.T, s redrive.Store) {
	rec := deviceRecord("dev-3", 7)
	await(t, s, "dev-3", t0, rec)
	h, sch := newHarness(t, s, false, redrive.WithInterval(time.Minute), redrive.WithRetryTimeout(8*time.Minute), redrive.WithReplyTopic("replies"))
	h.clock.Advance(5 * time.Minute)
	if ev := sch.Sweep(ctxFor(t)); ev.Redriven != 1 {
		t.Fatalf("sweep at 5m: %+v", ev)
	}
	if e := mustGet(t, s, "dev-3"); !e.DueAt.Equal(t0.Add(8 * time.Minute)) {
		t.Fatalf("due at %v after the re-drive at 5m, want the retry timeout at 8m (before 5m+expiry)", e.DueAt)
	}
	h.clock.Advance(2 * time.Minute)
	if ev := sch.Sweep(ctxFor(t)); ev.Claimed != 0 {
		t.Fatalf("sweep at 7m claimed %d", ev.Claimed)
	}
	h.clock.Advance(time.Minute)
	if ev := sch.Sweep(ctxFor(t)); ev.TimedOut != 1 {
		t.Fatalf("sweep at 8m: %+v, want a timeout", ev)
	}
	if len(h.pub.Topic(rec.Topic)) != 1 || len(h.pub.Topic("replies")) != 1 {
		t.Fatalf("published %d re-drives (back to the record's own topic) and %d replies, want 1 and 1", len(h.pub.Topic(rec.Topic)), len(h.pub.Topic("replies")))
	}
}

func testMaxRedrives(t *testing.T, s redrive.Store) {
	await(t, s, "m", t0, deviceRecord("m", 1))
	h, sch := newHarness(t, s, false, redrive.WithMaxRedrives(2), redrive.WithRetryTimeout(time.Hour), redrive.WithRetryTopic("r"))
	var evs []redrive.SweepEvent
	for range 4 {
		h.clock.Advance(5 * time.Minute)
		evs = append(evs, sch.Sweep(ctxFor(t)))
	}
	if evs[0].Redriven != 1 || evs[1].Redriven != 1 || evs[2].TimedOut != 1 || evs[3].Claimed != 0 {
		t.Fatalf("sweeps: %+v; want re-drive, re-drive, time out, nothing", evs)
	}
	e := mustGet(t, s, "m")
	if e.Status != redrive.TimedOut || e.Redrives != 2 || !strings.Contains(e.LastError, "maximum") {
		t.Fatalf("entry: %s, %d re-drives, %q", e.State(), e.Redrives, e.LastError)
	}
	if to := h.timeouts(); len(to) != 1 {
		t.Fatalf("%d TimedOut hook calls, want 1", len(to))
	}
}

// testIntervalRespected: entries are looked at by the sweeps only, every
// interval, not when they fall due.
func testIntervalRespected(t *testing.T, s redrive.Store) {
	a := deviceRecord("a", 1)
	e := await(t, s, "a", t0.Add(-4*time.Minute), a) // due at 1m
	if !e.DueAt.Equal(t0.Add(time.Minute)) {
		t.Fatalf("due at %v", e.DueAt)
	}
	await(t, s, "b", t0.Add(2*time.Minute), deviceRecord("b", 2)) // due at 7m
	h, _ := newHarness(t, s, true, redrive.WithInterval(5*time.Minute), redrive.WithRetryTopic("r"))
	h.advance(time.Minute)
	h.noSweep()
	h.advance(4 * time.Minute)
	if ev := h.next(); !ev.At.Equal(t0.Add(5*time.Minute)) || ev.Redriven != 1 {
		t.Fatalf("sweep %+v, want at 5m with a re-driven", ev)
	}
	h.advance(2 * time.Minute)
	h.noSweep()
	if n := len(h.pub.Records()); n != 1 {
		t.Fatalf("%d records published by 7m, want 1", n)
	}
	h.advance(3 * time.Minute)
	if ev := h.next(); !ev.At.Equal(t0.Add(10*time.Minute)) || ev.Redriven != 2 {
		t.Fatalf("sweep %+v, want at 10m with b re-driven and a re-driven again (5m after its first)", ev)
	}
	if b := mustGet(t, s, "b"); !b.StateTime.Equal(t0.Add(10 * time.Minute)) {
		t.Fatalf("b re-driven at %v, want 10m", b.StateTime)
	}
}

func testParkActionAndCompletion(t *testing.T, s redrive.Store) {
	clock := streamtest.NewClock(t0)
	park, err := redrive.Park(s, time.Minute, redrive.WithClock(clock))
	if err != nil {
		t.Fatal(err)
	}
	b := &stream.Batch{Topic: "orders", Partition: 2}
	for off := int64(10); off < 13; off++ {
		b.Records = append(b.Records, stream.Record{Topic: "orders", Partition: 2, Offset: off, Key: []byte("k" + strconv.FormatInt(off, 10)), Value: []byte("v"), Timestamp: t0})
	}
	xerr := &checkpoint.ExhaustedError{Reason: checkpoint.RetriesSpent, Retries: 3, FirstFailure: t0, Last: errors.New("db down")}
	for range 2 { // parking twice (a crash before the commit) adds nothing
		if err := park(ctxFor(t), b, xerr); err != nil {
			t.Fatal(err)
		}
	}
	all, err := s.List(ctxFor(t), redrive.Filter{})
	if err != nil || len(all) != 3 {
		t.Fatalf("%d entries after parking a batch of 3 twice, %v", len(all), err)
	}
	for i, e := range all {
		if e.Key != redrive.RecordKey("orders", 2, int64(10+i)) || e.State() != redrive.ParkedState || !strings.Contains(e.LastError, "db down") || !e.DueAt.Equal(t0.Add(time.Minute)) {
			t.Fatalf("parked entry %d: key %s state %s error %q due %v", i, e.Key, e.State(), e.LastError, e.DueAt)
		}
	}

	h, sch := newHarness(t, s, false, redrive.WithRetryTopic("orders-retry"))
	h.clock.Advance(time.Minute)
	if ev := sch.Sweep(ctxFor(t)); ev.Redriven != 3 {
		t.Fatalf("sweep: %+v", ev)
	}
	recs := h.pub.Topic("orders-retry")
	if len(recs) != 3 {
		t.Fatalf("%d re-driven records", len(recs))
	}
	for i, r := range recs {
		checkRedriven(t, r, "orders-retry", all[i].Key, 1, redrive.ParkedState, all[i].Message)
	}

	// The retry topic's consumer: its handler fails at the third record
	// the first time, then succeeds.
	fail := true
	handler := stream.Chain(stream.HandlerFunc(func(context.Context, *stream.Batch) error {
		if fail {
			fail = false
			return stream.FailedAt(2, errors.New("third one failed"))
		}
		return nil
	}), redrive.CompleteOnSuccess(s, redrive.WithClock(h.clock)))
	plain := stream.Record{Topic: "orders-retry", Offset: 99, Value: []byte("not re-driven")}
	rb := &stream.Batch{Topic: "orders-retry", Records: append(append([]stream.Record(nil), recs...), plain)}
	if err := handler.Handle(ctxFor(t), rb); err == nil {
		t.Fatal("the handler's error was swallowed")
	}
	states := func() []string {
		var out []string
		for _, e := range all {
			out = append(out, mustGet(t, s, e.Key).State())
		}
		return out
	}
	if got := fmt.Sprint(states()); got != "[REDELIVER_PARKED_DONE REDELIVER_PARKED_DONE REDELIVER_PARKED_RETRY]" {
		t.Fatalf("after a failure at the third record: %s", got)
	}
	if err := handler.Handle(ctxFor(t), &stream.Batch{Topic: "orders-retry", Records: rb.Records[2:]}); err != nil {
		t.Fatal(err)
	}
	if got := fmt.Sprint(states()); got != "[REDELIVER_PARKED_DONE REDELIVER_PARKED_DONE REDELIVER_PARKED_DONE]" {
		t.Fatalf("after success: %s", got)
	}
	// Handling a re-driven record again (a duplicate) is harmless.
	if err := handler.Handle(ctxFor(t), &stream.Batch{Topic: "orders-retry", Records: recs[:1]}); err != nil {
		t.Fatalf("a duplicate of a completed entry: %v", err)
	}
}

// testUnpublishableEntry: an entry whose topic refuses records is reported
// once per sweep, not retried in a loop, keeps its state, and is timed out
// at the retry timeout; the others go on.
func testUnpublishableEntry(t *testing.T, s redrive.Store) {
	gone := stream.Record{Topic: "gone", Offset: 1, Value: []byte("g")}
	await(t, s, "g", t0, gone)
	await(t, s, "ok", t0, deviceRecord("ok", 2))
	h, sch := newHarness(t, s, false, redrive.WithInterval(5*time.Minute), redrive.WithRetryTimeout(12*time.Minute),
		redrive.WithBatchSize(1), redrive.WithReplyTopic("replies"))
	h.pub.Fail("gone", errors.New("UNKNOWN_TOPIC_OR_PARTITION"))

	h.clock.Advance(5 * time.Minute)
	ev := sch.Sweep(ctxFor(t))
	if ev.Redriven != 1 || ev.Failed != 1 || ev.Claimed != 2 {
		t.Fatalf("sweep at 5m: %+v, want ok re-driven and g failed once", ev)
	}
	f := h.failures()
	if len(f) != 1 || f[0].Entry.Key != "g" || !strings.Contains(f[0].Err.Error(), "UNKNOWN_TOPIC") {
		t.Fatalf("Failed hook: %+v", f)
	}
	g := mustGet(t, s, "g")
	if g.State() != "NONCE_PUBLISHED" || !g.DueAt.Equal(t0.Add(10*time.Minute)) || !strings.Contains(g.LastError, "UNKNOWN_TOPIC") || g.Redrives != 0 {
		t.Fatalf("g after a failed publish: %s due %v error %q re-drives %d", g.State(), g.DueAt, g.LastError, g.Redrives)
	}
	h.clock.Advance(5 * time.Minute)
	if ev := sch.Sweep(ctxFor(t)); ev.Failed != 1 || ev.Redriven != 1 {
		t.Fatalf("sweep at 10m: %+v", ev)
	}
	h.clock.Advance(5 * time.Minute)
	if ev := sch.Sweep(ctxFor(t)); ev.TimedOut != 2 {
		t.Fatalf("sweep at 15m: %+v, want both timed out (past the 12m retry timeout)", ev)
	}
	if g := mustGet(t, s, "g"); g.Status != redrive.TimedOut || !strings.Contains(g.LastError, "UNKNOWN_TOPIC") {
		t.Fatalf("g at the end: %s %q", g.State(), g.LastError)
	}
	if n := len(h.failures()); n != 2 {
		t.Fatalf("%d failures reported, want one per sweep (2)", n)
	}
}

// testBigSweep: one sweep claims batch after batch until nothing is due,
// and publishes each entry once.
func testBigSweep(t *testing.T, s redrive.Store) {
	const n = 1234
	es := make([]redrive.Entry, n)
	for i := range es {
		es[i] = entry(fmt.Sprintf("big-%04d", i), t0.Add(time.Duration(i)*time.Millisecond))
	}
	mustPark(t, s, es...)
	h, sch := newHarness(t, s, false, redrive.WithBatchSize(100), redrive.WithRetryTopic("r"))
	h.clock.Advance(time.Hour)
	ev := sch.Sweep(ctxFor(t))
	if ev.Claimed != n || ev.Redriven != n || ev.Lost != 0 {
		t.Fatalf("sweep: %+v, want %d claimed and re-driven", ev, n)
	}
	count := map[string]int{}
	for _, r := range h.pub.Topic("r") {
		k, _ := Header(r, redrive.HeaderKey)
		count[k]++
	}
	for _, e := range es {
		if count[e.Key] != 1 {
			t.Fatalf("%s published %d times", e.Key, count[e.Key])
		}
	}
	if ev := sch.Sweep(ctxFor(t)); ev.Claimed != 0 {
		t.Fatalf("a second sweep at the same time claimed %d", ev.Claimed)
	}
	// Parked for an hour, past the 20m retry timeout: each re-driven entry
	// still gets its expiry to be completed before it times out.
	if e := mustGet(t, s, es[0].Key); !e.DueAt.Equal(h.clock.Now().Add(e.Expiry)) {
		t.Fatalf("due at %v after a re-drive past the retry timeout, want now+expiry %v", e.DueAt, h.clock.Now().Add(e.Expiry))
	}
	h.clock.Advance(5 * time.Minute)
	if ev := sch.Sweep(ctxFor(t)); ev.TimedOut != n {
		t.Fatalf("sweep after the expiry: %+v, want all %d timed out", ev, n)
	}
}
