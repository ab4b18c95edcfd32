package stream

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/redeliver-go/redeliver/checkpoint"
	"github.com/redeliver-go/redeliver/internal/park"
	"github.com/redeliver-go/redeliver/internal/retrystate"
)

// The batch driver: a partition worker delivers one batch at a time,
// decides with its retry state machine, and waits, retries or gives up.

// The partition worker's states, besides its batch's retry state (the
// machine, retrystate.Machine) and the restored state it continues (from).
// Each is set for the batch under way, and run resets it when a batch
// begins.
//
// fetch: flowing, or paused (the claim's Pause: no more records are
// fetched while the batch waits).
//
//	flowing -> paused   a retry scheduled with a delay, or due later than
//	                    now; an outage waited out; a batch halted by
//	                    StopPartition (beforeHalt)
//	paused  -> flowing  the batch's checkpoint written (commit)
//
// delivery, in the outage budget's terms (w.member; counted without one):
//
//	counted   -> uncounted  a failure the budget does not count (an
//	                        outage): the machine is put back as it was
//	                        before the delivery, which spent nothing
//	uncounted -> probing    the outage waited out names the batch its
//	                        probe
//	counted   -> probing    the same, for a retry due during an outage
//	probing   -> counted    a retry refused when due (the probe dropped:
//	                        another partition probes)
//	any       -> counted    the next delivery starts (it is the probe when
//	                        probing: Attempt.Probe)
//
// scope, what a give-up of the batch gives up:
//
//	wholeBatch     -> failedRecord    a delivery failed at the batch's
//	                                  first record (FailedAt, PerRecord),
//	                                  or the restored state says its
//	                                  failure was its record's alone
//	wholeBatch     -> previousGiveUp  the restored state is a previous
//	                                  owner's give-up of w.givenUp records
//	previousGiveUp -> wholeBatch      the stopped batch resumed
//	any            -> wholeBatch      a delivery returns, before its
//	                                  result is read
type (
	fetchState    bool
	deliveryState uint8
	giveUpScope   uint8
)

// The values of fetchState.
const (
	flowing fetchState = false
	paused  fetchState = true
)

// The values of deliveryState; the zero value is counted.
const (
	counted deliveryState = iota
	uncounted
	probing
)

// The values of giveUpScope; the zero value is wholeBatch.
const (
	wholeBatch giveUpScope = iota
	failedRecord
	previousGiveUp
)

// worker is the state of one partition's Process call. The processor, the
// partition's logger, its Rand and the ClaimID of the events are its
// unit's (u.p, u.log, u.rnd, u.claim), not copies: an idle partition keeps
// its worker, and the worker is kept small (its one-byte states side by
// side, too).
type worker struct {
	c     Claim
	m     retrystate.Machine
	batch Batch
	u     unit // what gives a batch up (unit.go)

	fetch fetchState
	// scope is what a give-up of the batch gives up; givenUp, in
	// previousGiveUp, how many of its records the previous owner gave up.
	scope giveUpScope
	// delivery is what the latest or next delivery is in the budget's
	// terms (the probe's number, when probing, goes to the Probing hook).
	delivery deliveryState
	// positioned is whether c is a Positioner, asked once: not on every
	// commit of a claim that is not one (it takes no room: the one-byte
	// states' padding).
	positioned bool
	givenUp    int

	// from is the offset of the batch that restored continues; -1 for none.
	from     int64
	restored *retrystate.State // made by readState: most claims restore nothing

	// rest holds the records after those given up (a record given up
	// alone, or the records a previous owner gave up), fetched already:
	// they are delivered as the next batch.
	rest []Record
	// extra is how many records after the batch the restored state
	// also covers (a previous owner's batch that this owner's fetch did
	// not return whole): fetched before the batch is retried or given
	// up, so that they are never delivered again with a fresh count. 0
	// for none.
	extra int

	// lastNext is the offset last committed (-1 for none).
	lastNext int64

	// member is the worker's place in the outage budget; nil for none.
	member *budgetMember

	// first is the Attempt of a batch's first delivery (run).
	first Attempt
}

// pause pauses the claim, unless it is paused.
func (w *worker) pause() {
	if w.fetch == flowing {
		w.c.Pause()
		w.fetch = paused
	}
}

func (w *worker) infoOf(b *Batch) BatchInfo { return w.u.infoOf(b) }

