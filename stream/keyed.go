package stream

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"time"

	"github.com/redeliver-go/redeliver/checkpoint"
	"github.com/redeliver-go/redeliver/internal/lifecycle"
)

// The keyed driver: a claimed partition in ByKey or ByNone ordering. Each
// record is a unit of its own (its machine, backoff, RetryResult and
// give-up, through unit.go's shared code); a key's records wait in a
// queue, and only the queue's head is handled, retried or given up; heads
// of different queues run at once, up to the concurrency limits.
//
// One goroutine (run) owns the claim, the window and the queues. Handler
// calls and exhaustion actions run in goroutines of their own and post
// their results to the inbox; a post wakes the driver, and cancels the
// Fetch it may be blocked in (the claim keeps the records of a Fetch
// whose context ends, for the next). The claim's methods are called one
// at a time, from run.
//
// The commit is the window's (checkpoint.Window, ReserveOnFailure): its
// base, with the finished records above it and each retrying record's
// state as metadata. It is written once per turn of the loop when it
// changed, and always before a retry is delivered: a record's state
// marked started is committed first, as in ByPartition ordering.

// kstate says where a record of the keyed driver stands.
type kstate uint8

const (
	kqueued   kstate = iota // behind the head of its key's queue
	kready                  // the head, to be delivered when a place is free
	krunning                // in a handler call
	kheld                   // failed, its state kept: waits for its retry to be due
	kroom                   // failed, no room for its state yet: waits for room
	kstarting               // its retry is due and marked started: delivered once committed
	kacting                 // given up: its exhaustion action runs (or StopPartition holds it)
	kdone                   // finished
)

// kkey names a queue: a key, or for ByNone a record's offset.
type kkey struct {
	s   string
	off int64
}

type krec struct {
	rec  Record
	q    *kqueue
	st   kstate
	m    checkpoint.Machine
	hasM bool
	due  time.Time // kheld, kroom: when its retry is due
	// resumed says that its state in a restored window was applied.
	resumed bool
}

type kqueue struct {
	key  kkey
	recs []*krec // recs[0] is the head
}

// kevent is what a handler call or an exhaustion action posts.
type kevent struct {
	r *krec
	// a handler call's
	b          *Batch
	err        error
	start, end time.Time
	notCalled  bool // the claim ended before the call
	// an exhaustion action's
	acted bool
	again bool
	reply chan<- error
	aerr  error
}

// maxUnfinished bounds how many records a partition takes in before they
// finish (in memory), whatever room its window has.
func (k *keyedConfig) maxUnfinished() int { return max(1024, 4*k.perPartition) }

type kdriver struct {
	p     *Processor
	c     Claim
	k     *keyedConfig
	claim uint64
	log   *slog.Logger
	rnd   checkpoint.Rand

	actx       context.Context // the claim's, for the exhaustion actions
	win        *checkpoint.Window
	fetched    int64 // the offset after the last record fetched; -1 for none
	fetchedAny bool  // records were fetched
	lastNext   int64
	lastMD     string
	queues     map[kkey]*kqueue
	pending    []*krec // fetched, not taken in yet
	ready      []*krec
	held       []*krec
	room       []*krec
	starting   []*krec
	running    int
	actions    int
	replies    []chan<- error // Skips to answer once committed
	fullLogged bool

	mu          sync.Mutex
	inbox       []kevent
	fetchCancel context.CancelFunc
	poke        chan struct{}
}

// processKeyed runs a claim in ByKey or ByNone ordering.
func (p *Processor) processKeyed(ctx context.Context, c Claim, id uint64) error {
	d := &kdriver{p: p, c: c, k: &p.cfg.keyed, claim: id, rnd: p.newRand(),
		log:    p.log.With("topic", c.Topic(), "partition", c.Partition(), "ordering", p.cfg.keyed.ordering.String()),
		queues: map[kkey]*kqueue{}, poke: make(chan struct{}, 1)}
	return d.run(ctx)
}

