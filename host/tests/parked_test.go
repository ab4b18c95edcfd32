package tests

import (
	"context"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redeliver-go/redeliver/host"
	"github.com/redeliver-go/redeliver/redrive"
	"github.com/redeliver-go/redeliver/redrive/redrivetest"
	"github.com/redeliver-go/redeliver/stream"
)

// TestParkedEntries runs a function whose policy parks on a host with an
// in-memory re-drive store: the record that keeps failing is parked, the
// partition moves on, and the status (JSON and page) lists the entry with
// its position, re-drives, last error and next re-drive, counted per
// function; a function of another topic shows none.
func TestParkedEntries(t *testing.T) {
	addrs := newCluster(t, 1, "parker", "calm")
	produce(t, addrs, "parker", 0, 5)
	produce(t, addrs, "calm", 0, 3)
	cfg := parse(t, `{
  "checkpointRetryPolicy": {
    "functions": {"parker": {"retryCount": 1, "sleepDuration": "10ms", "onExhausted": "park"}},
  },
  "redrive": {"expiry": "00:10:00"},
  "triggers": {
    "parker": {"type": "kafka", "topic": "parker", "consumerGroup": "parker-app", "maxBatchSize": 1},
    "calm": {"type": "kafka", "topic": "calm", "consumerGroup": "calm-app"},
  },
}`)
	store := redrivetest.NewMemStore()
	h, err := host.New(cfg, onKafka(t, addrs, host.WithRedrive(store))...)
	if err != nil {
		t.Fatal(err)
	}
	var calls atomic.Int64
	if err := h.Register("parker", stream.HandlerFunc(func(_ context.Context, b *stream.Batch) error {
		if b.FirstOffset() == 2 {
			calls.Add(1)
			return errBoom
		}
		return nil
	})); err != nil {
		t.Fatal(err)
	}
	if err := h.Register("calm", stream.HandlerFunc(func(context.Context, *stream.Batch) error { return nil })); err != nil {
		t.Fatal(err)
	}
	before := time.Now()
	start(t, h)
	waitCommitted(t, addrs, "parker-app", "parker", 0, 5) // the parked record does not hold the partition
	if n := calls.Load(); n != 2 {
		t.Errorf("offset 2 delivered %d times, want 2 (the first delivery and one retry)", n)
	}

	st := status(t, h.Handler())
	var parker, calm *host.FunctionStatus
	for i := range st.Functions {
		switch f := &st.Functions[i]; f.Name {
		case "parker":
			parker = f
		case "calm":
			calm = f
		}
	}
	if parker == nil || parker.Parked == nil || calm == nil || calm.Parked == nil {
		t.Fatalf("status without the functions' parked entries: %+v", st.Functions)
	}
	p := parker.Parked
	if p.Parked != 1 || p.Retrying != 0 || p.TimedOut != 0 || p.More || p.Error != "" || len(p.Entries) != 1 {
		t.Fatalf("parker's parked entries = %+v, want one parked", p)
	}
	e := p.Entries[0]
	if e.Key != "parker/0/2" || e.State != redrive.ParkedState || e.Status != "parked" || e.Topic != "parker" || e.Partition != 0 || e.Offset != 2 ||
		e.Redrives != 0 || !strings.Contains(e.LastError, "boom") || e.Parked.Before(before.Add(-time.Second)) ||
		e.NextAt.Sub(e.Parked) != 10*time.Minute {
		t.Errorf("entry = %+v, want parker/0/2 parked with the error, due 10m (the redrive section's expiry) after it was parked", e)
	}
	if c := calm.Parked; c.Total() != 0 || len(c.Entries) != 0 || c.Error != "" {
		t.Errorf("calm's parked entries = %+v, want none", c)
	}

	code, page := get(t, h.Handler(), "/")
	for _, want := range []string{`id="parked-parker" data-count="1"`, `data-key="parker/0/2"`, "parker/0 offset 2", "REDELIVER_PARKED", "1 parked entry",
		`id="parked-calm" data-count="0"`} {
		if code != 200 || !strings.Contains(page, want) {
			t.Errorf("page (%d) lacks %q", code, want)
		}
	}

	// The operator requeues it (as redeliver parked requeue does): the
	// page shows it due now.
	if _, err := store.Requeue(context.Background(), "parker/0/2", time.Now()); err != nil {
		t.Fatal(err)
	}
	if e := status(t, h.Handler()).Functions[0].Parked.Entries[0]; e.NextAt.Sub(e.Parked) >= 10*time.Minute {
		t.Errorf("after a requeue the entry is due %v after it was parked, want sooner", e.NextAt.Sub(e.Parked))
	}
}

// TestParkWithoutStoreFailsAtStart checks that a function whose policy
// parks cannot start on a host without a re-drive store.
func TestParkWithoutStoreFailsAtStart(t *testing.T) {
	addrs := newCluster(t, 1, "orders")
	h, err := host.New(parse(t, `{"checkpointRetryPolicy": {"retryCount": 1, "sleepDuration": "1s", "onExhausted": "park"}}`), onKafka(t, addrs)...)
	if err != nil {
		t.Fatal(err)
	}
	var calls atomic.Int64
	if err := h.Register("orders", stream.HandlerFunc(func(context.Context, *stream.Batch) error { calls.Add(1); return nil }),
		host.Kafka{Topic: "orders", Group: "g"}); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), wait)
	defer cancel()
	err = h.Run(ctx)
	want := "host: function orders: the policy of checkpointRetryPolicy (host.json:1:27) says onExhausted park, which needs a re-drive store: give host.WithRedrive(store)"
	if err == nil || ctx.Err() != nil || !strings.Contains(err.Error(), want) {
		t.Fatalf("Run = %v\nwant an error at start containing\n%s", err, want)
	}
	if calls.Load() != 0 {
		t.Error("the handler ran")
	}
}

