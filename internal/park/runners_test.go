package park

import (
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"
)

// checkIdle fails the test unless r counts no goroutine running and no
// worker in a brief wait, as after every worker ended.
func checkIdle(t *testing.T, r *Runners) {
	t.Helper()
	if r.running != 0 || r.briefAside != 0 || r.briefKept != 0 {
		t.Errorf("after every worker ended: %d running, %d aside, %d kept; want none", r.running, r.briefAside, r.briefKept)
	}
}

// concurrency counts how many of the workers run at once.
type concurrency struct {
	now, most atomic.Int64
}

func (c *concurrency) enter() {
	n := c.now.Add(1)
	for {
		m := c.most.Load()
		if n <= m || c.most.CompareAndSwap(m, n) {
			return
		}
	}
}

func (c *concurrency) leave() { c.now.Add(-1) }

// A burst of workers that finish at once runs on at most Limit goroutines,
// and every one of them runs.
func TestRunnersBurstUsesFewGoroutines(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r := &Runners{Limit: 4}
		var c concurrency
		var wg sync.WaitGroup
		release := make(chan struct{})
		const n = 1000
		ran := make([]bool, n)
		for i := range n {
			wg.Add(1)
			r.Go(func() {
				defer wg.Done()
				c.enter()
				defer c.leave()
				<-release // every goroutine started so far is running a worker
				ran[i] = true
			})
		}
		synctest.Wait()
		if got := c.now.Load(); got != 4 {
			t.Fatalf("%d workers running before any finished, want the limit, 4", got)
		}
		close(release)
		wg.Wait()
		if got := c.most.Load(); got != 4 {
			t.Errorf("at most %d workers ran at once, want 4", got)
		}
		for i, ok := range ran {
			if !ok {
				t.Fatalf("worker %d did not run", i)
			}
		}
		synctest.Wait() // the goroutines end: synctest fails the test otherwise
		if r.running != 0 || r.head != len(r.queue) {
			t.Errorf("after the burst: %d running, %d waiting", r.running, len(r.queue)-r.head)
		}
	})
}

// Workers wait in the queue, oldest first, while the goroutines make
// progress, however long that takes in all: no stall check spills them.
func TestRunnersProgressKeepsTheLimit(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r := &Runners{Limit: 1, Stall: 10 * time.Millisecond}
		var c concurrency
		var order []int
		var wg sync.WaitGroup
		for i := range 20 {
			wg.Add(1)
			r.Go(func() {
				defer wg.Done()
				c.enter()
				defer c.leave()
				time.Sleep(6 * time.Millisecond) // less than a stall, 120 ms in all
				order = append(order, i)
			})
		}
		wg.Wait()
		if got := c.most.Load(); got != 1 {
			t.Errorf("at most %d workers ran at once, want 1", got)
		}
		for i, v := range order {
			if v != i {
				t.Fatalf("workers ran in the order %v, want the order given", order)
			}
		}
	})
}

// When every goroutine is held up for a stall, the waiting workers get
// goroutines of their own: after the stall, not before.
func TestRunnersStallStartsTheWaiting(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const stall = 10 * time.Millisecond
		var stalled []int
		r := &Runners{Limit: 2, Stall: stall, Stalled: func(n int) { stalled = append(stalled, n) }}
		held := make(chan struct{})
		var wg sync.WaitGroup
		for range 2 {
			wg.Add(1)
			r.Go(func() { defer wg.Done(); <-held })
		}
		start := time.Now()
		var ran [3]atomic.Int64 // when each waiting worker ran, from start
		for i := range ran {
			wg.Add(1)
			r.Go(func() { defer wg.Done(); ran[i].Store(int64(time.Since(start)) + 1) })
		}
		time.Sleep(stall - time.Nanosecond)
		synctest.Wait()
		for i := range ran {
			if ran[i].Load() != 0 {
				t.Fatalf("waiting worker %d ran before a stall, with the goroutines held up", i)
			}
		}
		time.Sleep(time.Nanosecond)
		synctest.Wait()
		for i := range ran {
			if got := time.Duration(ran[i].Load() - 1); got != stall {
				t.Errorf("waiting worker %d ran %v after it was given, want after the stall, %v", i, got, stall)
			}
		}
		if len(stalled) != 1 || stalled[0] != len(ran) {
			t.Errorf("Stalled called with %v, want once with %d", stalled, len(ran))
		}
		close(held)
		wg.Wait()
		synctest.Wait()
		if r.running != 0 {
			t.Errorf("%d goroutines counted running after every worker ended", r.running)
		}
		// The runners work as before after a spill.
		done := make(chan struct{})
		r.Go(func() { close(done) })
		<-done
	})
}

