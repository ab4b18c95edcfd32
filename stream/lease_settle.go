package stream

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/redeliver-go/redeliver/checkpoint"
	"github.com/redeliver-go/redeliver/internal/lifecycle"
	"github.com/redeliver-go/redeliver/internal/retrystate"
)

// The lease driver's settling loop: how one poll's records go through the
// engine as record units, from delivery to settlement.

type leaseState uint8

const (
	lwaiting leaseState = iota // to be delivered now
	lrunning                   // in a handler call
	lheld                      // waiting for its retry to be due, lease kept
	lacting                    // given up; its exhaustion action runs (or StopPartition holds it)
	ldone                      // accepted, rejected or released
	llost                      // its lease ran out: not ours to settle
)

var leaseStateNames = [...]string{"waiting", "running", "held", "acting", "done", "lost"}

// leased is one record of a poll and where it stands. It is kept small: a
// record accepted at its first delivery, as most are, needs no more; the
// rest is in x.
type leased struct {
	l     Lease
	rec   *Record // in the lane's recs
	idx   int32   // its index there
	dc    int32   // the broker's delivery count
	state leaseState
	call  *leaseCall
	x     *leasedMore // made on first use
}

type leasedMore struct {
	m      retrystate.Machine
	hasM   bool
	due    time.Time          // held: when its retry is due
	cancel context.CancelFunc // acting: its action's
}

func (it *leased) more() *leasedMore {
	if it.x == nil {
		it.x = new(leasedMore)
	}
	return it.x
}

// machine returns the record's retry state machine, made on first use:
// most records never fail, and never need one.
func (it *leased) machine(p *checkpoint.Policy) *retrystate.Machine {
	x := it.more()
	if !x.hasM {
		x.m = retrystate.NewMachine(*p)
		x.m.Begin(it.rec.Timestamp)
		x.hasM = true
	}
	return &x.m
}

// retried reports whether the record failed or was retried before.
func (it *leased) retried() bool {
	if it.x == nil || !it.x.hasM {
		return false
	}
	st := it.x.m.State()
	return st.Retries > 0 || !st.FirstFailure.IsZero()
}

// attempt is the record's Attempt for its next delivery.
func (it *leased) attempt(p *checkpoint.Policy) Attempt {
	if it.x == nil || !it.x.hasM {
		return Attempt{MaxRetries: p.MaxRetries, Last: p.MaxRetries == 0}
	}
	return attemptOf(&it.x.m)
}

type leaseCall struct {
	items   []*leased
	batch   Batch
	cancel  context.CancelFunc
	start   time.Time
	end     time.Time
	err     error // batch result
	cut     bool  // cancelled because a lease ran out
	pending leasePending
}

// leasePending holds a per-record call's results that the settler has not
// taken yet: the call's goroutine appends, the settler takes them all at
// once when poked, so that its scans run once per batch of results, not
// once per record.
type leasePending struct {
	mu   sync.Mutex
	from int // the index of errs[0]
	errs []error
	late []bool // the call's context was done when the record's handler returned
	last bool
}

type leaseResult struct {
	cl   *leaseCall
	i    int
	errs []error
	late []bool
	last bool
}

type leaseActed struct {
	it    *leased
	again bool
	reply chan<- error
	err   error
}

// settler follows one poll's records until every one is settled or lost,
// or ctx ends.
type settler struct {
	// stop is Settle's ctx: its end starts the drain. The settler's own
	// ctx (of the handler calls, of Tend) outlives it until the drain
	// ends, which cut cancels.
	stop     context.Context
	cut      context.CancelCauseFunc
	draining bool
	drainEnd time.Time // zero: no bound
	ln       *LeaseLane
	d        *LeaseDriver
	p        *Processor
	poll     LeasePoll
	items    []*leased
	calls    int // handler calls running
	actions  int // exhaustion actions running
	results  chan leaseResult
	poke     chan *leaseCall // a per-record call has results pending
	open     map[*leaseCall]bool
	acted    chan leaseActed
}

