package stream

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"runtime/debug"
	"time"

	"github.com/redeliver-go/redeliver/checkpoint"
	"github.com/redeliver-go/redeliver/internal/actionctx"
)

// This file holds what the engine does the same way for every unit of
// work, whichever driver runs it: a partition's batch (the worker of
// processor.go, checkpoint mode) or a leased record (lease.go, share
// mode). Each retry decision is made here once:
//
//   - call and callRecord (handler.go) run the handler, with the one
//     panic recovery;
//   - readResult reads what the handler returned (FailedAt, RetryResult,
//     an invalid result) and delivered reports it to the Delivered hook;
//   - unit.exhaust reports a unit given up (the Exhausted hook, its log
//     line), runs the exhaustion action with the engine's logger until it
//     succeeds (the ActionTried hook, the operation backoff and its log
//     lines), and holds a unit that StopPartition stops in the stop
//     registry until Processor.Resume or Skip names it;
//   - unit.repeat and Processor.wait are the operation backoff and the
//     clock's waits.
//
// The drivers keep only what is theirs: how units are fetched, held and
// settled (a checkpoint with metadata; a lease's accept, release or
// reject).

// call runs the handler over b and turns a panic into a *PanicError. The
// batch's records are the engine's: what it commits, retries or gives up
// is read from them, so a handler that reslices b.Records (or sets it to
// nil) changes nothing but its own view.
func (p *Processor) call(ctx context.Context, b *Batch) (err error) {
	recs := b.Records
	defer func() {
		b.Records = recs
		if v := recover(); v != nil {
			err = &PanicError{Value: v, Stack: debug.Stack()}
		}
	}()
	return p.handle(ctx, b)
}

// callAction runs the exhaustion action and turns a panic into a
// *PanicError.
func callAction(ctx context.Context, action ExhaustionAction, b *Batch, xerr *checkpoint.ExhaustedError) (err error) {
	defer func() {
		if v := recover(); v != nil {
			err = &PanicError{Value: v, Stack: debug.Stack(), in: "exhaustion action"}
		}
	}()
	return action(ctx, b, xerr)
}

// result is a handler's result as the engine reads it.
type result struct {
	outcome Outcome
	// cause is the failure to apply (Failed), nil otherwise.
	cause error
	// rr is the retry requested (RetryRequested).
	rr *RetryResult
	// partial is the FailedAt that names a record of the batch: the
	// records before its index are done.
	partial *BatchError
}

// readResult reads err, what the handler returned for b: a success, a
// failure (of the whole batch, or from a record on with FailedAt), or a
// retry request. An invalid result (a FailedAt index out of range, an
// invalid RetryResult) is a failure of the whole batch, logged at Error
// at once since it is a programming error.
func readResult(err error, b *Batch, log *slog.Logger) result {
	if err == nil {
		return result{outcome: Succeeded}
	}
	n := len(b.Records)
	cause := err
	partial := asBatchError(err, n)
	if partial == nil {
		cause = invalidIndex(err, n)
	} else {
		cause = partial.Err
		if cause == nil {
			cause = fmt.Errorf("stream: the handler returned FailedAt(%d, nil): the record at offset %d failed with no error", partial.Index, b.Records[partial.Index].Offset)
		}
	}
	rr, cause := retryRequestOf(cause)
	if rr != nil {
		return result{outcome: RetryRequested, rr: rr, partial: partial}
	}
	if errors.Is(cause, errInvalidResult) {
		// A programming error, not the records' failure: say so at
		// once, not only if the batch is given up.
		log.Error("redeliver: the handler's result is invalid (a programming error): the batch fails, under the policy, as if the handler had returned this error",
			"offset", b.FirstOffset(), "records", n, "error", cause)
	}
	return result{outcome: Failed, cause: cause, partial: partial}
}

// delivered reports a handler call to the Delivered hook.
func (p *Processor) delivered(info BatchInfo, a Attempt, outcome Outcome, err error, start, end time.Time, uncounted bool) {
	if h := p.cfg.hooks.Delivered; h != nil {
		h(DeliveredEvent{BatchInfo: info, Attempt: a, Outcome: outcome, Err: err, Start: start, Duration: end.Sub(start), Uncounted: uncounted})
	}
}

