package stream

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/redeliver-go/redeliver/checkpoint"
	"github.com/redeliver-go/redeliver/internal/leases"
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
	l     lease
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
		x.m = retrystate.NewMachineOf(p)
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
	ln       *leaseLane
	d        *leaseDriver
	p        *Processor
	poll     leasePoll
	items    []*leased
	calls    int // handler calls running
	actions  int // exhaustion actions running
	results  chan leaseResult
	poke     chan *leaseCall // a per-record call has results pending
	open     map[*leaseCall]bool
	acted    chan leaseActed
}

func (ln *leaseLane) settle(ctx context.Context, poll leasePoll) {
	d := ln.d
	p := d.p
	ls := poll.Leases()
	n := len(ls)
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
	for i, l := range ls {
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

func (s *settler) observe(it *leased, e leases.Event) {
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
