package stream

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"time"
	"unsafe"

	"github.com/redeliver-go/redeliver/checkpoint"
	"github.com/redeliver-go/redeliver/internal/lifecycle"
	"github.com/redeliver-go/redeliver/internal/retrystate"
)

// The keyed driver's records (keyed.go runs the loop, the fetches and
// the admission): how a record is delivered, counted, held for its retry
// or for room in the window, given up and finished, and how the window is
// committed.

func (d *kdriver) machine(r *krec) *retrystate.Machine {
	if r.m == nil {
		m := retrystate.NewMachineOf(&d.p.cfg.policy)
		m.Begin(r.rec.Timestamp)
		r.m = &m
	}
	return r.m
}

// activate makes r its key's head: delivered, or, with a state a
// previous owner committed, continued from it.
func (d *kdriver) activate(r *krec) {
	if !r.resumed {
		r.resumed = true
		if s, ok := d.win.State(r.rec.Offset); ok {
			d.resume(r, s)
			return
		}
	}
	r.st = kready
	d.ready = append(d.ready, r)
}

// resume continues the state s that a previous owner committed for r.
func (d *kdriver) resume(r *krec, s retrystate.State) {
	m := d.machine(r)
	now := d.p.cfg.clock.Now()
	dec := m.Resume(s, now, d.rnd)
	d.log.Info("redeliver: continuing retry state of a previous owner", "offset", r.rec.Offset,
		"retries", s.Retries, "first_failure", s.FirstFailure, "next_at", s.NextAt, "started", s.Started, "next", dec.Action.String())
	switch dec.Action {
	case 0:
		// A fresh count (a record stopped, then moved).
		d.setState(r, retrystate.State{})
		r.st = kready
		d.ready = append(d.ready, r)
	case retrystate.StopRetrying:
		d.giveUp(r)
	default:
		if s.Started {
			// Its retry never reported: counted as failed, scheduled
			// anew (and committed before it is delivered).
			d.scheduled(r, dec, retrystate.ErrInterrupted)
		}
		d.hold(r, dec, s.Started)
	}
}

// stateOf is r's state as its window keeps it.
func (d *kdriver) stateOf(r *krec) retrystate.State {
	m := d.machine(r)
	s := m.State()
	s.Offset, s.Records, s.Alone, s.LastError = r.rec.Offset, 0, false, ""
	if err := m.LastError(); err != nil {
		s.LastError = err.Error()
	}
	return s
}

// setState sets r's state in the window; it reports false when there is
// no room for it.
func (d *kdriver) setState(r *krec, s retrystate.State) bool {
	var err error
	if s.GivenUp != 0 {
		err = d.win.GiveUp(r.rec.Offset, s)
	} else {
		err = d.win.Retry(r.rec.Offset, s)
	}
	switch {
	case errors.Is(err, retrystate.ErrWindowFull):
		return false
	case err != nil:
		// A state the window cannot hold (times too far apart): the
		// record goes on without it; a next owner starts its count over.
		d.log.Warn("redeliver: retry state not kept in the commit: a next owner starts the record's count over", "offset", r.rec.Offset, "error", err)
	default:
		d.stateSet = true
	}
	return true
}

// hold keeps r until its retry is due at dec.At, with its state in the
// window, or waits for room for its state. A failure just scheduled
// (fresh) whose backoff is too short for its state and its started mark
// one after the other is marked started at once instead (markAlone): the
// next commit writes its failure and its retry's start as one.
func (d *kdriver) hold(r *krec, dec retrystate.Decision, fresh bool) {
	r.due = dec.At
	now := d.p.cfg.clock.Now()
	r.short = shortBackoff(now, r.due)
	if fresh && !d.p.cfg.memoryOnly && d.p.markAlone(now, r.due, dec.Delay) && d.win.FitsState(r.rec.Offset) {
		d.startRetry(r, now)
		return
	}
	if d.p.cfg.memoryOnly || d.setState(r, d.stateOf(r)) {
		r.st = kheld
		d.held = append(d.held, r)
		return
	}
	r.st = kroom
	d.room = append(d.room, r)
	d.log.Info("redeliver: no room in the commit for the record's retry state: its retry waits until a retrying record finishes, and no new record is taken in meanwhile",
		"offset", r.rec.Offset, "unfinished", d.win.Unfinished(), "size", d.win.Size())
}

