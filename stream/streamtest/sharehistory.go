package streamtest

import (
	"fmt"
	"slices"
	"sync"
	"time"
)

// ShareKind says what a [ShareEvent] records.
type ShareKind uint8

// The kinds of share-group history events.
const (
	// ShareAcquired: the broker handed the record to the member (a poll), with
	// its delivery count.
	ShareAcquired ShareKind = iota + 1
	// ShareHandled: a handler call of the record returned. OK is whether it
	// succeeded (nil, or a RetryResult whose retries are spent).
	ShareHandled
	// ShareRetryAt: the member holds the record for a retry due at At.
	ShareRetryAt
	// ShareActionDone: the record's exhaustion action succeeded.
	ShareActionDone
	// ShareAccepted, ShareRejected, ShareReleased: the member's final acknowledgement.
	ShareAccepted
	ShareRejected
	ShareReleased
	// ShareCrashed: the member died (SIGKILL): it acknowledges nothing more.
	ShareCrashed
)

func (k ShareKind) String() string {
	switch k {
	case ShareAcquired:
		return "acquired"
	case ShareHandled:
		return "handled"
	case ShareRetryAt:
		return "retry at"
	case ShareActionDone:
		return "action done"
	case ShareAccepted:
		return "accepted"
	case ShareRejected:
		return "rejected"
	case ShareReleased:
		return "released"
	case ShareCrashed:
		return "crashed"
	}
	return "unknown"
}

// ShareEvent is one entry of a [ShareHistory]: something that happened to
// one record at one member.
type ShareEvent struct {
	Kind          ShareKind
	Member        string
	Topic         string
	Partition     int32
	Offset        int64
	DeliveryCount int       // ShareAcquired: the broker's count
	OK            bool      // ShareHandled: the handler succeeded
	Start         time.Time // ShareHandled: when the handler was called
	At            time.Time // ShareRetryAt: when the retry is due
}

// ShareHistory records, in one global order, what the members of a share
// group do with each record, and [ShareHistory.Check] verifies the share
// contract over it. Unlike [History], several members may read a
// partition at once and records are acknowledged one by one. It is safe for
// concurrent use.
type ShareHistory struct {
	// LeaderChanges says that the partitions' leaders may change during
	// the history (a cluster with broker faults). A share-partition
	// leader keeps a record's acquisition in memory only: it persists
	// the delivery count when the record is acknowledged, released or
	// renewed, not when it is handed out. So a
	// leader that takes over hands an acquired record out again at once,
	// with the count last persisted, while the member that held it knows
	// nothing of it yet (its lock has not run out as far as it can tell).
	// With LeaderChanges, [ShareHistory.Check] reports such a hand-out
	// (the same delivery count again) in [ShareReport.Recounts], and what
	// the member it was taken from does with the record afterwards, in
	// that acquisition, in [ShareReport.Displaced]: neither is then a
	// violation, and neither settles the record (the broker refuses that
	// member's acknowledgements; its exhaustion action may have been
	// done, a dead letter written twice). Anything else stays a
	// violation. Without it, both are violations.
	LeaderChanges bool

	mu     sync.Mutex
	events []ShareEvent
}

// Add records e.
func (h *ShareHistory) Add(e ShareEvent) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.events = append(h.events, e)
}

// Events returns a copy of the events so far.
func (h *ShareHistory) Events() []ShareEvent {
	h.mu.Lock()
	defer h.mu.Unlock()
	return slices.Clone(h.events)
}

// ShareReport is the result of [ShareHistory.Check].
type ShareReport struct {
	Records       int64 // records in the checked partitions
	Deliveries    int   // handler deliveries of records
	Lost          int64 // records with no accept or reject
	MaxDeliveries int   // the most handler deliveries of one record
	// Duplicates counts records delivered again after a member accepted
	// or rejected them: the acknowledgement did not reach the broker in
	// time (at least once).
	Duplicates int
	// Recounts and Displaced are reported instead of violations when
	// [ShareHistory.LeaderChanges] is set: a record a new leader handed
	// out again with the same delivery count, and an event of the member
	// it was taken from, in that acquisition, after it.
	Recounts   []string
	Displaced  []string
	Violations []string
}

