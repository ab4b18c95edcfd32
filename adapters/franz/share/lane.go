package share

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"runtime/debug"
	"slices"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/redeliver-go/redeliver/adapters/franz/internal/fetcherr"
	"github.com/redeliver-go/redeliver/adapters/franz/internal/kclient"
	"github.com/redeliver-go/redeliver/checkpoint"
	"github.com/redeliver-go/redeliver/internal/lifecycle"
	"github.com/redeliver-go/redeliver/stream"
)

func kerrFor(code int16) error { return kerr.ErrorForCode(code) }

// lane is one member of the share group: a franz-go client and the loop
// that polls it. Its invariant: PollFetches is called only when every record
// of the previous poll has a final acknowledgement (accept, release, reject)
// or its lock is known lost, since franz-go accepts the others at the next
// poll.
type lane struct {
	c      *Consumer
	id     int
	name   string
	cl     *kgo.Client
	cancel context.CancelFunc // cl's context (kgo.WithContext)
	rnd    checkpoint.Rand
	log    *slog.Logger

	mu      sync.Mutex
	ackErrs map[tp]ackErr // the latest failed acknowledgement per partition

	// A poll's items and records, kept for the next poll: handlers must
	// not keep a batch's records after they return, and a lane settles
	// one poll's records before it polls again.
	slab []item
	recs []stream.Record
	ptrs []*item
}

type tp struct {
	topic     string
	partition int32
}

type ackErr struct {
	at  time.Time
	err error
}

// acked is the client's ShareAckCallback.
func (l *lane) acked(_ *kgo.Client, rs kgo.ShareAckResults) {
	now := time.Now()
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, r := range rs {
		if r.Err == nil {
			continue
		}
		if l.ackErrs == nil {
			l.ackErrs = map[tp]ackErr{}
		}
		l.ackErrs[tp{r.Topic, r.Partition}] = ackErr{now, r.Err}
	}
}

// ackErrSince returns the latest acknowledgement error of the partition
// reported at or after t.
func (l *lane) ackErrSince(k tp, t time.Time) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if e, ok := l.ackErrs[k]; ok && !e.at.Before(t) {
		return e.err
	}
	return nil
}

func (l *lane) run(ctx context.Context) {
	defer l.close()
	var (
		gone    []*item // records whose locks were lost
		backoff fetcherr.Backoff
	)
	for ctx.Err() == nil {
		if len(gone) > 0 {
			l.forget(ctx, gone)
			gone = gone[:0]
		}
		fs := l.cl.PollFetches(ctx)
		if ctx.Err() != nil {
			// A poll that raced the shutdown may still hold records:
			// they go back to the broker unhandled.
			fs.EachRecord(func(r *kgo.Record) { r.Ack(kgo.AckRelease) })
			return
		}
		fatal, failed := l.c.fetchErrs.Seen(fs, time.Now())
		if fatal != nil {
			// The poll's records go back to the broker unhandled.
			fs.EachRecord(func(r *kgo.Record) { r.Ack(kgo.AckRelease) })
			l.log.Error("redeliver: share consumer stopped by a fetch error", "error", fatal)
			l.c.life.Fail(fatal)
			return
		}
		items, recs := l.items(fs)
		if len(items) == 0 {
			fetcherr.Wait(ctx, backoff.Next(failed))
			continue
		}
		backoff.Next(false)
		s := settle{l: l, items: items, recs: recs}
		for _, it := range items {
			s.event(Acquired, it, func(e *Event) { e.DeliveryCount = int(it.dc) })
		}
		s.run(ctx)
		for _, it := range items {
			if it.state == lost {
				gone = append(gone, it)
			}
		}
		clear(recs) // let go of the fetch buffers they point into
	}
}

// flushWait is how long a lane's shutdown waits for its last
// acknowledgements (the releases of the records in flight) before it
// leaves the group: what is left goes with the leave, or the broker
// releases the records when their locks run out.
const flushWait = 250 * time.Millisecond