func (ln *LeaseLane) settle(ctx context.Context, poll LeasePoll) {
	d := ln.d
	p := d.p
	leases := poll.Leases()
	n := len(leases)
	if n == 0 {
		return
	}
	if cap(ln.slab) < n {
		ln.slab, ln.recs, ln.ptrs = make([]leased, n), make([]Record, n), make([]*leased, 0, n)
	}
	slab, recs := ln.slab[:n], ln.recs[:n]
	clear(slab)
	stop := ctx
	ctx, cut := context.WithCancelCause(context.WithoutCancel(stop))
	defer cut(nil)
	s := &settler{stop: stop, cut: cut, ln: ln, d: d, p: p, poll: poll, items: ln.ptrs[:0],
		results: make(chan leaseResult), poke: make(chan *leaseCall, 1), open: map[*leaseCall]bool{}, acted: make(chan leaseActed)}
	now := p.cfg.clock.Now()
	for i, l := range leases {
		it := &slab[i]
		recs[i] = *l.Record()
		it.l, it.rec, it.idx, it.dc = l, &recs[i], int32(i), int32(l.Deliveries())
		s.items = append(s.items, it)
		if !now.Before(l.Deadline()) {
			it.state = llost
			ln.log.Warn("redeliver: record polled after its lock ran out, not delivered", "topic", it.rec.Topic, "partition", it.rec.Partition, "offset", it.rec.Offset)
			continue
		}
		if it.dc > 1 {
			s.restore(ctx, it, now)
		}
	}
	s.run(ctx, recs)
	clear(recs) // let go of the records' memory
	clear(ln.open)
}

// restore continues the count of a record the broker delivered before
// (it.dc > 1), with the bound check a next owner applies in checkpoint
// mode: a record whose count is past the policy's limits is given up
// without a delivery.
//
// What the count is: each earlier delivery that ended without a
// settlement (a release by a holder that stopped, a lock lost, a crash)
// counts as one failed delivery, since what an earlier holder retried in
// memory is not known; but a record this driver released because its
// retry was due too late to hold goes on from the state it was released
// with (a RetryResult's own count included), so that the release itself
// counts nothing.
func (s *settler) restore(ctx context.Context, it *leased, now time.Time) {
	pol := &s.p.cfg.policy
	m := it.machine(pol)
	if st, ok := s.d.recall(it.rec, int(it.dc)); ok {
		m.Restore(st)
	} else {
		m.Resume(retrystate.State{Retries: int(it.dc) - 1, LastError: fmt.Sprintf(
			"the broker delivered the record %s before, and it was not settled (released by a holder that stopped, or its lock lost)", times(int(it.dc)-1))}, now, s.ln.rnd)
	}
	if d := m.Start(now); d.Action == retrystate.StopRetrying {
		s.giveUp(ctx, it)
	}
}

func times(n int) string {
	if n == 1 {
		return "once"
	}
	return fmt.Sprintf("%d times", n)
}

func (s *settler) observe(it *leased, e LeaseEvent) {
	if fn := s.d.cfg.Observe; fn != nil {
		fn(it.l, e)
	}
}

func (s *settler) run(ctx context.Context, recs []Record) {
	clock := s.p.cfg.clock
	for {
		now := clock.Now()
		s.expire(now)
		if !s.draining && s.stop.Err() != nil {
			s.startDrain(ctx, now)
		}
		if s.draining && (s.d.cfg.Drain < 0 || ctx.Err() != nil || !s.drainEnd.IsZero() && !now.Before(s.drainEnd) || s.drained()) {
			s.shutdown(ctx)
			return
		}
		open := s.ln.open[:0]
		for _, it := range s.items {
			if it.state != ldone && it.state != llost {
				open = append(open, it.l)
			}
		}
		s.ln.open = open
		// Before a stop, the transport's upkeep ends with it, whatever
		// the broker is slow to answer; while the stop drains, it goes on
		// until the drain ends.
		tctx := s.stop
		if s.draining {
			tctx = ctx
		}
		tendAt := s.poll.Tend(tctx, now, open, s.calls > 0)
		now = clock.Now()
		s.expire(now)
		s.start(ctx, now, recs)
		wake, anyOpen := s.next()
		if !anyOpen && s.calls == 0 && s.actions == 0 {
			// The last settlements go with the transport's next poll,
			// or its Tend of a next one.
			return
		}
		if !tendAt.IsZero() && (wake.IsZero() || tendAt.Before(wake)) {
			wake = tendAt
		}
		if s.draining && !s.drainEnd.IsZero() && (wake.IsZero() || s.drainEnd.Before(wake)) {
			wake = s.drainEnd
		}
		stopped := s.stop.Done()
		if s.draining {
			stopped = nil
		}
		var timer <-chan time.Time
		stop := func() bool { return false }
		if !wake.IsZero() {
			timer, stop = clock.NewTimer(max(wake.Sub(now), 0))
		}
		select {
		case r := <-s.results:
			s.calls--
			s.finish(ctx, r.cl)
		case <-s.poke:
			for _, r := range s.takePending() {
				for j, err := range r.errs {
					s.finishRecord(ctx, r.cl, r.i+j, err, r.late[j])
				}
			}
		case r := <-s.acted:
			s.actions--
			s.afterAction(ctx, r)
		case <-timer:
		case <-stopped:
		case <-ctx.Done():
		}
		stop()
	}
}

