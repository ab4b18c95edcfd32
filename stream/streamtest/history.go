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
	// ActionTried: a try of the exhaustion action on a given-up batch;
	// Error is empty when it succeeded.
	ActionTried
	// Abandoned: the worker stopped with the batch in flight.
	Abandoned
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
	case ActionTried:
		return "action tried"
	case Abandoned:
		return "abandoned"
	}
	return "unknown"
}

// Event is one entry of a [History].
type Event struct {
	Kind      EventKind
	Member    string // the consumer that did it
	Claim     uint64 // the claim whose worker did it (stream.ClaimEvent.ClaimID); 0 when unknown
	Topic     string
	Partition int32
	// First and Last are the batch's offsets (Delivered, GivenUp,
	// ActionTried, Abandoned).
	First, Last int64
	Retry       int            // Delivered, Abandoned: the delivery's retry number (stream.Attempt.Retry), 0 for a first delivery
	MaxRetries  int            // Delivered: the limit of the policy in force, -1 for none
	Outcome     stream.Outcome // Delivered; Cancelled for a delivery a revocation or shutdown cut short
	Handled     int            // Delivered: how many records, from First, the handler finished
	Uncounted   bool           // Delivered: a failure during an outage, which spent no retry (stream.DeliveredEvent.Uncounted)
	// Offset is the committed offset: the claim's starting checkpoint
	// (Claimed, -1 for none) or the new checkpoint (Committed).
	Offset   int64
	Metadata string
	// Error is why a try of the exhaustion action failed (ActionTried);
	// empty when it succeeded.
	Error string
}

// History records, in one global order, what the consumers of a test do:
// the partitions they claim and release, every delivery (those a
// revocation cut short included), every batch given up, every try of the
// exhaustion action and every checkpoint. [History.Check] then verifies the
// delivery contract over it, as a Jepsen-style checker does over a history.
// It is safe for concurrent use; set MemoryOnly before recording.
type History struct {
	// MemoryOnly says that the consumers keep their retry state in memory
	// only (stream.WithInMemoryState): a move starts a batch's count over,
	// so Check does not verify the retry bound.
	MemoryOnly bool

	mu     sync.Mutex
	events []Event
}