// placeRoom gives room to the records waiting for it, lowest offset
// first.
func (d *kdriver) placeRoom() {
	if len(d.room) == 0 {
		return
	}
	slices.SortFunc(d.room, func(a, b *krec) int { return compareInt64(a.rec.Offset, b.rec.Offset) })
	n := 0
	for _, r := range d.room {
		if !d.win.FitsState(r.rec.Offset) || !d.setState(r, d.stateOf(r)) {
			break
		}
		r.st = kheld
		d.held = append(d.held, r)
		n++
	}
	d.room = slices.Delete(d.room, 0, n)
}

func compareInt64(a, b int64) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

// markLead is how long before r's retry is due its started mark is sent:
// the processor's markLead after a short backoff, none after a longer one
// or with no mark to write.
func (d *kdriver) markLead(r *krec) time.Duration {
	if !r.short || d.p.cfg.memoryOnly {
		return 0
	}
	return d.p.markLead()
}

// dueRetries marks started the retries that are due or whose mark's lead
// is reached (committed before they are delivered), or gives the record up
// when its limits are reached by then; and lets the retries whose marks
// were committed ahead go once they are due.
func (d *kdriver) dueRetries(now time.Time) {
	keep := d.held[:0]
	for _, r := range d.held {
		if now.Before(r.due.Add(-d.markLead(r))) {
			keep = append(keep, r)
			continue
		}
		d.startRetry(r, now)
	}
	clear(d.held[len(keep):])
	d.held = keep
	d.dueMarked(now)
}

// startRetry marks r's retry started, as of its due time when that is
// later than now (its limits are checked as of then), to be committed
// before it is delivered; or gives r up when its limits are reached by
// then.
func (d *kdriver) startRetry(r *krec, now time.Time) {
	if dec := d.machine(r).Start(later(now, r.due)); dec.Action == retrystate.StopRetrying {
		d.giveUp(r)
		return
	}
	if !d.p.cfg.memoryOnly {
		d.setState(r, d.stateOf(r)) // it holds a state, or was checked to fit: it fits
	}
	r.st = kstarting
	d.starting = append(d.starting, r)
}

// startDueTimer starts dueTimer for the earliest due time, after now, of
// the retries about to be marked, unless it runs for that time already.
func (d *kdriver) startDueTimer(now time.Time) {
	var at time.Time
	for _, r := range d.starting {
		if r.due.After(now) && (at.IsZero() || r.due.Before(at)) {
			at = r.due
		}
	}
	if at.IsZero() || d.dueTimer.ch != nil && !at.Before(d.dueAt) {
		return
	}
	d.dueTimer.cancel()
	d.dueTimer, d.dueAt = d.p.timer(at), at
}

// dueMarked makes the retries whose marks are committed ready once they
// are due, and lets dueTimer go once its time has come. A due retry is
// delivered before the records that are ready for their first delivery:
// it is late otherwise by as long as those take (up to the window's
// records, with a busy partition), and its key's later records, and the
// window's base, wait for it.
func (d *kdriver) dueMarked(now time.Time) {
	if d.dueTimer.ch != nil && !now.Before(d.dueAt) {
		d.dueTimer.cancel()
		d.dueTimer = deadline{}
	}
	keep, due := d.marked[:0], 0
	for _, r := range d.marked {
		if now.Before(r.due) {
			keep = append(keep, r)
			continue
		}
		r.st = kready
		d.ready = append(d.ready, r)
		due++
	}
	clear(d.marked[len(keep):])
	d.marked = keep
	if due > 0 && due < len(d.ready) {
		// Ahead of the records ready before them, in the order they
		// came due.
		n := len(d.ready) - due
		slices.Reverse(d.ready[:n])
		slices.Reverse(d.ready[n:])
		slices.Reverse(d.ready)
	}
}

// commit writes the window when it changed, then lets the retries marked
// started go and answers the Skips waiting for it. It returns an error
// when the driver must stop.
func (d *kdriver) commit(ctx context.Context) error {
	if d.win != nil {
		next, md := d.win.Base(), ""
		if !d.p.cfg.memoryOnly {
			md = d.win.Encode()
		}
		// A base past the records fetched (the last records of a
		// restored window were finished by the previous owner) waits
		// until they are fetched: nothing is committed past what this
		// owner has seen.
		if (next != d.lastNext || md != d.lastMD) && next <= d.fetched {
			start := d.p.cfg.clock.Now()
			d.startDueTimer(start)
			// A retry-state commit: its time is what the next marks are
			// sent ahead by.
			mine := d.stateSet && d.p.beginWrite(start)
			err := d.write(ctx, next, md)
			if d.stateSet {
				d.p.timedWrite(start, mine)
			}
			if err != nil {
				return err
			}
		}
	}
	d.stateSet = false
	// Marked ahead of their due times: they wait for them.
	d.marked = append(d.marked, d.starting...)
	for _, r := range d.starting {
		r.st = kmarked
	}
	clear(d.starting)
	d.starting = d.starting[:0]
	d.dueMarked(d.p.cfg.clock.Now())
	for _, c := range d.replies {
		c <- nil
	}
	d.replies = nil
	return nil
}

