package redrivetest

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/redeliver-go/redeliver/checkpoint"
	"github.com/redeliver-go/redeliver/redrive"
	"github.com/redeliver-go/redeliver/stream"
)

// The cases of this file hold the re-drive to what its docs promise where a
// store, a wiring or a clock could break it: one entry per record, no
// stuck partition, no double publish, no tombstone.

// testRepark hands re-drives back to an entry: it keeps its status and
// due time, takes the error byte for byte, and counts each re-drive once.
func testRepark(t *testing.T, s redrive.Store) {
	mustPark(t, s, entry("r", t0), entry("d", t0))
	now := t0.Add(5 * time.Minute)
	_, applied, err := s.Claim(ctxFor(t), now, 10, func(_ context.Context, due []redrive.Entry) []redrive.Change {
		var cs []redrive.Change
		for _, e := range due {
			cs = append(cs, redrive.Change{ID: e.ID, Status: e.Status, Version: e.Version, To: redrive.Retrying, StateTime: now,
				DueAt: now.Add(5 * time.Minute), Redrives: 1, LastError: e.LastError})
		}
		return cs
	})
	if err != nil || len(applied) != 2 {
		t.Fatalf("Claim: %d applied, %v", len(applied), err)
	}
	before := mustGet(t, s, "r")
	for i, c := range []struct {
		number  int
		err     string
		counted bool
		reparks int
	}{
		{1, "re-drive 1 failed again: bad \x00 byte \xff", true, 1},
		{1, "re-drive 1 failed again, delivered twice", false, 1}, // the same re-drive handed back again
		{2, "re-drive 2 failed again", true, 2},
		{0, "a record with no number", false, 2},
	} {
		e, counted, err := s.Repark(ctxFor(t), "r", c.number, c.err)
		if err != nil {
			t.Fatalf("Repark %d: %v", i, err)
		}
		want := before
		want.LastError, want.Reparks = c.err, c.reparks
		if d := diff(e, want); d != "" || counted != c.counted || e.Version != before.Version+int64(i)+1 {
			t.Fatalf("Repark %d (number %d): counted %v, version %d: %s; want counted %v, the entry unchanged but its error and count, version %d",
				i, c.number, counted, e.Version, d, c.counted, before.Version+int64(i)+1)
		}
		if d := diff(mustGet(t, s, "r"), e); d != "" {
			t.Fatalf("Get after Repark %d differs from what it returned: %s", i, d)
		}
	}
	if _, err := s.Complete(ctxFor(t), "d", now); err != nil {
		t.Fatal(err)
	}
	done := mustGet(t, s, "d")
	if e, counted, err := s.Repark(ctxFor(t), "d", 1, "too late"); !errors.Is(err, redrive.ErrNotPending) || counted || diff(e, done) != "" || e.Version != done.Version {
		t.Fatalf("Repark of a done entry: %v, counted %v, %+v; want ErrNotPending and the entry unchanged", err, counted, e)
	}
	if _, _, err := s.Repark(ctxFor(t), "nope", 1, "x"); !errors.Is(err, redrive.ErrNotFound) {
		t.Fatalf("Repark of a missing key: %v, want ErrNotFound", err)
	}
	if all, err := s.List(ctxFor(t), redrive.Filter{}); err != nil || len(all) != 2 {
		t.Fatalf("%d entries after the re-parks, %v; want the 2 parked", len(all), err)
	}
}

