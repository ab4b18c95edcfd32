package park

import (
	"runtime"
	"sync"
	"sync/atomic"
	"time"
)

// Runners runs workers (a partition's worker starting, or a parked
// worker's resume) on goroutines that take one worker after another, so
// that many partitions waking at once (an assignment, or a poll that
// brings records for many idle partitions) do not start a goroutine each.
//
// Up to Limit goroutines run at once while they make progress; a worker
// given beyond that waits in a queue, and the first goroutine whose worker
// ends or parks takes it. A worker that knows it waits (for a commit's
// answer, or for its backoff to pass) says so with Block, and a waiting
// worker starts at once. When no goroutine took a worker from the queue
// for a whole Stall and no brief wait ended (every one is held up, by a
// handler that takes its time, say; ten Stalls when every one waits for a
// commit's answer), every worker still waiting gets a goroutine of its
// own at once, so a worker waits at most about Stall behind held-up ones.
// Nothing else waits: a goroutine with no worker left ends, and so does
// one whose worker is done while more than Limit run.
//
// The zero value is ready to use, with the defaults below. Go may be
// called from any goroutine; Block and Unblock only from a worker r runs.
type Runners struct {
	// Limit is how many goroutines may take workers from the queue;
	// 0 is DefaultLimit or 4 per GOMAXPROCS when first used, whichever
	// is more.
	Limit int
	// Stall is how long the queue may go without a worker taken from it,
	// and without a brief wait ending, before each waiting worker gets a
	// goroutine of its own; 0 is DefaultStall.
	Stall time.Duration
	// BriefLimit is how many workers may step aside at once in a brief
	// wait (BlockBrief); those beyond it keep their places. 0 is 4 times
	// the limit.
	BriefLimit int
	// Stalled, when not nil, is called after a stall check gave waiting
	// workers goroutines of their own, with how many.
	Stalled func(waiting int)

	mu      sync.Mutex
	queue   []func() // waiting, oldest first, from head
	head    int
	running int  // goroutines running a worker, or about to take one, less those blocked
	armed   bool // a stall check is due
	taken   bool // a worker was taken from the queue, or a brief wait ended, since the check was armed
	check   *time.Timer
	lim     int // Limit, or its default once asked for (limit)
	// Workers in a brief wait that stepped aside (no more than
	// BriefLimit), and those that kept their places. The two are told
	// apart by count only: whichever such worker's wait ends first ends
	// a kept place's, which keeps the counts right (see UnblockBrief).
	briefAside, briefKept int
	patience              int          // stall checks passed over while every place was held by a brief wait
	starting              atomic.Int32 // goroutines started that have not run yet
}

// briefPatience is how many stall checks in a row a queue held up by brief
// waits alone passes over: ten stalls' time in all.
const briefPatience = 9

// DefaultLimit and DefaultStall are Runners' limits when not set.
const (
	DefaultLimit = 16
	DefaultStall = 10 * time.Millisecond
)

// Go runs fn on one of r's goroutines: a new one while fewer than Limit
// run, else the first one free, or a goroutine of its own after a stall.
func (r *Runners) Go(fn func()) {
	r.mu.Lock()
	if r.running < r.limit() {
		r.running++
		r.mu.Unlock()
		r.start(fn)
		return
	}
	r.queue = append(r.queue, fn)
	if !r.armed {
		r.armed, r.taken = true, false
		if r.check == nil {
			r.check = time.AfterFunc(r.stall(), r.stalled)
		} else {
			r.check.Reset(r.stall())
		}
	}
	r.mu.Unlock()
}

// Block notes that the calling goroutine, one of r's running a worker,
// is about to wait (for a commit's answer, or for its backoff to pass):
// it no longer counts against the limit, and a worker waiting in the
// queue, if any, starts on a goroutine of its own at once. Unblock, when
// the wait is over, counts it again. Only a worker that r runs calls
// them, once each, in that order.
func (r *Runners) Block() {
	r.mu.Lock()
	r.stepAside()
}

// BlockBrief is Block for a wait the worker knows to be brief (a
// commit's answer): while BriefLimit workers have stepped aside in such
// waits, the worker keeps its place instead, and the workers waiting in
// the queue wait for it (or for a stall check, if the wait is not brief
// after all). UnblockBrief, when the wait is over, ends it.
func (r *Runners) BlockBrief() {
	r.mu.Lock()
	if r.briefAside >= r.briefLimit() {
		r.briefKept++
		r.mu.Unlock()
		return
	}
	r.briefAside++
	r.stepAside()
}