// readState reads the retry state committed by a previous owner.
func (w *worker) readState(off int64, md string) {
	if off < 0 || md == "" {
		return
	}
	s, err := retrystate.ReadCommitted(off, md)
	var other *retrystate.OtherRecordError
	switch {
	case errors.Is(err, retrystate.ErrForeignMetadata):
		w.u.log.Debug("redeliver: committed metadata is not ours, ignored", "offset", off, "metadata", md)
	case errors.As(err, &other):
		// Not the state of the record at the checkpoint: never apply
		// one record's count to another.
		w.u.log.Warn("redeliver: committed retry state belongs to another record than the one at the checkpoint, ignored",
			"offset", off, "state_offset", other.Offset, "metadata", md)
	case err != nil:
		w.u.log.Warn("redeliver: damaged retry state ignored, the batch starts its count over", "offset", off, "error", err)
	default:
		w.from, w.restored = off, &s
	}
}

// run delivers w.batch until it is resolved and checkpointed. It returns nil
// when the checkpoint was written, an error when the worker must stop.
//
// The first delivery of a batch no previous owner began, outside an
// outage budget, is made here: the retry machine has nothing to say
// before the handler returns (the Attempt is w.first), and a success with
// no Delivered hook to call is committed at once. Anything else goes on in
// follow.
func (w *worker) run(ctx context.Context) error {
	if w.from >= 0 || w.member != nil || ctx.Err() != nil {
		return w.follow(ctx, false, nil, time.Time{})
	}
	b := &w.batch
	w.scope, w.givenUp, w.extra = wholeBatch, 0, 0
	b.Attempt = w.first
	var start time.Time
	timed := w.u.p.cfg.hooks.Delivered != nil
	if timed {
		start = w.u.p.cfg.clock.Now()
	}
	if err := w.u.p.call(ctx, b); err != nil || timed || ctx.Err() != nil {
		return w.follow(ctx, true, err, start)
	}
	return w.commit(ctx, b)
}