// close flushes what is left to acknowledge and leaves the group; the
// client releases every record that has no final acknowledgement. It
// takes at most flushWait and kclient.LeaveWait, whatever the broker is
// slow to answer.
func (l *lane) close() {
	ctx, cancel := context.WithTimeout(context.Background(), flushWait)
	defer cancel()
	if err := l.cl.FlushAcks(ctx); err != nil {
		l.log.Warn("redeliver: flushing acknowledgements at shutdown", "error", err)
	}
	l.closeClient()
}

// closeClient closes the lane's client within kclient.LeaveWait.
func (l *lane) closeClient() { kclient.Close(l.cl, l.cancel, l.log) }

// forget sends, alone, the release of records whose locks were lost. They
// are not ours any more, and the broker refuses the acknowledgement; but
// franz-go would accept them at the next poll, and a refused record fails
// every acknowledgement that travels in the same request for its
// partition. So the others go first.
func (l *lane) forget(ctx context.Context, lost []*item) {
	fctx, cancel := context.WithTimeout(ctx, l.c.lock)
	defer cancel()
	_ = l.cl.FlushAcks(fctx)
	for _, it := range lost {
		it.kr.Ack(kgo.AckRelease)
	}
	_ = l.cl.FlushAcks(fctx)
}

// items turns a poll's records into items, in offset order per partition,
// and their stream.Records, in the lane's memory of the previous poll (or
// new memory when it is too small): the first delivery of records that
// follow one another hands the handler a part of recs, not a copy. A
// record whose lock has already run out is not delivered.
func (l *lane) items(fs kgo.Fetches) ([]*item, []stream.Record) {
	now := l.c.set.Clock.Now()
	n := fs.NumRecords()
	if n == 0 {
		return nil, nil
	}
	if cap(l.slab) < n {
		l.slab, l.recs, l.ptrs = make([]item, n), make([]stream.Record, n), make([]*item, 0, n)
	}
	slab, recs, out := l.slab[:n], l.recs[:n], l.ptrs[:0]
	clear(slab)
	fs.EachRecord(func(r *kgo.Record) {
		i := len(out)
		it := &slab[i]
		toRecord(&recs[i], r)
		it.kr, it.rec, it.idx, it.dc, it.deadline = r, &recs[i], int32(i), r.DeliveryCount(), r.AcquisitionDeadline()
		if it.dc > 1 {
			// Each earlier delivery by the broker counts as one retry:
			// what an earlier holder retried in memory is not known.
			it.machine(&l.c.set.Policy).Restore(checkpoint.State{Retries: int(it.dc) - 1})
		}
		// franz-go computes the deadline when it decodes the fetch, with
		// at least 1s: never trust it beyond the lock the group told.
		if lim := now.Add(l.c.lock); it.deadline.IsZero() || lim.Before(it.deadline) {
			it.deadline = lim
		}
		if !now.Before(it.deadline) {
			it.state = lost
			l.log.Warn("redeliver: record polled after its lock ran out, not delivered", "topic", r.Topic, "partition", r.Partition, "offset", r.Offset)
		}
		out = append(out, it)
	})
	return out, recs
}

func toRecord(sr *stream.Record, r *kgo.Record) {
	*sr = stream.Record{Topic: r.Topic, Partition: r.Partition, Offset: r.Offset, Key: r.Key, Value: r.Value, Timestamp: r.Timestamp}
	if len(r.Headers) > 0 {
		sr.Headers = make([]stream.Header, len(r.Headers))
		for i, h := range r.Headers {
			sr.Headers[i] = stream.Header{Key: h.Key, Value: h.Value}
		}
	}
}

type state uint8

const (
	waiting state = iota // to be delivered now
	running              // in a handler call
	held                 // waiting for its retry to be due, lock renewed
	acting               // given up; its exhaustion action runs or waits to run again
	done                 // accepted, rejected or released
	lost                 // its lock ran out: not ours to acknowledge
)

// item is one acquired record and where it stands. It is kept small: a
// record that is accepted at its first delivery, as most are, needs no
// more; the rest is in x.
type item struct {
	kr       *kgo.Record
	rec      *stream.Record // in the poll's recs
	idx      int32          // its index there
	dc       int32          // the broker's delivery count
	state    state
	deadline time.Time // when its lock runs out, as far as we know
	call     *call
	x        *itemMore // made on first use
}

