package lifecycle_test

import (
	"context"
	"errors"
	"testing"
	"testing/synctest"
	"time"

	"github.com/redeliver-go/redeliver/internal/lifecycle"
)

var errClosed = errors.New("test: closed")

// blockUntilDone is a body that runs until its context ends.
func blockUntilDone(ctx context.Context) error {
	<-ctx.Done()
	return context.Cause(ctx)
}

func TestRunRule(t *testing.T) {
	boom := errors.New("boom")
	for _, tc := range []struct {
		name string
		stop func(l *lifecycle.Life, cancel context.CancelCauseFunc)
		body func(ctx context.Context) error
		want error
	}{
		{"context cancelled", func(_ *lifecycle.Life, cancel context.CancelCauseFunc) { cancel(nil) }, blockUntilDone, nil},
		{"context cancelled with a cause", func(_ *lifecycle.Life, cancel context.CancelCauseFunc) { cancel(errors.New("ctrl-c")) }, blockUntilDone, nil},
		{"Close", func(l *lifecycle.Life, _ context.CancelCauseFunc) { l.Close() }, blockUntilDone, nil},
		{"Fail", func(l *lifecycle.Life, _ context.CancelCauseFunc) { l.Fail(boom) }, blockUntilDone, boom},
		{"a failure of the body", func(*lifecycle.Life, context.CancelCauseFunc) {}, func(context.Context) error { return boom }, boom},
		{"cancelled, then a failure of its own", func(_ *lifecycle.Life, cancel context.CancelCauseFunc) { cancel(nil) },
			func(ctx context.Context) error { <-ctx.Done(); return boom }, boom},
	} {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				l := lifecycle.New("test", errClosed)
				ctx, cancel := context.WithCancelCause(context.Background())
				defer cancel(nil)
				done := make(chan error, 1)
				go func() { done <- l.Run(ctx, tc.body) }()
				synctest.Wait()
				go tc.stop(l, cancel)
				if err := <-done; !errors.Is(err, tc.want) || (tc.want == nil) != (err == nil) {
					t.Fatalf("Run returned %v, want %v", err, tc.want)
				}
			})
		})
	}
}

func TestDeadlineIsACleanShutdown(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		l := lifecycle.New("test", errClosed)
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		if err := l.Run(ctx, func(ctx context.Context) error { <-ctx.Done(); return ctx.Err() }); err != nil {
			t.Fatalf("Run returned %v after its deadline, want nil", err)
		}
	})
}

func TestRunOnce(t *testing.T) {
	l := lifecycle.New("test", errClosed)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := l.Run(ctx, blockUntilDone); err != nil {
		t.Fatal(err)
	}
	if err := l.Run(context.Background(), blockUntilDone); err == nil || errors.Is(err, errClosed) {
		t.Fatalf("second Run returned %v, want an error saying Run was called before", err)
	}
}

func TestCloseBeforeRun(t *testing.T) {
	l := lifecycle.New("test", errClosed)
	if inside := l.Close(); inside {
		t.Fatal("Close before Run reported being inside a run")
	}
	ran := false
	if err := l.Run(context.Background(), func(context.Context) error { ran = true; return nil }); !errors.Is(err, errClosed) {
		t.Fatalf("Run after Close returned %v, want ErrClosed", err)
	}
	if ran {
		t.Fatal("Run after Close ran its body")
	}
	l.Close() // idempotent
}

// Close before Run, called inside Inside (a callback of a client, which
// can come before Run), reports it: the caller must not wait there for
// what waits for the callback.
func TestCloseBeforeRunInside(t *testing.T) {
	l := lifecycle.New("test", errClosed)
	var inside bool
	lifecycle.Inside(func() { inside = l.Close() })
	if !inside {
		t.Fatal("Close before Run, inside Inside, did not report it")
	}
	if err := l.Run(context.Background(), func(context.Context) error { return nil }); !errors.Is(err, errClosed) {
		t.Fatalf("Run after Close returned %v, want ErrClosed", err)
	}
}

// Close from outside waits for Run to return.
func TestCloseWaitsForRun(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		l := lifecycle.New("test", errClosed)
		release := make(chan struct{})
		returned := make(chan struct{})
		go func() {
			defer close(returned)
			l.Run(context.Background(), func(ctx context.Context) error {
				<-ctx.Done()
				<-release // a slow shutdown
				return nil
			})
		}()
		synctest.Wait()
		closed := make(chan struct{})
		go func() { l.Close(); close(closed) }()
		synctest.Wait()
		select {
		case <-closed:
			t.Fatal("Close returned while Run was still shutting down")
		default:
		}
		close(release)
		<-returned
		<-closed
	})
}

// Close from a goroutine Run waits for (a worker, a callback) stops Run
// without waiting for it: Run waits for that goroutine.
func TestCloseFromInside(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		l := lifecycle.New("test", errClosed)
		var inside bool
		err := l.Run(context.Background(), func(ctx context.Context) error {
			worker := make(chan struct{})
			go lifecycle.Inside(func() {
				defer close(worker)
				inside = l.Close()
			})
			<-ctx.Done()
			<-worker // Run waits for its worker
			return nil
		})
		if err != nil || !inside {
			t.Fatalf("Run returned %v, Close reported inside %v; want nil, true", err, inside)
		}
	})
	// And from Run's own goroutine (a callback Run calls).
	synctest.Test(t, func(t *testing.T) {
		l := lifecycle.New("test", errClosed)
		err := l.Run(context.Background(), func(ctx context.Context) error {
			l.Close()
			<-ctx.Done()
			return nil
		})
		if err != nil {
			t.Fatalf("Run returned %v, want nil", err)
		}
	})
}

// A lingering context ends its delay after its parent, not before.
func TestLinger(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		parent, cancel := context.WithCancel(context.Background())
		ctx, stop := lifecycle.Linger(parent, 250*time.Millisecond)
		defer stop()
		cancel()
		began := time.Now()
		<-ctx.Done()
		if d := time.Since(began); d != 250*time.Millisecond {
			t.Fatalf("ended %v after its parent, want 250ms", d)
		}
	})
	synctest.Test(t, func(t *testing.T) {
		ctx, stop := lifecycle.Linger(context.Background(), time.Hour)
		stop()
		if ctx.Err() == nil {
			t.Fatal("not ended by its cancel")
		}
	})
}