// A stall check that finds progress looks again a stall later: a worker
// behind a goroutine that was making progress and then got held up waits
// at most about two stalls.
func TestRunnersStallAfterProgress(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const stall = 10 * time.Millisecond
		r := &Runners{Limit: 1, Stall: stall}
		held := make(chan struct{})
		var wg sync.WaitGroup
		wg.Add(3)
		r.Go(func() { defer wg.Done(); time.Sleep(stall / 2) })
		r.Go(func() { defer wg.Done(); <-held }) // taken at stall/2, then held
		start := time.Now()
		var ranAt time.Duration
		r.Go(func() { defer wg.Done(); ranAt = time.Since(start) })
		time.Sleep(3 * stall)
		synctest.Wait()
		if ranAt != 2*stall {
			t.Errorf("the last worker ran %v after it was given, want %v (the second check)", ranAt, 2*stall)
		}
		close(held)
		wg.Wait()
	})
}

// A worker that blocks (Block) lets a waiting worker start at once, with
// no stall; once it unblocks, the goroutines go back to the limit.
func TestRunnersBlockStartsTheNext(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var stalled int
		r := &Runners{Limit: 1, Stall: 10 * time.Millisecond, Stalled: func(int) { stalled++ }}
		var c concurrency
		answer := make(chan struct{})
		var wg sync.WaitGroup
		wg.Add(1)
		r.Go(func() {
			defer wg.Done()
			c.enter()
			r.Block()
			c.leave()
			<-answer // a commit's answer
			c.enter()
			defer c.leave()
			r.Unblock()
		})
		ran := make(chan struct{})
		wg.Add(1)
		r.Go(func() { defer wg.Done(); c.enter(); defer c.leave(); close(ran) })
		synctest.Wait()
		select {
		case <-ran:
		default:
			t.Fatal("the waiting worker did not start when the running one blocked")
		}
		// Three more while the first waits: they run one after another
		// on the one goroutine the limit allows.
		for range 3 {
			wg.Add(1)
			r.Go(func() { defer wg.Done(); c.enter(); defer c.leave(); time.Sleep(time.Millisecond) })
		}
		time.Sleep(5 * time.Millisecond) // they are done
		synctest.Wait()
		close(answer)
		wg.Wait()
		synctest.Wait()
		if got := c.most.Load(); got != 1 {
			t.Errorf("at most %d workers ran at once outside a Block, want 1", got)
		}
		if stalled != 0 {
			t.Errorf("%d stalls, want none", stalled)
		}
		if r.running != 0 {
			t.Errorf("%d goroutines counted running after every worker ended", r.running)
		}
	})
}

