package stream_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/redeliver-go/redeliver/checkpoint"
	"github.com/redeliver-go/redeliver/internal/leases"
	"github.com/redeliver-go/redeliver/internal/retrystate"
	"github.com/redeliver-go/redeliver/stream"
	"github.com/redeliver-go/redeliver/stream/streamtest"
)

// The keyed driver (ByKey and ByNone ordering), over streamtest's
// in-memory partitions, each history checked by History.CheckKeys.

var kTP = streamtest.TopicPartition{Topic: "t", Partition: 0}

// keyedRun runs a keyed processor over p as member until stop is called;
// stop revokes p and waits for the worker.
func keyedRun(t *testing.T, h *streamtest.History, member string, p *streamtest.Partition, handler stream.Handler, opts ...stream.Option) (proc *stream.Processor, stop func()) {
	t.Helper()
	opts = append([]stream.Option{stream.WithOrdering(stream.ByKey), stream.WithHooks(h.Hooks(member))}, opts...)
	proc, err := stream.NewProcessor(stream.Chain(handler, h.Middleware(member)), opts...)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() { done <- streamtest.Run(ctx, proc, p) }()
	return proc, func() {
		p.Revoke()
		cancel()
		if err := <-done; err != nil {
			t.Errorf("%s: %v", member, err)
		}
	}
}

func waitCommitted(t *testing.T, p *streamtest.Partition, next int64) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 24*time.Hour)
	defer cancel()
	if err := p.WaitCommitted(ctx, next); err != nil {
		c, md := p.Committed()
		t.Fatalf("waiting for a commit of %d: %v (committed %d %q)", next, err, c, md)
	}
}

func checkKeys(t *testing.T, h *streamtest.History, keys []string) streamtest.Report {
	t.Helper()
	r := h.CheckKeys(map[streamtest.TopicPartition][]string{kTP: keys})
	if len(r.Violations) > 0 || r.Lost != 0 || r.Records != int64(len(keys)) {
		t.Fatalf("CheckKeys: lost %d of %d: %s", r.Lost, r.Records, strings.Join(r.Violations, "\n"))
	}
	return r
}

// TestKeyedOtherKeysFlow: a key whose records fail waits out its backoff
// alone: every record of the other keys is handled meanwhile, and the
// failing key's records are handled in order once it succeeds.
func TestKeyedOtherKeysFlow(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var h streamtest.History
		p := streamtest.NewPartition("t", 0, 10)
		keys := make([]string, 200)
		for o := range keys {
			keys[o] = fmt.Sprint("k", o%10)
		}
		p.AppendKeyed(time.Now(), keys...)
		start := time.Now()
		var mu sync.Mutex
		var lastOther, firstPoisonOK time.Time
		handler := stream.HandlerFunc(func(_ context.Context, b *stream.Batch) error {
			r := b.Records[0]
			if len(b.Records) != 1 {
				t.Errorf("a batch of %d records", len(b.Records))
			}
			time.Sleep(time.Millisecond) // a handler's work
			mu.Lock()
			defer mu.Unlock()
			if string(r.Key) == "k3" {
				if b.Attempt.Retries < 2 {
					return errors.New("k3 is down")
				}
				if firstPoisonOK.IsZero() {
					firstPoisonOK = time.Now()
				}
				return nil
			}
			lastOther = time.Now()
			return nil
		})
		_, stop := keyedRun(t, &h, "a", p, handler, stream.WithConcurrency(8, 0),
			stream.WithPolicy(checkpoint.Policy{MaxRetries: 5, Backoff: checkpoint.Fixed(10 * time.Second)}))
		waitCommitted(t, p, 200)
		stop()
		checkKeys(t, &h, keys)
		if lastOther.Sub(start) >= 10*time.Second || firstPoisonOK.Sub(start) < 20*time.Second {
			t.Fatalf("other keys done after %v, k3's first success after %v: the other keys waited for k3", lastOther.Sub(start), firstPoisonOK.Sub(start))
		}
	})
}