// Hooks returns hooks that record member's events; give them to the
// Processor of each consumer (combine them with others with [MergeHooks]).
func (h *History) Hooks(member string) stream.Hooks {
	return stream.Hooks{
		Claimed: func(e stream.ClaimEvent) {
			h.add(Event{Kind: Claimed, Member: member, Claim: e.ClaimID, Topic: e.Topic, Partition: e.Partition, Offset: e.Committed, Metadata: e.Metadata})
		},
		Released: func(e stream.ReleaseEvent) {
			h.add(Event{Kind: Released, Member: member, Claim: e.ClaimID, Topic: e.Topic, Partition: e.Partition})
		},
		Delivered: func(e stream.DeliveredEvent) {
			ev := Event{Kind: Delivered, Member: member, Claim: e.ClaimID, Topic: e.Topic, Partition: e.Partition,
				First: e.FirstOffset, Last: e.LastOffset, Retry: e.Attempt.Retry, MaxRetries: e.Attempt.MaxRetries, Outcome: e.Outcome,
				Uncounted: e.Uncounted}
			var be *stream.BatchError
			switch {
			case e.Outcome == stream.Succeeded || e.Outcome == stream.RetryRequested:
				ev.Handled = e.Records
			case e.Outcome == stream.Cancelled:
			case errors.As(e.Err, &be) && be.Index > 0 && be.Index < e.Records:
				ev.Handled = be.Index
			}
			h.add(ev)
		},
		Exhausted: func(e stream.ExhaustedEvent) {
			h.add(Event{Kind: GivenUp, Member: member, Claim: e.ClaimID, Topic: e.Topic, Partition: e.Partition, First: e.FirstOffset, Last: e.LastOffset})
		},
		ActionTried: func(e stream.ActionEvent) {
			ev := Event{Kind: ActionTried, Member: member, Claim: e.ClaimID, Topic: e.Topic, Partition: e.Partition, First: e.FirstOffset, Last: e.LastOffset}
			if e.Err != nil {
				ev.Error = e.Err.Error()
			}
			h.add(ev)
		},
		Checkpointed: func(e stream.CheckpointEvent) {
			h.add(Event{Kind: Committed, Member: member, Claim: e.ClaimID, Topic: e.Topic, Partition: e.Partition, Offset: e.Next, Metadata: e.Metadata})
		},
		Abandoned: func(e stream.AbandonedEvent) {
			h.add(Event{Kind: Abandoned, Member: member, Claim: e.ClaimID, Topic: e.Topic, Partition: e.Partition, First: e.FirstOffset, Last: e.LastOffset, Retry: e.Attempt.Retry})
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
	Interrupted   int     // handler calls a revocation or shutdown cut short
	Lost          int64   // records never handled nor given up
	MaxDeliveries int     // the most deliveries of one record
	MeanPerRecord float64 // deliveries per record, on average
	// Violations lists every breach of the contract Check found, one
	// sentence each, naming the event's index in the history, the member,
	// the claim and the partition, e.g. "event 12: b (claim 3) t/0: commit
	// of 40 while a owns the partition". Empty means the history keeps the
	// contract.
	Violations []string
}

// Check verifies the history against the contract, for partitions whose
// records run from offset 0 to ends[tp] (exclusive):
//
//   - no record lost: every record was handled, or given up and its
//     exhaustion action succeeded;
//   - every delivery starts at the partition's checkpoint (the claim's
//     starting offset, or the latest commit of that claim): so order is
//     kept, nothing is skipped, and every rewind lands on the start of the
//     batch being retried;
//   - no checkpoint ahead of the records handled or resolved by the
//     exhaustion action (given up is not enough: the action must have
//     succeeded first), and none that goes backwards;
//   - no checkpoint written by a claim that no longer owns the partition:
//     after it was released, or after another claim took the partition, by
//     another consumer or by the same one again (claims are told apart by
//     their ClaimID);
//   - the retry bound, unless MemoryOnly: a batch (by its first offset)
//     never gets the same retry number twice, interrupted deliveries
//     included, so that a move or a crash never buys it another delivery,
//     and no retry goes past the limit of the policy in force. A failure
//     during an outage (Event.Uncounted) spends no retry: the batch is
//     delivered again with the same retry number. A give-up
//     starts the batch's count over (Processor.Resume of a stopped
//     partition). First deliveries may repeat: they commit nothing before
//     they run;
//   - a batch that failed at a known record (stream.FailedAt,
//     stream.PerRecord) is given up as that record alone: the checkpoint
//     moves past it once its action succeeded, and the next batch starts
//     after it, like any other;
//   - the final checkpoint of each partition is its end.
//
// Handled means the handler returned nil or a RetryResult for the record's
// batch, or the records before a BatchError's index. Offsets are taken as
// contiguous. The count checks of a test (deliveries per batch) use the
// report's figures and [History.Deliveries].
func (h *History) Check(ends map[TopicPartition]int64) Report {
	events := h.Events()
	type claimKey struct {
		member string
		claim  uint64
	}
	type session struct{ next int64 }
	type part struct {
		sessions  map[claimKey]*session
		owner     claimKey
		handled   []bool
		givenUp   []bool // given up, the exhaustion action not yet succeeded
		commit    int64  // latest checkpoint, -1 for none
		verified  int64  // every offset below is known handled
		delivered []int  // deliveries per offset
		retries   map[int64]map[int]bool
	}
	parts := map[TopicPartition]*part{}
	var r Report
	bad := func(format string, args ...any) { r.Violations = append(r.Violations, fmt.Sprintf(format, args...)) }
	get := func(tp TopicPartition) *part {
		p := parts[tp]
		if p == nil {
			end := ends[tp]
			p = &part{sessions: map[claimKey]*session{}, handled: make([]bool, end), givenUp: make([]bool, end),
				delivered: make([]int, end), commit: -1, retries: map[int64]map[int]bool{}}
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
		key := claimKey{e.Member, e.Claim}
		s := p.sessions[key]
		where := func() string {
			if e.Claim != 0 {
				return fmt.Sprintf("event %d: %s (claim %d) %s/%d", i, e.Member, e.Claim, e.Topic, e.Partition)
			}
			return fmt.Sprintf("event %d: %s %s/%d", i, e.Member, e.Topic, e.Partition)
		}
		switch e.Kind {
		case Claimed:
			p.sessions[key] = &session{next: max(e.Offset, 0)}
			p.owner = key
		case Released:
			delete(p.sessions, key)
		case Delivered:
			r.Deliveries++
			if e.Outcome == stream.Cancelled {
				r.Interrupted++
			}
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
			if !h.MemoryOnly && e.Retry > 0 && !e.Uncounted {
				seen := p.retries[e.First]
				if seen == nil {
					seen = map[int]bool{}
					p.retries[e.First] = seen
				}
				if seen[e.Retry] {
					bad("%s: retry %d of the batch at %d delivered again (an interrupted delivery or a move repeated it)", where(), e.Retry, e.First)
				}
				seen[e.Retry] = true
				if e.MaxRetries >= 0 && e.Retry > e.MaxRetries {
					bad("%s: retry %d of the batch at %d, past the limit of %d", where(), e.Retry, e.First, e.MaxRetries)
				}
			}
		case GivenUp:
			mark(p.givenUp, e.First, e.Last)
			delete(p.retries, e.First)
		case ActionTried:
			if e.Error == "" {
				mark(p.handled, e.First, e.Last)
			}
		case Committed:
			switch {
			case s == nil:
				bad("%s: commit of %d after its claim ended", where(), e.Offset)
			case p.owner != key && p.owner.member == e.Member:
				bad("%s: commit of %d by a stale claim: claim %d of the same consumer owns the partition", where(), e.Offset, p.owner.claim)
			case p.owner != key:
				bad("%s: commit of %d while %s owns the partition", where(), e.Offset, p.owner.member)
			}
			if e.Offset < p.commit {
				bad("%s: checkpoint went back from %d to %d", where(), p.commit, e.Offset)
			}
			for ; p.verified < e.Offset; p.verified++ {
				o := p.verified
				if o >= int64(len(p.handled)) || !p.handled[o] {
					if o < int64(len(p.givenUp)) && p.givenUp[o] {
						bad("%s: checkpoint %d passes record %d, given up but its exhaustion action has not succeeded", where(), e.Offset, o)
					} else {
						bad("%s: checkpoint %d ahead of record %d, which was not handled", where(), e.Offset, o)
					}
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
					bad("%s/%d: record %d lost: never handled nor resolved by the exhaustion action", tp.Topic, tp.Partition, o)
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

// MergeHooks returns hooks that call each of hs in turn: it is
// [stream.MergeHooks].
func MergeHooks(hs ...stream.Hooks) stream.Hooks { return stream.MergeHooks(hs...) }
