package conformance

import (
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/redeliver-go/redeliver/stream"
	"github.com/redeliver-go/redeliver/stream/streamtest"
)

// event is one delivery or checkpoint seen by a member's hooks.
//
// Times come from where the event happened, never from when the recorder
// got it: a delivery carries the handler's start and return as its worker
// read them from the processor's clock (DeliveredEvent.Start and
// Duration), so that a gap between two deliveries is the time the engine
// waited, not that plus the scheduling delays of the hooks. Other events
// are stamped by the hook itself, which the worker calls right after the
// event.
type event struct {
	member    string
	partition int32
	at        time.Time // a delivery: when the handler was called; otherwise: when the hook ran
	end       time.Time // a delivery: when the handler returned (the failure a backoff is measured from)

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
	topic  string
	rec    streamtest.History // the same events, for the checker
	// keys, in key ordering, returns the keys of a partition's records
	// (env.keys): check runs History.CheckKeys then.
	keys func(partition int32) []string
}

func (h *history) add(e event) {
	if e.at.IsZero() {
		e.at = time.Now()
	}
	h.mu.Lock()
	h.events = append(h.events, e)
	h.mu.Unlock()
}

// hooks returns hooks that record into h for member, then call next's.
func (h *history) hooks(member string, next stream.Hooks) stream.Hooks {
	own := stream.Hooks{
		Delivered: func(e stream.DeliveredEvent) {
			h.add(event{member: member, partition: e.Partition, delivery: true, first: e.FirstOffset, last: e.LastOffset,
				attempt: e.Attempt, outcome: e.Outcome, at: e.Start, end: e.Start.Add(e.Duration)})
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
	return stream.MergeHooks(own, h.rec.Hooks(member), next)
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

// check verifies the contract over the whole history with
// [streamtest.History.Check], for the case's topic whose partitions hold
// end[partition] records: no loss, every delivery at the checkpoint (order,
// no gaps, rewinds only to the batch being retried), no checkpoint ahead of
// handled records or going back, none by a consumer that no longer owns the
// partition, and each partition checkpointed to its end.
func (h *history) check(t *testing.T, end map[int32]int64) {
	t.Helper()
	ends := make(map[streamtest.TopicPartition]int64, len(end))
	for p, n := range end {
		ends[streamtest.TopicPartition{Topic: h.topic, Partition: p}] = n
	}
	// The broker can have a commit before its Checkpointed hook has run:
	// give the history a moment to catch up with what the case waited for.
	for deadline := time.Now().Add(wait); !h.reached(ends) && time.Now().Before(deadline); {
		time.Sleep(5 * time.Millisecond)
	}
	var r streamtest.Report
	if h.keys != nil {
		keys := map[streamtest.TopicPartition][]string{}
		for tp, end := range ends {
			ks := h.keys(tp.Partition)
			if int64(len(ks)) != end {
				t.Fatalf("%v: %d keys noted for %d records", tp, len(ks), end)
			}
			keys[tp] = ks
		}
		r = h.rec.CheckKeys(keys)
	} else {
		r = h.rec.Check(ends)
	}
	for _, v := range r.Violations {
		t.Error(v)
	}
	if t.Failed() {
		t.Log(h.dump())
	}
}

// reached reports whether the history has each partition checkpointed to
// its end.
func (h *history) reached(ends map[streamtest.TopicPartition]int64) bool {
	at := map[streamtest.TopicPartition]int64{}
	for _, ev := range h.rec.Events() {
		if ev.Kind == streamtest.Committed && ev.Metadata == "" {
			tp := streamtest.TopicPartition{Topic: ev.Topic, Partition: ev.Partition}
			at[tp] = max(at[tp], ev.Offset)
		}
	}
	for tp, end := range ends {
		if at[tp] < end {
			return false
		}
	}
	return true
}

func (h *history) dump() string {
	s := "history:\n"
	for _, e := range h.all() {
		switch {
		case e.delivery:
			s += fmt.Sprintf("  %s %s p%d deliver %d-%d retry %d: %s\n", e.at.Format("15:04:05.000"), e.member, e.partition, e.first, e.last, e.attempt.Retries, e.outcome)
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