func (d *kdriver) run(parent context.Context) error {
	ctx, cancel := context.WithCancelCause(parent)
	defer cancel(nil)
	defer d.k.lim.forget(d)
	d.actx = ctx
	d.restore()
	var stop error
	for {
		d.takeInbox(ctx)
		if ctx.Err() != nil {
			stop = context.Cause(ctx)
			break
		}
		now := d.p.cfg.clock.Now()
		d.dueRetries(now)
		d.placeRoom()
		d.admit()
		if err := d.commit(ctx); err != nil {
			stop = err
			break
		}
		d.start(ctx)
		wake := d.nextWake()
		if d.canFetch() {
			recs, err := d.fetch(ctx, wake)
			if err != nil {
				stop = err
				break
			}
			if err := d.take(recs); err != nil {
				stop = err
				break
			}
			continue
		}
		d.sleep(ctx, wake)
	}
	cancel(stop)
	d.drain(ctx, stop)
	return stop
}

// restore reads the window a previous owner committed.
func (d *kdriver) restore() {
	off, md := d.c.Committed()
	d.lastNext, d.lastMD, d.fetched = off, md, off
	if off < 0 {
		return // the window starts at the first record fetched
	}
	if d.p.cfg.memoryOnly {
		md = ""
	}
	w, err := checkpoint.RestoreWindow(off, md, d.k.limits)
	if err != nil {
		d.log.Warn("redeliver: committed metadata is not a window this processor can read, ignored: the records above the committed offset are delivered again, with fresh counts",
			"offset", off, "error", err)
	} else if md != "" {
		d.log.Info("redeliver: continuing the window of a previous owner", "offset", off, "unfinished", w.Unfinished(), "next", w.Next())
	}
	d.win = w
}

// post hands an event to the driver's goroutine.
func (d *kdriver) post(e kevent) {
	d.mu.Lock()
	d.inbox = append(d.inbox, e)
	d.mu.Unlock()
	d.wake()
}

// wake makes the driver look at its inbox: it cancels the Fetch it waits
// in, or ends its sleep.
func (d *kdriver) wake() {
	d.mu.Lock()
	if d.fetchCancel != nil {
		d.fetchCancel()
	}
	d.mu.Unlock()
	select {
	case d.poke <- struct{}{}:
	default:
	}
}

func (d *kdriver) takeInbox(ctx context.Context) {
	d.mu.Lock()
	in := d.inbox
	d.inbox = nil
	d.mu.Unlock()
	for _, e := range in {
		if e.acted {
			d.acted(e)
		} else {
			d.result(ctx, e)
		}
	}
}

// canFetch reports whether the driver takes in more records.
func (d *kdriver) canFetch() bool {
	switch {
	case len(d.pending) > 0:
		return false
	case d.win == nil || d.fetched < d.win.Next():
		// Records of a restored window are fetched whatever room is
		// left, and while failed records wait for room: they are in it
		// already, and the room may be held by their states.
		return true
	case len(d.room) > 0:
		return false
	}
	return d.win.Unfinished() < d.k.maxUnfinished() && d.win.Fits(d.win.Next())
}

// nextWake is when the earliest held retry is due; zero for none.
func (d *kdriver) nextWake() time.Time {
	var t time.Time
	for _, r := range d.held {
		if t.IsZero() || r.due.Before(t) {
			t = r.due
		}
	}
	return t
}

// fetch fetches records, until records come, wake passes, an event is
// posted or ctx ends. It returns an error when the driver must stop.
func (d *kdriver) fetch(ctx context.Context, wake time.Time) ([]Record, error) {
	fctx, fcancel := context.WithCancel(ctx)
	defer fcancel()
	d.mu.Lock()
	if len(d.inbox) > 0 {
		d.mu.Unlock()
		return nil, nil
	}
	d.fetchCancel = fcancel
	d.mu.Unlock()
	if !wake.IsZero() {
		ch, stop := d.p.cfg.clock.NewTimer(max(wake.Sub(d.p.cfg.clock.Now()), 0))
		defer stop()
		go func() {
			select {
			case <-ch:
				fcancel()
			case <-fctx.Done():
			}
		}()
	}
	recs, err := d.c.Fetch(fctx)
	d.mu.Lock()
	d.fetchCancel = nil
	d.mu.Unlock()
	switch {
	case err == nil:
		return recs, nil
	case ctx.Err() != nil:
		return nil, context.Cause(ctx)
	case fctx.Err() != nil:
		return nil, nil // woken
	}
	return nil, fmt.Errorf("stream: fetch %s/%d: %w", d.c.Topic(), d.c.Partition(), err)
}