// testPoisonRecordOneEntry parks a record that fails whenever it is
// handled, wired as a host does by default: no retry topic (each re-drive
// goes back to the record's own topic, whose consumer gives it up again
// through the same Park action), at most 2 re-drives, the design's 5-minute
// interval and expiry and 20-minute retry timeout. Over a simulated day:
// one entry, 2 publications, one timeout report.
func testPoisonRecordOneEntry(t *testing.T, s redrive.Store) {
	h, sch := newHarness(t, s, false, redrive.WithMaxRedrives(2), redrive.WithReplyTopic("replies"))
	var reparked int
	park, err := redrive.Park(s, redrive.DefaultInterval, redrive.WithClock(h.clock), redrive.WithLogger(quiet),
		redrive.WithHooks(redrive.Hooks{Reparked: func(redrive.EntryEvent) { reparked++ }}))
	if err != nil {
		t.Fatal(err)
	}
	giveUp := func(r stream.Record) {
		t.Helper()
		b := &stream.Batch{Topic: r.Topic, Partition: r.Partition, Records: []stream.Record{r}}
		xerr := &checkpoint.ExhaustedError{Reason: checkpoint.RetriesSpent, Retries: 3, FirstFailure: h.clock.Now(), Last: errors.New("poison")}
		if err := park(ctxFor(t), b, xerr); err != nil {
			t.Fatalf("park: %v", err)
		}
	}
	poison := stream.Record{Topic: "orders", Partition: 4, Offset: 1000, Key: []byte("k"), Value: []byte("poison"), Timestamp: t0}
	giveUp(poison)
	next := int64(5000) // the offsets the topic hands out to re-driven records
	handled := 0
	for range 24 * 60 / 5 {
		h.clock.Advance(redrive.DefaultInterval)
		if ev := sch.Sweep(ctxFor(t)); ev.Err != nil {
			t.Fatal(ev.Err)
		}
		recs := h.pub.Topic("orders")
		if len(recs) > 100 {
			t.Fatalf("%d publications of one poison record after %v: the record multiplies", len(recs), h.clock.Now().Sub(t0))
		}
		for _, r := range recs[handled:] { // the consumer of orders: it fails again
			r.Partition, r.Offset = 4, next
			next++
			giveUp(r)
		}
		handled = len(recs)
	}
	all, err := s.List(ctxFor(t), redrive.Filter{})
	if err != nil {
		t.Fatal(err)
	}
	if len(all) != 1 {
		keys := make([]string, len(all))
		for i, e := range all {
			keys[i] = e.Key
		}
		t.Fatalf("%d entries after a simulated day, want 1: %v", len(all), keys)
	}
	e := all[0]
	if e.Key != "orders/4/1000" || e.Status != redrive.TimedOut || e.Redrives != 2 || e.Reparks != 2 || reparked != 2 {
		t.Errorf("the entry: %s %s, %d re-drives, %d re-parks (hook %d); want orders/4/1000 timed out after 2 re-drives, both re-parked",
			e.Key, e.State(), e.Redrives, e.Reparks, reparked)
	}
	if n := len(h.pub.Topic("orders")); n != 2 {
		t.Errorf("%d publications of the poison record, want 2 (the maximum re-drives)", n)
	}
	if n, m := len(h.timeouts()), len(h.pub.Topic("replies")); n != 1 || m != 1 {
		t.Errorf("%d TimedOut hook calls and %d reply records, want 1 and 1", n, m)
	}
	if tp, p, o := e.Origin(); tp != "orders" || p != 4 || o != 1000 {
		t.Errorf("Origin() = %s/%d/%d, want orders/4/1000", tp, p, o)
	}
}