// follow is run with the retry machine: it delivers w.batch until it is
// resolved and checkpointed. When delivered is set, the batch's first
// delivery was made: it began at start (zero without a Delivered hook)
// and returned err.
//
// Each turn of the loop delivers the batch once and acts on the decision:
// a retry is scheduled (its state committed when there is a backoff to wait
// out, unless the backoff is too short for two commits), waited for,
// checked again when due, and marked started in a commit sent a little
// before it is due and landed before it is delivered; a first delivery
// commits nothing before it runs.
func (w *worker) follow(ctx context.Context, delivered bool, err error, start time.Time) error {
	b := &w.batch
	w.m.Begin(b.Records[0].Timestamp)
	w.scope, w.givenUp, w.extra = wholeBatch, 0, 0
	var (
		d       retrystate.Decision
		outcome Outcome // of the latest delivery
		cause   error   // the error behind d, for the hooks
		fresh   bool    // d was just made, not restored
		deliver = true
	)
	if delivered {
		var stop error
		if outcome, cause, stop = w.settle(ctx, b, &d, err, start); stop != nil {
			return stop
		}
		fresh, deliver = true, false
	}
	if w.from >= 0 {
		if w.from == b.FirstOffset() {
			d, outcome, cause, fresh = w.resume(b)
			deliver = d.Action == 0
			if w.extra > 0 {
				if err := w.fetchCovered(ctx, b); err != nil {
					return err
				}
			}
		}
		w.from = -1
	}
	for {
		if deliver {
			var err error
			if outcome, cause, err = w.deliver(ctx, b, &d); err != nil {
				return err
			}
			fresh = true
		}
		deliver = true
		if w.delivery == uncounted {
			// An outage: the failure spent nothing. The batch is
			// delivered again when the outage ends or as its probe.
			if err := w.outage(ctx, b); err != nil {
				return err
			}
			continue
		}
		if d.Action == retrystate.RetryNow || d.Action == retrystate.RetryLater {
			clock := w.u.p.cfg.clock
			due := d.At
			// A short backoff (at most maxMarkLead) sends its started mark
			// ahead of the retry's due time (markLead), or, too short for
			// the retry state and the mark one after the other, gets the
			// mark alone, at once (markAlone; not under an outage budget,
			// whose outage can hold a due retry back); a longer backoff's
			// mark is written once it is over (retrywrite.go).
			short := shortBackoff(clock.Now(), due)
			early := false
			if fresh {
				w.scheduled(b, d, cause, outcome)
				early = w.member == nil && w.u.p.markAlone(clock.Now(), due, d.Delay)
				if d.Delay > 0 && !early {
					// The failure is counted for a next owner before the
					// backoff; with none, the started mark below counts it.
					if err := w.saveState(ctx, b); err != nil {
						return err
					}
				}
			}
			if due.After(clock.Now()) {
				w.pause()
			}
			if !early {
				var lead time.Duration
				if short {
					lead = w.u.p.markLead()
				}
				if err := w.aside(func() error { return w.u.p.wait(ctx, due.Add(-lead)) }); err != nil {
					return w.abandon(ctx)
				}
				if w.member != nil && w.member.outage() {
					// A failing partition waits out the outage before
					// its retry.
					if err := w.aside(func() error { return w.outage(ctx, b) }); err != nil {
						return err
					}
				}
			}
			if d = w.m.Start(later(clock.Now(), due)); d.Action != retrystate.StopRetrying {
				// The retry counts before it starts: a move or a crash
				// during it cannot make a next owner repeat it. The
				// timer of its due time runs while the mark is written.
				dl := w.u.p.timer(due)
				if err := w.saveState(ctx, b); err != nil {
					dl.cancel()
					return err
				}
				if err := dl.wait(ctx); err != nil {
					// Counted and not delivered: the next owner
					// delivers the batch one time fewer than the
					// policy allows, never more.
					return w.abandon(ctx)
				}
				continue
			}
			outcome = Failed // a retry refused when due: the budget ran out
			if w.delivery == probing {
				// It was to be the outage's probe: another partition
				// probes instead.
				w.member.dropProbe()
				w.delivery = counted
			}
		}
		done, reply := b, chan<- error(nil)
		if d.Action == retrystate.StopRetrying && outcome == Failed {
			if w.member != nil {
				// Given up: the partition no longer counts as failing
				// in the outage budget, while its exhaustion action
				// runs or StopPartition holds it.
				w.member.resolved()
			}
			// A batch that failed at a known record gives up that record
			// only, and a batch a previous owner gave up the records it
			// gave up; the records after them are delivered as the next
			// batch.
			given := b
			if n := w.giving(); n < len(b.Records) {
				given = &Batch{Topic: b.Topic, Partition: b.Partition, Records: b.Records[:n], Attempt: b.Attempt}
			}
			if w.u.p.cfg.exhaustion != nil && !w.u.p.cfg.memoryOnly {
				// Until its action succeeds, a next owner gives it up
				// again at once, with what it was given up with, and
				// those records only.
				s := w.m.GivenUpState()
				s.Offset, s.Records = b.FirstOffset(), len(given.Records)
				if err := w.write(ctx, b, b.FirstOffset(), retrystate.EncodeState(s)); err != nil {
					return err
				}
			}
			var xerr *checkpoint.ExhaustedError
			errors.As(w.m.Err(), &xerr)
			again, r, err := w.u.exhaust(ctx, given, xerr)
			if err != nil {
				return w.abandon(ctx)
			}
			if again {
				w.m.Begin(b.Records[0].Timestamp)
				w.givenUp = 0
				if w.scope == previousGiveUp {
					w.scope = wholeBatch
				}
				continue
			}
			done, reply = given, r
			if given != b {
				// Before the records fetched after the batch, if any.
				w.rest = append(b.Records[len(given.Records):], w.rest...)
			}
		}
		err := w.commit(ctx, done)
		if reply != nil {
			if err != nil {
				err = fmt.Errorf("stream: skip of %s/%d at offset %d not written (%w): its next owner delivers the batch again", b.Topic, b.Partition, done.FirstOffset(), err)
			}
			reply <- err
		}
		return err
	}
}

// giving returns how many records of the batch a give-up gives up: the
// failed record alone after a failure at a known record, the records a
// previous owner gave up for a give-up it committed, or all of them.
func (w *worker) giving() int {
	switch {
	case w.scope == failedRecord:
		return 1
	case w.scope == previousGiveUp && w.givenUp > 0:
		return w.givenUp
	}
	return len(w.batch.Records)
}

