package stream

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"

	"github.com/redeliver-go/redeliver/checkpoint"
	"github.com/redeliver-go/redeliver/internal/leases"
	"github.com/redeliver-go/redeliver/internal/lifecycle"
	"github.com/redeliver-go/redeliver/internal/retrystate"
)

// The engine's lease driver: record units, for a transport that settles
// each record on its own (a Kafka share group). The seam it shares with the
// transport (the lease, the poll, the config, the events) is declared by
// internal/leases, out of the user's view; the transport gets a driver with
// leases.New, which calls newLeaseDriver (registered below).

// lease and leasePoll are the seam's types over this package's records.
type (
	lease     = leases.Lease[Record]
	leasePoll = leases.Poll[Record]
)

func init() { leases.Register(newLeaseDriver) }

// leaseDriver is the processor's [leases.Driver]: one per transport (a
// share consumer), with a leaseLane per poll loop. Each record is a unit
// of its own: its retries are counted, held, given up and stopped as a
// partition's batch is in checkpoint mode, by the same code (see
// docs/COUNTING.md for what differs).
type leaseDriver struct {
	p   *Processor
	cfg leases.Config[Record]
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

// newLeaseDriver returns the driver of record leases over p (leases.New).
// It returns an error when the processor has an outage budget: a record
// transport cannot pause a partition while its downstream is away (a
// held record blocks its lane, and the broker hands the partition's other
// records to other members), so the budget could not hold records back
// as it does in checkpoint mode.
func newLeaseDriver(p *Processor, cfg leases.Config[Record]) (leases.Driver[Record], error) {
	switch {
	case p == nil || p.h == nil:
		return nil, errors.New("stream: record leases on a Processor not made by NewProcessor")
	case p.cfg.budget != nil:
		return nil, errors.New("stream: the processor has an outage budget (WithOutageBudget, host.json outageBudget), which record leases (a share group) cannot apply: " +
			"a share consumer cannot pause a partition while the downstream is away, so records would be given up all the same; leave the budget out for this processor")
	case p.cfg.keyed.ordering != ByPartition:
		return nil, fmt.Errorf("stream: the processor has %s ordering (WithOrdering), which record leases (a share group) do not keep: the broker hands a partition's records to several consumers; leave the option out for this processor", p.cfg.keyed.ordering)
	case cfg.MaxBatch < 0:
		return nil, fmt.Errorf("stream: record leases: MaxBatch %d: want 0 or more", cfg.MaxBatch)
	}
	if cfg.MaxBatch == 0 {
		cfg.MaxBatch = 500
	}
	d := &leaseDriver{p: p, cfg: cfg, log: cfg.Logger}
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
func (d *leaseDriver) Lane(log *slog.Logger) leases.Lane[Record] {
	if log == nil {
		log = d.log
	}
	return &leaseLane{d: d, rnd: d.p.newRand(), log: log}
}

// remember keeps the state of a record released for a retry.
func (d *leaseDriver) remember(r *Record, deliveries int, s retrystate.State) {
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
func (d *leaseDriver) recall(r *Record, deliveries int) (retrystate.State, bool) {
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

// leaseLane is a [leases.Lane]: it settles the polls of one poll loop.
type leaseLane struct {
	d    *leaseDriver
	rnd  checkpoint.Rand
	log  *slog.Logger
	slab []leased
	recs []Record
	ptrs []*leased
	open []lease
}

// Settle is [leases.Lane.Settle].
func (ln *leaseLane) Settle(ctx context.Context, poll leasePoll) {
	if poll == nil {
		return
	}
	lifecycle.Inside(func() { ln.settle(ctx, poll) })
}