// testRedrivenWithoutEntry: a re-driven record whose entry this store does
// not hold (another store's scheduler re-published it) is parked once,
// under the key it carries, as the record it stands for.
func testRedrivenWithoutEntry(t *testing.T, s redrive.Store) {
	park, err := redrive.Park(s, time.Minute, redrive.WithLogger(quiet))
	if err != nil {
		t.Fatal(err)
	}
	r := stream.Record{Topic: "retry", Partition: 0, Offset: 7, Value: []byte("v"), Headers: []stream.Header{
		{Key: "traceparent", Value: []byte("00-x")},
		{Key: redrive.HeaderKey, Value: []byte("dev-9")}, {Key: redrive.HeaderNumber, Value: []byte("3")},
		{Key: redrive.HeaderState, Value: []byte("NONCE_PUBLISHED_RETRY")},
		{Key: stream.HeaderTopic, Value: []byte("provision")}, {Key: stream.HeaderPartition, Value: []byte("2")},
		{Key: stream.HeaderOffset, Value: []byte("41")},
	}}
	for range 2 {
		if err := park(ctxFor(t), &stream.Batch{Topic: "retry", Records: []stream.Record{r}}, nil); err != nil {
			t.Fatal(err)
		}
	}
	all, err := s.List(ctxFor(t), redrive.Filter{})
	if err != nil || len(all) != 1 {
		t.Fatalf("%d entries, %v; want 1", len(all), err)
	}
	m := all[0].Message
	if all[0].Key != "dev-9" || m.Topic != "provision" || m.Partition != 2 || m.Offset != 41 || len(m.Headers) != 1 || m.Headers[0].Key != "traceparent" {
		t.Fatalf("entry %s of %s/%d/%d with headers %q; want dev-9 of provision/2/41 with its own header only", all[0].Key, m.Topic, m.Partition, m.Offset, m.Headers)
	}
}

// odd is an entry whose texts and bytes are what databases' text types
// refuse or change: NUL, invalid UTF-8, empty against absent.
func odd(key string) redrive.Entry {
	e := entry(key, t0)
	e.LastError = "handler: payload \x00\x01\xff\xfe quoted with %s: \xc3\x28"
	e.Message.Key, e.Message.Value = []byte{}, []byte{}
	e.Message.Headers = []stream.Header{
		{Key: "nul\x00key", Value: []byte("v")},
		{Key: "bad\xffutf8", Value: []byte{}},
		{Key: "", Value: nil},
		{Key: "plain", Value: []byte{0}},
	}
	return e
}

// testBytesKeptExactly: errors and header keys with any bytes, and empty
// against nil keys, values and header values, go in and come out as they
// were, through every operation that returns an entry.
func testBytesKeptExactly(t *testing.T, s redrive.Store) {
	want := odd("odd")
	mustPark(t, s, want)
	if d := diff(mustGet(t, s, "odd"), want); d != "" {
		t.Fatalf("Get: %s", d)
	}
	nilled := entry("nil", t0)
	nilled.Message.Key, nilled.Message.Value, nilled.Message.Headers = nil, nil, []stream.Header{{Key: "k", Value: nil}}
	empty := entry("empty", t0)
	empty.Message.Key, empty.Message.Value, empty.Message.Headers = []byte{}, []byte{}, []stream.Header{{Key: "k", Value: []byte{}}}
	mustPark(t, s, nilled, empty)
	for _, w := range []redrive.Entry{nilled, empty} {
		if d := diff(mustGet(t, s, w.Key), w); d != "" {
			t.Fatalf("%s: %s", w.Key, d)
		}
	}
	all, err := s.List(ctxFor(t), redrive.Filter{})
	if err != nil || len(all) != 3 {
		t.Fatalf("List: %d, %v", len(all), err)
	}
	for i, w := range []redrive.Entry{want, nilled, empty} {
		if d := diff(all[i], w); d != "" {
			t.Fatalf("List %s: %s", w.Key, d)
		}
	}
	// Through a claim and its change (a failure to publish whose error
	// quotes the bytes), a completion and a re-park.
	failure := "re-publish: \x00\xff"
	_, applied, err := s.Claim(ctxFor(t), t0, 10, func(_ context.Context, due []redrive.Entry) []redrive.Change {
		var cs []redrive.Change
		for _, e := range due {
			w := map[string]redrive.Entry{"odd": want, "nil": nilled, "empty": empty}[e.Key]
			if d := diff(e, w); d != "" {
				t.Errorf("claimed %s: %s", e.Key, d)
			}
			cs = append(cs, redrive.Change{ID: e.ID, Status: e.Status, Version: e.Version, To: e.Status, StateTime: e.StateTime,
				DueAt: t0.Add(time.Minute), LastError: failure})
		}
		return cs
	})
	if err != nil || len(applied) != 3 {
		t.Fatalf("Claim: %d applied, %v", len(applied), err)
	}
	want.LastError, want.DueAt = failure, t0.Add(time.Minute)
	if d := diff(mustGet(t, s, "odd"), want); d != "" {
		t.Fatalf("after a change: %s", d)
	}
	e, _, err := s.Repark(ctxFor(t), "odd", 1, want.LastError+"\x00again")
	want.LastError, want.Reparks = want.LastError+"\x00again", 1
	if err != nil || diff(e, want) != "" {
		t.Fatalf("Repark: %v: %s", err, diff(e, want))
	}
	e, err = s.Complete(ctxFor(t), "odd", t0)
	want.Status, want.StateTime, want.DueAt = redrive.Done, t0, time.Time{}
	if err != nil || diff(e, want) != "" {
		t.Fatalf("Complete: %v: %s", err, diff(e, want))
	}
}

