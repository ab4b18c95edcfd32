package redrive_test

import (
	"context"
	"errors"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/redeliver-go/redeliver/checkpoint"
	"github.com/redeliver-go/redeliver/redrive"
	"github.com/redeliver-go/redeliver/redrive/redrivetest"
	"github.com/redeliver-go/redeliver/stream"
	"github.com/redeliver-go/redeliver/stream/streamtest"
)

func TestStateNames(t *testing.T) {
	for _, c := range []struct {
		st   redrive.Status
		want string
	}{{redrive.Parked, "NONCE_PUBLISHED"}, {redrive.Retrying, "NONCE_PUBLISHED_RETRY"}, {redrive.Done, "NONCE_PUBLISHED_DONE"}, {redrive.TimedOut, "NONCE_PUBLISHED_TIMEOUT"}} {
		if got := redrive.StateName("NONCE_PUBLISHED", c.st); got != c.want {
			t.Errorf("StateName(%v) = %s, want %s", c.st, got, c.want)
		}
		back, err := redrive.ParseStatus(c.st.String())
		if err != nil || back != c.st {
			t.Errorf("ParseStatus(%q) = %v, %v", c.st.String(), back, err)
		}
	}
	if _, err := redrive.ParseStatus("running"); err == nil {
		t.Error("ParseStatus accepted an unknown status")
	}
	if got := redrive.RecordKey("orders", 3, 42); got != "orders/3/42" {
		t.Errorf("RecordKey = %s", got)
	}
}

// fakeStore satisfies redrive.Store for constructor checks only; no test
// here reaches its methods.
type fakeStore struct{ redrive.Store }

func TestConstructorsRejectBadInput(t *testing.T) {
	pub := &redrivetest.Publisher{}
	for _, c := range []struct {
		name string
		err  error
		want string
	}{
		{"nil store", func() error { _, err := redrive.NewScheduler(nil, pub); return err }(), "nil store"},
		{"nil publisher", func() error { _, err := redrive.NewScheduler(fakeStore{}, nil); return err }(), "nil publisher"},
		{"zero interval", func() error { _, err := redrive.NewScheduler(fakeStore{}, pub, redrive.WithInterval(0)); return err }(), "interval"},
		{"negative timeout", func() error {
			_, err := redrive.NewScheduler(fakeStore{}, pub, redrive.WithRetryTimeout(-time.Second))
			return err
		}(), "retry timeout"},
		{"negative max", func() error {
			_, err := redrive.NewScheduler(fakeStore{}, pub, redrive.WithMaxRedrives(-1))
			return err
		}(), "maximum re-drives"},
		{"zero batch", func() error { _, err := redrive.NewScheduler(fakeStore{}, pub, redrive.WithBatchSize(0)); return err }(), "batch size"},
		{"park nil store", func() error { _, err := redrive.Park(nil, time.Minute); return err }(), "nil store"},
		{"park zero expiry", func() error { _, err := redrive.Park(fakeStore{}, 0); return err }(), "expiry"},
		{"await empty key", func() error {
			_, _, err := redrive.Await(t.Context(), fakeStore{}, redrive.Awaiting{State: "S", Expiry: time.Minute})
			return err
		}(), "empty key"},
		{"await no state", func() error {
			_, _, err := redrive.Await(t.Context(), fakeStore{}, redrive.Awaiting{Key: "k", Expiry: time.Minute})
			return err
		}(), "empty state"},
		{"await no expiry", func() error {
			_, _, err := redrive.Await(t.Context(), fakeStore{}, redrive.Awaiting{Key: "k", State: "S"})
			return err
		}(), "expiry"},
	} {
		if c.err == nil || !strings.Contains(c.err.Error(), c.want) {
			t.Errorf("%s: %v, want an error about %s", c.name, c.err, c.want)
		}
	}
}

