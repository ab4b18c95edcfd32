package streamtest_test

import (
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/redeliver-go/redeliver/stream/streamtest"
)

func TestShareHistoryCheck(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	ev := func(k streamtest.ShareKind, member string, off int64, mods ...func(*streamtest.ShareEvent)) streamtest.ShareEvent {
		e := streamtest.ShareEvent{Kind: k, Member: member, Topic: "t", Partition: 0, Offset: off}
		for _, m := range mods {
			m(&e)
		}
		return e
	}
	count := func(n int) func(*streamtest.ShareEvent) {
		return func(e *streamtest.ShareEvent) { e.DeliveryCount = n }
	}
	ok := func(e *streamtest.ShareEvent) { e.OK = true }
	start := func(d time.Duration) func(*streamtest.ShareEvent) {
		return func(e *streamtest.ShareEvent) { e.Start = t0.Add(d) }
	}
	due := func(d time.Duration) func(*streamtest.ShareEvent) {
		return func(e *streamtest.ShareEvent) { e.At = t0.Add(d) }
	}
	A, H, R, D := streamtest.ShareAcquired, streamtest.ShareHandled, streamtest.ShareRetryAt, streamtest.ShareActionDone
	Acc, Rej, Rel, X := streamtest.ShareAccepted, streamtest.ShareRejected, streamtest.ShareReleased, streamtest.ShareCrashed

	for _, tc := range []struct {
		name   string
		events []streamtest.ShareEvent
		want   string // a violation containing this; "" for a good history
	}{
		{"good: two members, a retry held, a crash, a dead letter", []streamtest.ShareEvent{
			ev(A, "a", 0, count(1)), ev(A, "b", 1, count(1)), ev(A, "b", 2, count(1)),
			ev(H, "a", 0, start(0), ok), ev(Acc, "a", 0),
			ev(H, "b", 1, start(0)), ev(R, "b", 1, due(time.Second)),
			ev(H, "b", 2, start(0)), ev(D, "b", 2), ev(Rej, "b", 2),
			ev(H, "b", 1, start(time.Second), ok), ev(Acc, "b", 1),
			ev(A, "a", 3, count(1)), ev(H, "a", 3, start(0)), ev(X, "a", 0),
			// a was handed offset 3 once more before it died, unreported:
			ev(A, "b", 3, count(3)), ev(H, "b", 3, start(2*time.Second), ok), ev(Acc, "b", 3),
		}, ""},
		{"lost record", []streamtest.ShareEvent{
			ev(A, "a", 0, count(1)), ev(H, "a", 0, ok), ev(Acc, "a", 0),
		}, "record 1 lost"},
		{"accepted without success", []streamtest.ShareEvent{
			ev(A, "a", 0, count(1)), ev(H, "a", 0), ev(Acc, "a", 0), ev(A, "a", 1, count(1)), ev(H, "a", 1, ok), ev(Acc, "a", 1),
		}, "accepted without a successful handler call"},
		{"accepted unhandled", []streamtest.ShareEvent{
			ev(A, "a", 0, count(1)), ev(Acc, "a", 0), ev(A, "a", 1, count(1)), ev(H, "a", 1, ok), ev(Acc, "a", 1),
		}, "accepted without a successful handler call"},
		{"success in an earlier acquisition does not count", []streamtest.ShareEvent{
			ev(A, "a", 0, count(1)), ev(H, "a", 0, ok), ev(A, "b", 0, count(2)), ev(Acc, "b", 0),
			ev(A, "a", 1, count(1)), ev(H, "a", 1, ok), ev(Acc, "a", 1),
		}, "accepted without a successful handler call"},
		{"rejected before the action succeeded", []streamtest.ShareEvent{
			ev(A, "a", 0, count(1)), ev(H, "a", 0), ev(Rej, "a", 0), ev(A, "a", 1, count(1)), ev(H, "a", 1, ok), ev(Acc, "a", 1),
		}, "rejected before its exhaustion action succeeded"},
		{"ack after the lock moved to another member", []streamtest.ShareEvent{
			ev(A, "a", 0, count(1)), ev(H, "a", 0, ok), ev(A, "b", 0, count(2)), ev(Acc, "a", 0), ev(H, "b", 0, ok), ev(Acc, "b", 0),
			ev(A, "a", 1, count(1)), ev(H, "a", 1, ok), ev(Acc, "a", 1),
		}, "held by b"},
		{"handled after a crash", []streamtest.ShareEvent{
			ev(A, "a", 0, count(1)), ev(X, "a", 0), ev(H, "a", 0, ok),
			ev(A, "b", 0, count(2)), ev(H, "b", 0, ok), ev(Acc, "b", 0),
			ev(A, "b", 1, count(1)), ev(H, "b", 1, ok), ev(Acc, "b", 1),
		}, "after the member crashed"},
		{"retry before its due time", []streamtest.ShareEvent{
			ev(A, "a", 0, count(1)), ev(H, "a", 0, start(0)), ev(R, "a", 0, due(time.Second)), ev(H, "a", 0, start(900*time.Millisecond), ok), ev(Acc, "a", 0),
			ev(A, "a", 1, count(1)), ev(H, "a", 1, ok), ev(Acc, "a", 1),
		}, "before it was due"},
		{"delivery count skipped", []streamtest.ShareEvent{
			ev(A, "a", 0, count(1)), ev(Rel, "a", 0), ev(A, "b", 0, count(3)), ev(H, "b", 0, ok), ev(Acc, "b", 0),
			ev(A, "a", 1, count(1)), ev(H, "a", 1, ok), ev(Acc, "a", 1),
		}, "delivery count 3, want 2"},
		{"delivery count going back", []streamtest.ShareEvent{
			ev(A, "a", 0, count(1)), ev(X, "a", 0), ev(A, "b", 0, count(1)), ev(H, "b", 0, ok), ev(Acc, "b", 0),
			ev(A, "b", 1, count(1)), ev(H, "b", 1, ok), ev(Acc, "b", 1),
		}, "delivery count 1 again, want more than 1"},
		{"a late report of an earlier hand-out holds nothing", []streamtest.ShareEvent{
			ev(A, "b", 0, count(2)), ev(A, "a", 0, count(1)), ev(H, "a", 0, ok), ev(Acc, "a", 0),
			ev(A, "b", 1, count(1)), ev(H, "b", 1, ok), ev(Acc, "b", 1),
		}, "held by b"},
		{"released record acknowledged", []streamtest.ShareEvent{
			ev(A, "a", 0, count(1)), ev(H, "a", 0, ok), ev(Rel, "a", 0), ev(Acc, "a", 0),
			ev(A, "a", 1, count(1)), ev(H, "a", 1, ok), ev(Acc, "a", 1),
		}, "held by nobody"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var h streamtest.ShareHistory
			for _, e := range tc.events {
				h.Add(e)
			}
			r := h.Check(map[streamtest.TopicPartition]int64{{Topic: "t", Partition: 0}: 2 + map[bool]int64{true: 2}[tc.want == ""]})
			if tc.want == "" {
				if len(r.Violations) > 0 {
					t.Fatalf("good history rejected: %v", r.Violations)
				}
				if r.Lost != 0 || r.MaxDeliveries != 2 || r.Deliveries != 6 {
					t.Fatalf("report %+v, want 0 lost, 6 deliveries, at most 2 per record", r)
				}
				return
			}
			for _, v := range r.Violations {
				if strings.Contains(v, tc.want) {
					return
				}
			}
			t.Fatalf("violations %v, want one containing %q", r.Violations, tc.want)
		})
	}
}