// deliver calls the handler once, sets *d to the machine's decision on
// what it returned (the zero Decision for a success), and returns the
// delivery's outcome and its error. After a partial success it has moved
// the checkpoint to the failed record and cut the batch there. It returns
// an error when the worker must stop.
//
// It runs once per batch, and a success with no Delivered hook and no
// outage budget returns at once: the clock is not read, the decision is
// written in place and the attempt filled field by field (an Attempt or a
// Decision built aside and copied measured about a tenth of the engine's
// own time per batch), and the rest (reading a failure, the hooks, the
// budget) is in settle, whose frame a success does not touch.
func (w *worker) deliver(ctx context.Context, b *Batch, d *retrystate.Decision) (outcome Outcome, cause error, stop error) {
	*d = retrystate.Decision{}
	fillAttempt(&b.Attempt, &w.m)
	b.Attempt.Probe = w.delivery == probing
	w.delivery = counted
	if ctx.Err() != nil {
		// The claim ended since the batch was fetched or its retry marked
		// started (the partition revoked, its lease lost, a shutdown): the
		// handler is not called for a partition this worker no longer
		// holds. Its next owner delivers the batch.
		return Cancelled, nil, w.abandon(ctx)
	}
	var start time.Time
	timed := w.u.p.cfg.hooks.Delivered != nil
	if timed {
		start = w.u.p.cfg.clock.Now()
	}
	err := w.u.p.call(ctx, b)
	if err != nil || timed || w.member != nil {
		return w.settle(ctx, b, d, err, start)
	}
	if ctx.Err() != nil {
		return Cancelled, nil, w.abandon(ctx)
	}
	w.scope, w.givenUp = wholeBatch, 0
	return Succeeded, nil, nil
}

// settle is deliver after the handler returned err, for a failure, a
// Delivered hook or an outage budget: the clock read, the decision made,
// the hook called, the budget told. start is when the call began (zero
// without the hook).
func (w *worker) settle(ctx context.Context, b *Batch, d *retrystate.Decision, err error, start time.Time) (outcome Outcome, cause error, stop error) {
	hooks := &w.u.p.cfg.hooks
	clock := w.u.p.cfg.clock
	var now time.Time
	if _, system := clock.(systemClock); system && !start.IsZero() {
		// time.Now, less any step of the wall clock during the call:
		// one read of the monotonic clock instead of two clocks.
		now = start.Add(time.Since(start))
	} else {
		now = clock.Now()
	}
	if ctx.Err() != nil {
		if hooks.Delivered != nil {
			w.u.p.delivered(w.infoOf(b), b.Attempt, Cancelled, err, start, now, false)
		}
		return Cancelled, err, w.abandon(ctx)
	}
	w.scope, w.givenUp = wholeBatch, 0
	res := result{outcome: Succeeded}
	if err != nil {
		res = readResult(err, b, w.u.log)
	}
	outcome, cause = res.outcome, res.cause
	partial := res.partial // the failed record is known: records before its index are done
	if err != nil {
		if partial != nil && partial.Index > 0 {
			// The retry state belongs to the batch's first record,
			// which is done: the record that failed starts its own
			// count, time budget and age.
			w.m.Begin(b.Records[partial.Index].Timestamp)
		}
		if rr := res.rr; rr != nil {
			*d = w.m.RequestRetries(now, rr.request(), w.u.rnd)
			if w.member != nil {
				w.member.requested(now)
			}
		} else {
			var before retrystate.Machine
			if w.member != nil {
				before = w.m
			}
			*d = w.m.Fail(now, cause, w.u.rnd)
			switch {
			case w.member == nil:
			case d.Action == retrystate.StopRetrying && d.Reason == checkpoint.NotRetryable:
				w.member.neutral(now)
			default:
				counts, began := w.member.failed(now, w.infoOf(b))
				if began {
					w.u.log.Error("redeliver: outage: the outage budget ran out, failures spend no retries until a delivery succeeds",
						"offset", b.FirstOffset(), "error", cause)
				}
				if !counts && (d.Action != retrystate.StopRetrying || d.Reason != checkpoint.RecordTooOld) {
					// An outage, not this batch's failure: it spends
					// no retry. MaxRecordAge applies all the same: a
					// failure past it counts, and gives the batch up.
					w.m, *d, w.delivery = before, retrystate.Decision{}, uncounted
				}
			}
		}
	} else if w.member != nil {
		if e, ended := w.member.succeeded(now, w.infoOf(b)); ended {
			w.u.log.Warn("redeliver: outage ended: a delivery succeeded", "offset", b.FirstOffset(),
				"lasted", e.Duration, "probes", e.Probes, "waiting", e.Failing)
		}
	}
	if hooks.Delivered != nil {
		w.u.p.delivered(w.infoOf(b), b.Attempt, outcome, err, start, now, w.delivery == uncounted)
	}
	if partial != nil && partial.Index > 0 {
		// The records before partial.Index are done: move the checkpoint
		// to the failed record and go on with the rest of the batch.
		if err := w.write(ctx, b, b.Records[partial.Index].Offset, ""); err != nil {
			return outcome, cause, err
		}
		b.Records = b.Records[partial.Index:]
	}
	if partial != nil && outcome == Failed {
		w.scope = failedRecord
	}
	return outcome, cause, nil
}