// write commits next with md, trying again until it succeeds.
func (d *kdriver) write(ctx context.Context, next int64, md string) error {
	u := &unit{p: d.p, log: d.log, rnd: d.rnd, claim: d.claim}
	err := d.c.Commit(ctx, next, md)
	if err != nil && !errors.Is(err, ErrRevoked) {
		err = u.repeat(ctx, "commit", true, func() error { return d.c.Commit(ctx, next, md) })
	}
	switch {
	case errors.Is(err, ErrRevoked):
		return ErrRevoked
	case err != nil:
		d.log.Warn("redeliver: commit given up: the claim ended before a failed commit was written; the partition's next owner starts from the last checkpoint written",
			"next", next, "cause", context.Cause(ctx))
		return context.Cause(ctx)
	}
	d.lastNext, d.lastMD = next, md
	if h := d.p.cfg.hooks.Checkpointed; h != nil {
		h(CheckpointEvent{Topic: d.c.Topic(), Partition: d.c.Partition(), ClaimID: d.claim, Next: next, Metadata: md})
	}
	return nil
}

// start delivers ready records up to the concurrency limits.
func (d *kdriver) start(ctx context.Context) {
	n, most := 0, d.k.perPartition+d.lookAhead()
	for _, r := range d.ready {
		if d.running >= most || !d.k.lim.acquire(d) {
			break
		}
		n++
		d.deliver(ctx, r)
	}
	clear(d.ready[:n])
	if n == len(d.ready) {
		d.ready = d.ready[:0]
	} else {
		d.ready = d.ready[n:] // nothing moved: appends make room when they must
	}
}

func (d *kdriver) one(r *krec) *Batch {
	b := &r.b
	*b = Batch{Topic: r.rec.Topic, Partition: r.rec.Partition, Records: unsafe.Slice(&r.rec, 1)}
	if r.m != nil {
		b.Attempt = attemptOf(r.m)
	} else {
		pol := &d.p.cfg.policy
		b.Attempt = Attempt{MaxRetries: pol.MaxRetries, Last: pol.MaxRetries == 0}
	}
	return b
}

func (d *kdriver) infoOf(b *Batch) BatchInfo {
	return BatchInfo{Topic: b.Topic, Partition: b.Partition, ClaimID: d.claim, FirstOffset: b.FirstOffset(), LastOffset: b.LastOffset(), Records: len(b.Records)}
}

// lookAhead is how many records the driver hands to the partition's
// callers beyond its concurrency limit: they wait in the callers' queue,
// so that a caller whose call returns goes on with the next record at
// once, instead of waiting for the driver's next turn (with 256 records at
// once, the turn's wait was a quarter of a 2ms handler's time per record).
// The callers are perPartition at most, so perPartition calls at most run
// at once. None under a processor-wide limit (WithConcurrency's
// perProcessor), whose places the records held back would take from
// other partitions.
func (d *kdriver) lookAhead() int {
	if d.k.lim != nil {
		return 0
	}
	return d.k.perPartition / 4
}

// kcall is a record handed to the callers, with its batch.
type kcall struct {
	r *krec
	b *Batch
}

// kcallers run the driver's handler calls: up to perPartition goroutines,
// each taking the next record handed over until there is none, then
// ending. A record handed over while fewer than perPartition run starts
// one; else one that runs takes it once its call returns, as a caller
// ends only when it finds none.
type kcallers struct {
	mu    sync.Mutex
	queue []kcall
	live  int
}

// deliver hands r to the callers.
func (d *kdriver) deliver(ctx context.Context, r *krec) {
	r.st = krunning
	d.running++
	w := &d.callers
	w.mu.Lock()
	w.queue = append(w.queue, kcall{r: r, b: d.one(r)})
	spawn := w.live < d.k.perPartition
	if spawn {
		w.live++
	}
	w.mu.Unlock()
	if spawn {
		go lifecycle.Inside(func() { d.callLoop(ctx) })
	}
}