// TestParkedEntriesAreRedriven: the host runs the re-drive's scheduler on
// its store. A record that keeps failing is parked; after the redrive
// section's expiry the scheduler publishes it back to its topic, the same
// function handles it (the downstream is back), and its entry is done.
func TestParkedEntriesAreRedriven(t *testing.T) {
	addrs := newCluster(t, 1, "parker")
	produce(t, addrs, "parker", 0, 5)
	cfg := parse(t, `{
  "checkpointRetryPolicy": {"retryCount": 1, "sleepDuration": "10ms", "onExhausted": "park"},
  "redrive": {"interval": "100ms", "expiry": "200ms"},
  "triggers": {"parker": {"type": "kafka", "topic": "parker", "consumerGroup": "parker-app", "maxBatchSize": 1}},
}`)
	store := redrivetest.NewMemStore()
	h, err := host.New(cfg, onKafka(t, addrs, host.WithRedrive(store))...)
	if err != nil {
		t.Fatal(err)
	}
	var failures, redriven atomic.Int64
	if err := h.Register("parker", stream.PerRecord(func(_ context.Context, r *stream.Record) error {
		for _, hd := range r.Headers {
			if hd.Key == redrive.HeaderKey {
				redriven.Add(1)
				return nil // the downstream is back
			}
		}
		if r.Offset == 2 {
			failures.Add(1)
			return errBoom
		}
		return nil
	})); err != nil {
		t.Fatal(err)
	}
	start(t, h)
	waitFor(t, "the parked entry done", func() bool {
		e, err := store.Get(context.Background(), "parker/0/2")
		return err == nil && e.Status == redrive.Done
	})
	if n := failures.Load(); n != 2 {
		t.Errorf("offset 2 failed %d times, want 2 (the first delivery and one retry)", n)
	}
	if n := redriven.Load(); n != 1 {
		t.Errorf("%d re-driven records handled, want 1", n)
	}
	e, _ := store.Get(context.Background(), "parker/0/2")
	if e.Redrives != 1 {
		t.Errorf("entry = %+v, want done after 1 re-drive", e)
	}
}

// TestParkedRecordsCounted: the status counts the records a function's
// entries stand for, and the page warns when a record has more than one
// entry (a consumer that dropped the re-drive's headers parked its
// re-drive anew); re-parks are summed and shown per entry.
func TestParkedRecordsCounted(t *testing.T) {
	addrs := newCluster(t, 1, "orders")
	cfg := parse(t, `{
  "checkpointRetryPolicy": {"retryCount": 1, "sleepDuration": "10ms", "onExhausted": "park"},
  "triggers": {"orders": {"type": "kafka", "topic": "orders", "consumerGroup": "orders-app"}},
}`)
	store := redrivetest.NewMemStore()
	now := time.Now().Truncate(time.Microsecond)
	first := redrive.Entry{Key: "orders/0/7", Base: redrive.ParkedState, Status: redrive.Retrying, StateTime: now, Created: now,
		Expiry: time.Minute, DueAt: now.Add(time.Minute), Redrives: 1, Reparks: 1, Message: stream.Record{Topic: "orders", Offset: 7}}
	// The same record's re-drive, parked as an entry of its own by a
	// consumer that kept the record's origin headers but not the key.
	again := redrive.Entry{Key: "orders/0/9", Base: redrive.ParkedState, Status: redrive.Parked, StateTime: now, Created: now,
		Expiry: time.Minute, DueAt: now.Add(time.Minute), Message: stream.Record{Topic: "orders", Offset: 9, Headers: []stream.Header{
			{Key: stream.HeaderTopic, Value: []byte("orders")}, {Key: stream.HeaderPartition, Value: []byte("0")}, {Key: stream.HeaderOffset, Value: []byte("7")}}}}
	other := redrive.Entry{Key: "orders/0/8", Base: redrive.ParkedState, Status: redrive.Parked, StateTime: now, Created: now,
		Expiry: time.Minute, DueAt: now.Add(time.Minute), Message: stream.Record{Topic: "orders", Offset: 8}}
	if _, err := store.Park(context.Background(), []redrive.Entry{first, again, other}); err != nil {
		t.Fatal(err)
	}
	h, err := host.New(cfg, onKafka(t, addrs, host.WithRedrive(store), host.WithoutScheduler())...)
	if err != nil {
		t.Fatal(err)
	}
	if err := h.Register("orders", stream.HandlerFunc(func(context.Context, *stream.Batch) error { return nil })); err != nil {
		t.Fatal(err)
	}
	start(t, h)
	var p *host.ParkedStatus
	waitFor(t, "the function's status", func() bool {
		p = status(t, h.Handler()).Functions[0].Parked
		return p != nil
	})
	if p == nil || p.Total() != 3 || p.Records != 2 || p.Reparks != 1 {
		t.Fatalf("parked status %+v: want 3 entries for 2 records, 1 re-park", p)
	}
	code, page := get(t, h.Handler(), "/")
	for _, want := range []string{`data-records="2"`, "3 entries stand for 2 records", "1 re-park (re-drives that failed again)", "1 failed again"} {
		if code != 200 || !strings.Contains(page, want) {
			t.Errorf("page (%d) lacks %q", code, want)
		}
	}
}