// wait blocks until at or until ctx is done.
func (p *Processor) wait(ctx context.Context, at time.Time) error {
	return p.timer(at).wait(ctx)
}

// timer returns a timer that fires at at (at once if at has passed), to be
// waited for later: one started before a write waits out its slack (see
// timerSlack) while the write runs.
func (p *Processor) timer(at time.Time) deadline {
	d := at.Sub(p.cfg.clock.Now())
	if d <= 0 {
		return deadline{}
	}
	ch, stop := p.cfg.clock.NewTimer(d)
	return deadline{ch, stop}
}

// deadline is a timer of Processor.timer.
type deadline struct {
	ch   <-chan time.Time // nil when it has fired already
	stop func() bool
}

// wait blocks until the timer fired or until ctx is done, and stops it.
func (t deadline) wait(ctx context.Context) error {
	if t.ch == nil {
		return ctx.Err()
	}
	defer t.stop()
	select {
	case <-t.ch:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// cancel stops the timer without waiting for it.
func (t deadline) cancel() {
	if t.stop != nil {
		t.stop()
	}
}

// unit is what the engine needs to give up one unit of work: a
// partition's batch, or one leased record.
type unit struct {
	p     *Processor
	log   *slog.Logger
	rnd   checkpoint.Rand
	claim uint64 // the ClaimID of the events; 0 for a record unit
	// record says that the unit is the record at its batch's first
	// offset (a lease), not a partition: StopPartition holds that record
	// alone, and Resume and Skip address it by its offset.
	record bool
	// source, for a record unit, says where the record came from, for a
	// dead letter's headers.
	source *Source
	// beforeHalt, when set, runs before the unit is registered as
	// stopped: the worker pauses its claim and commits the halted
	// state.
	beforeHalt func(ctx context.Context, b *Batch, xerr *checkpoint.ExhaustedError) error
	// attrs are added to the give-up's log line.
	attrs []any
	// haltLog, when set, is the log line of a record unit stopped by
	// StopPartition (the keyed driver's: its key waits).
	haltLog string
}

func (u *unit) infoOf(b *Batch) BatchInfo {
	return BatchInfo{Topic: b.Topic, Partition: b.Partition, ClaimID: u.claim,
		FirstOffset: b.FirstOffset(), LastOffset: b.LastOffset(), Records: len(b.Records)}
}

// exhaust reports the given-up batch b and runs the exhaustion action
// until it succeeds. It reports whether the batch is to be delivered
// again (a unit stopped by StopPartition resumed with Processor.Resume)
// and, for a stopped unit released by Processor.Skip, where to report how
// the skip went; it returns an error only when ctx ends first.
func (u *unit) exhaust(ctx context.Context, b *Batch, xerr *checkpoint.ExhaustedError) (again bool, reply chan<- error, err error) {
	p := u.p
	if h := p.cfg.hooks.Exhausted; h != nil {
		h(ExhaustedEvent{BatchInfo: u.infoOf(b), Err: xerr})
	}
	what := "redeliver: batch given up"
	if len(b.Records) == 1 {
		what = "redeliver: record given up"
	}
	u.log.Error(what, append([]any{"offset", b.FirstOffset(), "records", len(b.Records),
		"retries", xerr.Retries, "reason", xerr.Reason.String(), "error", xerr.Last}, u.attrs...)...)
	action := p.cfg.exhaustion
	if action == nil {
		u.actionTried(b, 1, nil, false)
		return false, nil, nil
	}
	stop, try := false, 0
	// The action's errors are its own: one that wraps ErrRevoked is a
	// failed try like any other (the claim's end shows in ctx).
	actx := context.WithValue(ctx, actionKey{}, &actionCall{log: u.log})
	if u.source != nil {
		actx = actionctx.WithSource(actx, actionctx.Source(*u.source))
	}
	err = u.repeat(ctx, "exhaustion action", false, func() error {
		try++
		err := callAction(actx, action, b, xerr)
		if IsStop(err) {
			stop = true
			return nil
		}
		u.actionTried(b, try, err, false)
		return err
	})
	if err != nil || !stop {
		return false, nil, err
	}
	return u.halt(ctx, b, xerr)
}

func (u *unit) actionTried(b *Batch, try int, err error, skipped bool) {
	if h := u.p.cfg.hooks.ActionTried; h != nil {
		h(ActionEvent{BatchInfo: u.infoOf(b), Try: try, Err: err, Skipped: skipped})
	}
}

// halt keeps the unit stopped until Processor.Resume or Processor.Skip
// names it or ctx ends: it registers it with the processor, so that
// Processor.Stopped lists it, and fires the Stopped hook.
func (u *unit) halt(ctx context.Context, b *Batch, xerr *checkpoint.ExhaustedError) (again bool, reply chan<- error, err error) {
	if u.beforeHalt != nil {
		if err := u.beforeHalt(ctx, b, xerr); err != nil {
			return false, nil, err
		}
	}
	sp := StoppedPartition{BatchInfo: u.infoOf(b), Err: xerr, Record: u.record}
	if u.record && len(b.Records) == 1 {
		sp.Key = u.p.cfg.keyed.keyOf(&b.Records[0])
	}
	e := u.p.register(sp)
	defer u.p.unregister(e)
	if h := u.p.cfg.hooks.Stopped; h != nil {
		h(StoppedEvent{BatchInfo: sp.BatchInfo, Err: xerr})
	}
	if u.haltLog != "" {
		u.log.Error(u.haltLog, "offset", b.FirstOffset(), "error", xerr)
	} else if u.record {
		u.log.Error("redeliver: record stopped until resumed or skipped; its lock is renewed meanwhile, and its lane polls no more records until then (franz-go would accept the record at the next poll)",
			"offset", b.FirstOffset(), "error", xerr)
	} else {
		u.log.Error("redeliver: partition stopped until resumed or skipped", "offset", b.FirstOffset(), "records", len(b.Records), "error", xerr)
	}
	select {
	case c := <-e.cmd:
		what := "redeliver: stopped partition released"
		if u.record {
			what = "redeliver: stopped record released"
		}
		u.log.Info(what, "offset", b.FirstOffset(), "redeliver", c.redeliver)
		if c.redeliver {
			c.reply <- nil // the batch is delivered again from here
			return true, nil, nil
		}
		u.actionTried(b, 1, nil, true)
		return false, c.reply, nil
	case <-ctx.Done():
		return false, nil, ctx.Err()
	}
}

// repeat calls op until it succeeds, or returns ErrRevoked when revoked is
// set, or ctx ends, waiting the operation backoff between tries. Its log
// line gives how long the failed try took as well as the delay after it:
// a try that blocks (a publisher waiting out its own timeout) makes the
// time between tries longer than the delay, and the line says so.
func (u *unit) repeat(ctx context.Context, what string, revoked bool, op func() error) error {
	var prev time.Duration
	clock := u.p.cfg.clock
	for n := 1; ; n++ {
		start := clock.Now()
		err := op()
		if err == nil || revoked && errors.Is(err, ErrRevoked) {
			return err
		}
		if ctx.Err() != nil {
			return ctx.Err()
		}
		took := clock.Now().Sub(start)
		prev = u.p.cfg.opBackoff(n, prev, u.rnd)
		u.log.Warn("redeliver: "+what+" failed, will try again after the delay", "try", n, "took", took, "delay", prev, "error", err)
		if err := u.p.wait(ctx, clock.Now().Add(prev)); err != nil {
			return err
		}
	}
}

// actionKey is the context key of an *actionCall, in the context of an
// exhaustion action, for the actions of this package.
type actionKey struct{}

// actionCall is what the actions of this package know of the batch given
// up that they are called for, across the tries of that batch.
type actionCall struct {
	log *slog.Logger // the unit's
	// written holds, for each DeadLetter action (by its identity), the
	// records whose dead letters a publish wrote in a try that failed
	// (see PublishError): the next tries publish only the others. Nil
	// until a try wrote some.
	written map[*deadLetterID]map[recordID]bool
}

// recordID names a record by its position.
type recordID struct {
	topic     string
	partition int32
	offset    int64
}

func actionCallFrom(ctx context.Context) *actionCall {
	c, _ := ctx.Value(actionKey{}).(*actionCall)
	return c
}

func loggerFrom(ctx context.Context) *slog.Logger {
	if c := actionCallFrom(ctx); c != nil && c.log != nil {
		return c.log
	}
	return slog.New(slog.DiscardHandler)
}