// TestKeyedDueRetryGoesFirst: a retry that comes due is delivered before
// the records waiting for their first delivery, not behind them: with one
// call at a time and 200 records of other keys ready, the failed record's
// retry comes one call after its backoff, not 200 calls later.
func TestKeyedDueRetryGoesFirst(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var h streamtest.History
		p := streamtest.NewPartition("t", 0, 500)
		keys := make([]string, 201)
		keys[0] = "failing"
		for o := 1; o < len(keys); o++ {
			keys[o] = fmt.Sprint("k", o)
		}
		p.AppendKeyed(time.Now(), keys...)
		const backoff = 5 * time.Millisecond
		var mu sync.Mutex
		var failedAt, retriedAt time.Time
		handler := stream.HandlerFunc(func(_ context.Context, b *stream.Batch) error {
			time.Sleep(time.Millisecond) // a handler's work
			if string(b.Records[0].Key) != "failing" {
				return nil
			}
			mu.Lock()
			defer mu.Unlock()
			if b.Attempt.Retries == 0 {
				failedAt = time.Now()
				return errors.New("down for a moment")
			}
			retriedAt = time.Now()
			return nil
		})
		_, stop := keyedRun(t, &h, "a", p, handler, stream.WithConcurrency(1, 0),
			stream.WithPolicy(checkpoint.Policy{MaxRetries: 3, Backoff: checkpoint.Fixed(backoff)}))
		waitCommitted(t, p, int64(len(keys)))
		stop()
		checkKeys(t, &h, keys)
		// The retry's call ends a call's time after it starts, and starts
		// at most a call's time after it is due.
		t.Logf("the retry ended %v after its failure (backoff %v)", retriedAt.Sub(failedAt), backoff)
		if late := retriedAt.Sub(failedAt) - backoff; late > 3*time.Millisecond {
			t.Fatalf("the retry ended %v after its failure, %v late with a backoff of %v: it waited behind the records of other keys", retriedAt.Sub(failedAt), late, backoff)
		}
	})
}

// TestKeyedConcurrency: records of different keys are handled at once, up
// to the limit per partition, and never two of one key.
func TestKeyedConcurrency(t *testing.T) {
	for _, tc := range []struct {
		ordering stream.Ordering
		keys     int
		limit    int
	}{{stream.ByKey, 100, 16}, {stream.ByKey, 3, 16}, {stream.ByNone, 1, 5}} {
		t.Run(fmt.Sprint(tc.ordering, tc.keys, tc.limit), func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				var h streamtest.History
				p := streamtest.NewPartition("t", 0, 50)
				keys := make([]string, 300)
				for o := range keys {
					keys[o] = fmt.Sprint("k", o%tc.keys)
				}
				p.AppendKeyed(time.Now(), keys...)
				var m meter
				_, stop := keyedRun(t, &h, "a", p, m.handler(), stream.WithOrdering(tc.ordering), stream.WithConcurrency(tc.limit, 0))
				waitCommitted(t, p, 300)
				stop()
				if tc.ordering == stream.ByKey {
					checkKeys(t, &h, keys)
				}
				want := min(tc.limit, tc.keys)
				if tc.ordering == stream.ByNone {
					want = tc.limit
				}
				if _, most := m.read(); most != want {
					t.Fatalf("at most %d records at once, want %d", most, want)
				}
			})
		})
	}
}