// sleep waits until wake, an event or ctx's end.
func (d *kdriver) sleep(ctx context.Context, wake time.Time) {
	var timer <-chan time.Time
	if !wake.IsZero() {
		ch, stop := d.p.cfg.clock.NewTimer(max(wake.Sub(d.p.cfg.clock.Now()), 0))
		defer stop()
		timer = ch
	}
	select {
	case <-d.poke:
	case <-timer:
	case <-ctx.Done():
	}
}

// take keeps fetched records (the claim owns the slice until its next
// Fetch, and may reuse the headers' memory) and takes in what fits.
func (d *kdriver) take(recs []Record) error {
	for i := range recs {
		if off := recs[i].Offset; d.fetchedAny && off < d.fetched {
			// A log rewound (a topic deleted and created again): its
			// records reuse offsets the window has passed.
			return fmt.Errorf("stream: %s/%d: record at offset %d fetched after offset %d: the log was rewound (a topic deleted and created again?), "+
				"which %s ordering cannot follow: the partition stops here, its commit at offset %d; reset the group's offsets to go on",
				d.c.Topic(), d.c.Partition(), off, d.fetched-1, d.k.ordering, d.lastNext)
		}
		d.fetchedAny = true
		r := &krec{rec: recs[i]}
		if h := recs[i].Headers; len(h) > 0 {
			r.rec.Headers = slices.Clone(h)
		}
		d.pending = append(d.pending, r)
		d.fetched = max(d.fetched, recs[i].Offset+1)
	}
	d.admit()
	return nil
}

// admit takes the fetched records into the window and their keys'
// queues, in offset order, while they fit and no failed record waits
// for room.
func (d *kdriver) admit() {
	n, full := 0, false
	for _, r := range d.pending {
		off := r.rec.Offset
		if len(d.room) > 0 && (d.win == nil || off >= d.win.Next()) {
			break // no new record while a failed one waits for room
		}
		if d.win == nil {
			w, err := checkpoint.NewWindow(max(off, 0), d.k.limits)
			if err != nil { // checked by NewProcessor
				d.log.Error("redeliver: window", "error", err)
				break
			}
			d.win = w
		}
		switch {
		case off < d.win.Next():
			if d.win.Finished(off) {
				// Finished by a previous owner: never handled again.
				n++
				continue
			}
			// Unfinished in the restored window: already in it.
		case d.win.Unfinished() >= d.k.maxUnfinished():
			full = true
		default:
			if err := d.win.Admit(off); err != nil {
				if !errors.Is(err, checkpoint.ErrWindowFull) {
					d.log.Error("redeliver: record out of order, not taken in", "offset", off, "next", d.win.Next(), "error", err)
					n++
					continue
				}
				full = true
			}
		}
		if full {
			break
		}
		n++
		d.enqueue(r)
	}
	clear(d.pending[:n])
	d.pending = slices.Delete(d.pending, 0, n)
	if full && !d.fullLogged {
		d.log.Debug("redeliver: window full, no more records taken in until records finish",
			"base", d.win.Base(), "unfinished", d.win.Unfinished(), "size", d.win.Size(), "bound", d.win.Bound())
	}
	d.fullLogged = full
}

// keyOf returns the queue of a record.
func (d *kdriver) keyOf(r *Record) kkey {
	switch {
	case d.k.ordering == ByNone:
		return kkey{off: r.Offset}
	case d.k.keyFn != nil:
		return kkey{s: d.userKey(r), off: -1}
	}
	return kkey{s: string(r.Key), off: -1}
}

