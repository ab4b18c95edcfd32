package stream

import (
	"time"

	"github.com/redeliver-go/redeliver/checkpoint"
)

// Hooks are called by a [Processor] as batches go through it. Every field is
// optional. Hooks run on the partition's worker goroutine: they must be fast
// and safe for concurrent use, since several partitions call them at once.
type Hooks struct {
	// Claimed is called when a worker starts on a claimed partition.
	Claimed func(ClaimEvent)
	// Released is called when a worker stops.
	Released func(ReleaseEvent)
	// Delivered is called after every handler call. In ByKey ordering with
	// redrive.ParkByKey, a record parked behind its locked key instead of
	// being handled is reported here too, once, with the ParkedBehind
	// outcome (not Succeeded): no RetryScheduled, Exhausted or ActionTried
	// follows it, and the record is finished for the commit.
	Delivered func(DeliveredEvent)
	// RetryScheduled is called when a batch is withheld for another
	// delivery.
	RetryScheduled func(RetryEvent)
	// Exhausted is called when a failed batch is given up, before the
	// exhaustion action runs.
	Exhausted func(ExhaustedEvent)
	// ActionTried is called after each try of the exhaustion action on a
	// given-up batch: with the error and the try's number when it failed
	// (it is tried again after a backoff), with a nil error when it
	// succeeded (the checkpoint may now pass the batch). With no action
	// configured (skip), it is called once, succeeded. It is also called,
	// succeeded and Skipped, when Processor.Skip releases a partition that
	// StopPartition stopped.
	ActionTried func(ActionEvent)
	// Checkpointed is called after a checkpoint was written.
	Checkpointed func(CheckpointEvent)
	// Stopped is called when StopPartition stops a partition.
	Stopped func(StoppedEvent)
	// Abandoned is called when a worker stops with a batch in flight
	// (shutdown, revocation, loss); its checkpoint is left where it was.
	Abandoned func(AbandonedEvent)
	// OutageBegan is called when the outage budget (see Budget) runs out,
	// and OutageEnded when a successful delivery ends the outage. With a
	// budget shared by several processors, each processor's hooks are
	// called, once per outage.
	OutageBegan func(OutageEvent)
	OutageEnded func(OutageEvent)
	// Probing is called before a waiting partition's batch is delivered as
	// the probe of an outage.
	Probing func(ProbeEvent)
}

// ClaimEvent reports a partition claimed by a worker, with the checkpoint it
// starts from.
type ClaimEvent struct {
	Topic     string
	Partition int32
	// ClaimID names this claim in every event of its worker: it is unique
	// among the Processor's calls of Process, so that a stale claim stands
	// apart from a later claim of the same partition by the same consumer.
	ClaimID   uint64
	Committed int64 // -1 when nothing was committed
	Metadata  string
}

// ReleaseEvent reports that a partition's worker stopped, and why.
type ReleaseEvent struct {
	Topic     string
	Partition int32
	ClaimID   uint64
	Cause     error
}

// BatchInfo identifies a batch in events.
type BatchInfo struct {
	Topic     string
	Partition int32
	ClaimID   uint64 // the claim whose worker reports the batch
	// FirstOffset and LastOffset are the offsets of the batch's first and
	// last records, as the records carry them (a batch cut by FailedAt
	// starts at the failed record).
	FirstOffset int64
	LastOffset  int64
	// Records is how many records the batch holds: 1 for a record given
	// up alone (see BatchError).
	Records int
}

// Outcome is the result of one delivery.
type Outcome uint8

const (
	// Succeeded: the handler returned nil.
	Succeeded Outcome = iota + 1
	// RetryRequested: the handler returned a RetryResult.
	RetryRequested
	// Failed: the handler returned an error or panicked.
	Failed
	// Cancelled: the claim's context ended during the delivery: it is
	// abandoned, its checkpoint left in place.
	Cancelled
	// ParkedBehind: in ByKey ordering, the handler was not called: a key
	// middleware (redrive.ParkByKey) parked the record behind the parked
	// records of its key, to be re-driven after them, and said so with
	// MarkParkedBehind. The record is finished for the commit (it is in
	// the re-drive store), but it was neither handled nor given up: it is
	// not a success, and no RetryScheduled, Exhausted or ActionTried
	// follows it.
	ParkedBehind
)

func (o Outcome) String() string {
	switch o {
	case Succeeded:
		return "succeeded"
	case RetryRequested:
		return "retry requested"
	case Failed:
		return "failed"
	case Cancelled:
		return "cancelled"
	case ParkedBehind:
		return "parked behind"
	}
	return "unknown"
}

// DeliveredEvent reports one handler call.
//
// Start and Duration are read from the processor's clock in the worker
// that ran the handler: Start is when the handler was called, and
// Start.Add(Duration) when it returned, the instant the retry decision is
// measured from (a retry's backoff runs from there to the next delivery's
// Start).
type DeliveredEvent struct {
	BatchInfo
	// Attempt is what the handler was told about this delivery.
	Attempt Attempt
	// Outcome is how the processor read what the handler returned (see
	// RetryResult for the rules).
	Outcome Outcome
	// Err is what the handler returned: nil, its error (a *BatchError when
	// it named the failed record), or a *RetryResult for RetryRequested.
	Err error
	// Start is when the handler was called, by the processor's clock.
	Start time.Time
	// Duration is how long the handler ran: the time from Start until it
	// returned (or panicked), by the processor's clock.
	Duration time.Duration
	// Uncounted reports a failure during an outage (see Budget): it
	// spent no retry, and the batch is delivered again, with the same
	// Attempt, once the outage ends or as its probe.
	Uncounted bool
}

// RetryEvent reports that a batch will be delivered again.
type RetryEvent struct {
	BatchInfo
	Retry int           // the retry number of the delivery scheduled, from 1: its Attempt.Retries
	Delay time.Duration // the backoff before it
	At    time.Time     // when it is due
	Err   error         // the error that caused it; nil for a RetryResult
}

// ExhaustedEvent reports that a failed batch is given up (or only the
// record that failed in it, when the handler named it: see BatchError).
type ExhaustedEvent struct {
	BatchInfo
	// Err says why it was given up, after how many retries, and the last
	// delivery's error (the failed record's own error for a record given
	// up alone).
	Err *checkpoint.ExhaustedError
}

// StoppedEvent reports a partition stopped by StopPartition.
type StoppedEvent struct {
	BatchInfo
	Err *checkpoint.ExhaustedError
}

// ActionEvent reports one try of the exhaustion action on a given-up batch.
type ActionEvent struct {
	BatchInfo
	Try int   // the try's number, from 1
	Err error // why the try failed; nil when the action succeeded
	// Skipped reports a stopped partition released past the batch by
	// Processor.Skip, which resolves the batch as a success of the action
	// would.
	Skipped bool
}

// CheckpointEvent reports a written checkpoint.
type CheckpointEvent struct {
	Topic     string
	Partition int32
	ClaimID   uint64
	Next      int64 // the offset of the next record to consume
	Metadata  string
}

// AbandonedEvent reports a batch left in flight when its worker stopped.
type AbandonedEvent struct {
	BatchInfo
	Attempt Attempt
	Cause   error
}
