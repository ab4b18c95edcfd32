package stream

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/redeliver-go/redeliver/checkpoint"
	"github.com/redeliver-go/redeliver/internal/leases"
	"github.com/redeliver-go/redeliver/internal/lifecycle"
	"github.com/redeliver-go/redeliver/internal/retrystate"
)

// The lease driver's outcomes: a call's results applied to its records,
// retries scheduled, records given up through the exhaustion action, and
// what a shutdown settles.

// errNotCalled marks a record of a per-record call that the handler was
// not called for: the call's context was done before its turn.
var errNotCalled = errors.New("stream: not delivered: the call's context was done before the record's turn")

// errLeaseLost is the cause of a delivery cut short by a lost lease.
var errLeaseLost = errors.New("stream: the record's lease (acquisition lock) was lost")

// finish applies a batch handler call's results to its records.
func (s *settler) finish(ctx context.Context, cl *leaseCall) {
	for _, it := range cl.items {
		it.call = nil
	}
	info := s.infoOf(&cl.batch)
	if ctx.Err() != nil || cl.cut {
		cause := context.Cause(ctx)
		if cl.cut {
			cause = errLeaseLost
		}
		s.p.delivered(info, cl.batch.Attempt, Cancelled, cause, cl.start, cl.end, false)
		for _, it := range cl.items {
			if it.state == lrunning {
				s.observe(it, leases.Event{Kind: leases.Handled, Start: cl.start})
				it.state = lwaiting // delivered again (unless the lane stops)
			}
		}
		return
	}
	res := readResult(cl.err, &cl.batch, s.ln.log)
	s.p.delivered(info, cl.batch.Attempt, res.outcome, cl.err, cl.start, cl.end, false)
	if be := res.partial; be != nil {
		// The record at be.Index failed (or asked for a retry) alone:
		// the records before it are done, and the ones after it were
		// not tried and count nothing, at index 0 too.
		for _, it := range cl.items[:be.Index] {
			s.result(ctx, it, result{outcome: Succeeded}, cl.start, cl.end)
		}
		s.result(ctx, cl.items[be.Index], res, cl.start, cl.end)
		for _, it := range cl.items[be.Index+1:] {
			if it.state == lrunning {
				it.state = lwaiting // not handled: delivered again at once
			}
		}
		return
	}
	for _, it := range cl.items {
		s.result(ctx, it, res, cl.start, cl.end)
	}
}

// takePending takes the results every open per-record call has pending,
// and closes the calls that reported their last record.
func (s *settler) takePending() []leaseResult {
	var out []leaseResult
	for cl := range s.open {
		cl.pending.mu.Lock()
		r := leaseResult{cl: cl, i: cl.pending.from, errs: cl.pending.errs, late: cl.pending.late, last: cl.pending.last}
		cl.pending.from += len(cl.pending.errs)
		cl.pending.errs, cl.pending.late = nil, nil
		cl.pending.mu.Unlock()
		if len(r.errs) > 0 {
			out = append(out, r)
		}
		if r.last {
			delete(s.open, cl)
			s.calls--
		}
	}
	return out
}

// finishRecord applies one record's result of a per-record handler.
func (s *settler) finishRecord(ctx context.Context, cl *leaseCall, i int, rerr error, late bool) {
	it, now := cl.items[i], s.p.cfg.clock.Now()
	it.call = nil
	b := s.one(it)
	b.Attempt = cl.batch.Attempt
	if rerr == errNotCalled {
		if it.state == lrunning {
			it.state = lwaiting // never handed over (unless the lane stops)
		}
		return
	}
	if late || cl.cut {
		err := context.Cause(ctx)
		if cl.cut {
			err = errLeaseLost
		} else if err == nil {
			err = rerr
		}
		s.p.delivered(s.infoOf(b), b.Attempt, Cancelled, err, cl.start, now, false)
		if it.state == lrunning {
			s.observe(it, leases.Event{Kind: leases.Handled, Start: cl.start})
			it.state = lwaiting // delivered again (unless the lane stops)
		}
		return
	}
	res := readResult(rerr, b, s.ln.log)
	s.p.delivered(s.infoOf(b), b.Attempt, res.outcome, rerr, cl.start, now, false)
	s.result(ctx, it, res, cl.start, now)
}

func (s *settler) one(it *leased) *Batch {
	return &Batch{Topic: it.rec.Topic, Partition: it.rec.Partition, Records: []Record{*it.rec}, Attempt: it.attempt(&s.p.cfg.policy)}
}