// startDrain begins the drain of a stop: the calls running finish and the
// records waiting are delivered, until drainEnd.
func (s *settler) startDrain(ctx context.Context, now time.Time) {
	s.draining = true
	if d := s.d.cfg.Drain; d > 0 {
		s.drainEnd = now.Add(d)
		// The bound cancels the calls and the transport's upkeep even
		// while the loop waits for one of them.
		timer, stop := s.p.cfg.clock.NewTimer(d)
		go func() {
			select {
			case <-timer:
				s.cut(s.drainErr())
			case <-ctx.Done():
				stop()
			}
		}()
	}
	waiting := 0
	for _, it := range s.items {
		if it.state == lwaiting {
			waiting++
		}
	}
	if s.d.cfg.Drain >= 0 && (s.calls > 0 || waiting > 0) {
		s.ln.log.Info("redeliver: stopping: the handler calls running finish and the records not delivered yet are delivered before the records left are released",
			"calls", s.calls, "waiting", waiting, "drain", s.d.cfg.Drain)
	}
}

// drainErr is the cause of a drain cut off by its bound.
func (s *settler) drainErr() error {
	return fmt.Errorf("stream: stopping: the drain bound (%v) ran out: %w", s.d.cfg.Drain, context.Cause(s.stop))
}

// drained reports whether a drain has nothing left to do: no handler call
// runs and no record waits to be delivered (a held retry is not started).
func (s *settler) drained() bool {
	if s.calls > 0 {
		return false
	}
	for _, it := range s.items {
		if it.state == lwaiting {
			return false
		}
	}
	return true
}

// expire marks the records whose lease ran out as lost, and cancels their
// handler calls and actions.
func (s *settler) expire(now time.Time) {
	for _, it := range s.items {
		if it.state == ldone || it.state == llost || now.Before(it.l.Deadline()) {
			continue
		}
		prev := it.state
		it.state = llost
		s.ln.log.Warn("redeliver: record lock lost, the broker may deliver it to another consumer; no acknowledgement from here",
			"topic", it.rec.Topic, "partition", it.rec.Partition, "offset", it.rec.Offset, "was", leaseStateNames[prev])
		switch {
		case prev == lrunning && it.call != nil && !it.call.cut:
			it.call.cut = true
			it.call.cancel()
		case prev == lacting && it.x != nil && it.x.cancel != nil:
			it.x.cancel()
		}
	}
}

// next returns when the loop must look again, and whether any record is
// still open.
func (s *settler) next() (wake time.Time, open bool) {
	earliest := func(t time.Time) {
		if !t.IsZero() && (wake.IsZero() || t.Before(wake)) {
			wake = t
		}
	}
	for _, it := range s.items {
		if it.state == ldone || it.state == llost {
			continue
		}
		open = true
		earliest(it.l.Deadline())
		if it.state == lheld {
			earliest(it.x.due)
		}
	}
	return wake, open
}

