package tests

import (
	"context"
	"errors"
	"log/slog"
	"maps"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	semconv "go.opentelemetry.io/otel/semconv/v1.43.0"

	"github.com/redeliver-go/redeliver/checkpoint"
	"github.com/redeliver-go/redeliver/host"
	"github.com/redeliver-go/redeliver/hostconfig"
	"github.com/redeliver-go/redeliver/rdotel"
	"github.com/redeliver-go/redeliver/redrive"
	"github.com/redeliver-go/redeliver/redrive/redrivetest"
	"github.com/redeliver-go/redeliver/stream"
)

// broker is an in-memory broker of single-partition topics that keeps
// whole records, headers included: the scheduler publishes to it and
// processors consume it, as a re-drive to the record's own topic (a
// host's default wiring) goes round.
type broker struct {
	mu      sync.Mutex
	topics  map[string][]stream.Record
	fail    map[string]error
	changed chan struct{}
}

func newBroker() *broker {
	return &broker{topics: map[string][]stream.Record{}, fail: map[string]error{}, changed: make(chan struct{})}
}

// brokerError is what the broker refuses a publish with.
type brokerError struct{ msg string }

func (e brokerError) Error() string { return e.msg }

// Publish appends recs to topic, or returns the error set for it, or one
// for a record without a topic.
func (b *broker) Publish(_ context.Context, topic string, recs []stream.Record) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	if topic == "" {
		return brokerError{"broker: a record without a topic"}
	}
	if err := b.fail[topic]; err != nil {
		return err
	}
	for _, r := range recs {
		r.Topic, r.Partition, r.Offset = topic, 0, int64(len(b.topics[topic]))
		b.topics[topic] = append(b.topics[topic], r)
	}
	close(b.changed)
	b.changed = make(chan struct{})
	return nil
}

// setFail makes publishes to topic fail with err (nil: succeed).
func (b *broker) setFail(topic string, err error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.fail[topic] = err
}

func (b *broker) records(topic string) []stream.Record {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.topics[topic]
}

// logClaim is partition 0 of one of the broker's topics, read from an
// offset: a [stream.Claim] that remembers its commits.
type logClaim struct {
	b     *broker
	topic string

	mu   sync.Mutex
	pos  int64
	next int64 // the latest checkpoint
}

func (b *broker) claim(topic string, from int64) *logClaim {
	return &logClaim{b: b, topic: topic, pos: from, next: from}
}

func (c *logClaim) Topic() string              { return c.topic }
func (c *logClaim) Partition() int32           { return 0 }
func (c *logClaim) Committed() (int64, string) { return -1, "" }
func (c *logClaim) Pause()                     {}
func (c *logClaim) Resume()                    {}
func (c *logClaim) checkpoint() int64          { c.mu.Lock(); defer c.mu.Unlock(); return c.next }
func (c *logClaim) Commit(_ context.Context, next int64, _ string) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.next = next
	return nil
}

func (c *logClaim) Fetch(ctx context.Context) ([]stream.Record, error) {
	for {
		c.b.mu.Lock()
		log, ch := c.b.topics[c.topic], c.b.changed
		c.b.mu.Unlock()
		c.mu.Lock()
		if from := c.pos; from < int64(len(log)) {
			c.pos = int64(len(log))
			c.mu.Unlock()
			return append([]stream.Record(nil), log[from:]...), nil
		}
		c.mu.Unlock()
		select {
		case <-ch:
		case <-ctx.Done():
			return nil, context.Cause(ctx)
		}
	}
}

// storeError is what faultyStore fails a claim with.
type storeError struct{ msg string }

func (e *storeError) Error() string { return e.msg }

// faultyStore is a real store whose next Claim fails when told to, as a
// database that is away for a sweep.
type faultyStore struct {
	*redrivetest.MemStore
	mu       sync.Mutex
	failNext error
}

func (s *faultyStore) Claim(ctx context.Context, now time.Time, limit int, fn func(context.Context, []redrive.Entry) []redrive.Change) (int, []redrive.Change, error) {
	s.mu.Lock()
	err := s.failNext
	s.failNext = nil
	s.mu.Unlock()
	if err != nil {
		return 0, nil, err
	}
	return s.MemStore.Claim(ctx, now, limit, fn)
}

// The re-drive's events, as the recorder keeps them.
type (
	redriven    redrive.EntryEvent
	reparked    redrive.EntryEvent
	timedOut    redrive.EntryEvent
	failedEntry redrive.EntryEvent
	storeFailed redrive.SweepEvent
)

