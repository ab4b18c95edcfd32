package conformance

import (
	"fmt"
	"sort"
	"sync"
	"testing"
	"time"

	"github.com/redeliver-go/redeliver/stream"
	"github.com/redeliver-go/redeliver/stream/streamtest"
)

// event is one delivery or checkpoint seen by a member's hooks.
type event struct {
	member    string
	partition int32
	at        time.Time

	// A delivery.
	delivery bool
	first    int64
	last     int64
	attempt  stream.Attempt
	outcome  stream.Outcome

	// A checkpoint.
	next     int64
	metadata string

	exhausted bool // an Exhausted event for first-last
	abandoned bool // an Abandoned event for first-last
}

// history records what every member's Processor did, in order.
type history struct {
	mu     sync.Mutex
	events []event
}

func (h *history) add(e event) {
	e.at = time.Now()
	h.mu.Lock()
	h.events = append(h.events, e)
	h.mu.Unlock()
}

// hooks returns hooks that record into h for member, then call next's.
func (h *history) hooks(member string, next stream.Hooks) stream.Hooks {
	own := stream.Hooks{
		Delivered: func(e stream.DeliveredEvent) {
			h.add(event{member: member, partition: e.Partition, delivery: true, first: e.FirstOffset, last: e.LastOffset,
				attempt: e.Attempt, outcome: e.Outcome})
		},
		Exhausted: func(e stream.ExhaustedEvent) {
			h.add(event{member: member, partition: e.Partition, exhausted: true, first: e.FirstOffset, last: e.LastOffset})
		},
		Checkpointed: func(e stream.CheckpointEvent) {
			h.add(event{member: member, partition: e.Partition, next: e.Next, metadata: e.Metadata})
		},
		Abandoned: func(e stream.AbandonedEvent) {
			h.add(event{member: member, partition: e.Partition, abandoned: true, first: e.FirstOffset, last: e.LastOffset})
		},
	}
	return streamtest.MergeHooks(own, next)
}

func (h *history) all() []event {
	h.mu.Lock()
	defer h.mu.Unlock()
	return append([]event(nil), h.events...)
}

// deliveries returns the deliveries of a partition, in order.
func (h *history) deliveries(partition int32) []event {
	var out []event
	for _, e := range h.all() {
		if e.delivery && e.partition == partition {
			out = append(out, e)
		}
	}
	return out
}

// count returns how many events of partition match f.
func (h *history) count(f func(event) bool) int {
	n := 0
	for _, e := range h.all() {
		if f(e) {
			n++
		}
	}
	return n
}

// check checks the invariants of every case, for partitions holding
// end[partition] records:
//
//   - no loss: every record reached a handler in a delivery that succeeded,
//     asked for a retry, or was given up;
//   - order: a member's deliveries of a partition each repeat the batch
//     before (a retry), start right after it, or rewind to an offset that
//     was checkpointed (a new assignment starts at the committed offset);
//   - commits never ahead: a checkpoint is never beyond the last record the
//     member delivered on that partition.
func (h *history) check(t *testing.T, end map[int32]int64) {
	t.Helper()
	events := h.all()
	type key struct {
		member    string
		partition int32
	}
	type batch struct{ first, last int64 }
	cur := map[key]batch{}
	checkpointed := map[int32]map[int64]bool{}
	handled := map[int32][]batch{}
	for i, e := range events {
		k := key{e.member, e.partition}
		switch {
		case e.delivery:
			b, seen := cur[k]
			switch {
			case !seen:
			case e.first == b.first && e.last == b.last:
			case e.first == b.last+1:
			case e.first == 0 || checkpointed[e.partition][e.first]: // a new assignment, at the committed offset
			default:
				t.Errorf("event %d: %s delivered %d/%d-%d after batch %d-%d: out of order", i, e.member, e.partition, e.first, e.last, b.first, b.last)
			}
			cur[k] = batch{e.first, e.last}
			if e.outcome == stream.Succeeded || e.outcome == stream.RetryRequested {
				handled[e.partition] = append(handled[e.partition], batch{e.first, e.last})
			}
		case e.exhausted:
			handled[e.partition] = append(handled[e.partition], batch{e.first, e.last})
		case e.abandoned:
		default: // a checkpoint
			if b, seen := cur[k]; !seen || e.next > b.last+1 {
				t.Errorf("event %d: %s checkpointed %d at %d beyond its last delivered record (batch %v, seen %t)", i, e.member, e.partition, e.next, b, seen)
			}
			if checkpointed[e.partition] == nil {
				checkpointed[e.partition] = map[int64]bool{}
			}
			checkpointed[e.partition][e.next] = true
		}
	}
	for p, n := range end {
		bs := handled[p]
		sort.Slice(bs, func(i, j int) bool { return bs[i].first < bs[j].first })
		var covered int64
		for _, b := range bs {
			if b.first > covered {
				break
			}
			covered = max(covered, b.last+1)
		}
		if covered < n {
			t.Errorf("partition %d: records %d-%d never handled: lost", p, covered, n-1)
		}
	}
	if t.Failed() {
		t.Log(h.dump())
	}
}

func (h *history) dump() string {
	s := "history:\n"
	for _, e := range h.all() {
		switch {
		case e.delivery:
			s += fmt.Sprintf("  %s %s p%d deliver %d-%d retry %d: %s\n", e.at.Format("15:04:05.000"), e.member, e.partition, e.first, e.last, e.attempt.Retry, e.outcome)
		case e.exhausted:
			s += fmt.Sprintf("  %s %s p%d exhausted %d-%d\n", e.at.Format("15:04:05.000"), e.member, e.partition, e.first, e.last)
		case e.abandoned:
			s += fmt.Sprintf("  %s %s p%d abandoned %d-%d\n", e.at.Format("15:04:05.000"), e.member, e.partition, e.first, e.last)
		default:
			s += fmt.Sprintf("  %s %s p%d checkpoint %d %q\n", e.at.Format("15:04:05.000"), e.member, e.partition, e.next, e.metadata)
		}
	}
	return s
}