// Check verifies the history for partitions whose records run from offset
// 0 to ends[tp] (exclusive):
//
//   - no record lost: each one was accepted or rejected by a member;
//   - a member acknowledges (accepts, rejects, releases) and handles only
//     records it holds: acquired by it, not acquired by another member
//     since, and not after it crashed;
//   - a record is accepted only after a handler call of it by the same
//     member, in the same acquisition, succeeded;
//   - a record is rejected only after its exhaustion action succeeded, at
//     the same member in the same acquisition;
//   - a held retry is not delivered before its due time;
//   - each acquisition of a record has the next delivery count (the
//     broker's count grows by one per hand-out; a record comes back with
//     its count after a crash, which may have grown by more than one if
//     the crashed member was handed it in a fetch it never reported).
//
// With [ShareHistory.LeaderChanges], a record handed out again with the
// same count (by a new leader) is a recount, and the member it was taken
// from may go on with its acquisition until it settles it (its accept,
// reject or release, which the broker refuses, settle nothing) or acquires
// the record again: those events are counted apart, not checked. They
// must come from that member and that acquisition: a member that never
// held the record, or one whose lock ran out (the next hand-out counts
// one more), is still in violation, and a record settled only by a
// displaced member is lost.
func (h *ShareHistory) Check(ends map[TopicPartition]int64) ShareReport {
	type key struct {
		tp  TopicPartition
		off int64
	}
	type rec struct {
		holder  string // the member holding the current acquisition
		count   int    // the broker's delivery count of the current acquisition
		crashes int    // crashes seen when it was acquired
		ok      bool   // a handler call succeeded in this acquisition
		acted   bool   // the action succeeded in this acquisition
		due     time.Time
		final   bool // accepted or rejected
		handled int
		// displaced: members whose acquisition a new leader forgot
		// (a recount), until they settle it or acquire the record again
		displaced []string
	}
	recs := map[key]*rec{}
	crashed := map[string]bool{}
	crashes := 0
	var r ShareReport
	bad := func(format string, args ...any) { r.Violations = append(r.Violations, fmt.Sprintf(format, args...)) }
	for i, e := range h.Events() {
		if e.Kind == ShareCrashed {
			crashed[e.Member] = true
			crashes++
			continue
		}
		tp := TopicPartition{e.Topic, e.Partition}
		end, ok := ends[tp]
		if !ok {
			continue
		}
		where := fmt.Sprintf("event %d: %s %s %s/%d@%d", i, e.Member, e.Kind, e.Topic, e.Partition, e.Offset)
		if e.Offset < 0 || e.Offset >= end {
			bad("%s: offset out of the partition's range [0, %d)", where, end)
			continue
		}
		k := key{tp, e.Offset}
		x := recs[k]
		if x == nil {
			x = &rec{}
			recs[k] = x
		}
		if crashed[e.Member] {
			bad("%s: after the member crashed", where)
			continue
		}
		if e.Kind == ShareAcquired {
			// A member that crashed may have had the record handed to it
			// in a fetch it never reported: after a crash the count may
			// grow by more than one, never otherwise.
			switch {
			case e.DeliveryCount < x.count && x.count > 0:
				// Reported late: members record their events on their
				// own goroutines, so a member that stalled past the lock
				// may report a hand-out after the broker gave the record
				// to another. That member holds nothing: its later
				// acknowledgements are violations (held by another).
				continue
			case e.DeliveryCount == x.count:
				msg := fmt.Sprintf("%s: delivery count %d again, want more than %d", where, e.DeliveryCount, x.count)
				if !h.LeaderChanges {
					bad("%s", msg)
					break
				}
				r.Recounts = append(r.Recounts, msg)
				if x.holder != "" && x.holder != e.Member && !slices.Contains(x.displaced, x.holder) {
					x.displaced = append(x.displaced, x.holder)
				}
			case e.DeliveryCount != x.count+1 && crashes == x.crashes:
				bad("%s: delivery count %d, want %d (the broker counts each hand-out once)", where, e.DeliveryCount, x.count+1)
			}
			x.crashes = crashes
			x.displaced = slices.DeleteFunc(x.displaced, func(m string) bool { return m == e.Member })
			if x.final {
				r.Duplicates++
			}
			x.holder, x.count, x.ok, x.acted, x.due = e.Member, e.DeliveryCount, false, false, time.Time{}
			continue
		}
		if x.holder != e.Member && slices.Contains(x.displaced, e.Member) {
			r.Displaced = append(r.Displaced, fmt.Sprintf("%s: the record went to %s with a new leader's recount", where, x.holder))
			switch e.Kind {
			case ShareHandled:
				r.Deliveries++
				x.handled++
			case ShareAccepted, ShareRejected, ShareReleased:
				x.displaced = slices.DeleteFunc(x.displaced, func(m string) bool { return m == e.Member })
			}
			continue
		}
		if x.holder != e.Member {
			holder := x.holder
			if holder == "" {
				holder = "nobody"
			}
			bad("%s: the record is held by %s", where, holder)
			continue
		}
		switch e.Kind {
		case ShareHandled:
			r.Deliveries++
			x.handled++
			if !x.due.IsZero() && e.Start.Before(x.due) {
				bad("%s: retry delivered at %v, %v before it was due", where, e.Start.Format(time.RFC3339Nano), x.due.Sub(e.Start))
			}
			x.due = time.Time{}
			x.ok = x.ok || e.OK
		case ShareRetryAt:
			x.due = e.At
		case ShareActionDone:
			x.acted = true
		case ShareAccepted:
			if !x.ok {
				bad("%s: accepted without a successful handler call in this acquisition", where)
			}
			x.final, x.holder = true, ""
		case ShareRejected:
			if !x.acted {
				bad("%s: rejected before its exhaustion action succeeded", where)
			}
			x.final, x.holder = true, ""
		case ShareReleased:
			x.holder = ""
		}
	}
	for tp, end := range ends {
		r.Records += end
		for o := range end {
			x := recs[key{tp, o}]
			if x != nil {
				r.MaxDeliveries = max(r.MaxDeliveries, x.handled)
			}
			if x == nil || !x.final {
				r.Lost++
				if r.Lost <= 10 {
					bad("%s/%d: record %d lost: never accepted nor rejected", tp.Topic, tp.Partition, o)
				}
			}
		}
	}
	return r
}
