package stream

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/redeliver-go/redeliver/checkpoint"
	"github.com/redeliver-go/redeliver/internal/lifecycle"
	"github.com/redeliver-go/redeliver/internal/retrystate"
)

// Lease is one record that a record-acknowledging transport (a Kafka share
// group) holds for the engine: the unit of work is the record, settled on
// its own by an acceptance, a release or a rejection, not by a checkpoint.
// The engine's lease driver ([Processor.Leases]) decides every settlement;
// the transport carries it out. Every method is called on the goroutine
// that runs [LeaseLane.Settle].
type Lease interface {
	// Record is the leased record.
	Record() *Record
	// Deliveries is the broker's delivery count of the record, this
	// delivery included (1 for a first delivery).
	Deliveries() int
	// Deadline is when the lease runs out, as far as the transport
	// knows: past it the record is lost (no settlement from here), and
	// the engine starts no delivery of it.
	Deadline() time.Time
	// Hold reports whether the transport can keep the lease until
	// until (renewing it meanwhile): false makes the engine release the
	// record to the broker instead, or give it up at the broker's last
	// delivery.
	Hold(until time.Time) bool
	// Accept, Release and Reject settle the record: done with, given
	// back to the broker to be delivered again, done with as not
	// processable (after an exhaustion action that succeeded). The
	// engine calls at most one of them per lease.
	Accept()
	Release()
	Reject()
}

// LeasePoll is one poll's leases, with the transport's upkeep of them.
type LeasePoll interface {
	// Leases are the poll's leases, in the order to deliver them.
	Leases() []Lease
	// Tend is called on the settling goroutine at each turn of its loop,
	// with the leases that are not settled (nor lost) yet: it renews what
	// must be renewed and sends the settlements made, when it must (busy
	// says that handler calls run, so that more settlements follow
	// soon). It returns when it wants to be called again; zero for no
	// time of its own.
	Tend(ctx context.Context, now time.Time, open []Lease, busy bool) time.Time
}

// LeaseConfig says how the records of a transport's leases are delivered
// and given up.
type LeaseConfig struct {
	// MaxBatch is the most records one handler call gets; 500 when 0.
	MaxBatch int
	// Group names the group that gives a record up, in its dead letter's
	// headers (see [Source]).
	Group string
	// Limit returns the broker's delivery count limit (0 unknown): a
	// record whose retry cannot be held at its last delivery is given up
	// here, since released it would be archived without its action.
	Limit func() int
	// Drain is how long a stop (the end of [LeaseLane.Settle]'s ctx)
	// waits for the poll's records: the handler calls running finish, with
	// their context not done, and the records not handed to the handler
	// yet are delivered; after Drain the calls' context is cancelled and
	// what is left is released. 0 waits as long as they take; a negative
	// Drain does not wait (the calls' context ends with ctx).
	Drain time.Duration
	// Logger is the transport's logger; the processor's when nil.
	Logger *slog.Logger
	// Observe, when set, is told what the engine did with a lease besides
	// settling it, for a transport's own events. It is called on the
	// settling goroutine.
	Observe func(Lease, LeaseEvent)
}

// LeaseEventKind says what a [LeaseEvent] reports.
type LeaseEventKind uint8

// The kinds of LeaseEvent.
const (
	// LeaseHandled: a handler call of the record returned (OK: it
	// succeeded, or a RetryResult's retries are spent), or was cancelled
	// (OK false).
	LeaseHandled LeaseEventKind = iota + 1
	// LeaseHeld: the record is held for a retry due at At.
	LeaseHeld
	// LeaseActionDone: the record's exhaustion action succeeded.
	LeaseActionDone
)

// LeaseEvent reports what the engine did with a lease.
type LeaseEvent struct {
	Kind  LeaseEventKind
	OK    bool      // LeaseHandled
	Start time.Time // LeaseHandled: when the handler was called
	At    time.Time // LeaseHeld: when the retry is due
}

// LeaseDriver runs the processor's handler and retry contract over record
// leases: one per transport (a share consumer), with a [LeaseLane] per
// poll loop. Each record is a unit of its own: its retries are counted,
// held, given up and stopped as a partition's batch is in checkpoint
// mode, by the same code (see docs/COUNTING.md for what differs).
type LeaseDriver struct {
	p   *Processor
	cfg LeaseConfig
	log *slog.Logger
	fn  RecordFunc // the handler's per-record function, when it has one

	mu sync.Mutex
	// released holds the retry state of records released to the broker
	// because their retry was due too late to hold: when one comes back
	// to this driver with the next delivery count, its count goes on
	// from that state instead of counting the release as a failure.
	released map[recordID]releasedRetry
}