// The chaos run's share history (issue 51): member a0 held a poison
// record, gave it up and was dead-lettering it when the partition's
// leader died; the new leader, which keeps no acquisition across a
// leader change, handed the record to a1 with the same delivery count; a0's
// dead letter was then written and its REJECT refused. With
// LeaderChanges that history passes, the recount and a0's late events
// counted apart; everything around it that is not that case is still a
// violation.
func TestShareHistoryLeaderChanges(t *testing.T) {
	ev := func(k streamtest.ShareKind, member string, off int64, mods ...func(*streamtest.ShareEvent)) streamtest.ShareEvent {
		e := streamtest.ShareEvent{Kind: k, Member: member, Topic: "t", Partition: 0, Offset: off}
		for _, m := range mods {
			m(&e)
		}
		return e
	}
	count := func(n int) func(*streamtest.ShareEvent) {
		return func(e *streamtest.ShareEvent) { e.DeliveryCount = n }
	}
	ok := func(e *streamtest.ShareEvent) { e.OK = true }
	A, H, D := streamtest.ShareAcquired, streamtest.ShareHandled, streamtest.ShareActionDone
	Acc, Rej, Rel := streamtest.ShareAccepted, streamtest.ShareRejected, streamtest.ShareReleased
	// The chaos run's record 0, and record 1 handled plainly.
	chaos := []streamtest.ShareEvent{
		ev(A, "a0", 0, count(1)), ev(H, "a0", 0), ev(H, "a0", 0),
		ev(A, "a1", 0, count(1)),         // the new leader's recount
		ev(D, "a0", 0), ev(Rej, "a0", 0), // a0 does not know yet
		ev(H, "a1", 0), ev(H, "a1", 0), ev(D, "a1", 0), ev(Rej, "a1", 0),
		ev(A, "b0", 1, count(1)), ev(H, "b0", 1, ok), ev(Acc, "b0", 1),
	}
	with := func(events ...streamtest.ShareEvent) []streamtest.ShareEvent {
		return append(slices.Clone(chaos), events...)
	}
	check := func(leaderChanges bool, events []streamtest.ShareEvent) streamtest.ShareReport {
		h := streamtest.ShareHistory{LeaderChanges: leaderChanges}
		for _, e := range events {
			h.Add(e)
		}
		return h.Check(map[streamtest.TopicPartition]int64{{Topic: "t", Partition: 0}: 2})
	}

	r := check(true, chaos)
	if len(r.Violations) > 0 {
		t.Fatalf("the chaos run's history rejected under LeaderChanges: %v", r.Violations)
	}
	if len(r.Recounts) != 1 || len(r.Displaced) != 2 || r.Deliveries != 5 || r.MaxDeliveries != 4 {
		t.Fatalf("report %+v, want 1 recount, 2 displaced events (a0's action and REJECT), 5 deliveries, at most 4 of one record", r)
	}
	if r := check(false, chaos); !has(r.Violations, "delivery count 1 again") || !has(r.Violations, "a0 action done t/0@0: the record is held by a1") {
		t.Fatalf("without LeaderChanges the recount and a0's late action must be violations: %v", r.Violations)
	}

	for _, tc := range []struct {
		name   string
		events []streamtest.ShareEvent
		want   string
	}{
		{"a member that never held the record", with(ev(Rej, "b0", 0)), "b0 rejected t/0@0: the record is held by nobody"},
		{"the displaced member after it settled its acquisition", with(ev(Acc, "a0", 0)), "a0 accepted t/0@0: the record is held by nobody"},
		{"the displaced member released, then acts", []streamtest.ShareEvent{
			ev(A, "a0", 0, count(1)), ev(H, "a0", 0), ev(A, "a1", 0, count(1)), ev(Rel, "a0", 0), ev(H, "a0", 0),
			ev(H, "a1", 0, ok), ev(Acc, "a1", 0), ev(A, "b0", 1, count(1)), ev(H, "b0", 1, ok), ev(Acc, "b0", 1),
		}, "a0 handled t/0@0: the record is held by a1"},
		{"an old holder after a plain hand-out (its lock ran out)", []streamtest.ShareEvent{
			ev(A, "a0", 0, count(1)), ev(H, "a0", 0), ev(A, "a1", 0, count(2)), ev(D, "a0", 0), ev(Rej, "a0", 0),
			ev(H, "a1", 0, ok), ev(Acc, "a1", 0), ev(A, "b0", 1, count(1)), ev(H, "b0", 1, ok), ev(Acc, "b0", 1),
		}, "a0 action done t/0@0: the record is held by a1"},
		{"settled only by the displaced member", []streamtest.ShareEvent{
			ev(A, "a0", 0, count(1)), ev(H, "a0", 0), ev(A, "a1", 0, count(1)), ev(D, "a0", 0), ev(Rej, "a0", 0),
			ev(A, "b0", 1, count(1)), ev(H, "b0", 1, ok), ev(Acc, "b0", 1),
		}, "record 0 lost"},
		{"the new holder's own rules still hold", []streamtest.ShareEvent{
			ev(A, "a0", 0, count(1)), ev(H, "a0", 0), ev(A, "a1", 0, count(1)), ev(D, "a0", 0), ev(Rej, "a1", 0),
			ev(A, "b0", 1, count(1)), ev(H, "b0", 1, ok), ev(Acc, "b0", 1),
		}, "a1 rejected t/0@0: rejected before its exhaustion action succeeded"},
		{"the displaced member's success does not let the new holder accept", []streamtest.ShareEvent{
			ev(A, "a0", 0, count(1)), ev(A, "a1", 0, count(1)), ev(H, "a0", 0, ok), ev(Acc, "a1", 0),
			ev(A, "b0", 1, count(1)), ev(H, "b0", 1, ok), ev(Acc, "b0", 1),
		}, "a1 accepted t/0@0: accepted without a successful handler call"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := check(true, tc.events)
			if !has(r.Violations, tc.want) {
				t.Fatalf("violations %v, want one containing %q", r.Violations, tc.want)
			}
		})
	}
}

func has(vs []string, s string) bool {
	for _, v := range vs {
		if strings.Contains(v, s) {
			return true
		}
	}
	return false
}
