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
	"github.com/redeliver-go/redeliver/internal/retrystate"
)

// The keyed driver (this file and keyed_record.go): a claimed partition
// in ByKey or ByNone ordering. Each record is a unit of its own (its
// machine, backoff, RetryResult and give-up, through unit.go's shared
// code); a key's records wait in a queue, and only the queue's head is
// handled, retried or given up; heads of different queues run at once,
// up to the concurrency limits.
//
// One goroutine (run) owns the claim, the window and the queues. Handler
// calls run in the partition's callers (kcallers: up to its concurrency
// limit of goroutines, each going on with the next record handed over
// without waiting for the driver), exhaustion actions in goroutines of
// their own; both post their results to the inbox; a post wakes the
// driver, and cancels the Fetch it may be blocked in (the claim keeps the
// records of a Fetch whose context ends, for the next). The claim's
// methods are called one at a time, from run.
//
// The commit is the window's (retrystate.Window, ReserveOnFailure): its
// base, with the finished records above it and each retrying record's
// state as metadata. It is written once per turn of the loop when it
// changed, and always before a retry is delivered: a record's state
// marked started is committed first, as in ByPartition ordering, and by
// the same rules (retrywrite.go): after a short backoff the mark is sent
// ahead of the retry's due time, or with the failure when the backoff is
// too short for two commits, and the retry waits for its due time once
// the mark is written.

// kstate says where a record of the keyed driver stands.
type kstate uint8

const (
	kqueued   kstate = iota // behind the head of its key's queue
	kready                  // the head, to be delivered when a place is free
	krunning                // handed to the callers: in a handler call, or next in line for one
	kheld                   // failed, its state kept: waits for its retry to be due
	kroom                   // failed, no room for its state yet: waits for room
	kstarting               // its retry is due, or its mark's lead reached, and marked started: delivered once committed and due
	kmarked                 // its started mark committed ahead of its retry: delivered once due
	kacting                 // given up: its exhaustion action runs (or StopPartition holds it)
	kdone                   // finished
)

// kkey names a queue: a key, or for ByNone a record's offset.
type kkey struct {
	s   string
	off int64
}

type krec struct {
	rec Record
	q   *kqueue
	st  kstate
	m   *retrystate.Machine // made at its first failure (machine): most records never need one
	// b is the batch of r.rec alone that delivers it (one): the handler
	// gets it, and its exhaustion action; not copied, as a batch of
	// partition ordering is held, not copied, from one delivery to the next.
	b   Batch
	due time.Time // kheld, kroom, kstarting, kmarked: when its retry is due
	// short says that its backoff is short enough for its started mark
	// to be sent ahead (shortBackoff).
	short bool
	// resumed says that its state in a restored window was applied.
	resumed bool
}

// maxSpareQueues is how many emptied queues a driver keeps for reuse: a
// key's queue is emptied, and a new key's made, about once per record.
const maxSpareQueues = 64

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
	behind     bool // a key middleware parked the record (MarkParkedBehind)
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
	win        *retrystate.Window
	fetched    int64 // the offset after the last record fetched; -1 for none
	fetchedAny bool  // records were fetched
	lastNext   int64
	lastMD     string
	queues     map[kkey]*kqueue
	spareQ     []*kqueue // emptied queues, for the next keys (at most maxSpareQueues)
	pending    []*krec   // fetched, not taken in yet
	ready      []*krec
	held       []*krec
	room       []*krec
	starting   []*krec
	marked     []*krec // kmarked
	// dueTimer fires at dueAt, the earliest due time of the retries
	// marked in the latest commit: started before that commit, so that a
	// timer's slack (timerSlack) runs alongside the write. Zero for none.
	dueTimer   deadline
	dueAt      time.Time
	stateSet   bool // a retry state was set since the last commit
	running    int  // records handed to the callers, not yet posted back
	callers    kcallers
	actions    int
	replies    []chan<- error // Skips to answer once committed
	fullLogged bool

	mu    sync.Mutex
	inbox []kevent
	spare []kevent // the driver's own: the inbox taken before, emptied for the next
	// woken says that something changed since the loop last looked (an
	// event posted, or a place freed under the processor's concurrency
	// limit): the next fetch returns at once instead of blocking.
	woken       bool
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
		d.skipped()
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
	d.dueTimer.cancel()
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
	w, err := retrystate.RestoreWindow(off, md, d.k.limits)
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
	d.woken = true
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
	d.inbox, d.woken, d.spare = d.spare, false, nil
	d.mu.Unlock()
	for _, e := range in {
		if e.acted {
			d.acted(e)
		} else {
			d.result(ctx, e)
		}
	}
	clear(in)
	d.spare = in[:0]
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