type releasedRetry struct {
	deliveries int
	state      retrystate.State
}

// maxReleased bounds the driver's memory of released retries.
const maxReleased = 4096

// Leases returns the driver of record leases over the processor. It
// returns an error when the processor has an outage budget: a record
// transport cannot pause a partition while its downstream is away (a
// held record blocks its lane, and the broker hands the partition's other
// records to other members), so the budget could not hold records back
// as it does in checkpoint mode.
func (p *Processor) Leases(cfg LeaseConfig) (*LeaseDriver, error) {
	switch {
	case p == nil || p.h == nil:
		return nil, errors.New("stream: Leases on a Processor not made by NewProcessor")
	case p.cfg.budget != nil:
		return nil, errors.New("stream: the processor has an outage budget (WithOutageBudget, host.json outageBudget), which record leases (a share group) cannot apply: " +
			"a share consumer cannot pause a partition while the downstream is away, so records would be given up all the same; leave the budget out for this processor")
	case p.cfg.keyed.ordering != ByPartition:
		return nil, fmt.Errorf("stream: the processor has %s ordering (WithOrdering), which record leases (a share group) do not keep: the broker hands a partition's records to several consumers; leave the option out for this processor", p.cfg.keyed.ordering)
	case cfg.MaxBatch < 0:
		return nil, fmt.Errorf("stream: Leases: MaxBatch %d: want 0 or more", cfg.MaxBatch)
	}
	if cfg.MaxBatch == 0 {
		cfg.MaxBatch = 500
	}
	d := &LeaseDriver{p: p, cfg: cfg, log: cfg.Logger}
	if d.log == nil {
		d.log = p.Logger()
	}
	if pr, ok := p.h.(perRecord); ok {
		d.fn = RecordFunc(pr)
	}
	return d, nil
}

// Lane returns a lane of the driver: its own source of randomness and
// memory, for one poll loop. A lane is not safe for concurrent use.
func (d *LeaseDriver) Lane(log *slog.Logger) *LeaseLane {
	if d == nil || d.p == nil {
		return nil // its Settle does nothing: a driver not made by Processor.Leases
	}
	if log == nil {
		log = d.log
	}
	return &LeaseLane{d: d, rnd: d.p.newRand(), log: log}
}

// remember keeps the state of a record released for a retry.
func (d *LeaseDriver) remember(r *Record, deliveries int, s retrystate.State) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.released == nil {
		d.released = map[recordID]releasedRetry{}
	}
	if len(d.released) >= maxReleased {
		for k := range d.released { // forget one: it counts as a failure
			delete(d.released, k)
			break
		}
	}
	d.released[recordID{r.Topic, r.Partition, r.Offset}] = releasedRetry{deliveries, s}
}

// recall takes the state of a record this driver released for a retry at
// the delivery before this one.
func (d *LeaseDriver) recall(r *Record, deliveries int) (retrystate.State, bool) {
	d.mu.Lock()
	defer d.mu.Unlock()
	k := recordID{r.Topic, r.Partition, r.Offset}
	rr, ok := d.released[k]
	if !ok {
		return retrystate.State{}, false
	}
	delete(d.released, k)
	return rr.state, rr.deliveries+1 == deliveries
}

// LeaseLane settles the polls of one poll loop.
type LeaseLane struct {
	d    *LeaseDriver
	rnd  checkpoint.Rand
	log  *slog.Logger
	slab []leased
	recs []Record
	ptrs []*leased
	open []Lease
}

// Settle delivers a poll's records and settles each of them (accepted,
// released, rejected) or sees its lease lost, and returns then. When ctx
// ends it drains, within [LeaseConfig.Drain]: the handler calls running
// finish (their context is not ctx) and the records not handed to the
// handler yet are delivered, so that a clean stop gives back no record
// that did not fail; a retry is not started, and an exhaustion action runs
// on until the drain ends, which it does not hold up. Then, or at the drain bound (which cancels the
// calls' context), it waits for the calls and actions in flight and
// releases every record not settled, with a log line: each release counts
// one delivery for the record's next holder.
func (ln *LeaseLane) Settle(ctx context.Context, poll LeasePoll) {
	if ln == nil || ln.d == nil || poll == nil {
		return
	}
	lifecycle.Inside(func() { ln.settle(ctx, poll) })
}