// TestKeyedMoveMidRetry: a record revoked mid-retry keeps its count at the
// next owner (the per-record bound holds across the move), and the
// records finished before the move are never delivered again.
func TestKeyedMoveMidRetry(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var h streamtest.History
		p := streamtest.NewPartition("t", 0, 10)
		keys := make([]string, 60)
		for o := range keys {
			keys[o] = fmt.Sprint("k", o%6)
		}
		p.AppendKeyed(time.Now(), keys...)
		var calls calls
		handler := stream.HandlerFunc(func(_ context.Context, b *stream.Batch) error {
			off := b.FirstOffset()
			calls.add(off)
			if off == 7 {
				return fmt.Errorf("record 7 fails (retry %d)", b.Attempt.Retries)
			}
			return nil
		})
		pol := stream.WithPolicy(checkpoint.Policy{MaxRetries: 4, Backoff: checkpoint.Fixed(time.Second)})
		_, stop := keyedRun(t, &h, "a", p, handler, pol)
		// Wait until the window says record 7 failed twice.
		ctx, cancel := context.WithTimeout(t.Context(), time.Hour)
		defer cancel()
		for {
			next, md := p.Committed()
			if w, err := retrystate.RestoreWindow(next, md, checkpoint.WindowLimits{}); err == nil {
				if s, ok := w.State(7); ok && s.Retries >= 2 && !s.Started {
					break
				}
			}
			if ctx.Err() != nil {
				t.Fatal("record 7 never failed twice")
			}
			time.Sleep(100 * time.Millisecond)
		}
		stop()
		before := map[int64]int{}
		for o := range int64(60) {
			before[o] = calls.of(o)
		}
		next, md := p.Committed()
		w, err := retrystate.RestoreWindow(next, md, checkpoint.WindowLimits{})
		if err != nil || next != 7 {
			t.Fatalf("committed %d %q: %v", next, md, err)
		}
		var gaveUp []int64
		_, stop = keyedRun(t, &h, "b", p, handler, pol, stream.WithExhaustionAction(func(_ context.Context, b *stream.Batch, _ *checkpoint.ExhaustedError) error {
			gaveUp = append(gaveUp, b.FirstOffset())
			return nil
		}))
		waitCommitted(t, p, 60)
		stop()
		checkKeys(t, &h, keys)
		for o := range int64(60) {
			if w.Finished(o) && calls.of(o) != before[o] {
				t.Errorf("record %d, finished before the move, delivered again", o)
			}
		}
		if n := calls.of(7); n != 5 || len(gaveUp) != 1 || gaveUp[0] != 7 {
			t.Fatalf("record 7 delivered %d times (want 5: MaxRetries 4 across the move), given up %v", n, gaveUp)
		}
	})
}

// TestKeyedStopKey: StopPartition in key mode stops the key, not the
// partition: the key's later records wait, the other keys go on, and
// SkipRecord lets the key go on.
func TestKeyedStopKey(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var h streamtest.History
		p := streamtest.NewPartition("t", 0, 10)
		keys := make([]string, 40)
		for o := range keys {
			keys[o] = fmt.Sprint("k", o%4)
		}
		p.AppendKeyed(time.Now(), keys...)
		handler := stream.HandlerFunc(func(_ context.Context, b *stream.Batch) error {
			if b.FirstOffset() == 5 {
				return checkpoint.Permanent(errors.New("poison"))
			}
			return nil
		})
		proc, stop := keyedRun(t, &h, "a", p, handler, stream.WithExhaustionAction(stream.StopPartition))
		waitCommitted(t, p, 5)
		for len(proc.Stopped()) == 0 {
			time.Sleep(time.Millisecond)
		}
		synctest.Wait()
		st := proc.Stopped()
		if len(st) != 1 || st[0].FirstOffset != 5 || !st[0].Record {
			t.Fatalf("stopped %+v", st)
		}
		// Every record of the other keys is handled; key k1's after 5 wait.
		d := h.Deliveries()[kTP]
		for o, k := range keys {
			switch {
			case k != "k1" && d[int64(o)] == 0:
				t.Errorf("record %d of %s not delivered while k1 is stopped", o, k)
			case k == "k1" && o > 5 && d[int64(o)] != 0:
				t.Errorf("record %d of k1 delivered while record 5 is stopped", o)
			}
		}
		if next, _ := p.Committed(); next != 5 {
			t.Fatalf("committed %d while 5 is stopped", next)
		}
		if err := proc.SkipRecord(t.Context(), "t", 0, 5); err != nil {
			t.Fatal(err)
		}
		waitCommitted(t, p, 40)
		stop()
		checkKeys(t, &h, keys)
	})
}