// itemMore is what a record that failed, is held, or had its lock renewed
// needs besides an item.
type itemMore struct {
	m       checkpoint.Machine
	hasM    bool
	renewAt time.Time // zero: renew when half the lock is left
	due     time.Time // held: when its retry is due; acting: when the action runs again
	xerr    *checkpoint.ExhaustedError
	reason  string
	tries   int
	prevOp  time.Duration
	stopped bool // the action asked to stop (StopPartition): held until shutdown
}

func (it *item) more() *itemMore {
	if it.x == nil {
		it.x = new(itemMore)
	}
	return it.x
}

func (it *item) renewAt() time.Time {
	if it.x == nil {
		return time.Time{}
	}
	return it.x.renewAt
}

func (it *item) due() time.Time {
	if it.x == nil {
		return time.Time{}
	}
	return it.x.due
}

func (it *item) stopped() bool { return it.x != nil && it.x.stopped }

type call struct {
	items   []*item
	batch   stream.Batch
	cancel  context.CancelFunc
	start   time.Time
	end     time.Time
	err     error // batch result
	cut     bool  // cancelled because a lock ran out
	pending pending
}

// result is what a handler call reports: the whole call's (i < 0, last),
// or, for a per-record handler, the results of records i to i+len(errs)-1.
type result struct {
	cl   *call
	i    int
	errs []error
	late []bool
	last bool
}

// pending holds a per-record call's results that the lane has not taken
// yet: the call's goroutine appends, the lane takes them all at once when
// poked, so that the lane's scans run once per batch of results, not once
// per record.
type pending struct {
	mu   sync.Mutex
	from int // the index of errs[0]
	errs []error
	late []bool // the call's context was done when the record's handler returned
	last bool
}

type actionResult struct {
	it   *item
	err  error
	took time.Duration // how long the try took, for its log line
}

// settle follows one poll's records until every one is done or lost, or
// the lane stops.
type settle struct {
	l       *lane
	items   []*item
	recs    []stream.Record // the items' records, in the same order
	calls   int             // handler calls running
	actions int             // exhaustion actions running
	results chan result
	poke    chan *call // a per-record call has results pending
	open    map[*call]bool
	acted   chan actionResult
	acked   bool      // a final acknowledgement was made since the last flush
	ackedAt time.Time // when the first of them was made
}

func (s *settle) run(ctx context.Context) {
	c := s.l.c
	clock := c.set.Clock
	s.results = make(chan result)
	s.poke = make(chan *call, 1)
	s.open = map[*call]bool{}
	s.acted = make(chan actionResult)
	for {
		now := clock.Now()
		s.expire(now)
		if ctx.Err() != nil {
			s.shutdown()
			return
		}
		s.renew(ctx, now)
		now = clock.Now()
		s.start(ctx, now)
		wake, open := s.next(now)
		if !open && s.calls == 0 && s.actions == 0 {
			return // the acknowledgements go with the next poll's fetch
		}
		if s.acked {
			// Records stay open, so the lane does not poll soon: send the
			// final acknowledgements rather than wait for franz-go's 1s
			// timer, which may be longer than what is left of their locks.
			// Not at once while handler calls run, though: their results
			// come soon, and a flush is a round trip to the broker.
			flushAt := s.ackedAt.Add(min(maxAckDelay, c.lock/10))
			if s.calls == 0 || !now.Before(flushAt) {
				s.acked = false
				fctx, cancel := context.WithTimeout(ctx, c.lock/2)
				t0 := time.Now()
				ferr := s.l.cl.FlushAcks(fctx)
				cancel()
				s.l.log.Debug("redeliver: acknowledgements flushed", "took", time.Since(t0), "error", ferr)
			} else if wake.IsZero() || flushAt.Before(wake) {
				wake = flushAt
			}
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
			s.afterAction(r, clock.Now())
		case <-timer:
		case <-ctx.Done():
		}
		stop()
	}
}

// expire marks the records whose lock ran out as lost and cancels their
// handler calls.
func (s *settle) expire(now time.Time) {
	for _, it := range s.items {
		if it.state == done || it.state == lost || now.Before(it.deadline) {
			continue
		}
		prev := it.state
		it.state = lost
		s.l.log.Warn("redeliver: record lock lost, the broker may deliver it to another consumer; no acknowledgement from here",
			"topic", it.rec.Topic, "partition", it.rec.Partition, "offset", it.rec.Offset, "was", prev)
		if prev == running && it.call != nil && !it.call.cut {
			it.call.cut = true
			it.call.cancel()
		}
	}
}