// redriveHooks records the re-drive's events, beside the Telemetry's
// hooks: redrive.WithHooks adds both.
func (r *recorder) redriveHooks(group string) redrive.Hooks {
	return redrive.Hooks{
		Redriven:    func(e redrive.EntryEvent) { r.add(group, redriven(e)) },
		Reparked:    func(e redrive.EntryEvent) { r.add(group, reparked(e)) },
		TimedOut:    func(e redrive.EntryEvent) { r.add(group, timedOut(e)) },
		Failed:      func(e redrive.EntryEvent) { r.add(group, failedEntry(e)) },
		StoreFailed: func(e redrive.SweepEvent) { r.add(group, storeFailed(e)) },
	}
}

// TestRedriveConformance runs a poison record through the re-drive under
// a host's default wiring (re-driven to its own topic, consumed by the
// processor that parked it), on a real in-memory store: parked, a
// re-publish refused by the broker, a sweep failed by the store,
// re-driven twice and failing again each time (two re-parks, the second
// re-drive handed back twice as after a crash, counted once), timed out
// after the maximum re-drives and reported; beside it an awaited entry
// whose record has no topic, never published and timed out by the retry
// timeout. Every re-drive metric the SDK exports is checked against the
// metric table (name, instrument, unit, attributes: no key, offset or
// error text) and its every value against what the hooks reported and
// what the store holds.
func TestRedriveConformance(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		reader := sdkmetric.NewManualReader()
		tel, err := rdotel.New(rdotel.WithMeterProvider(sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))),
			rdotel.WithConsumerGroup("billing"), rdotel.WithExhaustionAction("park"))
		if err != nil {
			t.Fatal(err)
		}
		hist := &recorder{}
		store := &faultyStore{MemStore: redrivetest.NewMemStore()}
		brk := newBroker()
		quiet := slog.New(slog.DiscardHandler)
		opts := []redrive.Option{redrive.WithHooks(tel.RedriveHooks()), redrive.WithHooks(hist.redriveHooks("billing")), redrive.WithLogger(quiet)}
		park, err := redrive.Park(store, time.Minute, opts...)
		if err != nil {
			t.Fatal(err)
		}
		sch, err := redrive.NewScheduler(store, brk, append(opts, redrive.WithInterval(time.Minute), redrive.WithMaxRedrives(2),
			redrive.WithRetryTimeout(10*time.Minute), redrive.WithReplyTopic("orders.replies"))...)
		if err != nil {
			t.Fatal(err)
		}
		errPoison := errors.New("poison: cannot decode")
		proc, err := stream.NewProcessor(stream.PerRecord(func(_ context.Context, r *stream.Record) error {
			if string(r.Value) == "poison" {
				return errPoison
			}
			return nil
		}), stream.WithExhaustionAction(park), stream.WithLogger(quiet),
			stream.WithPolicy(checkpoint.Policy{MaxRetries: 1, Backoff: checkpoint.Fixed(time.Second)}))
		if err != nil {
			t.Fatal(err)
		}
		ctx, t0 := t.Context(), time.Now()
		if err := brk.Publish(ctx, "orders", []stream.Record{{Value: []byte("ok")}, {Key: []byte("k"), Value: []byte("poison")}, {Value: []byte("ok")}}); err != nil {
			t.Fatal(err)
		}
		// consume runs the processor on orders from offset from, until
		// stop is called.
		consume := func(from int64) (c *logClaim, stop func()) {
			c = brk.claim("orders", from)
			cctx, cancel := context.WithCancel(ctx)
			done := make(chan error, 1)
			go func() { done <- proc.Process(cctx, c) }()
			return c, func() { cancel(); <-done }
		}
		claim, stop := consume(0)
		if _, _, err := redrive.Await(ctx, store, redrive.Awaiting{Key: "device-7", State: "NONCE_PUBLISHED", Expiry: time.Minute,
			Record: stream.Record{Value: []byte("nonce")}}); err != nil {
			t.Fatal(err)
		}
		time.Sleep(5 * time.Second)
		synctest.Wait()
		if got := claim.checkpoint(); got != 3 {
			t.Fatalf("orders checkpointed at %d after the poison record was parked, want 3", got)
		}
		sweep := func(at time.Duration) redrive.SweepEvent {
			t.Helper()
			time.Sleep(at - time.Since(t0))
			ev := sch.Sweep(ctx)
			time.Sleep(5 * time.Second) // the processor gets the re-driven record, fails it twice, parks it
			synctest.Wait()
			return ev
		}

		// 70s: the broker refuses orders; device-7's record has no
		// topic. Both fail, due again after the interval.
		brk.setFail("orders", brokerError{"broker: leader not available"})
		if ev := sweep(70 * time.Second); ev.Failed != 2 {
			t.Errorf("sweep at 70s: %+v, want 2 failed", ev)
		}
		brk.setFail("orders", nil)
		// 100s: the store is away.
		store.mu.Lock()
		store.failNext = &storeError{"store: connection refused"}
		store.mu.Unlock()
		if ev := sweep(100 * time.Second); ev.Err == nil {
			t.Errorf("sweep at 100s: %+v, want the store's error", ev)
		}
		// 140s and 200s: re-drives 1 and 2, each failed again and
		// handed back to the entry; re-drive 2 is delivered again to a
		// new owner (the checkpoint lost, as in a crash) and handed
		// back again: not a new re-park.
		if ev := sweep(140 * time.Second); ev.Redriven != 1 {
			t.Errorf("sweep at 140s: %+v, want 1 re-driven", ev)
		}
		if ev := sweep(200 * time.Second); ev.Redriven != 1 {
			t.Errorf("sweep at 200s: %+v, want 1 re-driven", ev)
		}
		stop()
		again, stop := consume(4)
		time.Sleep(5 * time.Second)
		synctest.Wait()
		if got := again.checkpoint(); got != 5 {
			t.Fatalf("the new owner checkpointed orders at %d, want 5: re-drive 2 given up again and handed back", got)
		}
		// 260s: the maximum re-drives made: timed out, reported. Then a
		// sweep a minute until device-7's retry timeout passes.
		if ev := sweep(260 * time.Second); ev.TimedOut != 1 {
			t.Errorf("sweep at 260s: %+v, want 1 timed out", ev)
		}
		for at := 320 * time.Second; at <= 620*time.Second; at += time.Minute {
			sweep(at)
		}
		stop()

		// What happened, by the broker and the store: one entry for the
		// poison record, re-driven twice, handed back twice, timed out;
		// device-7 timed out; two reports.
		if n := len(brk.records("orders")); n != 5 {
			t.Errorf("orders holds %d records, want 3 and 2 re-drives", n)
		}
		if n := len(brk.records("orders.replies")); n != 2 {
			t.Errorf("orders.replies holds %d reports, want 2", n)
		}
		entries, err := store.List(ctx, redrive.Filter{})
		if err != nil {
			t.Fatal(err)
		}
		byKey := map[string]redrive.Entry{}
		for _, e := range entries {
			byKey[e.Key] = e
		}
		if e := byKey["orders/0/1"]; len(entries) != 2 || e.Status != redrive.TimedOut || e.Redrives != 2 || e.Reparks != 2 ||
			byKey["device-7"].Status != redrive.TimedOut {
			t.Fatalf("entries %+v: want orders/0/1 timed out after 2 re-drives and 2 re-parks, and device-7 timed out", entries)
		}

		m := collect(t, reader)
		checkTable(t, m, redriveMetric, "orders/0/1", "device-7", "poison", "leader not available", "connection refused", "without a topic")
		want := checkRedriveHistory(t, m, hist)

		// The same, from the scenario.
		billing := []string{"messaging.system=kafka", "messaging.consumer.group.name=billing"}
		orders := append(billing[:2:2], "messaging.destination.name=orders")
		errType := func(e error) string { return "error.type=" + semconv.ErrorType(e).Value.AsString() }
		for _, c := range []struct {
			metric string
			point  []string
			value  float64
		}{
			{"redeliver.redrive.redrives", orders, 2},
			{"redeliver.redrive.reparks", orders, float64(byKey["orders/0/1"].Reparks)},
			{"redeliver.redrive.timeouts", orders, 1},
			{"redeliver.redrive.timeouts", billing, 1},
			{"redeliver.redrive.failures", append(orders, "error.type=github.com/redeliver-go/redeliver/rdotel/tests.brokerError"), 1},
			{"redeliver.redrive.sweeps.failed", append(billing, errType(&storeError{})), 1},
		} {
			if got := want[c.metric][expected(c.point...)]; got != c.value {
				t.Errorf("%s %v = %v, want %v", c.metric, c.point, got, c.value)
			}
		}
		// device-7 failed at every sweep from 70s to 560s but the one the
		// store failed: 9, then timed out at 620s.
		if got := want["redeliver.redrive.failures"][expected(append(billing, errType(brokerError{}))...)]; got != 9 {
			t.Errorf("failures without a topic %v, want 9", got)
		}
	})
}

