package lifecycle_test

import (
	"bytes"
	"errors"
	"log/slog"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/redeliver-go/redeliver/internal/lifecycle"
)

// names is a fixed set of running workers' names.
type names []string

func (n names) Names() []string { return n }

// Drain's reports and error say what the stop waits for: the handlers
// still running, by name; or, once every handler has returned, the
// partitions' last commits (a report that named no partition and blamed a
// handler sent the operator after a handler that had returned).
func TestDrainSaysWhatItWaitsFor(t *testing.T) {
	for _, tc := range []struct {
		name      string
		running   names
		report    string // in every Warn report
		errWant   string // in the error
		errReject string // never in the error
	}{
		{"a handler still running", names{"orders/0", "orders/3"},
			`partitions=orders/0,orders/3`, "the handlers of orders/0, orders/3 have not returned", "last commits"},
		{"every handler returned", nil,
			`waiting for the partitions' last commits`, "the partitions' last commits were not answered", "the handlers of"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				var buf bytes.Buffer
				log := slog.New(slog.NewTextHandler(&buf, nil))
				const drain = 10 * time.Second
				err := lifecycle.Drain(make(chan struct{}), log, "pkg", tc.running, drain)
				if !errors.Is(err, lifecycle.ErrDrainOver) || !strings.Contains(err.Error(), tc.errWant) || strings.Contains(err.Error(), tc.errReject) {
					t.Errorf("Drain = %v, want ErrDrainOver saying %q and not %q", err, tc.errWant, tc.errReject)
				}
				var reports int
				for _, line := range strings.Split(strings.TrimSpace(buf.String()), "\n") {
					if !strings.Contains(line, "level=WARN") {
						continue
					}
					reports++
					if !strings.Contains(line, tc.report) {
						t.Errorf("report %q does not say %q", line, tc.report)
					}
					if tc.running == nil && strings.Contains(line, "handlers have not returned") {
						t.Errorf("report %q blames a handler, with none running", line)
					}
				}
				if reports < 2 {
					t.Errorf("%d Warn reports in %v, want 2 or more:\n%s", reports, drain, buf.String())
				}
			})
		})
	}
}

// Drain returns nil once done is closed, with no report when done comes
// before the first one.
func TestDrainReturnsWhenDone(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var buf bytes.Buffer
		done := make(chan struct{})
		go func() {
			time.Sleep(time.Second) // the first report comes at 2s
			close(done)
		}()
		if err := lifecycle.Drain(done, slog.New(slog.NewTextHandler(&buf, nil)), "pkg", names{"orders/0"}, time.Minute); err != nil {
			t.Errorf("Drain = %v, want nil", err)
		}
		if buf.Len() > 0 {
			t.Errorf("logged before the first report was due:\n%s", buf.String())
		}
	})
}

// A rebalance held up by a handler is reported while it lasts, naming the
// partitions whose handlers still run, and once more, at Info, when it is
// over; one that ends before the first report says nothing.
func TestWaitRevokedReportsAHeldRebalance(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var buf bytes.Buffer
		log := slog.New(slog.NewTextHandler(&buf, nil))
		done := make(chan struct{})
		go func() {
			time.Sleep(2*time.Second + 2*5*time.Second + time.Second)
			close(done)
		}()
		all := names{"orders/0", "orders/1", "payments/2"}
		lifecycle.WaitRevoked(done, nil, log, lifecycle.Only(all, map[string]bool{"orders/1": true, "payments/2": true}), nil)
		out := buf.String()
		if n := strings.Count(out, "level=WARN msg=\"redeliver: a rebalance waits for partitions whose handlers have not returned"); n != 3 {
			t.Errorf("%d Warn reports, want 3 (at 2s, 7s and 12s):\n%s", n, out)
		}
		if strings.Contains(out, "orders/0") || !strings.Contains(out, "partitions=orders/1,payments/2") {
			t.Errorf("the reports do not name exactly the revoked partitions' running handlers:\n%s", out)
		}
		if !strings.Contains(out, `level=INFO msg="redeliver: the rebalance's wait is over" waited=13s`) {
			t.Errorf("no Info line with the wait's length:\n%s", out)
		}

		buf.Reset()
		quick := make(chan struct{})
		go func() { time.Sleep(time.Second); close(quick) }()
		lifecycle.WaitRevoked(quick, nil, log, all, nil)
		if buf.Len() != 0 {
			t.Errorf("a rebalance shorter than the first report logged:\n%s", buf.String())
		}

		buf.Reset()
		stop := make(chan struct{})
		go func() { time.Sleep(3 * time.Second); close(stop) }()
		lifecycle.WaitRevoked(make(chan struct{}), stop, log, names{}, nil)
		if out := buf.String(); strings.Count(out, "level=WARN") != 1 || !strings.Contains(out, "last commits (every handler has returned)") {
			t.Errorf("with every handler returned, want one report of the last commits, and none after stop:\n%s", out)
		}

		buf.Reset()
		stopping := make(chan struct{})
		go func() { time.Sleep(10 * time.Second); close(stopping) }()
		lifecycle.WaitRevoked(stopping, nil, log, all, func() bool { return true })
		if buf.Len() != 0 {
			t.Errorf("a quiet wait (the consumer stopping) logged:\n%s", buf.String())
		}
	})
}

