package streamtest

import (
	"errors"
	"fmt"
	"slices"
	"sync"

	"github.com/redeliver-go/redeliver/stream"
)

// EventKind says what a history [Event] records.
type EventKind uint8

// The kinds of history events.
const (
	Claimed EventKind = iota + 1
	Delivered
	GivenUp
	Committed
	Released
)

func (k EventKind) String() string {
	switch k {
	case Claimed:
		return "claimed"
	case Delivered:
		return "delivered"
	case GivenUp:
		return "given up"
	case Committed:
		return "committed"
	case Released:
		return "released"
	}
	return "unknown"
}

// Event is one entry of a [History].
type Event struct {
	Kind      EventKind
	Member    string // the consumer that did it
	Topic     string
	Partition int32
	// First and Last are the batch's offsets (Delivered, GivenUp).
	First, Last int64
	Retry       int            // Delivered: retries before this delivery
	Outcome     stream.Outcome // Delivered
	Handled     int            // Delivered: how many records, from First, the handler finished
	// Offset is the committed offset: the claim's starting checkpoint
	// (Claimed, -1 for none) or the new checkpoint (Committed).
	Offset   int64
	Metadata string
}

// History records, in one global order, what the consumers of a test do:
// the partitions they claim and release, every delivery, every batch given
// up and every checkpoint. [History.Check] then verifies the delivery
// contract over it, as a Jepsen-style checker does over a history. It is
// safe for concurrent use.
type History struct {
	mu     sync.Mutex
	events []Event
}

// Hooks returns hooks that record member's events; give them to the
// Processor of each consumer (combine them with others with [MergeHooks]).
func (h *History) Hooks(member string) stream.Hooks {
	return stream.Hooks{
		Claimed: func(e stream.ClaimEvent) {
			h.add(Event{Kind: Claimed, Member: member, Topic: e.Topic, Partition: e.Partition, Offset: e.Committed, Metadata: e.Metadata})
		},
		Released: func(e stream.ReleaseEvent) {
			h.add(Event{Kind: Released, Member: member, Topic: e.Topic, Partition: e.Partition})
		},
		Delivered: func(e stream.DeliveredEvent) {
			ev := Event{Kind: Delivered, Member: member, Topic: e.Topic, Partition: e.Partition,
				First: e.FirstOffset, Last: e.LastOffset, Retry: e.Attempt.Retry, Outcome: e.Outcome}
			var be *stream.BatchError
			switch {
			case e.Outcome == stream.Succeeded || e.Outcome == stream.RetryRequested:
				ev.Handled = e.Records
			case errors.As(e.Err, &be) && be.Index > 0 && be.Index < e.Records:
				ev.Handled = be.Index
			}
			h.add(ev)
		},
		Exhausted: func(e stream.ExhaustedEvent) {
			h.add(Event{Kind: GivenUp, Member: member, Topic: e.Topic, Partition: e.Partition, First: e.FirstOffset, Last: e.LastOffset})
		},
		Checkpointed: func(e stream.CheckpointEvent) {
			h.add(Event{Kind: Committed, Member: member, Topic: e.Topic, Partition: e.Partition, Offset: e.Next, Metadata: e.Metadata})
		},
	}
}

// Add appends e, for events recorded elsewhere (another process's consumer,
// say) and relayed here.
func (h *History) Add(e Event) { h.add(e) }

func (h *History) add(e Event) {
	h.mu.Lock()
	h.events = append(h.events, e)
	h.mu.Unlock()
}

// Events returns the events so far, in order.
func (h *History) Events() []Event {
	h.mu.Lock()
	defer h.mu.Unlock()
	return slices.Clone(h.events)
}

// TopicPartition names a partition.
type TopicPartition struct {
	Topic     string
	Partition int32
}

// Report is the result of [History.Check].
type Report struct {
	Records       int64   // records in the checked partitions
	Deliveries    int     // handler calls
	Lost          int64   // records never handled nor given up
	MaxDeliveries int     // the most deliveries of one record
	MeanPerRecord float64 // deliveries per record, on average
	Violations    []string
}