// userKey calls the key function; a panic of it orders the record with
// the records without a key, and is logged.
func (d *kdriver) userKey(r *Record) (k string) {
	defer func() {
		if v := recover(); v != nil {
			d.log.Error("redeliver: the key function (WithKeyFunc) panicked: the record is ordered with the partition's records without a key",
				"offset", r.Offset, "panic", v)
			k = ""
		}
	}()
	return d.k.keyFn(r)
}

func (d *kdriver) enqueue(r *krec) {
	k := d.keyOf(&r.rec)
	q := d.queues[k]
	if q == nil {
		q = &kqueue{key: k}
		d.queues[k] = q
	}
	r.q = q
	q.recs = append(q.recs, r)
	if len(q.recs) == 1 {
		d.activate(r)
	} else {
		r.st = kqueued
	}
}

func (d *kdriver) machine(r *krec) *checkpoint.Machine {
	if !r.hasM {
		r.m = checkpoint.NewMachine(d.p.cfg.policy)
		r.m.Begin(r.rec.Timestamp)
		r.hasM = true
	}
	return &r.m
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
func (d *kdriver) resume(r *krec, s checkpoint.State) {
	m := d.machine(r)
	now := d.p.cfg.clock.Now()
	dec := m.Resume(s, now, d.rnd)
	d.log.Info("redeliver: continuing retry state of a previous owner", "offset", r.rec.Offset,
		"retries", s.Retries, "first_failure", s.FirstFailure, "next_at", s.NextAt, "started", s.Started, "next", dec.Action.String())
	switch dec.Action {
	case 0:
		// A fresh count (a record stopped, then moved).
		d.setState(r, checkpoint.State{})
		r.st = kready
		d.ready = append(d.ready, r)
	case checkpoint.StopRetrying:
		d.giveUp(r)
	default:
		if s.Started {
			// Its retry never reported: counted as failed, scheduled
			// anew (and committed before it is delivered).
			d.scheduled(r, dec, checkpoint.ErrInterrupted)
		}
		d.hold(r, dec)
	}
}

// stateOf is r's state as its window keeps it.
func (d *kdriver) stateOf(r *krec) checkpoint.State {
	s := r.m.State()
	s.Offset, s.Records, s.Alone, s.LastError = r.rec.Offset, 0, false, ""
	if err := r.m.LastError(); err != nil {
		s.LastError = err.Error()
	}
	return s
}

// setState sets r's state in the window; it reports false when there is
// no room for it.
func (d *kdriver) setState(r *krec, s checkpoint.State) bool {
	var err error
	if s.GivenUp != 0 {
		err = d.win.GiveUp(r.rec.Offset, s)
	} else {
		err = d.win.Retry(r.rec.Offset, s)
	}
	switch {
	case errors.Is(err, checkpoint.ErrWindowFull):
		return false
	case err != nil:
		// A state the window cannot hold (times too far apart): the
		// record goes on without it; a next owner starts its count over.
		d.log.Warn("redeliver: retry state not kept in the commit: a next owner starts the record's count over", "offset", r.rec.Offset, "error", err)
	}
	return true
}

// hold keeps r until its retry is due at dec.At, with its state in the
// window, or waits for room for its state.
func (d *kdriver) hold(r *krec, dec checkpoint.Decision) {
	r.due = dec.At
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

// dueRetries marks the retries that are due started (committed before
// they are delivered), or gives the record up when its limits are
// reached by then.
func (d *kdriver) dueRetries(now time.Time) {
	keep := d.held[:0]
	for _, r := range d.held {
		if now.Before(r.due) {
			keep = append(keep, r)
			continue
		}
		if dec := r.m.Start(now); dec.Action == checkpoint.StopRetrying {
			d.giveUp(r)
			continue
		}
		if !d.p.cfg.memoryOnly {
			d.setState(r, d.stateOf(r)) // it holds a state: it fits
		}
		r.st = kstarting
		d.starting = append(d.starting, r)
	}
	clear(d.held[len(keep):])
	d.held = keep
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
			if err := d.write(ctx, next, md); err != nil {
				return err
			}
		}
	}
	d.ready = append(d.ready, d.starting...)
	for _, r := range d.starting {
		r.st = kready
	}
	clear(d.starting)
	d.starting = d.starting[:0]
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
	n := 0
	for _, r := range d.ready {
		if d.running >= d.k.perPartition || !d.k.lim.acquire(d) {
			break
		}
		n++
		d.deliver(ctx, r)
	}
	clear(d.ready[:n])
	d.ready = slices.Delete(d.ready, 0, n)
}