// testParkOddBatch: the Park action on records whose bytes a text column
// refuses, with an error that quotes them, parks them: a store that
// refused them would hold the partition for ever.
func testParkOddBatch(t *testing.T, s redrive.Store) {
	park, err := redrive.Park(s, time.Minute, redrive.WithLogger(quiet))
	if err != nil {
		t.Fatal(err)
	}
	o := odd("x").Message
	b := &stream.Batch{Topic: o.Topic, Partition: o.Partition, Records: []stream.Record{o}}
	xerr := &checkpoint.ExhaustedError{Reason: checkpoint.RetriesSpent, Last: fmt.Errorf("decode %s: invalid", "\x00\xff")}
	if err := park(ctxFor(t), b, xerr); err != nil {
		t.Fatalf("parking a batch with odd bytes: %v", err)
	}
	e := mustGet(t, s, redrive.RecordKey(o.Topic, o.Partition, o.Offset))
	w := e
	w.Message = o
	if d := diff(e, w); d != "" || e.LastError != xerr.Error() {
		t.Fatalf("parked: %s; error %q, want %q", d, e.LastError, xerr.Error())
	}

	// A record that carries an entry key this store does not hold and an
	// original topic that no topic name is (odd bytes, or nothing): it is
	// parked at its own position, under the key it carries.
	for i, topic := range []string{"bad\xff\xfe", "nul\x00topic", ""} {
		r := stream.Record{Topic: "retry", Partition: 1, Offset: int64(i), Value: []byte("v"), Headers: []stream.Header{
			{Key: redrive.HeaderKey, Value: fmt.Appendf(nil, "elsewhere-%d", i)}, {Key: redrive.HeaderNumber, Value: []byte("1")},
			{Key: stream.HeaderTopic, Value: []byte(topic)}, {Key: stream.HeaderPartition, Value: []byte("2")},
			{Key: stream.HeaderOffset, Value: []byte("41")},
		}}
		if err := park(ctxFor(t), &stream.Batch{Topic: r.Topic, Partition: r.Partition, Records: []stream.Record{r}}, xerr); err != nil {
			t.Fatalf("parking a re-driven record whose original topic header is %q: %v", topic, err)
		}
		e := mustGet(t, s, fmt.Sprintf("elsewhere-%d", i))
		if tp, p, off := e.Origin(); tp != "retry" || p != 1 || off != int64(i) || e.Message.Topic != "retry" {
			t.Errorf("entry of a record whose original topic header is %q: at %s/%d/%d, origin %s/%d/%d; want its own position, retry/1/%d",
				topic, e.Message.Topic, e.Message.Partition, e.Message.Offset, tp, p, off, i)
		}
	}
}