// callLoop calls the handler over the records handed over, one at a time,
// until there is none.
func (d *kdriver) callLoop(ctx context.Context) {
	w := &d.callers
	for {
		w.mu.Lock()
		if len(w.queue) == 0 {
			w.live--
			w.mu.Unlock()
			return
		}
		c := w.queue[0]
		w.queue[0] = kcall{}
		w.queue = w.queue[1:]
		w.mu.Unlock()
		d.call(ctx, c.r, c.b)
	}
}

// call calls the handler over r, or says it was not called once ctx is
// done, and posts the result.
func (d *kdriver) call(ctx context.Context, r *krec, b *Batch) {
	if ctx.Err() != nil {
		d.post(kevent{r: r, b: b, notCalled: true})
		return
	}
	hctx, kc := ctx, (*keyCtx)(nil)
	if d.k.ordering == ByKey && r.q != nil {
		kc = &keyCtx{Context: ctx, key: r.q.key.s, marks: len(d.k.mw) > 0}
		hctx = kc
	}
	// The clock is read for the Delivered hook, and at a failure for its
	// retry's schedule: a success with no hook reads none.
	clock := d.p.cfg.clock
	hooked := d.p.cfg.hooks.Delivered != nil
	var start, end time.Time
	if hooked {
		start = clock.Now()
	}
	err := d.p.call(hctx, b)
	if hooked || err != nil {
		end = clock.Now()
	}
	d.post(kevent{r: r, b: b, err: err, start: start, end: end, behind: kc != nil && kc.behind.Load()})
}

// result applies a handler call's result to its record.
func (d *kdriver) result(ctx context.Context, e kevent) {
	d.running--
	d.k.lim.release()
	r, b := e.r, e.b
	if e.notCalled {
		// Handed over but never called: nothing was in flight to abandon
		// (a batch the worker had not started is not reported either).
		// The claim has ended, and the record is not committed as done.
		r.st = kdone
		return
	}
	if ctx.Err() != nil {
		d.p.delivered(d.infoOf(b), b.Attempt, Cancelled, e.err, e.start, e.end, false)
		d.abandoned(r, b, context.Cause(ctx))
		return
	}
	res := readResult(e.err, b, d.log)
	if res.outcome == Succeeded && e.behind {
		// Not handled: parked behind its key, to be re-driven after the
		// key's earlier records. Finished for the commit, not a success.
		res.outcome = ParkedBehind
	}
	if d.p.cfg.hooks.Delivered != nil {
		d.p.delivered(d.infoOf(b), b.Attempt, res.outcome, e.err, e.start, e.end, false)
	}
	if res.outcome == Succeeded || res.outcome == ParkedBehind {
		d.finish(r)
		return
	}
	m := d.machine(r)
	var dec retrystate.Decision
	if res.rr != nil {
		dec = m.RequestRetries(e.end, res.rr.request(), d.rnd)
	} else {
		dec = m.Fail(e.end, res.cause, d.rnd)
	}
	switch {
	case dec.Action != retrystate.StopRetrying:
		cause := res.cause
		if res.outcome == RetryRequested {
			cause = nil
		}
		d.scheduled(r, dec, cause)
		d.hold(r, dec, true)
	case res.outcome == RetryRequested:
		d.finish(r) // a RetryResult's retries are spent: done
	default:
		d.giveUp(r)
	}
}

func (d *kdriver) scheduled(r *krec, dec retrystate.Decision, cause error) {
	if h := d.p.cfg.hooks.RetryScheduled; h != nil {
		h(RetryEvent{BatchInfo: d.infoOf(d.one(r)), Retry: dec.Retry, Delay: dec.Delay, At: dec.At, Err: cause})
	}
	d.log.Debug("redeliver: retry scheduled", "offset", r.rec.Offset, "retry", dec.Retry, "delay", dec.Delay, "error", cause)
}

func (d *kdriver) abandoned(r *krec, b *Batch, cause error) {
	r.st = kdone
	if h := d.p.cfg.hooks.Abandoned; h != nil {
		h(AbandonedEvent{BatchInfo: d.infoOf(b), Attempt: b.Attempt, Cause: cause})
	}
}

// finish marks r finished, and makes the next record of its key the head.
func (d *kdriver) finish(r *krec) {
	r.st = kdone
	if err := d.win.Finish(r.rec.Offset); err != nil {
		d.log.Error("redeliver: window", "error", err)
	}
	q := r.q
	r.q = nil
	if len(q.recs) > 0 && q.recs[0] == r {
		q.recs[0] = nil
		q.recs = q.recs[1:]
	}
	if len(q.recs) == 0 {
		delete(d.queues, q.key)
		if len(d.spareQ) < maxSpareQueues {
			q.key, q.recs = kkey{}, q.recs[:0]
			d.spareQ = append(d.spareQ, q)
		}
		return
	}
	d.activate(q.recs[0])
}

