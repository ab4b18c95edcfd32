package streamtest

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/redeliver-go/redeliver/checkpoint"
	"github.com/redeliver-go/redeliver/internal/retrystate"
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
	// DeadLettered: a record was published to a dead-letter topic (see
	// History.Publisher).
	DeadLettered
	// Started: a handler call began (see History.Middleware); First and
	// Last are its batch's offsets, Retry its retry number.
	Started
	// Unwritten: the success checkpoints a member's adapter had coalesced
	// (a commit window) were not all written before its claim of the
	// partition ended: the write of the last one, Offset, was refused or
	// failed (a Kafka adapter logs "the last success commit was not
	// written before the partition was given up", typically because the
	// member had lost its place in the group). Member, Topic, Partition
	// and Offset name the claim: the member's claim that reported that
	// checkpoint last. Its next owner starts from the last checkpoint written,
	// which may be before those the history saw reported, and delivers
	// the records after it again.
	Unwritten
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
	case DeadLettered:
		return "dead-lettered"
	case Started:
		return "started"
	case Unwritten:
		return "unwritten"
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
	Retry       int            // Delivered, Abandoned: the delivery's retry number (stream.Attempt.Retries), 0 for a first delivery
	MaxRetries  int            // Delivered: the limit of the policy in force, -1 for none
	Outcome     stream.Outcome // Delivered; Cancelled for a delivery a revocation or shutdown cut short
	Handled     int            // Delivered: how many records, from First, the handler finished (or, ParkedBehind, parked behind their key)
	// Index is the index in the batch of the record that a failure or a
	// retry request names (Delivered: a stream.BatchError's Index; 0 when
	// it names none, which stands for the batch's first record).
	Index int
	// Named says that the failure or the retry request named its record
	// (Delivered: a stream.BatchError, from FailedAt or PerRecord, its
	// Index 0 included): it counts against that record alone. False for
	// a failure of the whole batch, which counts against every record of
	// it. An Index above 0 names its record too.
	Named     bool
	Uncounted bool // Delivered: a failure during an outage, which spent no retry (stream.DeliveredEvent.Uncounted)
	// Offset is the committed offset: the claim's starting checkpoint
	// (Claimed, -1 for none) or the new checkpoint (Committed); the
	// original offset of a dead-lettered record (DeadLettered).
	Offset   int64
	Metadata string
	// Error is why a try of the exhaustion action failed (ActionTried;
	// empty when it succeeded), the error of a failed delivery
	// (Delivered: the failed record's own error when the handler named
	// it), or the last error of a given-up record (GivenUp).
	Error string
	// At is when a delivery returned (Delivered: the instant the engine
	// measures a failure from), or the first failure a given-up record
	// was given up with (GivenUp).
	At time.Time
	// Retries and Reason are the retries a given-up record was given up
	// after and why (GivenUp: the ExhaustedError's).
	Retries int
	Reason  checkpoint.Reason
	// Headers are the headers of a dead-lettered record (DeadLettered).
	Headers []stream.Header
}