// testWaitsHonourContext: while a sweep holds an entry (its publish hangs),
// a completion, a requeue and a re-park of it give up when their context
// ends, and work once the sweep is over.
func testWaitsHonourContext(t *testing.T, s redrive.Store) {
	mustPark(t, s, entry("held", t0))
	release := make(chan struct{})
	claimed := make(chan struct{})
	done := make(chan error, 1)
	go func() {
		_, _, err := s.Claim(ctxFor(t), t0, 10, func(context.Context, []redrive.Entry) []redrive.Change {
			close(claimed)
			<-release
			return nil
		})
		done <- err
	}()
	select {
	case <-claimed:
	case <-time.After(30 * time.Second):
		t.Fatal("the claim did not start")
	}
	for _, op := range []struct {
		name string
		do   func(context.Context) error
	}{
		{"Complete", func(ctx context.Context) error { _, err := s.Complete(ctx, "held", t0); return err }},
		{"Requeue", func(ctx context.Context) error { _, err := s.Requeue(ctx, "held", t0); return err }},
		{"Repark", func(ctx context.Context) error { _, _, err := s.Repark(ctx, "held", 1, "x"); return err }},
	} {
		ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
		res := make(chan error, 1)
		go func() { res <- op.do(ctx) }()
		select {
		case err := <-res:
			if !errors.Is(err, context.DeadlineExceeded) {
				t.Errorf("%s while a claim holds the entry: %v, want an error matching context.DeadlineExceeded", op.name, err)
			}
		case <-time.After(10 * time.Second):
			t.Errorf("%s ignored its context's deadline of 100ms while a claim held the entry", op.name)
		}
		cancel()
	}
	close(release)
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if e, err := s.Complete(ctxFor(t), "held", t0); err != nil || e.Status != redrive.Done {
		t.Fatalf("Complete after the claim: %v %v", e.State(), err)
	}
}

// testSubMicrosecond: stores keep microseconds, so an expiry under one is
// refused, one that is not a whole number of them is rounded up, and a
// retry timeout that is not either never makes an entry due again within
// the sweep that re-drove it.
func testSubMicrosecond(t *testing.T, s redrive.Store) {
	if _, _, err := redrive.Await(ctxFor(t), s, redrive.Awaiting{Key: "a", State: "S", Expiry: 500 * time.Nanosecond}); err == nil {
		t.Error("Await took an expiry of 500ns")
	}
	if _, err := redrive.Park(s, 999*time.Nanosecond); err == nil {
		t.Error("Park took an expiry of 999ns")
	}
	e, _, err := redrive.Await(ctxFor(t), s, redrive.Awaiting{Key: "b", State: "S", Expiry: 1500 * time.Nanosecond, At: t0, Record: deviceRecord("b", 1)})
	if err != nil || e.Expiry != 2*time.Microsecond || !e.DueAt.Equal(t0.Add(2*time.Microsecond)) {
		t.Errorf("Await with 1.5µs: expiry %v due %v, %v; want 2µs", e.Expiry, e.DueAt, err)
	}
	await(t, s, "c", t0, deviceRecord("c", 2))
	h, sch := newHarness(t, s, false, redrive.WithRetryTimeout(5*time.Minute+500*time.Nanosecond), redrive.WithRetryTopic("r"), redrive.WithBatchSize(1))
	h.clock.Advance(5 * time.Minute)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	ev := sch.Sweep(ctx)
	if ev.Err != nil || ev.Redriven != 2 || ev.Claimed != 2 {
		t.Fatalf("sweep: %+v; want b and c re-driven once each", ev)
	}
	count := map[string]int{}
	for _, r := range h.pub.Topic("r") {
		k, _ := Header(r, redrive.HeaderKey)
		count[k]++
	}
	if count["b"] != 1 || count["c"] != 1 || len(count) != 2 {
		t.Fatalf("published in one sweep: %v; want b and c once each", count)
	}
	if c := mustGet(t, s, "c"); !c.DueAt.After(h.clock.Now()) {
		t.Fatalf("c due at %v after its re-drive at %v", c.DueAt, h.clock.Now())
	}
}