func (w *worker) scheduled(b *Batch, d retrystate.Decision, err error, outcome Outcome) {
	if outcome == RetryRequested {
		err = nil
	}
	if h := w.u.p.cfg.hooks.RetryScheduled; h != nil {
		h(RetryEvent{BatchInfo: w.infoOf(b), Retry: d.Retry, Delay: d.Delay, At: d.At, Err: err})
	}
	if w.scope == failedRecord {
		w.u.log.Info("redeliver: retry scheduled", "offset", b.FirstOffset(), "records", len(b.Records),
			"failed_offset", b.FirstOffset(), "retry", d.Retry, "delay", d.Delay, "error", err)
	} else {
		w.u.log.Info("redeliver: retry scheduled", "offset", b.FirstOffset(), "records", len(b.Records),
			"retry", d.Retry, "delay", d.Delay, "error", err)
	}
	if d.Delay > 0 {
		w.pause()
	}
}

// aside runs wait, a wait for time to pass while the worker holds a batch
// (its backoff, an outage), with the worker's goroutine stepped aside for
// other partitions' workers when its claim shares goroutines
// (park.Blocker).
func (w *worker) aside(wait func() error) error {
	if b, ok := w.c.(park.Blocker); ok {
		b.Block()
		defer b.Unblock()
	}
	return wait()
}

// outage waits, paused, until the outage ends or b is to be delivered as
// its probe. The time it waits does not count against the policy's time
// budget (it adds to the state's OutageTime). It returns an error when the
// worker must stop.
func (w *worker) outage(ctx context.Context, b *Batch) error {
	w.pause()
	clock := w.u.p.cfg.clock
	start := clock.Now()
	w.u.log.Warn("redeliver: outage: partition waits for the downstream", "offset", b.FirstOffset(), "records", len(b.Records), "retry", b.Attempt.Retries)
	probe, since, err := w.member.await(ctx, clock)
	if err != nil {
		return w.abandon(ctx)
	}
	if waited := clock.Now().Sub(start); waited > 0 {
		if s := w.m.State(); !s.FirstFailure.IsZero() {
			s.OutageTime += waited
			w.m.Restore(s)
		}
	}
	if probe > 0 {
		w.delivery = probing
		w.u.log.Info("redeliver: outage: probing the downstream with this batch", "offset", b.FirstOffset(), "records", len(b.Records), "probe", probe)
		if h := w.u.p.cfg.hooks.Probing; h != nil {
			h(ProbeEvent{BatchInfo: w.infoOf(b), Probe: probe, Since: since})
		}
	}
	return nil
}

// errInvalidResult marks the error a handler's invalid result becomes: a
// FailedAt index outside the batch, a RetryResult out of range.
var errInvalidResult = errors.New("stream: invalid handler result")

// invalidResultError is a handler's invalid result, as the failure it is
// taken for. It wraps the handler's own error (its Err, for FailedAt), so
// that a Permanent error stays one.
type invalidResultError struct {
	msg string
	err error
}

func (e *invalidResultError) Error() string {
	if e.err == nil {
		return e.msg
	}
	return e.msg + ": " + e.err.Error()
}

func (e *invalidResultError) Unwrap() []error {
	if e.err == nil {
		return []error{errInvalidResult}
	}
	return []error{errInvalidResult, e.err}
}

// invalidIndex returns err, or, when err holds a *BatchError whose index
// names none of the n records, the error saying so: the whole batch fails.
func invalidIndex(err error, n int) error {
	var be *BatchError
	if !errors.As(err, &be) {
		return err
	}
	msg := fmt.Sprintf("stream: invalid handler result: FailedAt(%d, ...) names no record of this batch of %d (indexes 0 to %d): the whole batch fails", be.Index, n, n-1)
	if be.Err == nil {
		msg += ", with no error given"
	}
	return &invalidResultError{msg: msg, err: be.Err}
}

// asBatchError returns err's *BatchError when its index names one of the n
// records of the batch: an index out of range fails the whole batch.
func asBatchError(err error, n int) *BatchError {
	var be *BatchError
	if errors.As(err, &be) && be.Index >= 0 && be.Index < n {
		return be
	}
	return nil
}