// DrainUntil gives up at until, not a drain time after it is called, and
// its error names the drain time the stop began with; with until already
// past, at once. With done closed meanwhile, it returns nil.
func TestDrainUntilKeepsTheStopsDrainTime(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const drain = 10 * time.Second
		until := time.Now().Add(drain)
		time.Sleep(7 * time.Second) // the stop waited elsewhere first
		start := time.Now()
		err := lifecycle.DrainUntil(make(chan struct{}), slog.New(slog.DiscardHandler), "pkg", names{"orders/0"}, drain, until)
		if took := time.Since(start); took != 3*time.Second {
			t.Errorf("DrainUntil gave up after %v, want the 3s left of the drain time", took)
		}
		if !errors.Is(err, lifecycle.ErrDrainOver) || !strings.Contains(err.Error(), "drain time (10s) over") {
			t.Errorf("DrainUntil = %v, want ErrDrainOver naming the drain time of 10s", err)
		}

		start = time.Now()
		err = lifecycle.DrainUntil(make(chan struct{}), slog.New(slog.DiscardHandler), "pkg", names{"orders/0"}, drain, start.Add(-time.Second))
		if took := time.Since(start); took != 0 || !errors.Is(err, lifecycle.ErrDrainOver) {
			t.Errorf("DrainUntil past its end = %v after %v, want ErrDrainOver at once", err, took)
		}

		done := make(chan struct{})
		go func() {
			time.Sleep(time.Second)
			close(done)
		}()
		if err := lifecycle.DrainUntil(done, slog.New(slog.DiscardHandler), "pkg", names{"orders/0"}, drain, time.Now().Add(drain)); err != nil {
			t.Errorf("DrainUntil = %v with done closed, want nil", err)
		}
	})
}

// WaitLost reports a handler running on a lost partition after 2s, then
// every 5s, and its end; nothing for one that returns before the first
// report.
func TestWaitLostReportsAHandlerRunningOn(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var buf bytes.Buffer
		log := slog.New(slog.NewTextHandler(&buf, nil))
		done := make(chan struct{})
		go func() { time.Sleep(8 * time.Second); close(done) }()
		lifecycle.WaitLost(done, log, "orders/3")
		out := buf.String()
		if n := strings.Count(out, `level=WARN msg="redeliver: a handler still runs on a partition this consumer lost to another owner`); n != 2 || !strings.Contains(out, "partitions=orders/3 waited=7s") {
			t.Errorf("%d reports, want 2 naming orders/3 (at 2s and 7s):\n%s", n, out)
		}
		if !strings.Contains(out, `level=INFO msg="redeliver: the lost partition's handler has returned" partitions=orders/3 waited=8s`) {
			t.Errorf("no Info line with how long the handler ran on:\n%s", out)
		}

		buf.Reset()
		quick := make(chan struct{})
		go func() { time.Sleep(time.Second); close(quick) }()
		lifecycle.WaitLost(quick, log, "orders/3")
		if buf.Len() != 0 {
			t.Errorf("a handler that returned within 2s was reported:\n%s", buf.String())
		}
	})
}