// slowPublisher stands for a broker that takes d of the harness's clock
// for each publish.
type slowPublisher struct {
	h *harness
	d time.Duration
}

func (p slowPublisher) Publish(ctx context.Context, topic string, recs []stream.Record) error {
	p.h.clock.Advance(p.d)
	return p.h.pub.Publish(ctx, topic, recs)
}

// testLongSweep: a sweep that runs longer than the expiry (a backlog after
// an outage, a slow broker) stamps each entry with the time its publish
// returned, so the next sweep, which starts at once, re-drives only what
// has waited its expiry since its publication.
func testLongSweep(t *testing.T, s redrive.Store) {
	for i, k := range []string{"s1", "s2", "s3"} {
		await(t, s, k, t0, deviceRecord(k, int64(i)))
	}
	h, sch := newHarnessVia(t, s, false, func(h *harness) stream.Publisher { return slowPublisher{h, 3 * time.Minute} },
		redrive.WithBatchSize(1), redrive.WithRetryTopic("r"), redrive.WithRetryTimeout(time.Hour))
	h.clock.Advance(5 * time.Minute)
	if ev := sch.Sweep(ctxFor(t)); ev.Redriven != 3 {
		t.Fatalf("first sweep: %+v", ev)
	}
	for i, k := range []string{"s1", "s2", "s3"} {
		at := t0.Add(5*time.Minute + time.Duration(i+1)*3*time.Minute)
		if e := mustGet(t, s, k); !e.StateTime.Equal(at) || !e.DueAt.Equal(at.Add(5*time.Minute)) {
			t.Errorf("%s: state time %v due %v; want %v and 5m later (its publish's end)", k, e.StateTime, e.DueAt, at)
		}
	}
	ev := sch.Sweep(ctxFor(t)) // at 14m: s1 was published at 8m
	var got []string
	for _, r := range h.pub.Topic("r")[3:] {
		k, _ := Header(r, redrive.HeaderKey)
		got = append(got, k)
	}
	if ev.Redriven != 1 || !slices.Equal(got, []string{"s1"}) {
		t.Fatalf("the sweep after: %+v, re-published %v; want s1 alone (5m after its publication), not the entries published after it", ev, got)
	}
}

// testPartialPublish: a publish that fails part-way (the publisher says
// which records were written) marks the written entries retrying and only
// the others failed, so the next attempt publishes those alone.
func testPartialPublish(t *testing.T, s redrive.Store) {
	for i, k := range []string{"p1", "p2", "p3"} {
		await(t, s, k, t0, deviceRecord(k, int64(i)))
	}
	h, sch := newHarness(t, s, false, redrive.WithRetryTopic("r"), redrive.WithInterval(time.Minute), redrive.WithRetryTimeout(time.Hour))
	h.pub.FailRecords(func(r stream.Record) error {
		if k, _ := Header(r, redrive.HeaderKey); k == "p2" {
			return errors.New("NOT_LEADER_FOR_PARTITION")
		}
		return nil
	})
	h.clock.Advance(5 * time.Minute)
	if ev := sch.Sweep(ctxFor(t)); ev.Redriven != 2 || ev.Failed != 1 {
		t.Fatalf("sweep: %+v; want p1 and p3 re-driven, p2 failed", ev)
	}
	if p2 := mustGet(t, s, "p2"); p2.Status != redrive.Parked || !strings.Contains(p2.LastError, "NOT_LEADER") || !p2.DueAt.Equal(h.clock.Now().Add(time.Minute)) {
		t.Fatalf("p2: %s due %v error %q", p2.State(), p2.DueAt, p2.LastError)
	}
	h.pub.FailRecords(nil)
	h.clock.Advance(time.Minute)
	if ev := sch.Sweep(ctxFor(t)); ev.Redriven != 1 {
		t.Fatalf("sweep after the interval: %+v; want p2 alone", ev)
	}
	count := map[string]int{}
	for _, r := range h.pub.Topic("r") {
		k, _ := Header(r, redrive.HeaderKey)
		n, _ := Header(r, redrive.HeaderNumber)
		count[k+"#"+n]++
	}
	if len(count) != 3 || count["p1#1"] != 1 || count["p2#1"] != 1 || count["p3#1"] != 1 {
		t.Fatalf("publications: %v; want each entry's first re-drive once", count)
	}
	for _, k := range []string{"p1", "p2", "p3"} {
		if e := mustGet(t, s, k); e.Status != redrive.Retrying || e.Redrives != 1 {
			t.Errorf("%s: %s after %d re-drives", k, e.State(), e.Redrives)
		}
	}
}