// start delivers the records that are waiting or due.
func (s *settler) start(ctx context.Context, now time.Time, recs []Record) {
	var batch []*leased
	flush := func() {
		if len(batch) > 0 {
			s.deliver(ctx, batch, now, recs)
			batch = nil
		}
	}
	for _, it := range s.items {
		if it.state == lheld && !now.Before(it.x.due) && !s.draining {
			// The retry is due: the policy's limits are checked again,
			// as the partition worker does.
			if d := it.x.m.Start(now); d.Action == retrystate.StopRetrying {
				s.giveUp(ctx, it)
				continue
			}
			it.state = lwaiting
		}
		if it.state != lwaiting {
			continue
		}
		// A record that was retried goes alone, with its own Attempt;
		// first deliveries of one partition go together.
		retried := it.retried()
		if len(batch) > 0 && (retried || batch[0].rec.Topic != it.rec.Topic ||
			batch[0].rec.Partition != it.rec.Partition || len(batch) >= s.d.cfg.MaxBatch) {
			flush()
		}
		batch = append(batch, it)
		if retried {
			flush()
		}
	}
	flush()
}

func (s *settler) infoOf(b *Batch) BatchInfo {
	return BatchInfo{Topic: b.Topic, Partition: b.Partition, FirstOffset: b.FirstOffset(), LastOffset: b.LastOffset(), Records: len(b.Records)}
}

// deliver runs the handler over items in a goroutine of its own.
func (s *settler) deliver(ctx context.Context, items []*leased, now time.Time, recs []Record) {
	p := s.p
	hctx, cancel := context.WithCancel(ctx)
	cl := &leaseCall{items: items, cancel: cancel, start: now}
	cl.batch = Batch{Topic: items[0].rec.Topic, Partition: items[0].rec.Partition, Attempt: items[0].attempt(&p.cfg.policy)}
	first, n := int(items[0].idx), len(items)
	if int(items[n-1].idx)-first == n-1 {
		// Records that follow one another in the poll (a first
		// delivery): a part of recs, capped so that an append by the
		// handler does not write over the next records.
		cl.batch.Records = recs[first : first+n : first+n]
	} else {
		cl.batch.Records = make([]Record, n)
		for i, it := range items {
			cl.batch.Records[i] = *it.rec
		}
	}
	for _, it := range items {
		it.state = lrunning
		it.call = cl
	}
	s.calls++
	fn := s.d.fn
	if fn != nil {
		s.open[cl] = true
	}
	go lifecycle.Inside(func() {
		defer cancel()
		if fn != nil {
			// A per-record handler: each record's result is applied as
			// soon as it is known, so a record done before a shutdown or
			// a lost lease is settled. Once the call's context is done,
			// the records left are not handed to the handler.
			recs := cl.batch.Records
			for i := range recs {
				if hctx.Err() != nil {
					// The rest are not handed over: reported as not
					// delivered.
					cl.pending.mu.Lock()
					for range recs[i:] {
						cl.pending.errs = append(cl.pending.errs, errNotCalled)
						cl.pending.late = append(cl.pending.late, true)
					}
					cl.pending.last = true
					cl.pending.mu.Unlock()
					s.poked(cl)
					return
				}
				err := callRecord(hctx, fn, &recs[i])
				late := hctx.Err() != nil
				cl.pending.mu.Lock()
				cl.pending.errs = append(cl.pending.errs, err)
				cl.pending.late = append(cl.pending.late, late)
				cl.pending.last = i == len(recs)-1
				cl.pending.mu.Unlock()
				s.poked(cl)
			}
			return
		}
		cl.err = p.call(hctx, &cl.batch)
		cl.end = p.cfg.clock.Now()
		s.results <- leaseResult{cl: cl, i: -1, last: true}
	})
}

// poked tells the settler that cl has results pending.
func (s *settler) poked(cl *leaseCall) {
	select {
	case s.poke <- cl:
	default: // the settler has a poke waiting: it takes these too
	}
}

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
				s.observe(it, LeaseEvent{Kind: LeaseHandled, Start: cl.start})
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
			s.observe(it, LeaseEvent{Kind: LeaseHandled, Start: cl.start})
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
		s.observe(it, LeaseEvent{Kind: LeaseHandled, OK: true, Start: start})
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
	s.observe(it, LeaseEvent{Kind: LeaseHandled, OK: requested && d.Action == retrystate.StopRetrying, Start: start})
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
		s.observe(it, LeaseEvent{Kind: LeaseHeld, At: d.At})
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
		s.observe(it, LeaseEvent{Kind: LeaseActionDone})
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
				s.observe(it, LeaseEvent{Kind: LeaseHandled, OK: true, Start: r.cl.start})
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
				s.observe(r.it, LeaseEvent{Kind: LeaseActionDone})
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