// giveUp gives r up: its exhaustion action runs, and its key waits for
// it.
func (d *kdriver) giveUp(r *krec) {
	m := d.machine(r)
	var xerr *checkpoint.ExhaustedError
	if !errors.As(m.Err(), &xerr) {
		xerr = &checkpoint.ExhaustedError{Reason: checkpoint.RetriesSpent, Retries: m.State().Retries, FirstFailure: m.State().FirstFailure, Last: m.LastError()}
	}
	if d.p.cfg.exhaustion != nil && !d.p.cfg.memoryOnly {
		// Until its action succeeds, a next owner gives it up again at
		// once (when there is room for its state; else it delivers it
		// again).
		d.setState(r, m.GivenUpState())
	}
	r.st = kacting
	b := d.one(r)
	u := &unit{p: d.p, log: d.log, rnd: d.p.newRand(), claim: d.claim, record: true,
		haltLog: "redeliver: key stopped until its record is resumed or skipped (Processor.ResumeRecord, SkipRecord): the key's later records wait, the partition's other keys go on"}
	if d.p.cfg.exhaustion == nil {
		u.exhaust(context.Background(), b, xerr) // logs and reports; nothing to wait for
		d.finish(r)
		return
	}
	d.actions++
	ctx := d.keyed(d.actx, r)
	go lifecycle.Inside(func() {
		again, reply, err := u.exhaust(ctx, b, xerr)
		d.post(kevent{r: r, acted: true, again: again, reply: reply, aerr: err})
	})
}

// keyed returns ctx with r's ordering key for [OrderKey], in ByKey
// ordering.
func (d *kdriver) keyed(ctx context.Context, r *krec) context.Context {
	if d.k.ordering != ByKey || r.q == nil {
		return ctx
	}
	return &keyCtx{Context: ctx, key: r.q.key.s}
}

// keyCtx is the context of a handler call or an exhaustion action in ByKey
// ordering: its record's ordering key ([OrderKey]) and, for a handler call
// under key middleware, the call's mark of [MarkParkedBehind]. One value
// per call, where a context.WithValue for each took two or three.
type keyCtx struct {
	context.Context
	key    string
	marks  bool        // MarkParkedBehind sets behind
	behind atomic.Bool // the call was parked behind its key's parked records
}

func (c *keyCtx) Value(k any) any {
	switch k.(type) {
	case orderKeyCtx:
		return c.key
	case parkedBehindCtx:
		if c.marks {
			return &c.behind
		}
	}
	return c.Context.Value(k)
}

// acted applies the end of an exhaustion action.
func (d *kdriver) acted(e kevent) {
	d.actions--
	r := e.r
	switch {
	case e.aerr != nil:
		// The claim ended: the next owner gives it up again.
	case e.again:
		// Resumed: delivered again with a fresh count.
		d.machine(r).Begin(r.rec.Timestamp)
		d.setState(r, retrystate.State{})
		r.st = kready
		d.ready = append(d.ready, r)
	default:
		d.finish(r)
		if e.reply != nil {
			d.replies = append(d.replies, e.reply)
		}
	}
}

// drain waits for the handler calls and actions in flight, which see the
// claim's context done, once the driver stops.
func (d *kdriver) drain(ctx context.Context, cause error) {
	for _, c := range d.replies {
		c <- fmt.Errorf("stream: skip of a record of %s/%d not written (%w): its next owner delivers the record again", d.c.Topic(), d.c.Partition(), cause)
	}
	d.replies = nil
	for d.running > 0 || d.actions > 0 {
		<-d.poke
		d.mu.Lock()
		in := d.inbox
		d.inbox = nil
		d.mu.Unlock()
		for _, e := range in {
			if e.acted {
				d.actions--
				if e.reply != nil && e.aerr == nil && !e.again {
					e.reply <- fmt.Errorf("stream: skip of the record %s/%d at offset %d not written (%w): its next owner delivers it again", d.c.Topic(), d.c.Partition(), e.r.rec.Offset, cause)
				}
				continue
			}
			d.result(ctx, e)
		}
	}
	if d.win != nil && d.win.Unfinished() > 0 {
		d.log.Info("redeliver: keyed partition stopped; its next owner goes on from the last window committed",
			"cause", cause, "base", d.lastNext, "unfinished", d.win.Unfinished())
	}
}