func (d *kdriver) one(r *krec) *Batch {
	b := &Batch{Topic: r.rec.Topic, Partition: r.rec.Partition, Records: []Record{r.rec}}
	if r.hasM {
		b.Attempt = attemptOf(&r.m)
	} else {
		pol := &d.p.cfg.policy
		b.Attempt = Attempt{MaxRetries: pol.MaxRetries, Last: pol.MaxRetries == 0}
	}
	return b
}

func (d *kdriver) infoOf(b *Batch) BatchInfo {
	return BatchInfo{Topic: b.Topic, Partition: b.Partition, ClaimID: d.claim, FirstOffset: b.FirstOffset(), LastOffset: b.LastOffset(), Records: len(b.Records)}
}

// deliver calls the handler over r in a goroutine of its own.
func (d *kdriver) deliver(ctx context.Context, r *krec) {
	r.st = krunning
	d.running++
	b := d.one(r)
	clock := d.p.cfg.clock
	go lifecycle.Inside(func() {
		if ctx.Err() != nil {
			d.post(kevent{r: r, b: b, notCalled: true})
			return
		}
		start := clock.Now()
		err := d.p.call(ctx, b)
		d.post(kevent{r: r, b: b, err: err, start: start, end: clock.Now()})
	})
}

// result applies a handler call's result to its record.
func (d *kdriver) result(ctx context.Context, e kevent) {
	d.running--
	d.k.lim.release()
	r, b := e.r, e.b
	if e.notCalled {
		d.abandoned(r, b, context.Cause(ctx))
		return
	}
	if ctx.Err() != nil {
		d.p.delivered(d.infoOf(b), b.Attempt, Cancelled, e.err, e.start, e.end, false)
		d.abandoned(r, b, context.Cause(ctx))
		return
	}
	res := readResult(e.err, b, d.log)
	d.p.delivered(d.infoOf(b), b.Attempt, res.outcome, e.err, e.start, e.end, false)
	if res.outcome == Succeeded {
		d.finish(r)
		return
	}
	m := d.machine(r)
	var dec checkpoint.Decision
	if res.rr != nil {
		dec = m.RequestRetries(e.end, res.rr.request(), d.rnd)
	} else {
		dec = m.Fail(e.end, res.cause, d.rnd)
	}
	switch {
	case dec.Action != checkpoint.StopRetrying:
		cause := res.cause
		if res.outcome == RetryRequested {
			cause = nil
		}
		d.scheduled(r, dec, cause)
		d.hold(r, dec)
	case res.outcome == RetryRequested:
		d.finish(r) // a RetryResult's retries are spent: done
	default:
		d.giveUp(r)
	}
}

func (d *kdriver) scheduled(r *krec, dec checkpoint.Decision, cause error) {
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
	if len(q.recs) > 0 && q.recs[0] == r {
		q.recs[0] = nil
		q.recs = q.recs[1:]
	}
	if len(q.recs) == 0 {
		delete(d.queues, q.key)
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
	ctx := d.actx
	go lifecycle.Inside(func() {
		again, reply, err := u.exhaust(ctx, b, xerr)
		d.post(kevent{r: r, acted: true, again: again, reply: reply, aerr: err})
	})
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
		r.m.Begin(r.rec.Timestamp)
		d.setState(r, checkpoint.State{})
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