// checkRedriveHistory checks the values of the re-drive's metrics against
// the events the hooks reported, and returns them by metric and point.
func checkRedriveHistory(t *testing.T, m map[string]metricdata.Metrics, hist *recorder) map[string]map[string]float64 {
	t.Helper()
	want := map[string]map[string]float64{}
	add := func(name string, v float64, kv ...string) {
		if want[name] == nil {
			want[name] = map[string]float64{}
		}
		want[name][expected(kv...)] += v
	}
	entry := func(g string, e redrive.Entry, extra ...string) []string {
		kv := append([]string{"messaging.system=kafka", "messaging.consumer.group.name=" + g}, extra...)
		if e.Message.Topic != "" {
			kv = append(kv, "messaging.destination.name="+e.Message.Topic)
		}
		return kv
	}
	hist.mu.Lock()
	defer hist.mu.Unlock()
	for _, ev := range hist.evs {
		switch e := ev.e.(type) {
		case redriven:
			add("redeliver.redrive.redrives", 1, entry(ev.group, e.Entry)...)
		case reparked:
			add("redeliver.redrive.reparks", 1, entry(ev.group, e.Entry)...)
		case timedOut:
			add("redeliver.redrive.timeouts", 1, entry(ev.group, e.Entry)...)
		case failedEntry:
			add("redeliver.redrive.failures", 1, entry(ev.group, e.Entry, "error.type="+semconv.ErrorType(e.Err).Value.AsString())...)
		case storeFailed:
			add("redeliver.redrive.sweeps.failed", 1, "messaging.system=kafka", "messaging.consumer.group.name="+ev.group,
				"error.type="+semconv.ErrorType(e.Err).Value.AsString())
		default:
			t.Errorf("an event %T in the re-drive's history", ev.e)
		}
	}
	for _, r := range metricTable {
		if !redriveMetric(r.name) {
			continue
		}
		if len(want[r.name]) == 0 {
			t.Errorf("the history has no %s", r.name)
		}
		got, _ := values(m[r.name])
		if !maps.Equal(got, want[r.name]) {
			t.Errorf("%s:\n got  %v\n want %v (from the hooks)", r.name, got, want[r.name])
		}
	}
	return want
}