// TestKeyedWindowFull: with little room for commit metadata, failing
// records wait for room for their state, nothing is committed past the
// limit, and every record is handled in key order.
func TestKeyedWindowFull(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var h streamtest.History
		p := streamtest.NewPartition("t", 0, 50)
		keys := make([]string, 400)
		for o := range keys {
			keys[o] = fmt.Sprint("k", o%40)
		}
		p.AppendKeyed(time.Now(), keys...)
		handler := stream.HandlerFunc(func(_ context.Context, b *stream.Batch) error {
			if b.FirstOffset()%3 == 0 && b.Attempt.Retries < 2 {
				return errors.New("a transient failure with an error text long enough to take room")
			}
			return nil
		})
		const limit = 400
		var logs syncBuffer
		_, stop := keyedRun(t, &h, "a", p, handler, stream.WithConcurrency(32, 0),
			stream.WithLogger(slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug}))),
			stream.WithWindowLimits(checkpoint.WindowLimits{MaxBytes: limit}),
			stream.WithPolicy(checkpoint.Policy{MaxRetries: 3, Backoff: checkpoint.Fixed(time.Second)}))
		waitCommitted(t, p, 400)
		stop()
		checkKeys(t, &h, keys)
		most := 0
		for _, c := range p.Commits() {
			most = max(most, len(c.Metadata))
		}
		if most > limit || most == 0 {
			t.Fatalf("largest metadata %d bytes, limit %d", most, limit)
		}
		waits := strings.Count(logs.String(), "no room in the commit for the record's retry state")
		if waits == 0 {
			t.Fatal("no retry waited for room: the test did not fill the window")
		}
		t.Logf("largest metadata: %d bytes of %d; %d retries waited for room", most, limit, waits)
	})
}

// TestKeyedOptions: options that do not apply are refused with the reason.
func TestKeyedOptions(t *testing.T) {
	h := stream.HandlerFunc(func(context.Context, *stream.Batch) error { return nil })
	budget, err := stream.NewBudget(stream.BudgetConfig{})
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		opts []stream.Option
		want string
	}{
		{[]stream.Option{stream.WithConcurrency(4, 0)}, "WithConcurrency applies to ByKey and ByNone"},
		{[]stream.Option{stream.WithOrdering(stream.ByKey), stream.WithConcurrency(-1, 0)}, "want 0"},
		{[]stream.Option{stream.WithOrdering(stream.ByKey), stream.WithKeyFunc(nil)}, "WithKeyFunc(nil)"},
		{[]stream.Option{stream.WithOrdering(stream.ByNone), stream.WithKeyFunc(func(*stream.Record) string { return "" })}, "orders nothing"},
		{[]stream.Option{stream.WithOrdering(stream.ByKey), stream.WithWindowLimits(checkpoint.WindowLimits{MaxBytes: 50})}, "too small"},
		{[]stream.Option{stream.WithOrdering(stream.ByKey), stream.WithOutageBudget(budget)}, "WithOutageBudget"},
		{[]stream.Option{stream.WithOrdering(7)}, "WithOrdering(7)"},
	} {
		if _, err := stream.NewProcessor(h, tc.opts...); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("want an error with %q, got %v", tc.want, err)
		}
	}
	for _, s := range []string{"key", "KEY", "none", "partition", ""} {
		if _, err := stream.ParseOrdering(s); err != nil {
			t.Error(err)
		}
	}
	if _, err := stream.ParseOrdering("keys"); err == nil {
		t.Error("ParseOrdering(keys): no error")
	}
}