// nextWake is when the earliest held retry's mark is to be sent or the
// earliest marked retry is due; zero for none.
func (d *kdriver) nextWake() time.Time {
	var t time.Time
	earliest := func(at time.Time) {
		if t.IsZero() || at.Before(t) {
			t = at
		}
	}
	for _, r := range d.held {
		earliest(r.due.Add(-d.markLead(r)))
	}
	for _, r := range d.marked {
		earliest(r.due)
	}
	return t
}

// fetch fetches records, until records come, wake passes, an event is
// posted or ctx ends. It returns an error when the driver must stop.
func (d *kdriver) fetch(ctx context.Context, wake time.Time) ([]Record, error) {
	fctx, fcancel := context.WithCancel(ctx)
	defer fcancel()
	d.mu.Lock()
	if d.woken {
		d.mu.Unlock()
		return nil, nil
	}
	d.fetchCancel = fcancel
	d.mu.Unlock()
	if !wake.IsZero() {
		ch, stop := d.timer(wake)
		exited := make(chan struct{})
		go func() {
			defer close(exited)
			select {
			case <-ch:
				fcancel()
			case <-fctx.Done():
			}
		}()
		defer func() {
			// The goroutine is gone before the next turn: dueTimer's
			// channel, which it may take the time from, is read by one
			// goroutine at a time.
			fcancel()
			<-exited
			stop()
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

// timer returns a channel that receives at wake, and a function that stops
// it: dueTimer's when wake is its time (kept when stopped, for the next
// turns until it is due), a new timer's otherwise.
func (d *kdriver) timer(wake time.Time) (<-chan time.Time, func()) {
	if d.dueTimer.ch != nil && wake.Equal(d.dueAt) {
		return d.dueTimer.ch, func() {}
	}
	ch, stop := d.p.cfg.clock.NewTimer(max(wake.Sub(d.p.cfg.clock.Now()), 0))
	return ch, func() { stop() }
}

// sleep waits until wake, an event or ctx's end.
func (d *kdriver) sleep(ctx context.Context, wake time.Time) {
	var timer <-chan time.Time
	if !wake.IsZero() {
		ch, stop := d.timer(wake)
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

// skipped moves the window to the claim's position ([Positioner]) when
// the claim skipped records (transaction markers, aborted records) after
// the last it returned, and every record fetched is finished: the next
// commit writes it. Never past a record unfinished, and never back.
func (d *kdriver) skipped() {
	pos := positionOf(d.c)
	switch {
	case pos < 0 || pos <= d.lastNext || pos < d.fetched || len(d.pending) > 0:
		return
	case d.win != nil && (d.win.Unfinished() > 0 || pos <= d.win.Next()):
		return
	}
	w, err := retrystate.NewWindow(pos, d.k.limits)
	if err != nil { // checked by NewProcessor
		d.log.Error("redeliver: window", "error", err)
		return
	}
	d.win, d.fetched = w, pos
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
			w, err := retrystate.NewWindow(max(off, 0), d.k.limits)
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
				if !errors.Is(err, retrystate.ErrWindowFull) {
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
		if n := len(d.spareQ); n > 0 {
			q, d.spareQ = d.spareQ[n-1], d.spareQ[:n-1]
			q.key = k
		} else {
			q = &kqueue{key: k}
		}
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