// Check verifies the history against the contract, for partitions whose
// records run from offset 0 to ends[tp] (exclusive):
//
//   - no record lost: every record was handled or given up;
//   - every delivery starts at the partition's checkpoint (the claim's
//     starting offset, or the latest commit of that claim): so order is
//     kept, nothing is skipped, and every rewind lands on the start of the
//     batch being retried;
//   - no checkpoint ahead of the records handled or given up, and none that
//     goes backwards;
//   - no checkpoint written by a consumer that no longer owns the partition:
//     after it released it, or after another consumer claimed it;
//   - the final checkpoint of each partition is its end.
//
// Handled means the handler returned nil or a RetryResult for the record's
// batch, or the records before a BatchError's index. Offsets are taken as
// contiguous. The count checks of a test (deliveries per batch) use the
// report's figures and [History.Deliveries].
func (h *History) Check(ends map[TopicPartition]int64) Report {
	events := h.Events()
	type session struct{ next int64 }
	type part struct {
		sessions  map[string]*session
		owner     string
		handled   []bool
		commit    int64 // latest checkpoint, -1 for none
		verified  int64 // every offset below is known handled
		delivered []int // deliveries per offset
	}
	parts := map[TopicPartition]*part{}
	var r Report
	bad := func(format string, args ...any) { r.Violations = append(r.Violations, fmt.Sprintf(format, args...)) }
	get := func(tp TopicPartition) *part {
		p := parts[tp]
		if p == nil {
			end := ends[tp]
			p = &part{sessions: map[string]*session{}, handled: make([]bool, end), delivered: make([]int, end), commit: -1}
			parts[tp] = p
		}
		return p
	}
	for i, e := range events {
		tp := TopicPartition{e.Topic, e.Partition}
		if _, ok := ends[tp]; !ok {
			continue
		}
		p := get(tp)
		s := p.sessions[e.Member]
		where := func() string { return fmt.Sprintf("event %d: %s %s/%d", i, e.Member, e.Topic, e.Partition) }
		switch e.Kind {
		case Claimed:
			p.sessions[e.Member] = &session{next: max(e.Offset, 0)}
			p.owner = e.Member
		case Released:
			delete(p.sessions, e.Member)
		case Delivered:
			r.Deliveries++
			if s == nil {
				bad("%s: delivery of %d-%d without a claim", where(), e.First, e.Last)
				continue
			}
			if e.First != s.next {
				bad("%s: delivery of %d-%d, but the checkpoint is at %d (a gap, a reordering or a wrong rewind)", where(), e.First, e.Last, s.next)
			}
			for o := max(e.First, 0); o <= e.Last && o < int64(len(p.handled)); o++ {
				p.delivered[o]++
			}
			mark(p.handled, e.First, e.First+int64(e.Handled)-1)
		case GivenUp:
			mark(p.handled, e.First, e.Last)
		case Committed:
			if s == nil {
				bad("%s: commit of %d after its claim ended", where(), e.Offset)
			} else if p.owner != e.Member {
				bad("%s: commit of %d while %s owns the partition", where(), e.Offset, p.owner)
			}
			if e.Offset < p.commit {
				bad("%s: checkpoint went back from %d to %d", where(), p.commit, e.Offset)
			}
			for ; p.verified < e.Offset; p.verified++ {
				if p.verified >= int64(len(p.handled)) || !p.handled[p.verified] {
					bad("%s: checkpoint %d ahead of record %d, which was not handled", where(), e.Offset, p.verified)
					break
				}
			}
			p.commit = max(p.commit, e.Offset)
			if s != nil {
				s.next = e.Offset
			}
		}
	}
	total := 0
	for tp, end := range ends {
		p := get(tp)
		r.Records += end
		for o, ok := range p.handled {
			if !ok {
				r.Lost++
				if r.Lost <= 10 {
					bad("%s/%d: record %d lost: never handled nor given up", tp.Topic, tp.Partition, o)
				}
			}
		}
		if p.commit != end {
			bad("%s/%d: final checkpoint %d, want %d", tp.Topic, tp.Partition, p.commit, end)
		}
		for _, n := range p.delivered {
			total += n
			r.MaxDeliveries = max(r.MaxDeliveries, n)
		}
	}
	if r.Records > 0 {
		r.MeanPerRecord = float64(total) / float64(r.Records)
	}
	return r
}

func mark(handled []bool, first, last int64) {
	for o := max(first, 0); o <= last && o < int64(len(handled)); o++ {
		handled[o] = true
	}
}

// Deliveries returns how many times each batch was delivered, by partition
// and first offset, counting every consumer.
func (h *History) Deliveries() map[TopicPartition]map[int64]int {
	out := map[TopicPartition]map[int64]int{}
	for _, e := range h.Events() {
		if e.Kind != Delivered {
			continue
		}
		tp := TopicPartition{e.Topic, e.Partition}
		if out[tp] == nil {
			out[tp] = map[int64]int{}
		}
		out[tp][e.First]++
	}
	return out
}

// MergeHooks returns hooks that call each of hs in turn.
func MergeHooks(hs ...stream.Hooks) stream.Hooks {
	var m stream.Hooks
	for _, h := range hs {
		m.Claimed = chain(m.Claimed, h.Claimed)
		m.Released = chain(m.Released, h.Released)
		m.Delivered = chain(m.Delivered, h.Delivered)
		m.RetryScheduled = chain(m.RetryScheduled, h.RetryScheduled)
		m.Exhausted = chain(m.Exhausted, h.Exhausted)
		m.ActionTried = chain(m.ActionTried, h.ActionTried)
		m.Stopped = chain(m.Stopped, h.Stopped)
		m.Checkpointed = chain(m.Checkpointed, h.Checkpointed)
		m.Abandoned = chain(m.Abandoned, h.Abandoned)
	}
	return m
}

func chain[E any](a, b func(E)) func(E) {
	switch {
	case a == nil:
		return b
	case b == nil:
		return a
	}
	return func(e E) { a(e); b(e) }
}