// In a functions host, the options after the store of host.WithRedrive go
// to the functions' Park action and to the host's scheduler, so
// redrive.WithHooks(tel.RedriveHooks()) there counts both: the re-parks
// of a poison record going round the default wiring (re-driven to its own
// topic, consumed by the function that parked it) and the scheduler's
// re-drives and time-out.
func TestRedriveHooksInAHost(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		reader := sdkmetric.NewManualReader()
		tel, err := rdotel.New(rdotel.WithMeterProvider(sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))),
			rdotel.WithConsumerGroup("orders-app"))
		if err != nil {
			t.Fatal(err)
		}
		cfg, err := hostconfig.Loader{Environ: func() []string { return nil }}.Parse("host.json", []byte(`{
  "checkpointRetryPolicy": {"retryCount": 1, "sleepDuration": "00:00:01", "onExhausted": "park"},
  "redrive": {"maxRedrives": 2}
}`))
		if err != nil {
			t.Fatal(err)
		}
		brk := newBroker()
		if err := brk.Publish(t.Context(), "orders", []stream.Record{{Value: []byte("poison")}}); err != nil {
			t.Fatal(err)
		}
		store := redrivetest.NewMemStore()
		h, err := host.New(cfg, host.WithPublisher(brk), host.WithLogger(slog.New(slog.DiscardHandler)),
			host.WithRedrive(store, redrive.WithHooks(tel.RedriveHooks())))
		if err != nil {
			t.Fatal(err)
		}
		poison := stream.PerRecord(func(context.Context, *stream.Record) error { return errors.New("poison: cannot decode") })
		if err := h.Register("orders", poison, host.Source{Describe: "orders, in memory", Topic: "orders",
			New: func(proc *stream.Processor) (func(context.Context) error, error) {
				return func(ctx context.Context) error {
					if err := proc.Process(ctx, brk.claim("orders", 0)); ctx.Err() == nil {
						return err
					}
					return nil
				}, nil
			}}); err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithCancel(t.Context())
		done := make(chan error, 1)
		go func() { done <- h.Run(ctx) }()
		time.Sleep(time.Hour) // sweeps every 5 minutes: re-drives at 10 and 15, the time-out at 20
		synctest.Wait()
		cancel()
		if err := <-done; err != nil {
			t.Fatalf("Run: %v", err)
		}

		es, err := store.List(t.Context(), redrive.Filter{})
		if err != nil {
			t.Fatal(err)
		}
		if len(es) != 1 || es[0].Status != redrive.TimedOut || es[0].Redrives != 2 || es[0].Reparks != 2 {
			t.Fatalf("entries %+v, want one, timed out after 2 re-drives and 2 re-parks", es)
		}
		m := collect(t, reader)
		point := expected("messaging.system=kafka", "messaging.consumer.group.name=orders-app", "messaging.destination.name=orders")
		for name, want := range map[string]float64{
			"redeliver.redrive.redrives": float64(es[0].Redrives),
			"redeliver.redrive.reparks":  float64(es[0].Reparks),
			"redeliver.redrive.timeouts": 1,
		} {
			if got, _ := values(m[name]); !maps.Equal(got, map[string]float64{point: want}) {
				t.Errorf("%s = %v, want %v at %s", name, got, want, point)
			}
		}
	})
}