// History records, in one global order, what the consumers of a test do:
// the partitions they claim and release, every delivery (those a
// revocation cut short included), every batch given up, every try of the
// exhaustion action, every checkpoint and, through [History.Publisher],
// every dead-lettered record. [History.Check] then verifies the delivery
// contract over it, as a Jepsen-style checker does over a history. It is
// safe for concurrent use; set MemoryOnly before recording.
type History struct {
	// MemoryOnly says that the consumers keep their retry state in memory
	// only (stream.WithInMemoryState): a move starts every record's count
	// over, and nothing is committed before a retry.
	MemoryOnly bool
	// LeaseOwnership says that the consumers take partitions from each
	// other by leases, with no rebalance between them (Event Hubs: a
	// processor steals a partition from another at once, and the older
	// owner's receiver is closed by the newer one's). A claim that
	// verified its lease just before it was stolen may then report its
	// Claimed after the thief's claim did, and end as soon as it sees the
	// loss, having delivered and committed nothing. With LeaseOwnership,
	// a claim that is Claimed while another member's claim of its
	// partition is live, and is Released with nothing of its own in
	// between (no delivery, commit, give-up or action), never held the
	// partition: the live claim keeps it. Likewise, the lease check before a checkpoint
	// write cannot be atomic with the write (the SDK's stores write a
	// checkpoint unconditionally): one commit a claim had checked before
	// the steal may be reported after the thief's claim. With
	// LeaseOwnership, one such commit per claim is taken as in flight at
	// the steal: it is not a commit of a claim that no longer owns the
	// partition, nor a checkpoint going back, and the checker's checkpoint
	// does not move for it; a second one is a fencing defect. Leave it
	// unset where a rebalance orders the moves (Kafka): there such
	// histories are fencing defects.
	LeaseOwnership bool

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
				First: e.FirstOffset, Last: e.LastOffset, Retry: e.Attempt.Retries, MaxRetries: e.Attempt.MaxRetries, Outcome: e.Outcome,
				Uncounted: e.Uncounted, At: e.Start.Add(e.Duration)}
			var be *stream.BatchError
			switch {
			case e.Outcome == stream.Succeeded || e.Outcome == stream.RetryRequested:
				ev.Handled = e.Records
			case e.Outcome == stream.ParkedBehind:
				// Not handled, but finished: parked behind its key in the
				// re-drive store, which delivers it later (not lost).
				ev.Handled = e.Records
			case e.Outcome == stream.Cancelled:
			case errors.As(e.Err, &be) && be.Index > 0 && be.Index < e.Records:
				ev.Handled = be.Index
			}
			if (e.Outcome == stream.Failed || e.Outcome == stream.RetryRequested) && errors.As(e.Err, &be) && be.Index >= 0 && be.Index < e.Records {
				ev.Index, ev.Named = be.Index, true
			}
			if e.Outcome == stream.Failed && e.Err != nil {
				ev.Error = e.Err.Error()
				if errors.As(e.Err, &be) && be.Index >= 0 && be.Index < e.Records && be.Err != nil {
					ev.Error = be.Err.Error()
				}
			}
			h.add(ev)
		},
		Exhausted: func(e stream.ExhaustedEvent) {
			ev := Event{Kind: GivenUp, Member: member, Claim: e.ClaimID, Topic: e.Topic, Partition: e.Partition, First: e.FirstOffset, Last: e.LastOffset}
			if x := e.Err; x != nil {
				ev.Retries, ev.Reason, ev.At = x.Retries, x.Reason, x.FirstFailure
				if x.Last != nil {
					ev.Error = x.Last.Error()
				}
			}
			h.add(ev)
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
			h.add(Event{Kind: Abandoned, Member: member, Claim: e.ClaimID, Topic: e.Topic, Partition: e.Partition, First: e.FirstOffset, Last: e.LastOffset, Retry: e.Attempt.Retries})
		},
	}
}

// Publisher returns a [stream.Publisher] that publishes through next and
// records every record it published as a DeadLettered event, for
// [History.Check] to verify the headers of what was dead-lettered. A nil
// next publishes nowhere: the records are only recorded. Give it to
// [stream.DeadLetter].
func (h *History) Publisher(next stream.Publisher) stream.Publisher {
	return historyPublisher{h, next}
}

type historyPublisher struct {
	h    *History
	next stream.Publisher
}

func (p historyPublisher) Publish(ctx context.Context, topic string, recs []stream.Record) error {
	if p.next != nil {
		if err := p.next.Publish(ctx, topic, recs); err != nil {
			// A publish that wrote some records says which: those were
			// dead-lettered.
			var pe *stream.PublishError
			if errors.As(err, &pe) && len(pe.Errs) == len(recs) {
				for i, r := range recs {
					if pe.Written(i) {
						p.h.add(DeadLetteredEvent(r))
					}
				}
			}
			return err
		}
	}
	for _, r := range recs {
		p.h.add(DeadLetteredEvent(r))
	}
	return nil
}

