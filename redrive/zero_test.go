package redrive_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/redeliver-go/redeliver/redrive"
	"github.com/redeliver-go/redeliver/redrive/redrivetest"
	"github.com/redeliver-go/redeliver/stream"
)

// TestZeroAndNil: a Scheduler not built by NewScheduler, nil stores (typed
// or not), nil contexts and nil arguments give errors that say what to do
// instead, never a panic.
func TestZeroAndNil(t *testing.T) {
	ctx := context.Background()
	var nilMem *redrivetest.MemStore
	for _, c := range []struct {
		name string
		err  func() error
		want string
	}{
		{"Run on a zero Scheduler", func() error { return new(redrive.Scheduler).Run(ctx) }, "redrive.NewScheduler"},
		{"Run on a nil *Scheduler", func() error { var s *redrive.Scheduler; return s.Run(ctx) }, "redrive.NewScheduler"},
		{"Sweep on a zero Scheduler", func() error { return new(redrive.Scheduler).Sweep(ctx).Err }, "redrive.NewScheduler"},
		{"Run with a nil context", func() error {
			s, err := redrive.NewScheduler(redrivetest.NewMemStore(), &redrivetest.Publisher{})
			if err != nil {
				return err
			}
			return s.Run(nil) //nolint:staticcheck // the nil context is what is checked
		}, "nil context"},
		{"NewScheduler with a typed nil store", func() error { _, err := redrive.NewScheduler(nilMem, &redrivetest.Publisher{}); return err }, "nil store"},
		{"NewScheduler with a typed nil publisher", func() error {
			var p *redrivetest.Publisher
			_, err := redrive.NewScheduler(redrivetest.NewMemStore(), p)
			return err
		}, "nil publisher"},
		{"Park with a typed nil store", func() error { _, err := redrive.Park(nilMem, time.Minute); return err }, "nil store"},
		{"Park's action on a nil batch", func() error {
			park, err := redrive.Park(redrivetest.NewMemStore(), time.Minute)
			if err != nil {
				return err
			}
			return park(ctx, nil, nil)
		}, "nil batch"},
		{"Await with a nil store", func() error {
			_, _, err := redrive.Await(ctx, nil, redrive.Awaiting{Key: "k", State: "S", Expiry: time.Minute})
			return err
		}, "nil store"},
		{"Await with a nil context", func() error {
			_, _, err := redrive.Await(nil, redrivetest.NewMemStore(), redrive.Awaiting{Key: "k", State: "S", Expiry: time.Minute}) //nolint:staticcheck
			return err
		}, "nil context"},
		{"Await with a key that is not text", func() error {
			_, _, err := redrive.Await(ctx, redrivetest.NewMemStore(), redrive.Awaiting{Key: "k\x00", State: "S", Expiry: time.Minute})
			return err
		}, "not text"},
		{"Complete with a nil store", func() error { _, err := redrive.Complete(ctx, nil, "k"); return err }, "nil store"},
		{"ReadMigrations of a nil file system", func() error { _, err := redrive.ReadMigrations(nil, "m"); return err }, "nil file system"},
		{"CompleteOnSuccess with a nil store, on a re-driven record", func() error {
			h := stream.Chain(stream.HandlerFunc(func(context.Context, *stream.Batch) error { return nil }), redrive.CompleteOnSuccess(nil))
			return h.Handle(ctx, &stream.Batch{Records: []stream.Record{{Headers: []stream.Header{{Key: redrive.HeaderKey, Value: []byte("k")}}}}})
		}, "nil store"},
	} {
		err := func() (err error) {
			defer func() {
				if r := recover(); r != nil {
					err = fmt.Errorf("panic: %v", r)
				}
			}()
			return c.err()
		}()
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: %v, want an error about %s", c.name, err, c.want)
		}
	}
	// A nil option is a wiring mistake, named by its place.
	if _, err := redrive.NewScheduler(redrivetest.NewMemStore(), &redrivetest.Publisher{}, redrive.WithInterval(time.Minute), nil); err == nil || err.Error() != "redrive: NewScheduler: option 2 of 2 is nil" {
		t.Errorf("NewScheduler with a nil option: %v", err)
	}
	if _, err := redrive.Park(redrivetest.NewMemStore(), time.Minute, nil); err == nil || err.Error() != "redrive: Park: option 1 of 1 is nil" {
		t.Errorf("Park with a nil option: %v", err)
	}
	h := stream.Chain(stream.HandlerFunc(func(context.Context, *stream.Batch) error { return nil }), redrive.CompleteOnSuccess(redrivetest.NewMemStore(), nil))
	if err := h.Handle(ctx, &stream.Batch{}); err == nil || err.Error() != "redrive: CompleteOnSuccess: option 1 of 1 is nil" {
		t.Errorf("CompleteOnSuccess with a nil option: %v", err)
	}
	// A zero MemStore is an empty store.
	var m redrivetest.MemStore
	if n, err := m.Park(ctx, []redrive.Entry{{Key: "k", Base: "S", Status: redrive.Parked}}); err != nil || n != 1 {
		t.Errorf("Park on a zero MemStore: %d, %v", n, err)
	}
	// CompleteOnSuccess with a nil store lets other records through.
	h = stream.Chain(stream.HandlerFunc(func(context.Context, *stream.Batch) error { return nil }), redrive.CompleteOnSuccess(nil))
	if err := h.Handle(ctx, &stream.Batch{Records: []stream.Record{{Value: []byte("v")}}}); err != nil {
		t.Errorf("CompleteOnSuccess with a nil store on a plain record: %v", err)
	}
}