// result decides what happens to one record after a delivery.
func (s *settler) result(ctx context.Context, it *leased, res result, start, now time.Time) {
	if it.state != lrunning {
		return // lost meanwhile
	}
	if res.outcome == Succeeded {
		s.observe(it, leases.Event{Kind: leases.Handled, OK: true, Start: start})
		s.settle(it, it.l.Accept)
		return
	}
	m := it.machine(&s.p.cfg.policy)
	var d retrystate.Decision
	if res.rr != nil {
		d = m.RequestRetries(now, res.rr.request(), s.ln.rnd)
	} else {
		d = m.Fail(now, res.cause, s.ln.rnd)
	}
	requested := res.outcome == RetryRequested
	s.observe(it, leases.Event{Kind: leases.Handled, OK: requested && d.Action == retrystate.StopRetrying, Start: start})
	switch {
	case d.Action != retrystate.StopRetrying:
		s.schedule(ctx, it, d, res.cause, now)
	case requested:
		// A RetryResult's retries are spent: the record is done.
		s.settle(it, it.l.Accept)
	default:
		s.giveUp(ctx, it)
	}
}

// settle settles a record with one of its lease's methods.
func (s *settler) settle(it *leased, how func()) {
	it.state = ldone
	how()
}

// schedule holds a record until its retry is due, or releases it to the
// broker when its lease cannot be held that long; at the broker's last
// delivery it gives the record up instead.
func (s *settler) schedule(ctx context.Context, it *leased, d retrystate.Decision, cause error, now time.Time) {
	if h := s.p.cfg.hooks.RetryScheduled; h != nil {
		h(RetryEvent{BatchInfo: s.infoOf(s.one(it)), Retry: d.Retry, Delay: d.Delay, At: d.At, Err: cause})
	}
	if it.l.Hold(d.At) {
		it.state, it.more().due = lheld, d.At
		s.observe(it, leases.Event{Kind: leases.Held, At: d.At})
		s.ln.log.Debug("redeliver: retry scheduled, record held", "topic", it.rec.Topic, "partition", it.rec.Partition, "offset", it.rec.Offset, "retry", d.Retry, "delay", d.Delay, "error", cause)
		return
	}
	if lim := s.limit(); lim > 0 && int(it.dc) >= lim {
		// Released, the broker would archive it: given up here.
		m := &it.x.m
		st := m.State()
		xerr := &checkpoint.ExhaustedError{Reason: checkpoint.DeliveryLimitReached, Retries: st.Retries - 1, FirstFailure: st.FirstFailure, Last: m.LastError()}
		s.ln.log.Warn("redeliver: retry due too late to hold the record, at the broker's last delivery: given up here rather than released to be archived",
			"topic", it.rec.Topic, "partition", it.rec.Partition, "offset", it.rec.Offset, "delay", d.Delay, "delivery_count", it.dc, "delivery_limit", lim)
		s.act(ctx, it, xerr)
		return
	}
	s.d.remember(it.rec, int(it.dc), it.x.m.State())
	s.ln.log.Info("redeliver: retry due too late to hold, record released to the broker", "topic", it.rec.Topic, "partition", it.rec.Partition, "offset", it.rec.Offset, "delay", d.Delay)
	s.settle(it, it.l.Release)
}

func (s *settler) limit() int {
	if s.d.cfg.Limit == nil {
		return 0
	}
	return s.d.cfg.Limit()
}

// giveUp gives a record up with its machine's error.
func (s *settler) giveUp(ctx context.Context, it *leased) {
	var xerr *checkpoint.ExhaustedError
	errors.As(it.x.m.Err(), &xerr)
	s.act(ctx, it, xerr)
}

// act gives a record up: in a goroutine of its own, the engine reports it
// and runs its exhaustion action until it succeeds, as for a partition's
// batch (the Exhausted and ActionTried hooks, the logger, StopPartition);
// the record is rejected only once the action succeeded.
func (s *settler) act(ctx context.Context, it *leased, xerr *checkpoint.ExhaustedError) {
	it.state = lacting
	// While a stop drains, an action runs on until the drain ends (the
	// calls done, or the bound), which it does not hold up.
	actx, cancel := context.WithCancel(ctx)
	it.more().cancel = cancel
	b := s.one(it)
	u := &unit{p: s.p, log: s.ln.log.With("topic", it.rec.Topic, "partition", it.rec.Partition), rnd: s.p.newRand(),
		record: true, source: &Source{Group: s.d.cfg.Group}, attrs: []any{"delivery_count", it.dc}}
	s.actions++
	go lifecycle.Inside(func() {
		defer cancel()
		again, reply, err := u.exhaust(actx, b, xerr)
		s.acted <- leaseActed{it: it, again: again, reply: reply, err: err}
	})
}

func (s *settler) afterAction(ctx context.Context, r leaseActed) {
	it := r.it
	if it.state != lacting {
		if r.reply != nil {
			r.reply <- fmt.Errorf("stream: skip of the record %s/%d at offset %d not done: its lease was lost meanwhile, and the broker delivers it again", it.rec.Topic, it.rec.Partition, it.rec.Offset)
		}
		return // lost meanwhile: no settlement
	}
	switch {
	case r.err != nil:
		return // ctx ended: the shutdown releases it
	case r.again:
		// Resumed: delivered again with a fresh count.
		it.x.m.Begin(it.rec.Timestamp)
		it.state = lwaiting
	default:
		s.observe(it, leases.Event{Kind: leases.ActionDone})
		s.settle(it, it.l.Reject)
		if r.reply != nil {
			r.reply <- nil
		}
	}
}

