package lifecycle

import (
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// DefaultDrain is how long a consumer's Run waits, once it is stopping,
// for its workers to return (the host's default drain time too): a
// handler that ignores the end of its context holds a worker, and Run
// gives up on it after this long.
const DefaultDrain = 25 * time.Second

// The drain's report: a first Warn line once a shutdown has waited 2s for
// workers, then one every 5s while it still waits. Atomic, so that a test
// can shorten them (SetDrainReport) while a consumer of an earlier test
// still stops.
var drainFirst, drainEvery atomic.Int64

func init() { SetDrainReport(2*time.Second, 5*time.Second) }

// SetDrainReport sets when Drain reports (the first report, then the
// interval), for tests, and returns what restores the timings before.
func SetDrainReport(first, every time.Duration) (restore func()) {
	f, e := drainFirst.Swap(int64(first)), drainEvery.Swap(int64(every))
	return func() { drainFirst.Store(f); drainEvery.Store(e) }
}

// Workers is the set of a consumer's running workers, by name
// ("orders/0"), with when each started: what a stopping Run waits for.
// The zero Workers is empty and ready to use.
type Workers struct {
	mu      sync.Mutex
	running map[string]int // a name can run twice, across a rebalance
}

// Start records a worker called name; the returned func records its end.
func (w *Workers) Start(name string) (done func()) {
	w.mu.Lock()
	if w.running == nil {
		w.running = map[string]int{}
	}
	w.running[name]++
	w.mu.Unlock()
	var once sync.Once
	return func() {
		once.Do(func() {
			w.mu.Lock()
			if w.running[name]--; w.running[name] <= 0 {
				delete(w.running, name)
			}
			w.mu.Unlock()
		})
	}
}

// Names returns the running workers' names, sorted.
func (w *Workers) Names() []string {
	w.mu.Lock()
	defer w.mu.Unlock()
	out := make([]string, 0, len(w.running))
	for n := range w.running {
		out = append(out, n)
	}
	slices.Sort(out)
	return out
}

// Named is what Drain names the running workers from: a [Workers], or a
// consumer's own record of them.
type Named interface {
	// Names returns the running workers' names ("orders/0"), sorted.
	Names() []string
}

// ErrDrainOver is wrapped by Drain's error: the drain time passed with
// workers still running.
var ErrDrainOver = errors.New("drain time over")

// drainError is Drain's error: its own words, matching ErrDrainOver.
type drainError struct{ msg string }

func (e *drainError) Error() string        { return e.msg }
func (e *drainError) Is(target error) bool { return target == ErrDrainOver }

// Drain waits until done is closed, or until drain has passed when drain
// is above 0. While it waits, it logs at Warn, after a first 2s and then
// every 5s (SetDrainReport), which workers it waits for and for how
// long, so that a shutdown held up by a handler that ignores its context
// is never silent; with no worker running, it says it waits for the
// partitions' last commits. It returns nil when done was closed, else an
// error that names the workers still running and says why they hold Run
// (or, with none running, that the last commits were not answered).
func Drain(done <-chan struct{}, log *slog.Logger, pkg string, w Named, drain time.Duration) error {
	var until time.Time
	if drain > 0 {
		until = time.Now().Add(drain)
	}
	return DrainUntil(done, log, pkg, w, drain, until)
}

// DrainUntil is Drain for a drain that began earlier: it gives up at until
// (the zero Time for never), and its reports and error name drain, the
// drain time the stop began with. A consumer whose stop waited for its
// workers elsewhere first (a rebalance the stop came during) drains what
// is left of its drain time.
func DrainUntil(done <-chan struct{}, log *slog.Logger, pkg string, w Named, drain time.Duration, until time.Time) error {
	var deadline <-chan time.Time
	if !until.IsZero() {
		t := time.NewTimer(time.Until(until))
		defer t.Stop()
		deadline = t.C
	}
	if reportWhile(done, deadline, time.Duration(drainFirst.Load()), time.Duration(drainEvery.Load()), func(waited time.Duration) {
		names := w.Names()
		if len(names) == 0 {
			// Every handler has returned: what is left is the
			// partitions' last commits, and the client's leave.
			log.Warn("redeliver: stopping: waiting for the partitions' last commits (every handler has returned)",
				"waited", waited, "drain", drain)
		} else {
			log.Warn("redeliver: stopping: waiting for partitions whose handlers have not returned since their context ended (a handler that ignores its context holds the shutdown)",
				"partitions", strings.Join(names, ","), "waited", waited, "drain", drain)
		}
	}) {
		return nil
	}
	names := w.Names()
	if len(names) == 0 {
		log.Error("redeliver: stopping: drain time over, the partitions' last commits not answered", "drain", drain)
		return &drainError{fmt.Sprintf("%s: drain time (%v) over: every handler has returned, but the partitions' last commits were not answered", pkg, drain)}
	}
	err := &drainError{fmt.Sprintf("%s: drain time (%v) over: the handlers of %s have not returned since their context ended: they are left running; make the handler return when its context is done", pkg, drain, strings.Join(names, ", "))}
	log.Error("redeliver: stopping: drain time over, partitions left running", "partitions", strings.Join(names, ","), "drain", drain)
	return err
}

// reportWhile waits until done or stop is closed (or receives), calling
// report with the time waited after first and then every every. It
// reports whether done was closed.
func reportWhile[T any](done <-chan struct{}, stop <-chan T, first, every time.Duration, report func(waited time.Duration)) bool {
	start := time.Now()
	t := time.NewTimer(first)
	defer t.Stop()
	for {
		select {
		case <-done:
			return true
		case <-stop:
			return false
		case <-t.C:
			report(time.Since(start).Round(time.Millisecond))
			t.Reset(every)
		}
	}
}
