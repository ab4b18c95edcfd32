// Package lifecycle is the life of redeliver's long-running types (the
// consumers of every adapter, the share consumer, the functions host, the
// re-drive scheduler): made by a constructor, run once, closed from
// anywhere. A stream.Processor runs each claim's worker inside [Inside], so
// a handler, a hook or an exhaustion action may close what runs it.
//
// The rules it keeps, so that every such type keeps them the same way:
//
//   - Run may be called once; a second call returns an error at once.
//   - Run returns nil after a clean shutdown (its context done, or Close
//     called) and an error only for a failure (see [Life.Fail]).
//   - Close stops Run and waits for it to return. Run called after Close
//     returns the type's ErrClosed.
//   - Close may be called from anywhere, also from a goroutine that Run
//     waits for (a handler, a hook, a callback such as OnAssigned): such
//     a goroutine runs inside [Inside], and Close called from it stops Run
//     without waiting, since Run cannot return before that goroutine does.
//     Close is idempotent.
//
// The mark Close looks for is not tied to one Life: Close called inside
// any run (a handler of one consumer closing another consumer) stops that
// Run without waiting for it either.
package lifecycle

import (
	"context"
	"errors"
	"reflect"
	"runtime"
	"sync"
	"time"
)

// Life is the lifecycle of one long-running value. Make it with [New]. It
// is safe for concurrent use.
type Life struct {
	pkg       string // the package's name, for messages
	errClosed error  // what Run returns after Close

	mu      sync.Mutex
	started bool
	closed  bool
	cancel  context.CancelCauseFunc
	done    chan struct{} // closed when Run returns
}

// New returns the lifecycle of a value of package pkg (its name prefixes
// the errors Life makes) whose Run returns errClosed after Close.
func New(pkg string, errClosed error) *Life {
	return &Life{pkg: pkg, errClosed: errClosed, done: make(chan struct{})}
}

// failure is the cause of a run that Fail ended.
type failure struct{ err error }

func (f failure) Error() string { return f.err.Error() }
func (f failure) Unwrap() error { return f.err }

// Run runs body once, inside [Inside], with a context that ends when ctx
// does, when Close is called (cause: the package's ErrClosed) or when Fail
// is called. It returns an error at once when Run was called before, and
// the package's ErrClosed when Close was.
//
// What Run returns: body's error when it is a failure of its own; the
// error given to Fail, when Fail ended the run; otherwise nil (a clean
// shutdown). An error body returns because its context ended (a
// context.Canceled or DeadlineExceeded, or the context's cause) is not a
// failure.
func (l *Life) Run(ctx context.Context, body func(ctx context.Context) error) error {
	l.mu.Lock()
	if l.started {
		l.mu.Unlock()
		return errors.New(l.pkg + ": Run called more than once")
	}
	l.started = true
	defer close(l.done)
	if l.closed {
		l.mu.Unlock()
		return l.errClosed
	}
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	l.cancel = cancel
	l.mu.Unlock()

	var err error
	Inside(func() { err = body(ctx) })
	cause := context.Cause(ctx)
	var f failure
	switch {
	case errors.As(cause, &f) && ctx.Err() != nil:
		if err != nil && !errors.Is(err, context.Canceled) && !errors.Is(err, context.DeadlineExceeded) && !errors.Is(err, f.err) {
			return err // body's own failure, besides
		}
		return f.err
	case err == nil:
		return nil
	case ctx.Err() != nil && (errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) || errors.Is(err, cause)):
		return nil // the end of the run, not a failure
	}
	return err
}

// Fail ends the run with err, which Run returns. The first end of a run
// wins: a Fail after the run's context ended (Close, ctx) changes nothing.
func (l *Life) Fail(err error) {
	if err == nil {
		err = errors.New(l.pkg + ": failed")
	}
	l.mu.Lock()
	cancel := l.cancel
	l.mu.Unlock()
	if cancel != nil {
		cancel(failure{err})
	}
}

// Close stops Run if it runs and waits for it to return, unless called
// inside Run (see [Inside]): then it stops Run and returns at once. After
// Close, Run returns the package's ErrClosed. It reports whether it was
// called inside [Inside]: inside a run, or, before Run, inside a callback
// marked so (a client can call its callbacks before Run: the caller must
// not wait there for what waits for the callback).
func (l *Life) Close() (inside bool) {
	l.mu.Lock()
	l.closed = true
	cancel, started := l.cancel, l.started
	l.mu.Unlock()
	if cancel != nil {
		cancel(l.errClosed)
	}
	if !started {
		return calledInside()
	}
	if calledInside() {
		return true
	}
	<-l.done
	return false
}

// Started reports whether Run was called.
func (l *Life) Started() bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.started
}

// Closed reports whether Close was called.
func (l *Life) Closed() bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.closed
}

// Linger returns a context that ends d after ctx ends, or when cancel is
// called, and carries ctx's values: for a request in flight at a shutdown
// that is better finished than cut short (a commit the broker may have
// written already), within a bound.
func Linger(ctx context.Context, d time.Duration) (context.Context, context.CancelFunc) {
	lctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	var (
		mu    sync.Mutex
		timer *time.Timer
	)
	stop := context.AfterFunc(ctx, func() {
		mu.Lock()
		timer = time.AfterFunc(d, cancel)
		mu.Unlock()
	})
	return lctx, func() {
		stop()
		mu.Lock()
		if timer != nil {
			timer.Stop()
		}
		mu.Unlock()
		cancel()
	}
}

// Inside runs fn on the calling goroutine, marked as one that a Run waits
// for: a worker's goroutine, or a callback the run's client calls. Close
// called under fn does not wait for Run (which waits for fn). Every
// goroutine that runs user code (a handler, a hook, a callback) and that a
// Run waits for must run it inside Inside.
//
// The mark is the call's frame on the goroutine's stack: Close looks for
// it there. A goroutine that fn starts is not marked; if fn waits for such
// a goroutine, that goroutine must not call Close.
//
//go:noinline
func Inside(fn func()) {
	fn()
}

// insideName is Inside's function name, as a stack frame names it.
var insideName = runtime.FuncForPC(reflect.ValueOf(Inside).Pointer()).Name()

// calledInside reports whether the calling goroutine runs inside Inside.
func calledInside() bool {
	pcs := make([]uintptr, 64)
	for {
		n := runtime.Callers(2, pcs)
		if n < len(pcs) {
			pcs = pcs[:n]
			break
		}
		pcs = make([]uintptr, 2*len(pcs))
	}
	frames := runtime.CallersFrames(pcs)
	for {
		f, more := frames.Next()
		if f.Function == insideName {
			return true
		}
		if !more {
			return false
		}
	}
}
