package lifecycle

import (
	"log/slog"
	"strings"
	"sync/atomic"
	"time"
)

// The report of a rebalance held up by handlers: a first Warn line once a
// revocation has waited 2s for its partitions' workers, then one every 5s
// while it still waits. Atomic, so that a test can shorten them
// (SetRevokeReport) while a consumer of an earlier test still waits.
var revokeFirst, revokeEvery atomic.Int64

func init() { SetRevokeReport(2*time.Second, 5*time.Second) }

// SetRevokeReport sets when WaitRevoked reports (the first report, then
// the interval), for tests, and returns what restores the timings before.
func SetRevokeReport(first, every time.Duration) (restore func()) {
	f, e := revokeFirst.Swap(int64(first)), revokeEvery.Swap(int64(every))
	return func() { revokeFirst.Store(f); revokeEvery.Store(e) }
}

// WaitRevoked waits until done is closed, or until stop is (nil for
// never), for the workers of partitions a rebalance takes from the
// consumer. A handler that ignores the end of its context holds the
// rebalance, and with it the whole group: while it waits, WaitRevoked logs
// at Warn, after a first 2s and then every 5s (SetRevokeReport), the
// partitions whose handlers have not returned (running), and what it
// costs: past the group's rebalance timeout the broker takes the member
// out of the group, and another member may deliver those partitions'
// records while the handlers still run. Once done is closed after such a
// report, it logs at Info how long the rebalance waited. No report is made
// while quiet (when not nil) returns true: a stopping consumer's wait is
// reported by Drain.
func WaitRevoked(done, stop <-chan struct{}, log *slog.Logger, running Named, quiet func() bool) {
	if over, waited := reportHeld(done, stop, func(waited time.Duration) bool {
		if quiet != nil && quiet() {
			return false
		}
		if names := running.Names(); len(names) == 0 {
			log.Warn("redeliver: a rebalance waits for the revoked partitions' last commits (every handler has returned)",
				"waited", waited)
		} else {
			log.Warn("redeliver: a rebalance waits for partitions whose handlers have not returned since their context ended: "+
				"the group's rebalance waits for this member, and past its rebalance timeout the broker takes the member out of the group "+
				"and another member may deliver these partitions' records while the handlers still run; make the handler return when its context is done",
				"partitions", strings.Join(names, ","), "waited", waited)
		}
		return true
	}); over {
		log.Info("redeliver: the rebalance's wait is over", "waited", waited)
	}
}

// reportHeld waits until done or stop is closed, calling report with the
// rebalance report's timings (SetRevokeReport); report says whether it
// logged. It returns whether done was closed after a report was logged
// (the wait's end is then worth a line), and how long it waited.
func reportHeld(done, stop <-chan struct{}, report func(waited time.Duration) bool) (over bool, waited time.Duration) {
	select {
	case <-done:
		return false, 0
	default:
	}
	start := time.Now()
	reported := false
	closed := reportWhile(done, stop, time.Duration(revokeFirst.Load()), time.Duration(revokeEvery.Load()), func(waited time.Duration) {
		if report(waited) {
			reported = true
		}
	})
	return closed && reported, time.Since(start).Round(time.Millisecond)
}

// Only is the names of running that are among want ("orders/0"): the
// workers of the partitions a revocation takes, among all running.
func Only(running Named, want map[string]bool) Named {
	return namesFunc(func() []string {
		var out []string
		for _, n := range running.Names() {
			if want[n] {
				out = append(out, n)
			}
		}
		return out
	})
}

type namesFunc func() []string

func (f namesFunc) Names() []string { return f() }

// WaitLost reports, until done is closed, a handler still running on a
// partition the consumer has lost to another owner (Event Hubs: its
// ownership taken), whose claim has ended: no group waits for it there,
// but the new owner may deliver the same records while it runs. After a
// first 2s and then every 5s (SetRevokeReport) it logs at Warn, naming
// partition; once done is closed after such a report, it logs at Info how
// long the handler ran on.
func WaitLost(done <-chan struct{}, log *slog.Logger, partition string) {
	if over, waited := reportHeld(done, nil, func(waited time.Duration) bool {
		log.Warn("redeliver: a handler still runs on a partition this consumer lost to another owner: "+
			"the new owner may deliver the same records meanwhile; make the handler return when its context is done",
			"partitions", partition, "waited", waited)
		return true
	}); over {
		log.Info("redeliver: the lost partition's handler has returned", "partitions", partition, "waited", waited)
	}
}