// After an Unblock takes the goroutines over the limit, the first to
// finish its worker ends instead of taking another from the queue.
func TestRunnersBackToTheLimitAfterUnblock(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r := &Runners{Limit: 1, Stall: time.Hour}
		var c concurrency
		answer, hold := make(chan struct{}), make(chan struct{})
		var wg sync.WaitGroup
		wg.Add(2)
		r.Go(func() {
			defer wg.Done()
			r.Block()
			<-answer
			r.Unblock()
			c.enter()
			defer c.leave()
			<-hold
		})
		r.Go(func() { defer wg.Done(); c.enter(); defer c.leave(); <-hold }) // started by the Block
		synctest.Wait()
		close(answer) // two goroutines count now, over the limit of one
		synctest.Wait()
		var queued concurrency
		for range 4 {
			wg.Add(1)
			r.Go(func() { defer wg.Done(); queued.enter(); defer queued.leave(); time.Sleep(time.Millisecond) })
		}
		close(hold)
		wg.Wait()
		synctest.Wait()
		if got := c.most.Load(); got != 2 {
			t.Errorf("at most %d of the first workers ran at once, want 2 (the unblocked one beside the one its Block started)", got)
		}
		if got := queued.most.Load(); got != 1 {
			t.Errorf("at most %d of the workers queued after the Unblock ran at once, want 1 (the limit)", got)
		}
		if r.running != 0 {
			t.Errorf("%d goroutines counted running after every worker ended", r.running)
		}
	})
}

// Workers in a brief wait step aside up to BriefLimit at once; the next
// keeps its place, so a burst of commits leaves at most Limit+BriefLimit
// goroutines, and every worker still runs.
func TestRunnersBlockBriefKeepsPlacesPastItsLimit(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var stalled int
		r := &Runners{Limit: 1, BriefLimit: 2, Stall: time.Hour, Stalled: func(int) { stalled++ }}
		var alive concurrency // worker functions started and not returned
		answer := make(chan struct{})
		var wg sync.WaitGroup
		const n = 10
		var ran atomic.Int64
		for range n {
			wg.Add(1)
			r.Go(func() {
				defer wg.Done()
				alive.enter()
				defer alive.leave()
				r.BlockBrief()
				<-answer // a commit's answer
				r.UnblockBrief()
				ran.Add(1)
			})
		}
		synctest.Wait()
		if got := alive.now.Load(); got != 3 {
			t.Fatalf("%d workers waiting for their answers, want 3 (the limit's one and the 2 that stepped aside)", got)
		}
		if r.briefAside != 2 || r.briefKept != 1 {
			t.Fatalf("%d stepped aside and %d kept their places, want 2 and 1", r.briefAside, r.briefKept)
		}
		close(answer)
		wg.Wait()
		synctest.Wait()
		if got := alive.most.Load(); got != 3 {
			t.Errorf("at most %d workers at once, want 3", got)
		}
		if got := ran.Load(); got != n {
			t.Errorf("%d workers ran, want %d", got, n)
		}
		if stalled != 0 {
			t.Errorf("%d stalls, want none", stalled)
		}
		checkIdle(t, r)
	})
}

// A worker that stepped aside may end its brief wait before the one that
// kept its place: the counts stay right, the queue's worker runs while
// the kept one still waits, and no goroutine is left over.
func TestRunnersBlockBriefEndsInAnyOrder(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r := &Runners{Limit: 1, BriefLimit: 1, Stall: time.Hour}
		answerA, answerB := make(chan struct{}), make(chan struct{})
		ranC := make(chan struct{})
		var wg sync.WaitGroup
		wg.Add(3)
		r.Go(func() { defer wg.Done(); r.BlockBrief(); <-answerA; r.UnblockBrief() }) // steps aside
		r.Go(func() { defer wg.Done(); r.BlockBrief(); <-answerB; r.UnblockBrief() }) // keeps its place
		r.Go(func() { defer wg.Done(); close(ranC) })
		synctest.Wait()
		select {
		case <-ranC:
			t.Fatal("the third worker ran while the second kept its place")
		default:
		}
		close(answerA)
		synctest.Wait()
		select {
		case <-ranC:
		default:
			t.Fatal("the third worker did not run once the first was done")
		}
		close(answerB)
		wg.Wait()
		synctest.Wait()
		checkIdle(t, r)
	})
}