// TestKeyedProcessorConcurrency: WithConcurrency's limit per processor
// holds over its partitions together.
func TestKeyedProcessorConcurrency(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var mu sync.Mutex
		now, most := 0, 0
		handler := stream.HandlerFunc(func(_ context.Context, b *stream.Batch) error {
			mu.Lock()
			now++
			most = max(most, now)
			mu.Unlock()
			time.Sleep(2 * time.Millisecond)
			mu.Lock()
			now--
			mu.Unlock()
			return nil
		})
		proc, err := stream.NewProcessor(handler, stream.WithOrdering(stream.ByNone), stream.WithConcurrency(8, 5))
		if err != nil {
			t.Fatal(err)
		}
		parts := []*streamtest.Partition{streamtest.NewPartition("t", 0, 50), streamtest.NewPartition("t", 1, 50)}
		for _, p := range parts {
			p.AppendN(time.Now(), 200)
		}
		ctx, cancel := context.WithCancel(t.Context())
		done := make(chan error, 1)
		go func() { done <- streamtest.Run(ctx, proc, parts...) }()
		for _, p := range parts {
			waitCommitted(t, p, 200)
		}
		cancel()
		if err := <-done; err != nil {
			t.Fatal(err)
		}
		if most != 5 {
			t.Fatalf("at most %d records at once over two partitions, want 5", most)
		}
	})
}

// TestKeyedKeyFunc: WithKeyFunc orders records by the key it gives (here
// a header), and a key function that panics orders the record with the
// records without a key, logged.
func TestKeyedKeyFunc(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var h streamtest.History
		p := streamtest.NewPartition("t", 0, 10)
		p.AppendN(time.Now(), 30)
		keys := make([]string, 30)
		for o := range keys {
			keys[o] = fmt.Sprint("k", o%3)
		}
		keys[13] = "" // its key function panics
		var logs syncBuffer
		_, stop := keyedRun(t, &h, "a", p, stream.HandlerFunc(func(_ context.Context, b *stream.Batch) error {
			time.Sleep(time.Millisecond)
			return nil
		}), stream.WithKeyFunc(func(r *stream.Record) string {
			if r.Offset == 13 {
				panic("no key")
			}
			return fmt.Sprint("k", r.Offset%3)
		}), stream.WithLogger(slog.New(slog.NewTextHandler(&logs, nil))))
		waitCommitted(t, p, 30)
		stop()
		checkKeys(t, &h, keys)
		if !strings.Contains(logs.String(), "the key function (WithKeyFunc) panicked") {
			t.Fatalf("no log line of the key function's panic:\n%s", logs.String())
		}
	})
}

// rewindClaim returns its batches in turn, then blocks.
type rewindClaim struct {
	batches [][]stream.Record
}

func (c *rewindClaim) Topic() string                               { return "t" }
func (c *rewindClaim) Partition() int32                            { return 0 }
func (c *rewindClaim) Committed() (int64, string)                  { return -1, "" }
func (c *rewindClaim) Pause()                                      {}
func (c *rewindClaim) Resume()                                     {}
func (c *rewindClaim) Commit(context.Context, int64, string) error { return nil }
func (c *rewindClaim) Fetch(ctx context.Context) ([]stream.Record, error) {
	if len(c.batches) == 0 {
		<-ctx.Done()
		return nil, ctx.Err()
	}
	b := c.batches[0]
	c.batches = c.batches[1:]
	return b, nil
}

// TestKeyedRewindStops: a log rewound under a keyed partition (offsets it
// passed come again: a topic deleted and created again) ends Process
// with an error that says so, rather than a window that no longer
// matches the log.
func TestKeyedRewindStops(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		recs := func(from, to int64) []stream.Record {
			var out []stream.Record
			for o := from; o < to; o++ {
				out = append(out, stream.Record{Topic: "t", Offset: o, Key: []byte("k")})
			}
			return out
		}
		proc, err := stream.NewProcessor(stream.HandlerFunc(func(context.Context, *stream.Batch) error { return nil }),
			stream.WithOrdering(stream.ByKey), stream.WithLogger(slog.New(slog.DiscardHandler)))
		if err != nil {
			t.Fatal(err)
		}
		err = proc.Process(t.Context(), &rewindClaim{batches: [][]stream.Record{recs(0, 5), recs(2, 4)}})
		if err == nil || !strings.Contains(err.Error(), "record at offset 2 fetched after offset 4: the log was rewound") {
			t.Fatalf("Process = %v, want an error that says the log was rewound", err)
		}
	})
}