// renew extends the locks of the records that are not done and have half
// their lock or less left. The renewal is flushed here, on the one
// goroutine that acknowledges this poll's records, so that no final
// acknowledgement of a record travels while its renewal does.
func (s *settle) renew(ctx context.Context, now time.Time) {
	c := s.l.c
	if c.noRenewal.Load() {
		return
	}
	var due []*item
	for _, it := range s.items {
		if it.state == done || it.state == lost {
			continue
		}
		at := it.renewAt()
		if at.IsZero() {
			at = it.deadline.Add(-c.lock / 2)
		}
		if !now.Before(at) {
			due = append(due, it)
		}
	}
	if len(due) == 0 {
		return
	}
	t0 := time.Now()
	for _, it := range due {
		it.kr.Ack(kgo.AckRenew)
	}
	fctx, cancel := context.WithTimeout(ctx, c.lock/4)
	err := s.l.cl.FlushAcks(fctx)
	cancel()
	after := c.set.Clock.Now()
	for _, it := range due {
		perr := s.l.ackErrSince(tp{it.rec.Topic, it.rec.Partition}, t0)
		switch {
		case err == nil && perr == nil:
			it.deadline = now.Add(c.lock)
			if it.x != nil {
				it.x.renewAt = time.Time{}
			}
			s.l.log.Debug("redeliver: lock renewed", "topic", it.rec.Topic, "partition", it.rec.Partition, "offset", it.rec.Offset, "until", it.deadline, "took", after.Sub(now))
		default:
			if perr == nil {
				perr = err
			}
			if errors.Is(perr, kerr.UnsupportedVersion) || errors.Is(perr, kerr.InvalidRequest) {
				if c.noRenewal.CompareAndSwap(false, true) {
					s.l.log.Warn("redeliver: the broker does not renew acquisition locks: a retry is held only while the record's lock lasts, a later one releases the record to the broker", "error", perr)
				}
			}
			it.more().renewAt = after.Add(c.lock / 10)
			s.l.log.Debug("redeliver: lock renewal failed", "topic", it.rec.Topic, "partition", it.rec.Partition, "offset", it.rec.Offset, "error", perr)
		}
	}
}

// next returns when the loop must look again, and whether any record is
// still open.
func (s *settle) next(now time.Time) (wake time.Time, open bool) {
	c := s.l.c
	earliest := func(t time.Time) {
		if !t.IsZero() && (wake.IsZero() || t.Before(wake)) {
			wake = t
		}
	}
	for _, it := range s.items {
		if it.state == done || it.state == lost {
			continue
		}
		open = true
		earliest(it.deadline)
		if !c.noRenewal.Load() {
			if at := it.renewAt(); at.IsZero() {
				earliest(it.deadline.Add(-c.lock / 2))
			} else {
				earliest(at)
			}
		}
		switch {
		case it.state == held:
			earliest(it.due())
		case it.state == acting && !it.stopped() && it.call == nil && !it.due().IsZero():
			earliest(it.due())
		}
	}
	return wake, open
}

// start delivers the records that are waiting or due, and runs the
// exhaustion actions that are due.
func (s *settle) start(ctx context.Context, now time.Time) {
	c := s.l.c
	var batch []*item
	flush := func() {
		if len(batch) > 0 {
			s.deliver(ctx, batch, now)
			batch = nil
		}
	}
	for _, it := range s.items {
		switch {
		case it.state == held && !now.Before(it.due()):
			it.state = waiting // the retry is due
		case it.state == acting && !it.stopped() && it.call == nil && !it.due().IsZero() && !now.Before(it.due()):
			it.x.due = time.Time{}
			s.act(ctx, it)
			continue
		}
		if it.state != waiting {
			continue
		}
		// A record that was retried goes alone, with its own Attempt;
		// first deliveries of one partition go together.
		retried := it.retried()
		if len(batch) > 0 && (retried || batch[0].rec.Topic != it.rec.Topic ||
			batch[0].rec.Partition != it.rec.Partition || len(batch) >= c.cfg.maxBatch) {
			flush()
		}
		batch = append(batch, it)
		if retried {
			flush()
		}
	}
	flush()
}

