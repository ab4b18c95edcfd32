// Package leases is the seam between the engine and a transport that
// settles each record on its own (a Kafka share group): the transport
// hands the engine's lease driver each poll's records as leases, and the
// driver decides every settlement, which the transport carries out. The
// driver is package stream's (its record units: stream/lease*.go); this
// package declares what the two sides exchange, so that none of it is in
// the user's view of package stream.
//
// The types are generic over the record type R (stream.Record), which
// this package cannot name: package stream imports it. Package stream
// registers its driver in its init; a transport gets one with [New]:
//
//	d, err := leases.New(proc, leases.Config[stream.Record]{...})
//	lane := d.Lane(log) // one per poll loop
//	lane.Settle(ctx, poll)
package leases

import (
	"context"
	"fmt"
	"log/slog"
	"time"
)

// Lease is one record that a transport holds for the engine: the unit of
// work is the record, settled on its own by an acceptance, a release or a
// rejection, not by a checkpoint. The engine's lease driver decides every
// settlement; the transport carries it out. Every method is called on the
// goroutine that runs [Lane.Settle].
type Lease[R any] interface {
	// Record is the leased record.
	Record() *R
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

// Poll is one poll's leases, with the transport's upkeep of them.
type Poll[R any] interface {
	// Leases are the poll's leases, in the order to deliver them.
	Leases() []Lease[R]
	// Tend is called on the settling goroutine at each turn of its loop,
	// with the leases that are not settled (nor lost) yet: it renews what
	// must be renewed and sends the settlements made, when it must (busy
	// says that handler calls run, so that more settlements follow
	// soon). It returns when it wants to be called again; zero for no
	// time of its own.
	Tend(ctx context.Context, now time.Time, open []Lease[R], busy bool) time.Time
}

// Config says how the records of a transport's leases are delivered and
// given up.
type Config[R any] struct {
	// MaxBatch is the most records one handler call gets; 500 when 0.
	MaxBatch int
	// Group names the group that gives a record up, in its dead letter's
	// headers (stream.Source).
	Group string
	// Limit returns the broker's delivery count limit (0 unknown): a
	// record whose retry cannot be held at its last delivery is given up
	// here, since released it would be archived without its action.
	Limit func() int
	// Drain is how long a stop (the end of [Lane.Settle]'s ctx) waits
	// for the poll's records: the handler calls running finish, with
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
	Observe func(Lease[R], Event)
}

// EventKind says what an [Event] reports.
type EventKind uint8

// The kinds of Event.
const (
	// Handled: a handler call of the record returned (OK: it succeeded,
	// or a RetryResult's retries are spent), or was cancelled (OK
	// false).
	Handled EventKind = iota + 1
	// Held: the record is held for a retry due at At.
	Held
	// ActionDone: the record's exhaustion action succeeded.
	ActionDone
)

// Event reports what the engine did with a lease.
type Event struct {
	Kind  EventKind
	OK    bool      // Handled
	Start time.Time // Handled: when the handler was called
	At    time.Time // Held: when the retry is due
}

// Driver runs a processor's handler and retry contract over record
// leases: one per transport (a share consumer), with a [Lane] per poll
// loop. Each record is a unit of its own: its retries are counted, held,
// given up and stopped as a partition's batch is in checkpoint mode, by
// the same code (see docs/COUNTING.md for what differs).
type Driver[R any] interface {
	// Lane returns a lane of the driver, for one poll loop, logging to
	// log (the driver's logger when nil).
	Lane(log *slog.Logger) Lane[R]
}

// Lane settles the polls of one poll loop. A lane is not safe for
// concurrent use.
type Lane[R any] interface {
	// Settle delivers a poll's records and settles each of them
	// (accepted, released, rejected) or sees its lease lost, and returns
	// then. When ctx ends it drains, within [Config.Drain]: the handler
	// calls running finish (their context is not ctx) and the records not
	// handed to the handler yet are delivered, so that a clean stop gives
	// back no record that did not fail; a retry is not started, and an
	// exhaustion action runs on until the drain ends, which it does not
	// hold up. Then, or at the drain bound (which cancels the calls'
	// context), it waits for the calls and actions in flight and releases
	// every record not settled, with a log line: each release counts one
	// delivery for the record's next holder.
	Settle(ctx context.Context, poll Poll[R])
}

// newDriver is the registered driver: a func(P, Config[R]) (Driver[R],
// error). It is set by package stream's init, before any caller of New
// can run.
var newDriver any

// Register makes fn the driver that New returns for a processor of type
// P. Package stream calls it in its init.
func Register[P, R any](fn func(P, Config[R]) (Driver[R], error)) { newDriver = fn }

// New returns the engine's driver of record leases over proc (a
// *stream.Processor), or an error that says why proc cannot drive leases
// (an outage budget, key ordering, a processor not made by
// stream.NewProcessor).
func New[P, R any](proc P, cfg Config[R]) (Driver[R], error) {
	fn, ok := newDriver.(func(P, Config[R]) (Driver[R], error))
	if !ok {
		return nil, fmt.Errorf("leases: no lease driver for a %T over records of type %T (package stream registers one for *stream.Processor and stream.Record)", proc, *new(R))
	}
	return fn(proc, cfg)
}