// Brief waits that keep ending are progress: while commits are answered,
// a queue that waits longer than a stall behind them is not spilled onto
// goroutines of their own.
func TestRunnersBriefAnswersAreProgress(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var stalled int
		r := &Runners{Limit: 1, BriefLimit: 1, Stall: 10 * time.Millisecond, Stalled: func(int) { stalled++ }}
		ranC := make(chan struct{})
		var wg sync.WaitGroup
		wg.Add(3)
		r.Go(func() { // steps aside, then keeps its place: an answer every 6ms
			defer wg.Done()
			for range 3 {
				r.BlockBrief()
				time.Sleep(6 * time.Millisecond)
				r.UnblockBrief()
			}
		})
		synctest.Wait() // the first stepped aside, with no queue
		r.Go(func() { defer wg.Done(); r.BlockBrief(); time.Sleep(15 * time.Millisecond); r.UnblockBrief() })
		synctest.Wait() // the second keeps its place
		// The third waits 15ms for a place, past the 10ms stall.
		r.Go(func() { defer wg.Done(); close(ranC) })
		wg.Wait()
		synctest.Wait()
		<-ranC
		if stalled != 0 {
			t.Errorf("%d stalls while commits were answered every 6ms, want none", stalled)
		}
		checkIdle(t, r)
	})
}

// A queue held up by commits alone (every place held by a brief wait) is
// given ten stalls' time before its workers get goroutines of their own:
// they would only wait for commits of their own. Then they do, in case a
// commit waits for one of them (a rebalance).
func TestRunnersBriefWaitsGetTenStalls(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var stalled int
		r := &Runners{Limit: 1, BriefLimit: 1, Stall: 10 * time.Millisecond, Stalled: func(int) { stalled++ }}
		answer := make(chan struct{})
		ranC := make(chan struct{})
		var wg sync.WaitGroup
		wg.Add(3)
		r.Go(func() { defer wg.Done(); r.BlockBrief(); <-answer; r.UnblockBrief() }) // steps aside
		synctest.Wait()
		r.Go(func() { defer wg.Done(); r.BlockBrief(); <-answer; r.UnblockBrief() }) // keeps its place
		synctest.Wait()
		r.Go(func() { defer wg.Done(); close(ranC) })
		time.Sleep(95 * time.Millisecond)
		synctest.Wait()
		select {
		case <-ranC:
			t.Fatalf("the waiting worker started after 95ms behind commits, want after 100ms (%d stalls)", stalled)
		default:
		}
		time.Sleep(10 * time.Millisecond)
		synctest.Wait()
		select {
		case <-ranC:
		default:
			t.Fatal("the waiting worker had not started after 105ms behind commits")
		}
		if stalled != 1 {
			t.Errorf("%d stalls, want 1", stalled)
		}
		close(answer)
		wg.Wait()
		synctest.Wait()
		checkIdle(t, r)
	})
}

// A goroutine the runners started that has not run yet is not held up:
// the stall check passes over it rather than start more goroutines the
// scheduler has not got to either.
func TestRunnersStallWaitsForStartedGoroutines(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var stalled int
		r := &Runners{Limit: 1, Stall: time.Hour, Stalled: func(int) { stalled++ }}
		hold := make(chan struct{})
		var wg sync.WaitGroup
		wg.Add(2)
		r.Go(func() { defer wg.Done(); <-hold })
		synctest.Wait()
		r.Go(func() { defer wg.Done() }) // waits in the queue
		r.starting.Add(1)                // as if a goroutine started had not run yet
		r.stalled()
		if stalled != 0 || r.head == len(r.queue) {
			t.Fatalf("the check started the waiting worker (%d stalls) while a goroutine it started had not run", stalled)
		}
		r.starting.Add(-1)
		r.stalled()
		if stalled != 1 {
			t.Fatalf("%d stalls once every goroutine started had run and none took a worker, want 1", stalled)
		}
		close(hold)
		wg.Wait()
		synctest.Wait()
	})
}