// machine returns the record's retry state machine, made on first use:
// most records never fail, and never need one.
func (it *item) machine(p *checkpoint.Policy) *checkpoint.Machine {
	x := it.more()
	if !x.hasM {
		x.m = checkpoint.NewMachine(*p)
		x.m.Begin(it.rec.Timestamp)
		x.hasM = true
	}
	return &x.m
}

// retried reports whether the record failed or was retried before.
func (it *item) retried() bool {
	if it.x == nil || !it.x.hasM {
		return false
	}
	st := it.x.m.State()
	return st.Retries > 0 || !st.FirstFailure.IsZero()
}

// attempt is the record's Attempt for its next delivery.
func (it *item) attempt(p *checkpoint.Policy) stream.Attempt {
	if it.x == nil || !it.x.hasM {
		return stream.Attempt{MaxRetries: p.MaxRetries, Last: p.MaxRetries == 0}
	}
	m := &it.x.m
	st := m.State()
	return stream.Attempt{Retry: st.Retries, MaxRetries: m.MaxRetries(), Last: m.Last(), FirstFailure: st.FirstFailure, LastError: m.LastError()}
}

// deliver runs the handler over items in a goroutine of its own.
func (s *settle) deliver(ctx context.Context, items []*item, now time.Time) {
	c := s.l.c
	hctx, cancel := context.WithCancel(ctx)
	cl := &call{items: items, cancel: cancel, start: now}
	cl.batch = stream.Batch{Topic: items[0].rec.Topic, Partition: items[0].rec.Partition, Attempt: items[0].attempt(&c.set.Policy)}
	first, n := int(items[0].idx), len(items)
	if int(items[n-1].idx)-first == n-1 {
		// Records that follow one another in the poll (a first
		// delivery): a part of recs, capped so that an append by the
		// handler does not write over the next records.
		cl.batch.Records = s.recs[first : first+n : first+n]
	} else {
		cl.batch.Records = make([]stream.Record, n)
		for i, it := range items {
			cl.batch.Records[i] = *it.rec
		}
	}
	for _, it := range items {
		it.state = running
		it.call = cl
	}
	s.calls++
	if c.fn != nil {
		s.open[cl] = true
	}
	go lifecycle.Inside(func() {
		defer cancel()
		if c.fn != nil {
			// A per-record handler: each record's result is applied as
			// soon as it is known, so a record done before a shutdown or
			// a lost lock is acknowledged.
			for i := range cl.batch.Records {
				err := protect(func() error { return c.fn(hctx, &cl.batch.Records[i]) })
				late := hctx.Err() != nil
				cl.pending.mu.Lock()
				cl.pending.errs = append(cl.pending.errs, err)
				cl.pending.late = append(cl.pending.late, late)
				cl.pending.last = i == len(cl.batch.Records)-1
				cl.pending.mu.Unlock()
				select {
				case s.poke <- cl:
				default: // the lane has a poke waiting: it takes these too
				}
			}
			return
		}
		cl.err = protect(func() error { return c.set.Handler.Handle(hctx, &cl.batch) })
		cl.end = c.set.Clock.Now()
		s.results <- result{cl: cl, i: -1, last: true}
	})
}

// protect runs f and turns a panic into a *stream.PanicError.
func protect(f func() error) (err error) {
	defer func() {
		if v := recover(); v != nil {
			err = &stream.PanicError{Value: v, Stack: debug.Stack()}
		}
	}()
	return f()
}

