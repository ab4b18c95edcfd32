package streamtest_test

import (
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