// TestRunReturnsNilOnCancel: Run returns nil after a clean shutdown by its
// context, as the adapters and the host do.
func TestRunReturnsNilOnCancel(t *testing.T) {
	swept := make(chan struct{}, 1)
	s, err := redrive.NewScheduler(redrivetest.NewMemStore(), &redrivetest.Publisher{}, redrive.WithInterval(time.Hour),
		redrive.WithHooks(redrive.Hooks{Swept: func(redrive.SweepEvent) { swept <- struct{}{} }}))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancelCause(context.Background())
	done := make(chan error, 1)
	go func() { done <- s.Run(ctx) }()
	<-swept // the sweep at start; then it waits for the next
	cancel(errors.New("shutting down"))
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("Run after cancellation: %v, want nil", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Run did not return after its context was cancelled")
	}
}

// sameAgain is a store whose claims hand out the same due entry every
// time, as a store that lost the sweep's changes would.
type sameAgain struct {
	redrive.Store
	e redrive.Entry
}

func (s sameAgain) Claim(ctx context.Context, now time.Time, limit int, fn func(context.Context, []redrive.Entry) []redrive.Change) (int, []redrive.Change, error) {
	return 1, fn(ctx, []redrive.Entry{s.e}), nil
}

// TestSweepHandlesAnEntryOnce: whatever the store hands out, one sweep
// publishes an entry at most once and then ends.
func TestSweepHandlesAnEntryOnce(t *testing.T) {
	now := time.Date(2026, 3, 1, 9, 0, 0, 0, time.UTC)
	e := redrive.Entry{ID: 1, Key: "k", Base: "S", Status: redrive.Parked, StateTime: now, Created: now, Expiry: time.Minute, DueAt: now,
		Version: 1, Message: stream.Record{Topic: "t"}}
	pub := &redrivetest.Publisher{}
	s, err := redrive.NewScheduler(sameAgain{e: e}, pub, redrive.WithBatchSize(1), redrive.WithLogger(slog.New(slog.DiscardHandler)))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	ev := s.Sweep(ctx)
	if n := len(pub.Records()); n != 1 || ev.Claimed != 2 || ctx.Err() != nil {
		t.Fatalf("one sweep over a store that hands out one entry again and again: %d publications, %+v; want 1, and the sweep ended at the second claim", n, ev)
	}
}

// Close stops a running scheduler (Run returns nil), a Run after Close
// returns stream.ErrClosed, and a hook may close the scheduler that calls
// it without a deadlock.
func TestSchedulerClose(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s, err := redrive.NewScheduler(redrivetest.NewMemStore(), &redrivetest.Publisher{}, redrive.WithInterval(time.Hour))
		if err != nil {
			t.Fatal(err)
		}
		done := make(chan error, 1)
		go func() { done <- s.Run(t.Context()) }()
		synctest.Wait()
		if err := s.Close(); err != nil {
			t.Fatalf("Close = %v", err)
		}
		// Run returns as Close does, give or take its last steps
		// (Close waits for the run; the goroutine then sends): a
		// moment of the bubble's clock, never a drain or a timer.
		select {
		case err := <-done:
			if err != nil {
				t.Errorf("Run = %v after Close, want nil", err)
			}
		case <-time.After(time.Millisecond):
			t.Error("Close returned before Run did")
		}
		if err := s.Run(t.Context()); err == nil {
			t.Error("a second Run: no error")
		}
	})
	s, err := redrive.NewScheduler(redrivetest.NewMemStore(), &redrivetest.Publisher{})
	if err != nil {
		t.Fatal(err)
	}
	s.Close()
	if err := s.Run(t.Context()); !errors.Is(err, stream.ErrClosed) {
		t.Errorf("Run after Close = %v, want stream.ErrClosed", err)
	}
	synctest.Test(t, func(t *testing.T) {
		var s *redrive.Scheduler
		s, err := redrive.NewScheduler(redrivetest.NewMemStore(), &redrivetest.Publisher{}, redrive.WithInterval(time.Hour),
			redrive.WithHooks(redrive.Hooks{Swept: func(redrive.SweepEvent) { s.Close() }}))
		if err != nil {
			t.Fatal(err)
		}
		if err := s.Run(t.Context()); err != nil {
			t.Errorf("Run = %v after its hook closed it, want nil", err)
		}
	})
	var zero redrive.Scheduler
	if err := zero.Close(); err == nil {
		t.Error("Close of a zero Scheduler: no error")
	}
}