// finish applies a handler call's results to its records.
func (s *settle) finish(ctx context.Context, cl *call) {
	hooks := &s.l.c.set.Hooks
	for _, it := range cl.items {
		it.call = nil
	}
	if ctx.Err() != nil || cl.cut {
		if hooks.Delivered != nil {
			hooks.Delivered(stream.DeliveredEvent{BatchInfo: infoOf(&cl.batch), Attempt: cl.batch.Attempt, Outcome: stream.Cancelled, Err: context.Cause(ctx), Start: cl.start, Duration: cl.end.Sub(cl.start)})
		}
		for _, it := range cl.items {
			if it.state == running {
				s.event(Handled, it, func(e *Event) { e.Start = cl.start })
				it.state = waiting // deliver again (unless the lane stops)
			}
		}
		return
	}
	outcome, herr := stream.Succeeded, cl.err
	if herr != nil {
		outcome = stream.Failed
		if asRetryResult(herr) != nil {
			outcome = stream.RetryRequested
		}
	}
	if hooks.Delivered != nil {
		hooks.Delivered(stream.DeliveredEvent{BatchInfo: infoOf(&cl.batch), Attempt: cl.batch.Attempt, Outcome: outcome, Err: herr, Start: cl.start, Duration: cl.end.Sub(cl.start)})
	}
	now := cl.end
	var be *stream.BatchError
	if errors.As(cl.err, &be) && be.Index >= 0 && be.Index < len(cl.items) {
		// The record at be.Index failed (or asked for a retry) alone:
		// the records before it are done, and the ones after it were not
		// tried and count nothing, at index 0 too.
		for _, it := range cl.items[:be.Index] {
			s.result(ctx, it, nil, cl.start, now)
		}
		ferr := be.Err
		if ferr == nil {
			ferr = fmt.Errorf("stream: the handler returned FailedAt(%d, nil): the record at offset %d failed with no error", be.Index, cl.items[be.Index].rec.Offset)
		}
		s.result(ctx, cl.items[be.Index], ferr, cl.start, now)
		for _, it := range cl.items[be.Index+1:] {
			if it.state == running {
				it.state = waiting // not handled: delivered again at once
			}
		}
		return
	}
	for _, it := range cl.items {
		s.result(ctx, it, cl.err, cl.start, now)
	}
}