// testCopiedHeaders: a consumer of re-driven records derives a record
// from one and writes it to another topic with the same headers (as
// header propagation does); when that record fails and is given up, it is
// not the entry's record: it is parked as a record of its own, at its own
// position and without the copied re-drive headers, and the entry is left
// as it is. Before and after the entry is done: a record handed back to a
// done entry would be dropped.
func testCopiedHeaders(t *testing.T, s redrive.Store) {
	h, sch := newHarness(t, s, false, redrive.WithRetryTopic("orders-retry"))
	park, err := redrive.Park(s, 5*time.Minute, redrive.WithClock(h.clock), redrive.WithLogger(quiet))
	if err != nil {
		t.Fatal(err)
	}
	xerr := &checkpoint.ExhaustedError{Reason: checkpoint.RetriesSpent, Last: errors.New("shipment refused")}
	giveUp := func(r stream.Record) {
		t.Helper()
		if err := park(ctxFor(t), &stream.Batch{Topic: r.Topic, Partition: r.Partition, Records: []stream.Record{r}}, xerr); err != nil {
			t.Fatalf("park: %v", err)
		}
	}
	giveUp(stream.Record{Topic: "orders", Partition: 0, Offset: 5, Key: []byte("o-5"), Value: []byte("order 5")})
	h.clock.Advance(5 * time.Minute)
	if ev := sch.Sweep(ctxFor(t)); ev.Redriven != 1 {
		t.Fatalf("sweep: %+v", ev)
	}
	redriven := h.pub.Topic("orders-retry")[0]
	derive := func(offset int64) stream.Record {
		return stream.Record{Topic: "shipments", Partition: 1, Offset: offset, Key: []byte("o-5"), Value: []byte("shipment of order 5"),
			Headers: append([]stream.Header{{Key: "traceparent", Value: []byte("00-t")}}, redriven.Headers...)}
	}
	before := mustGet(t, s, "orders/0/5")
	giveUp(derive(9))
	if e := mustGet(t, s, "orders/0/5"); diff(e, before) != "" || e.Version != before.Version {
		t.Errorf("the order's entry after a derived record failed: %s; want it unchanged", diff(e, before))
	}
	if _, err := redrive.Complete(ctxFor(t), s, "orders/0/5"); err != nil {
		t.Fatal(err)
	}
	giveUp(derive(10))
	for _, off := range []int64{9, 10} {
		key := redrive.RecordKey("shipments", 1, off)
		e, err := s.Get(ctxFor(t), key)
		if err != nil {
			t.Fatalf("the derived record at offset %d was not parked as a record of its own: %v", off, err)
		}
		if tp, p, o := e.Origin(); tp != "shipments" || p != 1 || o != off || string(e.Message.Value) != "shipment of order 5" {
			t.Errorf("%s: origin %s/%d/%d, value %q; want its own position and value", key, tp, p, o, e.Message.Value)
		}
		if len(e.Message.Headers) != 1 || e.Message.Headers[0].Key != "traceparent" {
			t.Errorf("%s: headers %q; want its own, without the copied re-drive headers", key, e.Message.Headers)
		}
	}
}