// drainAtShutdown takes the per-record results pending at shutdown: a
// record whose handler succeeded before its context was cancelled is
// accepted; the others are left to be released.
func (s *settler) drainAtShutdown(ctx context.Context) {
	for _, r := range s.takePending() {
		for j, err := range r.errs {
			it := r.cl.items[r.i+j]
			it.call = nil
			if err == errNotCalled {
				continue
			}
			b := s.one(it)
			b.Attempt = r.cl.batch.Attempt
			now := s.p.cfg.clock.Now()
			if err == nil && !r.late[j] && it.state == lrunning {
				s.p.delivered(s.infoOf(b), b.Attempt, Succeeded, nil, r.cl.start, now, false)
				s.observe(it, leases.Event{Kind: leases.Handled, OK: true, Start: r.cl.start})
				s.settle(it, it.l.Accept)
				continue
			}
			s.p.delivered(s.infoOf(b), b.Attempt, Cancelled, context.Cause(ctx), r.cl.start, now, false)
		}
	}
}

// shutdown cancels the handler calls and waits for them and for the
// actions, then releases every record that is not settled or lost. A
// record whose action succeeded meanwhile is rejected, as it was handed
// over.
func (s *settler) shutdown(ctx context.Context) {
	cutOff := ctx.Err() != nil // by the drain bound's timer
	cause := context.Cause(s.stop)
	if s.d.cfg.Drain > 0 && !s.drained() {
		cutOff = true
		cause = s.drainErr()
	}
	s.cut(cause)
	cause = context.Cause(ctx)
	s.drainAtShutdown(ctx)
	for _, it := range s.items {
		if it.call != nil && it.call.cancel != nil {
			it.call.cancel()
		}
	}
	for s.calls > 0 || s.actions > 0 {
		select {
		case r := <-s.results:
			s.calls--
			for _, it := range r.cl.items {
				it.call = nil
			}
			s.p.delivered(s.infoOf(&r.cl.batch), r.cl.batch.Attempt, Cancelled, context.Cause(ctx), r.cl.start, r.cl.end, false)
		case <-s.poke:
			s.drainAtShutdown(ctx)
		case r := <-s.acted:
			s.actions--
			if r.err == nil && !r.again && r.it.state == lacting {
				s.observe(r.it, leases.Event{Kind: leases.ActionDone})
				s.settle(r.it, r.it.l.Reject)
				if r.reply != nil {
					r.reply <- nil
				}
			}
		}
	}
	var held, cut, acting int
	lim := s.limit()
	for _, it := range s.items {
		if it.state == ldone || it.state == llost {
			continue
		}
		switch {
		case it.state == lacting:
			acting++
		case it.state == lheld || it.retried():
			held++
		default:
			cut++
		}
		if h := s.p.cfg.hooks.Abandoned; h != nil {
			b := s.one(it)
			h(AbandonedEvent{BatchInfo: s.infoOf(b), Attempt: b.Attempt, Cause: cause})
		}
		if it.state == lacting {
			if lim > 0 && int(it.dc) >= lim {
				s.ln.log.Error("redeliver: record given up whose exhaustion action has not succeeded, released at shutdown at the broker's last delivery: the broker archives it, and its action (a dead letter) is never done",
					"topic", it.rec.Topic, "partition", it.rec.Partition, "offset", it.rec.Offset, "delivery_count", it.dc, "delivery_limit", lim)
			} else {
				s.ln.log.Warn("redeliver: record given up whose exhaustion action has not succeeded, released at shutdown: the broker delivers it again, and its next holder gives it up again",
					"topic", it.rec.Topic, "partition", it.rec.Partition, "offset", it.rec.Offset, "delivery_count", it.dc)
			}
		}
		s.settle(it, it.l.Release)
	}
	switch {
	case cut > 0:
		why := "the drain bound ran out"
		if !cutOff {
			why = "the stop cut their delivery short"
		}
		s.ln.log.Warn("redeliver: records released at shutdown, "+why+": each counts one delivery for the next member, as a failed one, although some never failed (under MaxRetries 0 it gives them up); a longer drain (WithDrain) lets them finish",
			"records", held+cut+acting, "not_failed", cut, "held_for_retry", held, "given_up", acting, "drain", s.d.cfg.Drain)
	case held+acting > 0:
		s.ln.log.Info("redeliver: records released at shutdown: each had failed, and its release counts one delivery for the next member, the failed delivery it was held to retry; the retries held in memory are otherwise lost",
			"records", held+acting, "held_for_retry", held, "given_up", acting)
	}
}