// takePending takes the results every open per-record call has pending,
// and closes the calls that reported their last record.
func (s *settle) takePending() []result {
	var out []result
	for cl := range s.open {
		cl.pending.mu.Lock()
		r := result{cl: cl, i: cl.pending.from, errs: cl.pending.errs, late: cl.pending.late, last: cl.pending.last}
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
func (s *settle) finishRecord(ctx context.Context, cl *call, i int, rerr error, late bool) {
	it, now := cl.items[i], s.l.c.set.Clock.Now()
	it.call = nil
	b := s.one(it)
	b.Attempt = cl.batch.Attempt
	outcome, err := stream.Succeeded, rerr
	if late || cl.cut {
		outcome, err = stream.Cancelled, context.Cause(ctx)
		if cl.cut {
			err = errLockLost
		}
	} else if err != nil {
		outcome = stream.Failed
		if asRetryResult(err) != nil {
			outcome = stream.RetryRequested
		}
	}
	if h := s.l.c.set.Hooks.Delivered; h != nil {
		h(stream.DeliveredEvent{BatchInfo: infoOf(b), Attempt: b.Attempt, Outcome: outcome, Err: err, Start: cl.start, Duration: now.Sub(cl.start)})
	}
	if outcome == stream.Cancelled {
		if it.state == running {
			s.event(Handled, it, func(e *Event) { e.Start = cl.start })
			it.state = waiting // deliver again (unless the lane stops)
		}
		return
	}
	s.result(ctx, it, rerr, cl.start, now)
}

// errLockLost is the cause of a delivery cut short by a lost lock.
var errLockLost = errors.New("share: acquisition lock lost")

// asRetryResult returns the retry request err makes, read as the
// Processor reads it (a failure beside a RetryResult, Permanent and an
// invalid RetryResult are failures); nil for none.
func asRetryResult(err error) *stream.RetryResult {
	rr, _ := stream.RetryRequestOf(err)
	return rr
}

func infoOf(b *stream.Batch) stream.BatchInfo {
	return stream.BatchInfo{Topic: b.Topic, Partition: b.Partition, FirstOffset: b.FirstOffset(), LastOffset: b.LastOffset(), Records: len(b.Records)}
}

func (s *settle) one(it *item) *stream.Batch {
	return &stream.Batch{Topic: it.rec.Topic, Partition: it.rec.Partition, Records: []stream.Record{*it.rec}, Attempt: it.attempt(&s.l.c.set.Policy)}
}

// result decides what happens to one record after a delivery.
func (s *settle) result(ctx context.Context, it *item, err error, start, now time.Time) {
	if it.state != running {
		return // lost meanwhile
	}
	if err == nil {
		s.event(Handled, it, func(e *Event) { e.OK, e.Start = true, start })
		s.accept(it)
		return
	}
	var d checkpoint.Decision
	failed := true
	if rr, ferr := stream.RetryRequestOf(err); rr != nil {
		failed = false
		m := it.machine(&s.l.c.set.Policy)
		m.Override(checkpoint.Policy{MaxRetries: rr.MaxRetries, Backoff: checkpoint.Fixed(rr.Delay)})
		d = m.Request(now, s.l.rnd)
	} else {
		d = it.machine(&s.l.c.set.Policy).Fail(now, ferr, s.l.rnd)
	}
	s.event(Handled, it, func(e *Event) { e.OK, e.Start = !failed && d.Action == checkpoint.StopRetrying, start })
	switch d.Action {
	case checkpoint.StopRetrying:
		if !failed {
			// A RetryResult's retries are spent: the record is done.
			s.accept(it)
			return
		}
		var xerr *checkpoint.ExhaustedError
		errors.As(it.machine(&s.l.c.set.Policy).Err(), &xerr)
		s.exhaust(ctx, it, xerr, xerr.Error())
	default:
		s.schedule(ctx, it, d, err, failed, now)
	}
}

// maxAckDelay is how long a final acknowledgement may wait for others
// while handler calls of the same poll run.
const maxAckDelay = 100 * time.Millisecond

// ackMade notes a final acknowledgement, to be flushed.
func (s *settle) ackMade() {
	if !s.acked {
		s.acked, s.ackedAt = true, s.l.c.set.Clock.Now()
	}
}

func (s *settle) accept(it *item) {
	it.kr.Ack(kgo.AckAccept)
	it.state = done
	s.ackMade()
	s.event(Accepted, it, nil)
}

func (s *settle) reject(it *item) {
	it.kr.Ack(kgo.AckReject)
	it.state = done
	s.ackMade()
	s.event(Rejected, it, nil)
}

func (s *settle) release(it *item) {
	it.kr.Ack(kgo.AckRelease)
	it.state = done
	s.ackMade()
	s.event(Released, it, nil)
}

// schedule holds a record until its retry is due, or releases it to the
// broker when it is due too late to hold.
func (s *settle) schedule(ctx context.Context, it *item, d checkpoint.Decision, err error, failed bool, now time.Time) {
	c := s.l.c
	if !failed {
		err = nil
	}
	if h := c.set.Hooks.RetryScheduled; h != nil {
		h(stream.RetryEvent{BatchInfo: infoOf(s.one(it)), Retry: d.Retry, Delay: d.Delay, At: d.At, Err: err})
	}
	margin := min(c.lock/10, 2*time.Second)
	holdable := d.At.Sub(now) <= c.cfg.maxHold && (!c.noRenewal.Load() || d.At.Before(it.deadline.Add(-margin)))
	if holdable {
		it.state, it.more().due = held, d.At
		s.event(Held, it, func(e *Event) { e.At = d.At })
		s.l.log.Debug("redeliver: retry scheduled, record held", "topic", it.rec.Topic, "partition", it.rec.Partition, "offset", it.rec.Offset, "retry", d.Retry, "delay", d.Delay, "error", err)
		return
	}
	if limit := int(c.limit.Load()); limit > 0 && int(it.dc) >= limit {
		// Released, the broker would archive it: give it up here.
		m := it.machine(&c.set.Policy)
		st := m.State()
		xerr := &checkpoint.ExhaustedError{Reason: checkpoint.RetriesSpent, Retries: st.Retries - 1, FirstFailure: st.FirstFailure, Last: m.LastError()}
		s.exhaust(ctx, it, xerr, fmt.Sprintf("retry due in %v cannot be held and the broker's delivery count limit %d is reached", d.Delay, limit))
		return
	}
	s.l.log.Info("redeliver: retry due too late to hold, record released to the broker", "topic", it.rec.Topic, "partition", it.rec.Partition, "offset", it.rec.Offset, "delay", d.Delay, "max_hold", c.cfg.maxHold)
	s.release(it)
}

// exhaust gives a record up: the Exhausted hook, then the exhaustion action;
// the record is rejected only once the action succeeded.
func (s *settle) exhaust(ctx context.Context, it *item, xerr *checkpoint.ExhaustedError, reason string) {
	c := s.l.c
	it.more().xerr, it.x.reason = xerr, reason
	if h := c.set.Hooks.Exhausted; h != nil {
		h(stream.ExhaustedEvent{BatchInfo: infoOf(s.one(it)), Err: xerr})
	}
	s.l.log.Error("redeliver: record given up", "topic", it.rec.Topic, "partition", it.rec.Partition, "offset", it.rec.Offset,
		"retries", xerr.Retries, "delivery_count", it.dc, "reason", reason, "error", xerr.Last)
	it.state = acting
	if c.set.Exhaustion == nil {
		s.event(ActionDone, it, nil) // skipping always succeeds
		s.reject(it)
		return
	}
	s.act(ctx, it)
}

// act runs the exhaustion action of a given-up record in a goroutine.
func (s *settle) act(ctx context.Context, it *item) {
	c := s.l.c
	actx := stream.WithSource(ctx, stream.Source{Group: c.group, Reason: it.x.reason})
	b := s.one(it)
	s.actions++
	it.call = &call{} // marks the action as running
	go lifecycle.Inside(func() {
		start := c.set.Clock.Now()
		err := protect(func() error { return c.set.Exhaustion(actx, b, it.x.xerr) })
		s.acted <- actionResult{it, err, c.set.Clock.Now().Sub(start)}
	})
}

func (s *settle) afterAction(r actionResult, now time.Time) {
	it := r.it
	it.call = nil
	if it.state != acting {
		return // lost meanwhile: no acknowledgement
	}
	if r.err == nil {
		s.event(ActionDone, it, nil)
		s.reject(it)
		return
	}
	if stream.IsStop(r.err) {
		it.x.stopped = true
		s.l.log.Error("redeliver: StopPartition in a share group: the record is held, its lock renewed, until the consumer stops; then it is released", "topic", it.rec.Topic, "partition", it.rec.Partition, "offset", it.rec.Offset)
		return
	}
	x := it.x
	x.tries++
	x.prevOp = s.l.c.set.OperationBackoff(x.tries, x.prevOp, s.l.rnd)
	x.due = now.Add(x.prevOp)
	s.l.log.Warn("redeliver: exhaustion action failed, will try again after the delay; the record is held meanwhile", "topic", it.rec.Topic, "partition", it.rec.Partition, "offset", it.rec.Offset, "try", x.tries, "took", r.took, "delay", x.prevOp, "error", r.err)
}

// drainAtShutdown takes the per-record results pending at shutdown: a
// record whose handler succeeded before its context was cancelled is
// accepted; the others are left to be released.
func (s *settle) drainAtShutdown() {
	for _, r := range s.takePending() {
		for j, err := range r.errs {
			it := r.cl.items[r.i+j]
			it.call = nil
			if err == nil && !r.late[j] && it.state == running {
				s.event(Handled, it, func(e *Event) { e.OK, e.Start = true, r.cl.start })
				s.accept(it)
			}
		}
	}
}

// shutdown cancels the handler calls and waits for them and for the
// actions, then releases every record that is not done or lost. A record
// whose action succeeded meanwhile is rejected, as it was handed over.
func (s *settle) shutdown() {
	s.drainAtShutdown()
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
		case <-s.poke:
			s.drainAtShutdown()
		case r := <-s.acted:
			s.actions--
			r.it.call = nil
			if r.err == nil && r.it.state == acting {
				s.event(ActionDone, r.it, nil)
				s.reject(r.it)
			}
		}
	}
	var released []int64
	for _, it := range s.items {
		if it.state == done || it.state == lost {
			continue
		}
		s.release(it)
		released = append(released, it.rec.Offset)
	}
	if len(released) > 0 {
		slices.Sort(released)
		s.l.log.Info("redeliver: records in flight released at shutdown", "records", len(released))
	}
}