// UnblockBrief ends what BlockBrief began. The worker whose wait ends
// need not be one that kept its place for one to be counted as ended:
// every worker in a brief wait is alike to the counts, and the goroutines
// counted against the limit stay as many as those not waiting.
func (r *Runners) UnblockBrief() {
	r.mu.Lock()
	if r.briefKept > 0 {
		r.briefKept--
	} else {
		r.briefAside--
		r.running++
	}
	// An answer came: the runners are not held up, even if no worker
	// was taken from the queue meanwhile (a round of commits that took
	// longer than a stall is no reason to give every waiting worker a
	// goroutine, which would wait for its own commit next).
	r.taken = true
	r.mu.Unlock()
}

// stepAside counts the calling goroutine out of the limit and starts the
// oldest waiting worker, if any and the limit allows; r.mu is held, and
// released.
func (r *Runners) stepAside() {
	r.running--
	if r.head == len(r.queue) || r.running >= r.limit() {
		r.mu.Unlock()
		return
	}
	fn := r.take()
	r.running++
	r.mu.Unlock()
	r.start(fn)
}

// Unblock ends what Block began.
func (r *Runners) Unblock() {
	r.mu.Lock()
	r.running++
	r.mu.Unlock()
}

// start runs fn on a new goroutine (run).
func (r *Runners) start(fn func()) {
	r.starting.Add(1)
	go r.run(fn)
}

// run runs fn, then the queue's workers one after another, until the
// queue is empty.
func (r *Runners) run(fn func()) {
	r.starting.Add(-1)
	for fn != nil {
		fn()
		fn = r.next()
	}
}

// next takes the oldest waiting worker, or returns nil and counts the
// calling goroutine out: when none waits, or when more goroutines than
// the limit run (after a stall, or a Block).
func (r *Runners) next() func() {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.head == len(r.queue) || r.running > r.limit() {
		r.running--
		return nil
	}
	return r.take()
}

// take takes the oldest waiting worker; r.mu is held, and one waits.
func (r *Runners) take() func() {
	fn := r.queue[r.head]
	r.queue[r.head] = nil
	r.head++
	if r.head == len(r.queue) {
		r.queue, r.head = r.queue[:0], 0
	}
	r.taken = true
	return fn
}

// stalled is the stall check: when no worker was taken from the queue,
// and no brief wait ended, since it was armed, every waiting worker gets
// a goroutine of its own (which, once its worker is done, takes from the
// queue as the others do if no more than Limit run, and ends otherwise).
func (r *Runners) stalled() {
	r.mu.Lock()
	if r.head == len(r.queue) {
		r.armed = false
		r.mu.Unlock()
		return
	}
	// A goroutine started and not run yet is not held up: the Go
	// scheduler has not got to it (a process busy on every CPU for a
	// while, say), and starting more would not help.
	if r.taken || r.starting.Load() > 0 {
		r.taken, r.patience = false, 0
		r.check.Reset(r.stall())
		r.mu.Unlock()
		return
	}
	// Every place is held by a commit the broker has not answered yet:
	// the waiting workers would soon wait for commits of their own. The
	// broker is given briefPatience checks more; not for ever, since a
	// commit that waits for a rebalance to end may need a waiting worker
	// to run first (one whose partition the rebalance takes away).
	if r.running > 0 && r.briefKept >= r.running && r.patience < briefPatience {
		r.patience++
		r.check.Reset(r.stall())
		r.mu.Unlock()
		return
	}
	waiting := r.queue[r.head:]
	r.queue, r.head, r.armed, r.patience = nil, 0, false, 0
	r.running += len(waiting)
	r.mu.Unlock()
	for _, fn := range waiting {
		r.start(fn)
	}
	if r.Stalled != nil {
		r.Stalled(len(waiting))
	}
}

// limit returns the limit; r.mu is held. The default is worked out once:
// asking the runtime for GOMAXPROCS takes a lock of its own.
func (r *Runners) limit() int {
	if r.lim == 0 {
		r.lim = r.Limit
		if r.lim <= 0 {
			r.lim = max(DefaultLimit, 4*runtime.GOMAXPROCS(0))
		}
	}
	return r.lim
}

// briefLimit returns BriefLimit or its default; r.mu is held.
func (r *Runners) briefLimit() int {
	if r.BriefLimit > 0 {
		return r.BriefLimit
	}
	return 4 * r.limit()
}

func (r *Runners) stall() time.Duration {
	if r.Stall > 0 {
		return r.Stall
	}
	return DefaultStall
}