// TestParkByKeyRefuses: ParkByKey refuses a nil store, a store that keeps
// no key locks and a tiny expiry; NewProcessor refuses its option in an
// ordering other than ByKey, so that it is never half wired.
func TestParkByKeyRefuses(t *testing.T) {
	for _, c := range []struct {
		name string
		err  error
		want string
	}{
		{"nil store", func() error { _, err := redrive.ParkByKey(nil, time.Minute); return err }(), "nil store"},
		{"no key locks", func() error { _, err := redrive.ParkByKey(fakeStore{}, time.Minute); return err }(), "not a redrive.KeyLocker"},
		{"zero expiry", func() error { _, err := redrive.ParkByKey(redrivetest.NewMemStore(), 0); return err }(), "expiry"},
	} {
		if c.err == nil || !strings.Contains(c.err.Error(), c.want) {
			t.Errorf("%s: %v, want an error about %s", c.name, c.err, c.want)
		}
	}
	park, err := redrive.ParkByKey(redrivetest.NewMemStore(), time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	h := stream.HandlerFunc(func(context.Context, *stream.Batch) error { return nil })
	for _, o := range []stream.Ordering{stream.ByPartition, stream.ByNone} {
		if _, err := stream.NewProcessor(h, park, stream.WithOrdering(o)); err == nil || !strings.Contains(err.Error(), "redrive.ParkByKey applies to ByKey ordering only") {
			t.Errorf("NewProcessor with ParkByKey in %s ordering: %v, want a refusal", o, err)
		}
	}
	if _, err := stream.NewProcessor(h, park, stream.WithOrdering(stream.ByKey)); err != nil {
		t.Errorf("NewProcessor with ParkByKey in key ordering: %v", err)
	}
}

func TestOrderKey(t *testing.T) {
	for _, c := range []struct {
		key, want string
	}{
		{"customer-42", "orders/3/customer-42"},
		{"", "orders/3/"},
		{"a/b", "orders/3/a/b"},
		{"~x", "orders/3/~fng"},
		{"\x00\xff", "orders/3/~AP8"},
	} {
		if got := redrive.OrderKey("orders", 3, c.key); got != c.want {
			t.Errorf("OrderKey(%q) = %q, want %q", c.key, got, c.want)
		}
	}
}

// flakyLocks is a MemStore whose LockedKeys fails while fail is above 0.
type flakyLocks struct {
	*redrivetest.MemStore
	mu   sync.Mutex
	fail int
}

func (s *flakyLocks) LockedKeys(ctx context.Context, topic string, partition int32) ([]string, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.fail > 0 {
		s.fail--
		return nil, errors.New("database down")
	}
	return s.MemStore.LockedKeys(ctx, topic, partition)
}

// TestParkByKeyStoreDown: while the store cannot say whether a key is
// locked, the record waits and is tried again; it spends none of its
// retries (a policy of none here), is neither given up nor parked, and is
// handled once the store answers.
func TestParkByKeyStoreDown(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		store := &flakyLocks{MemStore: redrivetest.NewMemStore(), fail: 3}
		park, err := redrive.ParkByKey(store, time.Minute, redrive.WithLogger(slog.New(slog.DiscardHandler)))
		if err != nil {
			t.Fatal(err)
		}
		var mu sync.Mutex
		var handled []int64
		proc, err := stream.NewProcessor(stream.HandlerFunc(func(_ context.Context, b *stream.Batch) error {
			mu.Lock()
			handled = append(handled, b.Records[0].Offset)
			mu.Unlock()
			return nil
		}), stream.WithOrdering(stream.ByKey), park, stream.WithLogger(slog.New(slog.DiscardHandler)))
		if err != nil {
			t.Fatal(err)
		}
		part := streamtest.NewPartition("orders", 0, 5)
		end := part.AppendKeyed(time.Now(), "a")
		ctx, cancel := context.WithTimeout(t.Context(), time.Hour)
		defer cancel()
		go func() { _ = part.WaitCommitted(ctx, end); cancel() }()
		start := time.Now()
		_ = streamtest.Run(ctx, proc, part)
		if n, _ := part.Committed(); n != end {
			t.Fatalf("committed %d, want %d", n, end)
		}
		if len(handled) != 1 {
			t.Fatalf("handled %v, want offset 0 once, after the store came back", handled)
		}
		if d := time.Since(start); d < 15*time.Second {
			t.Fatalf("handled after %v: want three waits of 5 s for the store", d)
		}
		if es, _ := store.List(t.Context(), redrive.Filter{}); len(es) != 0 {
			t.Fatalf("%d entries: want none (nothing given up)", len(es))
		}
	})
}

// TestParkInKeyOrderingWarns: plain Park given to a processor in key
// ordering parks a key's given-up records while the key's later records
// are handled, so the key's order is lost: the action says so at Warn,
// once, and names ParkByKey.
func TestParkInKeyOrderingWarns(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var (
			mu  sync.Mutex
			buf strings.Builder
		)
		log := slog.New(slog.NewTextHandler(lockedWriter{&mu, &buf}, nil))
		store := redrivetest.NewMemStore()
		park, err := redrive.Park(store, time.Minute, redrive.WithLogger(log))
		if err != nil {
			t.Fatal(err)
		}
		h := stream.HandlerFunc(func(_ context.Context, b *stream.Batch) error {
			if string(b.Records[0].Key) == "bad" {
				return errors.New("poison")
			}
			return nil
		})
		proc, err := stream.NewProcessor(h, stream.WithOrdering(stream.ByKey), stream.WithExhaustionAction(park))
		if err != nil {
			t.Fatal(err)
		}
		p := streamtest.NewPartition("t", 0, 10)
		end := p.AppendKeyed(time.Now(), "a", "bad", "a", "bad", "a")
		ctx, cancel := context.WithTimeout(t.Context(), time.Hour)
		defer cancel()
		go func() { _ = p.WaitCommitted(ctx, end); cancel() }()
		_ = streamtest.Run(ctx, proc, p)
		if n, _ := p.Committed(); n != end {
			t.Fatalf("committed %d, want %d", n, end)
		}
		mu.Lock()
		out := buf.String()
		mu.Unlock()
		if n := strings.Count(out, "Park in key ordering"); n != 1 || !strings.Contains(out, "redrive.ParkByKey keeps it") {
			t.Fatalf("%d warnings about Park in key ordering, want 1 naming ParkByKey; log:\n%s", n, out)
		}
		entries, err := store.List(t.Context(), redrive.Filter{})
		if err != nil || len(entries) != 2 {
			t.Fatalf("parked %d entries (%v), want the two bad records", len(entries), err)
		}
	})
}