// TestKeyedRoomHeldByRecordsNotFetched: a next owner whose window has no
// room left, the room held by the states of records it has not fetched
// yet, fetches them while a failed record waits for room, rather than
// wait for ever for room that only those records can free.
func TestKeyedRoomHeldByRecordsNotFetched(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		now := time.Now()
		s := retrystate.State{Retries: 1, FirstFailure: now, NextAt: now.Add(time.Second), LastDelay: time.Second, LastError: "failed before the move"}
		// The smallest limit whose window holds the states of records 8
		// and 9, and has no room for a third.
		var lim checkpoint.WindowLimits
		var md string
		for m := 100; m < 4096 && md == ""; m++ {
			lim = checkpoint.WindowLimits{MaxBytes: m, ReserveOnFailure: true}
			w, err := retrystate.NewWindow(0, lim)
			if err != nil {
				continue
			}
			ok := true
			for o := range int64(10) {
				ok = ok && w.Admit(o) == nil
			}
			ok = ok && w.Retry(8, s) == nil && w.Retry(9, s) == nil
			if ok && !w.FitsState(0) {
				md = w.Encode()
			}
		}
		if md == "" {
			t.Fatal("no such limit")
		}
		var h streamtest.History
		p := streamtest.NewPartition("t", 0, 3)
		keys := []string{"a", "b", "c", "d", "e", "f", "g", "h", "i", "j", "k", "l"}
		p.AppendKeyed(now, keys[:3]...) // the rest come once record 0 waits for room
		p.SetCheckpoint(0, md)
		var calls calls
		handler := stream.HandlerFunc(func(_ context.Context, b *stream.Batch) error {
			if calls.add(b.FirstOffset()) == 1 && b.FirstOffset() == 0 {
				return errors.New("record 0 fails once")
			}
			return nil
		})
		_, stop := keyedRun(t, &h, "b", p, handler, stream.WithWindowLimits(checkpoint.WindowLimits{MaxBytes: lim.MaxBytes}),
			stream.WithPolicy(checkpoint.Policy{MaxRetries: 3, Backoff: checkpoint.Fixed(time.Second)}))
		for calls.of(0) == 0 {
			time.Sleep(time.Millisecond)
		}
		synctest.Wait()
		p.AppendKeyed(now, keys[3:]...)
		waitCommitted(t, p, int64(len(keys)))
		stop()
		if calls.of(0) != 2 || calls.of(8) != 1 || calls.of(9) != 1 {
			t.Fatalf("deliveries of 0, 8, 9: %d, %d, %d", calls.of(0), calls.of(8), calls.of(9))
		}
	})
}

// TestKeyedLeasesRefused: record leases (a share group) refuse a
// processor in key ordering, with the reason.
func TestKeyedLeasesRefused(t *testing.T) {
	proc, err := stream.NewProcessor(stream.HandlerFunc(func(context.Context, *stream.Batch) error { return nil }), stream.WithOrdering(stream.ByKey))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := leases.New(proc, leases.Config[stream.Record]{}); err == nil || !strings.Contains(err.Error(), "key ordering") {
		t.Fatalf("leases.New = %v, want an error about key ordering", err)
	}
}