// DeadLetteredEvent returns the DeadLettered event of a record read from
// a dead-letter topic, for [History.Add]: its original topic, partition
// and offset come from its redeliver headers.
func DeadLetteredEvent(r stream.Record) Event {
	e := Event{Kind: DeadLettered, Offset: -1, Headers: slices.Clone(r.Headers)}
	for _, x := range r.Headers {
		switch x.Key {
		case stream.HeaderTopic:
			e.Topic = string(x.Value)
		case stream.HeaderPartition:
			n, _ := strconv.ParseInt(string(x.Value), 10, 32)
			e.Partition = int32(n)
		case stream.HeaderOffset:
			if n, err := strconv.ParseInt(string(x.Value), 10, 64); err == nil {
				e.Offset = n
			}
		}
	}
	return e
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

// checked returns the events to check and the indices of those Check and
// CheckKeys pass over: with LeaseOwnership, the Claimed and Released
// events of the claims that never held their partition.
func (h *History) checked() ([]Event, map[int]bool) {
	events := h.Events()
	if !h.LeaseOwnership {
		return events, nil
	}
	skip := map[int]bool{}
	live := map[TopicPartition]map[claimKey]bool{}
	for i, e := range events {
		tp, key := TopicPartition{e.Topic, e.Partition}, claimKey{e.Member, e.Claim}
		switch e.Kind {
		case Claimed:
			other := false // a live claim of another member
			for k := range live[tp] {
				other = other || k.member != e.Member
			}
			if other {
				if j := releasedIdle(events, i); j > 0 {
					skip[i], skip[j] = true, true
					continue
				}
			}
			if live[tp] == nil {
				live[tp] = map[claimKey]bool{}
			}
			live[tp][key] = true
		case Released:
			if !skip[i] {
				delete(live[tp], key)
			}
		}
	}
	return events, skip
}

// unwrittenClaims returns, by partition, the claims that an Unwritten
// event names: the claim of its member that last reported the checkpoint
// it names (Offset) before it. (The member may have claimed the partition
// again by the time its adapter reports the old claim's last commit
// unwritten.)
func unwrittenClaims(events []Event) map[TopicPartition]map[claimKey]bool {
	var (
		out map[TopicPartition]map[claimKey]bool
		// by partition, member and checkpoint: the claim that reported it last
		reported = map[TopicPartition]map[string]map[int64]uint64{}
	)
	for _, e := range events {
		tp := TopicPartition{e.Topic, e.Partition}
		switch e.Kind {
		case Committed:
			if reported[tp] == nil {
				reported[tp] = map[string]map[int64]uint64{}
			}
			if reported[tp][e.Member] == nil {
				reported[tp][e.Member] = map[int64]uint64{}
			}
			reported[tp][e.Member][e.Offset] = e.Claim
		case Unwritten:
			c, ok := reported[tp][e.Member][e.Offset]
			if !ok {
				continue
			}
			if out == nil {
				out = map[TopicPartition]map[claimKey]bool{}
			}
			if out[tp] == nil {
				out[tp] = map[claimKey]bool{}
			}
			out[tp][claimKey{e.Member, c}] = true
		}
	}
	return out
}

// releasedIdle returns the index of the Released event of the claim that
// events[i] is the Claimed event of, if nothing of that claim (nor of its
// member on its partition with no claim named) comes between; else -1.
func releasedIdle(events []Event, i int) int {
	c := events[i]
	for j := i + 1; j < len(events); j++ {
		e := events[j]
		if e.Topic != c.Topic || e.Partition != c.Partition || e.Member != c.Member || (e.Claim != c.Claim && e.Claim != 0) {
			continue
		}
		if e.Kind == Released && e.Claim == c.Claim {
			return j
		}
		return -1
	}
	return -1
}

// claimKey names one claim: its member and its ClaimID.
type claimKey struct {
	member string
	claim  uint64
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
//     succeeded first), and none that goes backwards, except to where a
//     new owner starts after a claim that was never released (a crash:
//     the commits its adapter had coalesced are gone, and their records
//     are delivered again) or one whose coalesced commits were not all
//     written before it was released (an Unwritten event names it); a
//     claim that starts past the last checkpoint reported (a commit that
//     landed while its claim, revoked, no longer waited for the answer)
//     is checked as that commit, and the checkpoint is where it starts;
//   - no checkpoint written by a claim that no longer owns the partition:
//     after it was released, or after another claim took the partition, by
//     another consumer or by the same one again (claims are told apart by
//     their ClaimID); a previous owner's commit of exactly the checkpoint
//     the new claim started from is taken as written before the claim
//     read it, whenever its report comes;
//   - the retry bound, per record, counted by the checker itself from
//     the deliveries it saw, never from the retry numbers the engine
//     reports: each record's own count is the deliveries that failed at
//     it or asked for a retry of it (a failure at a known record,
//     stream.FailedAt, counts against that record alone, and the records
//     before it are done; a failure of the whole batch counts against its
//     first record), plus a retry cut short by a revocation or a crash.
//     A record is delivered as retry n only when its count is n (the
//     Attempt a handler is told describes the record), never past the
//     limit of the policy in force, and only after a retry state that
//     counts it was committed (unless MemoryOnly). A new owner continues
//     from what was committed: a first failure whose state was not
//     committed before the move is the one count a move may lose (first
//     deliveries commit nothing before they run), and a retry committed
//     as started counts even if no delivery of it was seen (a crash).
//     Every retry state committed must name the record at its checkpoint
//     and hold that record's count; a new owner ignores a state that names
//     another record, as the engine does. A failure
//     during an outage (Event.Uncounted) counts nothing. A give-up starts
//     the record's count over (Processor.Resume of a stopped partition);
//   - a record given up was given up after its own count: the
//     ExhaustedError's retries are its count less one, its first failure
//     is the record's first counted failure, its last error that of its
//     last counted delivery, and a record given up for spent retries had
//     the policy's limit of them;
//   - a batch that failed at a known record (stream.FailedAt,
//     stream.PerRecord) is given up as that record alone: the checkpoint
//     moves past it once its action succeeded, and the next batch starts
//     after it, like any other;
//   - a next owner that gives up again what a previous owner gave up
//     (its give-up committed, its exhaustion action not done) gives up
//     the records given up then and no record after them;
//   - every dead-lettered record (DeadLettered events) was given up, and
//     its headers describe it: its topic, partition and offset, its own
//     deliveries (redeliver-deliveries and __dlq.errors.delivery.count),
//     its first failure and its last error;
//   - the final checkpoint of each partition is its end.
//
// Handled means the handler returned nil or a RetryResult for the record's
// batch, or the records before a BatchError's index. Offsets are taken as
// contiguous. The count checks of a test (deliveries per batch) use the
// report's figures and [History.Deliveries].
func (h *History) Check(ends map[TopicPartition]int64) Report {
	events, skip := h.checked()
	// own is what the checker knows of a record's own retry count, as
	// one claim knows it.
	type own struct {
		count   int       // deliveries counted against the record
		first   time.Time // when its first counted delivery failed; zero when unknown
		lastErr string    // the error of its last counted delivery
		limit   int       // the policy's MaxRetries at its latest delivery
		stateAt bool      // a retry state that counts it is committed
		// gaveTo is, for a record a previous owner gave up (its state
		// committed as given up), the last record it gave up with it:
		// a next owner gives up no record past it. -1 for none.
		gaveTo int64
	}
	// gaveUp is a record's give-up, for its dead letter.
	type gaveUp struct {
		deliveries int
		first      time.Time
		err        string
	}
	// session is what one claim knows: where its checkpoint is, and the
	// records' counts, from what was committed when it began and from
	// its own deliveries (a stale claim's deliveries are its own affair:
	// the owner counts what it can know, the committed state).
	type session struct {
		next int64
		own  map[int64]*own
		// owedTo is the last record that a previous owner gave up (its
		// give-up committed, its exhaustion action not done) and that
		// this claim must give up again, never deliver; -1 for none.
		owedTo int64
		// lateWrite: with LeaseOwnership, the commit in flight when
		// another member took the partition has been reported.
		lateWrite bool
	}
	type part struct {
		sessions  map[claimKey]*session
		owner     claimKey
		handled   []bool
		givenUp   []bool // given up, the exhaustion action not yet succeeded
		commit    int64  // latest checkpoint, -1 for none
		commitMD  string // its metadata
		start     int64  // where the owner's claim started (Claimed's Offset)
		startMD   string // with that metadata
		verified  int64  // every offset below is known handled
		delivered []int  // deliveries per offset
		gave      map[int64]gaveUp
		gaveLast  map[int64]int64 // first offset of each give-up -> its last
		left      map[int64]*own  // what the owner knew when its claim was released
		released  *claimKey       // the owner's claim that was released last, until the next claim
	}
	parts := map[TopicPartition]*part{}
	var r Report
	bad := func(format string, args ...any) { r.Violations = append(r.Violations, fmt.Sprintf(format, args...)) }
	get := func(tp TopicPartition) *part {
		p := parts[tp]
		if p == nil {
			end := ends[tp]
			p = &part{sessions: map[claimKey]*session{}, handled: make([]bool, end), givenUp: make([]bool, end),
				delivered: make([]int, end), commit: -1, gave: map[int64]gaveUp{}, gaveLast: map[int64]int64{}}
			parts[tp] = p
		}
		return p
	}
	// verify checks that a checkpoint at next passes only records handled,
	// or resolved by their exhaustion action.
	verify := func(p *part, next int64, where func() string) {
		for ; p.verified < next; p.verified++ {
			o := p.verified
			if o >= int64(len(p.handled)) || !p.handled[o] {
				if o < int64(len(p.givenUp)) && p.givenUp[o] {
					bad("%s: checkpoint %d passes record %d, given up but its exhaustion action has not succeeded", where(), next, o)
				} else {
					bad("%s: checkpoint %d ahead of record %d, which was not handled", where(), next, o)
				}
				return
			}
		}
	}
	ownOf := func(s *session, off int64) *own {
		o := s.own[off]
		if o == nil {
			o = &own{limit: -1, gaveTo: -1}
			s.own[off] = o
		}
		return o
	}
	done := func(s *session, first, last int64) {
		for o := first; o <= last; o++ {
			delete(s.own, o)
		}
	}
	unwritten := unwrittenClaims(events)
	interrupted := retrystate.ErrInterrupted.Error()
	for i, e := range events {
		tp := TopicPartition{e.Topic, e.Partition}
		if _, ok := ends[tp]; !ok || skip[i] {
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
			start := max(e.Offset, 0)
			var kept *own // what the previous owner knew of the record at the checkpoint
			live := false // its claim not released yet
			if prev := p.sessions[p.owner]; prev != nil {
				kept, live = prev.own[start], true
			} else if p.left != nil {
				kept = p.left[start]
			}
			// A claim released without writing every commit its adapter
			// had coalesced (an Unwritten event names it).
			unclean := !live && p.released != nil && unwritten[tp][*p.released]
			if (live || unclean) && e.Offset < p.commit {
				// The claim before was never released (its process was
				// killed, or its session expired), or was released with
				// its last commit refused: the success commits its adapter
				// had coalesced and not written are gone, and their
				// records are delivered again from the checkpoint written
				// (the redelivery window, DESIGN 9.2). Nothing is lost; a
				// claim released cleanly wrote them before its release.
				p.commit, p.commitMD = e.Offset, e.Metadata
			}
			if e.Offset > p.commit {
				// The checkpoint is past the last one the history saw:
				// a commit that landed and was never reported (its
				// claim ended while it was in flight, and did not wait
				// for the answer). It passes only what a reported one
				// may pass.
				verify(p, e.Offset, where)
				p.commit, p.commitMD = e.Offset, e.Metadata
			}
			p.left, p.released = nil, nil
			s = &session{next: start, own: map[int64]*own{}, owedTo: -1}
			p.sessions[key] = s
			p.owner = key
			p.start, p.startMD = e.Offset, e.Metadata
			// A new owner knows of each record's count only what was
			// committed: the state at the checkpoint, as the claim
			// read it or as the history saw it committed.
			if h.MemoryOnly {
				break
			}
			st := stateOf(e.Metadata, start)
			if e.Offset < 0 {
				st = committedState{}
			}
			if p.commit == start {
				if c := stateOf(p.commitMD, start); c.n > st.n {
					st = c
				}
			}
			n, first := st.n, st.first
			if n == 0 {
				break
			}
			o := &own{count: n, limit: -1, first: first, gaveTo: -1}
			if kept != nil {
				if live {
					// A claim not released yet: its policy, as
					// before. A released one's tells nothing of the
					// next owner's.
					o.limit = kept.limit
				}
				if !kept.first.IsZero() {
					o.first = kept.first
				}
			}
			cover := 1 // the records from start that the state counts
			switch {
			case st.givenUp:
				o.lastErr = st.lastErr // given up again with it
				if last, ok := p.gaveLast[start]; ok {
					o.gaveTo = last // and with the records given up with it only
					cover = int(last - start + 1)
				}
			case st.started:
				// The next owner cannot know how the started retry
				// ended.
				o.lastErr = interrupted
			case kept != nil && kept.count == n:
				// Scheduled: a refusal of the retry gives the record up
				// with the error of its last counted delivery.
				o.lastErr = kept.lastErr
			default:
				o.lastErr = st.lastErr
			}
			if st.records > 0 && !st.alone {
				cover = st.records
			}
			s.own[start] = o
			// A whole-batch failure's count, or a give-up, covers the
			// records after the first that the state names.
			for off := start + 1; off < start+int64(cover); off++ {
				c := *o
				c.limit = -1
				s.own[off] = &c
			}
			if st.givenUp {
				s.owedTo = start + int64(cover) - 1
			}
		case Released:
			if s != nil && p.owner == key {
				p.left, p.released = s.own, &key
			}
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
			if e.First <= s.owedTo {
				bad("%s: delivery of %d-%d, but a previous owner gave up the records to %d (its exhaustion action not done): delivered again instead of given up", where(), e.First, e.Last, s.owedTo)
			}
			for o := max(e.First, 0); o <= e.Last && o < int64(len(p.handled)); o++ {
				p.delivered[o]++
			}
			mark(p.handled, e.First, e.First+int64(e.Handled)-1)
			o := s.own[e.First]
			n := 0
			if o != nil {
				n = o.count
			}
			if e.Retry != n {
				bad("%s: delivery of %d-%d as retry %d, but the record at %d has had %d counted deliveries (its own count)", where(), e.First, e.Last, e.Retry, e.First, n)
			}
			for off := e.First + 1; off <= e.Last; off++ {
				if x := s.own[off]; x != nil && x.count > n {
					bad("%s: delivery of %d-%d as retry %d, but record %d has had %d counted deliveries: its count is not continued", where(), e.First, e.Last, e.Retry, off, x.count)
					break
				}
			}
			if n > 0 {
				if !h.MemoryOnly && !o.stateAt {
					bad("%s: retry %d of the record at %d delivered before a retry state that counts it was committed", where(), n, e.First)
				}
				if e.MaxRetries >= 0 && n > e.MaxRetries {
					bad("%s: retry %d of the record at %d, past the limit of %d", where(), n, e.First, e.MaxRetries)
				}
			}
			target := e.First + int64(e.Index)
			switch e.Outcome {
			case stream.Succeeded:
				done(s, e.First, e.Last)
			case stream.Cancelled:
				if n > 0 {
					// A retry committed as started counts, whatever
					// became of it.
					o.count++
					o.lastErr, o.stateAt = interrupted, false
				}
			case stream.Failed, stream.RetryRequested:
				done(s, e.First, target-1)
				if e.Index > 0 {
					// A partial success: the record that failed, and
					// the records after it, start their counts over,
					// even when the failure counts nothing (an outage).
					for off := range s.own {
						if off >= target {
							delete(s.own, off)
						}
					}
				}
				if e.Uncounted {
					break
				}
				// A failure that names its record counts against it
				// alone, and the records after it begin counts of their
				// own; a whole-batch failure counts against every record
				// of the batch.
				last := e.Last
				if e.Named || e.Index > 0 {
					last = target
					for off := range s.own {
						if off > target {
							delete(s.own, off)
						}
					}
				}
				for off := target; off <= last; off++ {
					t := ownOf(s, off)
					t.count++
					t.stateAt, t.gaveTo = false, -1
					// The limit the delivery reports is that of the policy
					// in force for its first record; a record after it
					// begins under the processor's own, not known here until
					// a delivery starts at it.
					t.limit = -1
					if off == e.First {
						t.limit = e.MaxRetries
					}
					t.lastErr = e.Error
					if t.count == 1 {
						t.first = e.At
					}
				}
			}
		case GivenUp:
			mark(p.givenUp, e.First, e.Last)
			if s == nil {
				bad("%s: %d-%d given up without a claim", where(), e.First, e.Last)
				continue
			}
			o := s.own[e.First]
			if o == nil {
				o = &own{limit: -1, gaveTo: -1}
			}
			if o.gaveTo >= 0 && e.Last > o.gaveTo {
				bad("%s: records %d-%d given up again, but a previous owner gave up %d-%d: records after %d given up without a delivery that failed at them", where(), e.First, e.Last, e.First, o.gaveTo, o.gaveTo)
			}
			p.gaveLast[e.First] = e.Last
			switch {
			case e.Retries+1 != o.count:
				bad("%s: record %d given up after %s, but it has had %d counted deliveries (its own count)", where(), e.First, count(e.Retries+1, "delivery", "deliveries"), o.count)
			case e.Reason == checkpoint.RetriesSpent && o.limit >= 0 && e.Retries != o.limit:
				bad("%s: record %d given up for spent retries after %s, but the policy allows %d", where(), e.First, count(e.Retries, "retry", "retries"), o.limit)
			}
			if !o.first.IsZero() && !near(e.At, o.first) {
				bad("%s: record %d given up with its first failure at %s, but it first failed at %s", where(), e.First, stamp(e.At), stamp(o.first))
			}
			if o.count > 0 && e.Error != o.lastErr {
				bad("%s: record %d given up with the last error %q, but its last counted delivery's was %q", where(), e.First, e.Error, o.lastErr)
			}
			for off := e.First + 1; off <= e.Last; off++ {
				if x := s.own[off]; x == nil || x.count == 0 {
					bad("%s: records %d-%d given up, but record %d never failed: the failures were record %d's alone (or another owner's)", where(), e.First, e.Last, off, e.First)
					break
				}
			}
			for o := e.First; o <= e.Last; o++ {
				p.gave[o] = gaveUp{deliveries: e.Retries + 1, first: e.At, err: e.Error}
				delete(s.own, o)
			}
			if e.Last >= s.owedTo {
				// What a previous owner gave up is given up again: from
				// here on the records are this give-up's (a stop and a
				// Resume deliver them again with a fresh count).
				s.owedTo = -1
			}
		case ActionTried:
			if e.Error == "" {
				mark(p.handled, e.First, e.Last)
			}
		case DeadLettered:
			g, ok := p.gave[e.Offset]
			if !ok {
				bad("event %d: %s/%d: record %d dead-lettered, but it was never given up", i, e.Topic, e.Partition, e.Offset)
				continue
			}
			hs := map[string]string{}
			for _, x := range e.Headers {
				hs[x.Key] = string(x.Value)
			}
			n := strconv.Itoa(g.deliveries)
			for k, want := range map[string]string{
				stream.HeaderDeliveries: n, stream.HeaderDLQDeliveryCount: n, stream.HeaderError: g.err,
				stream.HeaderDLQTopic: e.Topic, stream.HeaderDLQPartition: strconv.Itoa(int(e.Partition)),
				stream.HeaderDLQOffset: strconv.FormatInt(e.Offset, 10),
			} {
				if got, ok := hs[k]; !ok || got != want {
					bad("event %d: %s/%d: record %d dead-lettered with %s %q, want %q", i, e.Topic, e.Partition, e.Offset, k, got, want)
				}
			}
			if at, err := time.Parse(time.RFC3339Nano, hs[stream.HeaderFirstFailure]); err != nil || !at.Equal(g.first) {
				bad("event %d: %s/%d: record %d dead-lettered with %s %q, want %s", i, e.Topic, e.Partition, e.Offset,
					stream.HeaderFirstFailure, hs[stream.HeaderFirstFailure], g.first.UTC().Format(time.RFC3339Nano))
			}
		case Committed:
			// A previous owner's commit of exactly the checkpoint the
			// owner's claim started from landed before that claim read
			// it: only the hook that reports it ran late (the engine
			// reports a commit once the write returns, and the history
			// orders events by their reports).
			landedBefore := s != nil && p.owner != key && e.Offset == p.start && e.Metadata == p.startMD
			// With LeaseOwnership: the one write of this claim that passed
			// its lease check before another member took the partition,
			// reported after the thief's claim (see LeaseOwnership). It
			// neither breaks ownership nor moves the checkpoint the checker
			// holds; a second one does.
			inFlight := h.LeaseOwnership && !landedBefore && s != nil && !s.lateWrite && p.owner != key && p.owner.member != e.Member
			if inFlight {
				s.lateWrite = true
			}
			switch {
			case landedBefore, inFlight:
			case s == nil:
				bad("%s: commit of %d after its claim ended", where(), e.Offset)
			case p.owner != key && p.owner.member == e.Member:
				bad("%s: commit of %d by a stale claim: claim %d of the same consumer owns the partition", where(), e.Offset, p.owner.claim)
			case p.owner != key:
				bad("%s: commit of %d while %s owns the partition", where(), e.Offset, p.owner.member)
			}
			if e.Offset < p.commit && !landedBefore && !inFlight {
				bad("%s: checkpoint went back from %d to %d", where(), p.commit, e.Offset)
			}
			verify(p, e.Offset, where)
			if !inFlight {
				p.commit = max(p.commit, e.Offset)
			}
			if s != nil {
				s.next = e.Offset
			}
			if s == nil || p.owner != key {
				break
			}
			p.commitMD = e.Metadata
			if e.Metadata == "" || h.MemoryOnly {
				break
			}
			n := 0
			if o := s.own[e.Offset]; o != nil {
				n = o.count
				o.stateAt = true
			}
			// A started retry is committed before its delivery; a
			// given-up state after every delivery it counts.
			var other *retrystate.OtherRecordError
			if _, err := retrystate.ReadCommitted(e.Offset, e.Metadata); errors.As(err, &other) {
				bad("%s: retry state %q committed with the checkpoint at %d, but it names the record at %d", where(), e.Metadata, e.Offset, other.Offset)
			} else if st := stateOf(e.Metadata, e.Offset); st.n-b2i(st.started && !st.givenUp) != n {
				bad("%s: retry state %q committed for the record at %d, but the record has had %d counted deliveries", where(), e.Metadata, e.Offset, n)
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

// committedState is what a committed retry state says of its record.
type committedState struct {
	n       int       // the deliveries it counts: the retries so far, and the started one
	records int       // how many records from its own it covers; 0 when it does not say
	alone   bool      // a failure at its record alone
	started bool      // a retry was started
	givenUp bool      // given up, its exhaustion action not done
	lastErr string    // a given-up record's last error
	first   time.Time // its first failure
}

// stateOf reads a retry state committed with the checkpoint at at; the
// zero committedState for no state, metadata that is not redeliver's, or
// a state that names another record than the one at at (a next owner
// ignores it).
func stateOf(md string, at int64) committedState {
	s, err := retrystate.ReadCommitted(at, md)
	if err != nil || s.Halted || s.Retries <= 0 && s.GivenUp == 0 {
		return committedState{} // a halted partition's next owner starts afresh
	}
	return committedState{n: s.Retries + b2i(s.Started), records: s.Records, alone: s.Alone, started: s.Started, givenUp: s.GivenUp != 0,
		lastErr: s.LastError, first: s.FirstFailure}
}

func b2i(b bool) int {
	if b {
		return 1
	}
	return 0
}

// near reports whether a and b are the same instant, to the millisecond
// a committed retry state keeps.
func near(a, b time.Time) bool {
	d := a.Sub(b)
	return d > -time.Millisecond && d < time.Millisecond
}

func stamp(t time.Time) string { return t.UTC().Format("15:04:05.000000") }

func count(n int, one, many string) string {
	if n == 1 {
		return "1 " + one
	}
	return fmt.Sprintf("%d %s", n, many)
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