type lockedWriter struct {
	mu *sync.Mutex
	w  *strings.Builder
}

func (l lockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(p)
}

// TestParkedBehindIsNotASuccess: a record parked behind its locked key is
// not handled, so the Delivered hook reports it with the ParkedBehind
// outcome, not Succeeded, and nothing else about it (no retry, no
// give-up, no action); the records the handler did handle succeed, and
// the partition's commit passes them all.
func TestParkedBehindIsNotASuccess(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		store := redrivetest.NewMemStore()
		park, err := redrive.ParkByKey(store, time.Minute, redrive.WithLogger(slog.New(slog.DiscardHandler)))
		if err != nil {
			t.Fatal(err)
		}
		var (
			mu       sync.Mutex
			outcomes = map[int64][]stream.Outcome{}
			gaveUp   []int64
			actions  []int64
			handled  []int64
		)
		hooks := stream.Hooks{
			Delivered: func(e stream.DeliveredEvent) {
				mu.Lock()
				outcomes[e.FirstOffset] = append(outcomes[e.FirstOffset], e.Outcome)
				mu.Unlock()
			},
			Exhausted: func(e stream.ExhaustedEvent) {
				mu.Lock()
				gaveUp = append(gaveUp, e.FirstOffset)
				mu.Unlock()
			},
			ActionTried: func(e stream.ActionEvent) {
				mu.Lock()
				actions = append(actions, e.FirstOffset)
				mu.Unlock()
			},
		}
		var hist streamtest.History
		proc, err := stream.NewProcessor(stream.Chain(stream.HandlerFunc(func(_ context.Context, b *stream.Batch) error {
			r := b.Records[0]
			mu.Lock()
			handled = append(handled, r.Offset)
			mu.Unlock()
			if string(r.Key) == "a" {
				return errors.New("poison")
			}
			return nil
		}), hist.Middleware("m")), stream.WithOrdering(stream.ByKey), stream.WithConcurrency(1, 0), park,
			stream.WithPolicy(checkpoint.Policy{MaxRetries: 0}), stream.WithHooks(stream.MergeHooks(hooks, hist.Hooks("m"))),
			stream.WithLogger(slog.New(slog.DiscardHandler)))
		if err != nil {
			t.Fatal(err)
		}
		part := streamtest.NewPartition("orders", 0, 5)
		end := part.AppendKeyed(time.Now(), "a", "a", "b", "a")
		ctx, cancel := context.WithTimeout(t.Context(), time.Hour)
		defer cancel()
		go func() { _ = part.WaitCommitted(ctx, end); cancel() }()
		_ = streamtest.Run(ctx, proc, part)
		if n, _ := part.Committed(); n != end {
			t.Fatalf("committed %d, want %d", n, end)
		}
		mu.Lock()
		defer mu.Unlock()
		want := map[int64][]stream.Outcome{0: {stream.Failed}, 1: {stream.ParkedBehind}, 2: {stream.Succeeded}, 3: {stream.ParkedBehind}}
		for off := range int64(end) {
			if got := outcomes[off]; len(got) != 1 || got[0] != want[off][0] {
				t.Errorf("record %d: Delivered outcomes %v, want %v", off, got, want[off])
			}
		}
		if len(handled) != 2 || handled[0] != 0 || handled[1] != 2 {
			t.Errorf("handler called for %v, want 0 and 2 (1 and 3 parked behind 0)", handled)
		}
		if len(gaveUp) != 1 || gaveUp[0] != 0 || len(actions) != 1 || actions[0] != 0 {
			t.Errorf("given up %v, actions tried %v: want record 0 alone in each", gaveUp, actions)
		}
		if es, _ := store.List(t.Context(), redrive.Filter{}); len(es) != 3 {
			t.Errorf("%d entries in the store, want 3 (0 given up, 1 and 3 behind it)", len(es))
		}
		// The history checker reads a record parked behind as finished,
		// neither lost nor delivered out of order.
		r := hist.CheckKeys(map[streamtest.TopicPartition][]string{{Topic: "orders", Partition: 0}: {"a", "a", "b", "a"}})
		if len(r.Violations) > 0 || r.Lost != 0 || r.Deliveries != 2 {
			t.Errorf("CheckKeys: %d deliveries, %d lost, violations:\n%s", r.Deliveries, r.Lost, strings.Join(r.Violations, "\n"))
		}
	})
}