// TestKeyedCallsGoOnDuringTheDriversTurn: a handler call that returns
// goes on with the next record handed over without waiting for the
// driver's turn (here held up in a Delivered hook, as a slow turn
// would), so that the calls of a partition do not wait for the driver
// between records; and never more than the limit at once.
func TestKeyedCallsGoOnDuringTheDriversTurn(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const limit = 8
		var (
			m              meter
			block, release = make(chan struct{}), make(chan struct{})
			blocked        sync.Once
		)
		// The driver reports a call's result from its own goroutine:
		// held up in the first, as in a slow turn.
		hooks := stream.Hooks{Delivered: func(stream.DeliveredEvent) {
			blocked.Do(func() {
				close(block)
				<-release
			})
		}}
		proc, err := stream.NewProcessor(m.handler(), stream.WithOrdering(stream.ByKey), stream.WithConcurrency(limit, 0), stream.WithHooks(hooks))
		if err != nil {
			t.Fatal(err)
		}
		p, cancel, done := runDistinctKeys(t, proc, 100)
		<-block
		synctest.Wait() // every call that can go on without the driver has
		during, _ := m.read()
		close(release)
		waitCommitted(t, p, 100)
		cancel()
		if err := <-done; err != nil {
			t.Fatal(err)
		}
		if during <= limit {
			t.Errorf("%d calls while the driver's turn was held up, after the first %d: the calls waited for the driver", during, limit)
		}
		if _, most := m.read(); most != limit {
			t.Errorf("at most %d records at once, want %d", most, limit)
		}
	})
}

// TestKeyedAbandonsOnlyCallsInFlight: when the claim ends, the Abandoned
// hook reports the records whose handler calls were in flight, not those
// handed to the partition's callers and never called (its count is of
// deliveries left unfinished, as for a batch in checkpoint mode).
func TestKeyedAbandonsOnlyCallsInFlight(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const limit = 8
		var (
			mu        sync.Mutex
			calls     int
			abandoned int
		)
		handler := stream.HandlerFunc(func(ctx context.Context, b *stream.Batch) error {
			mu.Lock()
			calls++
			mu.Unlock()
			<-ctx.Done()
			return ctx.Err()
		})
		hooks := stream.Hooks{Abandoned: func(stream.AbandonedEvent) {
			mu.Lock()
			abandoned++
			mu.Unlock()
		}}
		proc, err := stream.NewProcessor(handler, stream.WithOrdering(stream.ByKey), stream.WithConcurrency(limit, 0),
			stream.WithHooks(hooks))
		if err != nil {
			t.Fatal(err)
		}
		_, cancel, done := runDistinctKeys(t, proc, 100)
		synctest.Wait() // every call that can start has
		cancel()
		<-done
		synctest.Wait()
		mu.Lock()
		defer mu.Unlock()
		if calls != limit {
			t.Fatalf("%d handler calls at once, want %d", calls, limit)
		}
		if abandoned != calls {
			t.Errorf("Abandoned reported %d records, want the %d whose calls were in flight", abandoned, calls)
		}
	})
}

// runDistinctKeys runs proc over a partition of n records, each of a key
// of its own, until cancel; done gets Run's error.
func runDistinctKeys(t *testing.T, proc *stream.Processor, n int) (p *streamtest.Partition, cancel context.CancelFunc, done <-chan error) {
	t.Helper()
	p = streamtest.NewPartition("t", 0, 100)
	keys := make([]string, n)
	for o := range keys {
		keys[o] = fmt.Sprint("k", o)
	}
	p.AppendKeyed(time.Now(), keys...)
	ctx, cancel := context.WithCancel(t.Context())
	errc := make(chan error, 1)
	go func() { errc <- streamtest.Run(ctx, proc, p) }()
	return p, cancel, errc
}

// meter counts a handler's calls and the most that ran at once; each call
// takes 2ms.
type meter struct {
	mu               sync.Mutex
	calls, now, most int
}

func (m *meter) handler() stream.Handler {
	return stream.HandlerFunc(func(context.Context, *stream.Batch) error {
		m.mu.Lock()
		m.calls++
		m.now++
		m.most = max(m.most, m.now)
		m.mu.Unlock()
		time.Sleep(2 * time.Millisecond)
		m.mu.Lock()
		m.now--
		m.mu.Unlock()
		return nil
	})
}

// read returns the calls so far and the most at once.
func (m *meter) read() (calls, most int) {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.calls, m.most
}
