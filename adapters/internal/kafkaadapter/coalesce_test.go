package kafkaadapter

import (
	"errors"
	"fmt"
	"io"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/redeliver-go/redeliver/checkpoint"
	"github.com/redeliver-go/redeliver/internal/retrystate"
)

var errTestRevoked = errors.New("revoked")

// sends records what a Coalescer sends, and fails the sends it is told to.
type sends struct {
	mu    sync.Mutex
	got   []string
	fails int // how many sends fail from now on
}

func (s *sends) send(next int64, epoch int32, md string, kind SendKind) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	ep := ""
	if epoch >= 0 {
		ep = fmt.Sprintf("@%d", epoch)
	}
	if s.fails > 0 {
		s.fails--
		s.got = append(s.got, fmt.Sprintf("%d%s%s failed", next, ep, md))
		return errors.New("broker says no")
	}
	f := ""
	if kind == SendFinal {
		f = " final"
	}
	s.got = append(s.got, fmt.Sprintf("%d%s%s%s", next, ep, md, f))
	return nil
}

func (s *sends) take() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	g := s.got
	s.got = nil
	return g
}

// funcClaim is a Sender made of functions, which a test sets.
type funcClaim struct {
	send     func(next int64, epoch int32, md string, kind SendKind) error
	caughtUp func() bool
	ended    func() bool
}

func (f *funcClaim) SendCommit(next int64, epoch int32, md string, kind SendKind) error {
	return f.send(next, epoch, md, kind)
}
func (f *funcClaim) CaughtUp() bool       { return f.caughtUp() }
func (f *funcClaim) Ended() bool          { return f.ended() }
func (f *funcClaim) Revoked() error       { return errTestRevoked }
func (f *funcClaim) Background(fn func()) { go fn() }

func newCoalescer(s *sends, caughtUp *bool) *Coalescer {
	c := &Coalescer{
		Interval: time.Second, Records: 100,
		Claim: &funcClaim{send: s.send, caughtUp: func() bool { return *caughtUp }, ended: func() bool { return false }},
		Log:   slog.New(slog.NewTextHandler(io.Discard, nil)), Topic: "t",
	}
	c.Start(-1, "")
	return c
}

// latency is how long slowCoalescer's broker takes to answer a commit.
const latency = 10 * time.Millisecond

// slowCoalescer is newCoalescer, never caught up, whose every send takes
// latency: a slow broker, so that a commit written before Commit returns
// shows in how long Commit took.
func slowCoalescer(s *sends) *Coalescer {
	caughtUp := false
	c := newCoalescer(s, &caughtUp)
	c.Claim.(*funcClaim).send = func(next int64, epoch int32, md string, kind SendKind) error {
		time.Sleep(latency)
		return s.send(next, epoch, md, kind)
	}
	return c
}

func expect(t *testing.T, s *sends, want ...string) {
	t.Helper()
	synctest.Wait()
	if got := s.take(); !slices.Equal(got, want) {
		t.Fatalf("sent %q, want %q", got, want)
	}
}

// Success commits wait for the interval, the record threshold or the
// partition to be caught up; a retry state is sent before Commit returns,
// and the success after it at once, in the background; Final sends what
// is pending.
func TestCoalescer(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var s sends
		caughtUp := false
		c := newCoalescer(&s, &caughtUp)
		if err := c.Commit(5, -1, ""); err != nil {
			t.Fatal(err)
		}
		expect(t, &s, "5") // no commit sent yet: at once
		for _, next := range []int64{10, 20, 30} {
			if err := c.Commit(next, -1, ""); err != nil {
				t.Fatal(err)
			}
		}
		expect(t, &s) // within the window
		time.Sleep(time.Second)
		expect(t, &s, "30")                           // the interval: the latest only
		if err := c.Commit(200, -1, ""); err != nil { // 170 records past 30
			t.Fatal(err)
		}
		expect(t, &s, "200") // the record threshold
		if err := c.Commit(200, -1, retryState); err != nil {
			t.Fatal(err)
		}
		if got := s.take(); !slices.Equal(got, []string{"200" + retryState}) {
			t.Fatalf("a retry state: sent %q before Commit returned, want [200%s]", got, retryState)
		}
		if err := c.Commit(210, -1, ""); err != nil {
			t.Fatal(err)
		}
		expect(t, &s, "210") // clears the retry state: at once
		caughtUp = true
		if err := c.Commit(220, -1, ""); err != nil {
			t.Fatal(err)
		}
		expect(t, &s, "220") // caught up: at once
		caughtUp = false
		if err := c.Commit(230, -1, ""); err != nil {
			t.Fatal(err)
		}
		c.Final()
		expect(t, &s, "230 final")
		if err := c.Commit(240, -1, ""); !errors.Is(err, errTestRevoked) {
			t.Fatalf("Commit after Final: %v, want the revoked error", err)
		}
		time.Sleep(2 * time.Second)
		expect(t, &s) // nothing after Final
	})
}

// The retry states the engine writes (retrystate.EncodeState): a batch's
// failure, its retry started, its give-up and its halt (StopPartition).
var (
	failedAt     = time.UnixMilli(1700000000000)
	retryState   = retrystate.EncodeState(retrystate.State{Offset: 200, Retries: 1, FirstFailure: failedAt, NextAt: failedAt.Add(time.Millisecond), Records: 10})
	startedState = retrystate.EncodeState(retrystate.State{Offset: 200, Retries: 1, FirstFailure: failedAt, Started: true, Records: 10})
	givenUpState = retrystate.EncodeState(retrystate.State{Offset: 210, Retries: 3, FirstFailure: failedAt, Started: true, GivenUp: checkpoint.RetriesSpent, Records: 10})
	haltedState  = retrystate.EncodeState(retrystate.State{Offset: 210, Retries: 3, FirstFailure: failedAt, Started: true, GivenUp: checkpoint.RetriesSpent, Records: 10, Halted: true})
)

// The success that clears a retry state is sent at once in the
// background, and Commit returns without waiting for it, however slow the
// broker; a retry state, and the success after a give-up or a halt (the
// exhaustion action's or a Skip's commit, whose caller is told whether
// it was written), are written before Commit returns.
func TestCoalescerClearingSuccessInBackground(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var s sends
		c := slowCoalescer(&s)
		took := func(next int64, md string) time.Duration {
			t.Helper()
			start := time.Now()
			if err := c.Commit(next, -1, md); err != nil {
				t.Fatal(err)
			}
			return time.Since(start)
		}
		if d := took(200, retryState); d != latency {
			t.Fatalf("a retry state: Commit returned after %v, want %v (written first)", d, latency)
		}
		if d := took(200, startedState); d != latency {
			t.Fatalf("a retry started: Commit returned after %v, want %v (written first)", d, latency)
		}
		expect(t, &s, "200"+retryState, "200"+startedState)
		start := time.Now()
		if d := took(210, ""); d != 0 {
			t.Fatalf("the success after a retry: Commit returned after %v, want at once", d)
		}
		time.Sleep(latency)
		expect(t, &s, "210") // sent at once, not at the interval
		if d := time.Since(start); d != latency {
			t.Fatalf("the success after a retry was written after %v, want %v", d, latency)
		}

		for _, state := range []string{givenUpState, haltedState, "not ours"} {
			took(210, state)
			if d := took(220, ""); d != latency {
				t.Fatalf("the success after %q: Commit returned after %v, want %v (written first)", state, d, latency)
			}
			expect(t, &s, "210"+state, "220")
			took(230, "") // coalesced again: within the window
			expect(t, &s)
			time.Sleep(time.Second + latency)
			expect(t, &s, "230")
		}
	})
}

// A failed background commit is tried again at the interval, and when it
// keeps failing, Final sends it.
func TestCoalescerFailedFlush(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var s sends
		caughtUp := true
		c := newCoalescer(&s, &caughtUp)
		s.fails = 2
		if err := c.Commit(10, -1, ""); err != nil {
			t.Fatal(err)
		}
		expect(t, &s, "10 failed")
		if err := c.Commit(20, -1, ""); err != nil { // waits for the interval after a failure
			t.Fatal(err)
		}
		expect(t, &s)
		time.Sleep(time.Second)
		expect(t, &s, "20 failed")
		c.Final()
		expect(t, &s, "20 final")
	})
}

// While a commit is in flight, the records after it are held to the
// window: once they reach it, Commit sends the next one itself (after the
// one in flight: kafkatest.RunCoalesce checks that through an adapter).
func TestCoalescerHoldsTheWindowWhileInFlight(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var s sends
		release := make(chan struct{})
		held := make(chan struct{})
		c := newCoalescer(&s, new(bool))
		c.Claim.(*funcClaim).send = func(next int64, epoch int32, md string, kind SendKind) error {
			if next == 150 {
				close(held)
				<-release
			}
			return s.send(next, epoch, md, kind)
		}
		if err := c.Commit(150, -1, ""); err != nil { // the first: flushed at once
			t.Fatal(err)
		}
		<-held
		if err := c.Commit(200, -1, ""); err != nil { // 50 records: within the window
			t.Fatal(err)
		}
		c.pmu.Lock()
		within, past := c.overdue(249), c.overdue(250)
		c.pmu.Unlock()
		if within || !past {
			t.Errorf("with 150 in flight and 200 pending, 249 overdue %v, 250 overdue %v; want false, true (100 records)", within, past)
		}
		time.Sleep(time.Second)
		c.pmu.Lock()
		late := c.overdue(201)
		c.pmu.Unlock()
		if !late {
			t.Error("a commit in flight for the interval: the next is not overdue")
		}
		close(release)
		expect(t, &s, "150", "200") // the pending one is due: sent after the one in flight
		c.Final()
		expect(t, &s)
	})
}

// A flush counts as sent once it is started, not once its goroutine first
// runs: a success commit taken in between is within the window and is
// coalesced. It was counted past the window (the last send long ago, never
// for the claim's first flush, or made due by the interval's timer), so
// Commit wrote it before returning: at 1,000 partitions, the last batch of
// most partitions waited for a commit's round trip.
func TestCoalescerFlushStartedIsInFlight(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var s sends
		c := newCoalescer(&s, new(bool))
		overdue := func(next int64) bool {
			c.pmu.Lock()
			defer c.pmu.Unlock()
			return c.overdue(next)
		}
		// While the test holds the send lock, a flush started does not
		// begin: its goroutine waits for the lock.
		c.smu.Lock()
		if err := c.Commit(5, -1, ""); err != nil { // no commit sent yet: flushed at once
			t.Fatal(err)
		}
		if overdue(10) {
			t.Error("the claim's first flush started: a commit 5 records later is overdue, want within the window")
		}
		c.smu.Unlock()
		expect(t, &s, "5")
		if err := c.Commit(10, -1, ""); err != nil {
			t.Fatal(err)
		}
		expect(t, &s) // within the window
		c.smu.Lock()
		c.due() // the interval's timer
		if overdue(11) {
			t.Error("the interval's flush started: a commit 1 record later is overdue, want within the window")
		}
		c.smu.Unlock()
		expect(t, &s, "10")
		c.Final()
		expect(t, &s)
	})
}

// A coalesced commit (reported written when Commit took it) that a retry
// state commit superseded is kept when that commit fails, with its leader
// epoch: Final writes it. A later commit that is written supersedes it.
func TestCoalescerFailedCommitKeepsSuperseded(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var s sends
		c := newCoalescer(&s, new(bool))
		if err := c.Commit(5, 3, ""); err != nil { // the first: flushed at once
			t.Fatal(err)
		}
		expect(t, &s, "5@3")
		if err := c.Commit(8, 4, ""); err != nil {
			t.Fatal(err)
		}
		expect(t, &s) // within the window
		s.fails = 1
		if err := c.Commit(8, -1, "state"); err == nil {
			t.Fatal("the retry state commit the broker refused: no error")
		}
		expect(t, &s, "8state failed")
		c.Final()
		expect(t, &s, "8@4 final")

		c = newCoalescer(&s, new(bool))
		if err := c.Commit(5, -1, ""); err != nil {
			t.Fatal(err)
		}
		expect(t, &s, "5")
		if err := c.Commit(8, -1, ""); err != nil {
			t.Fatal(err)
		}
		s.fails = 1
		if err := c.Commit(8, -1, "state"); err == nil {
			t.Fatal("the retry state commit the broker refused: no error")
		}
		if err := c.Commit(8, -1, "state"); err != nil { // the Processor tries again
			t.Fatal(err)
		}
		c.Final()
		expect(t, &s, "8state failed", "8state") // the written state superseded it
	})
}

// Once the claim is ending, nothing is flushed in the background, a
// success is refused, and Final writes what is pending; a flush's errors
// that Quiet names are tried again without a warning.
func TestCoalescerEnding(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var (
			s                 sends
			ended, quiet, bad atomic.Bool
			logged            lockedBuilder
		)
		c := newCoalescer(&s, new(bool))
		c.Claim.(*funcClaim).ended = ended.Load
		c.Log = slog.New(slog.NewTextHandler(&logged, nil))
		errQuiet := errors.New("a new session")
		c.Quiet = func(err error) bool { return errors.Is(err, errQuiet) }
		c.Claim.(*funcClaim).send = func(next int64, epoch int32, md string, kind SendKind) error {
			switch {
			case quiet.Load():
				return errQuiet
			case bad.Load():
				return errors.New("broker says no")
			}
			return s.send(next, epoch, md, kind)
		}
		quiet.Store(true)
		if err := c.Commit(5, -1, ""); err != nil { // flushed at once, fails quietly
			t.Fatal(err)
		}
		synctest.Wait()
		if l := logged.String(); l != "" {
			t.Fatalf("a quiet error was logged: %s", l)
		}
		quiet.Store(false)
		bad.Store(true)
		time.Sleep(time.Second) // tried again at the interval
		synctest.Wait()
		if l := logged.String(); !strings.Contains(l, "a success commit failed") {
			t.Fatalf("a failed flush was not logged: %q", l)
		}
		bad.Store(false)
		time.Sleep(time.Second)
		expect(t, &s, "5") // and again
		if err := c.Commit(9, -1, ""); err != nil {
			t.Fatal(err)
		}
		ended.Store(true)
		time.Sleep(3 * time.Second)
		expect(t, &s) // ending: no background flush
		if err := c.Commit(12, -1, ""); !errors.Is(err, errTestRevoked) {
			t.Fatalf("a success while ending: %v, want the revoked error", err)
		}
		c.Final()
		expect(t, &s, "9 final")
	})
}

// lockedBuilder is a strings.Builder safe for concurrent use.
type lockedBuilder struct {
	mu sync.Mutex
	b  strings.Builder
}

func (l *lockedBuilder) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuilder) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

func TestCheckCommitWindow(t *testing.T) {
	for _, tc := range []struct {
		d    time.Duration
		n    int64
		want string
	}{
		{0, 0, ""},
		{time.Second, 10, ""},
		{time.Second, 0, "x: WithCommitWindow(1s, 0): want both more than 0, or both 0"},
		{0, 10, "x: WithCommitWindow(0s, 10)"},
		{-time.Second, 10, "x: WithCommitWindow(-1s, 10)"},
	} {
		err := CheckCommitWindow("x", tc.d, tc.n)
		if tc.want == "" && err != nil || tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)) {
			t.Errorf("CheckCommitWindow(%v, %d) = %v, want %q", tc.d, tc.n, err, tc.want)
		}
	}
}

// In key ordering a commit's metadata is a window (retrystate.Window): the
// records finished above the base, and the state of each record retrying.
// A window that only finishes records (every state in it as the commit
// before it had it) is coalesced like a success, and sent at once when it
// clears a state that counted retries; one with a state of its own (a
// failure, a retry started, a give-up), the one after a give-up, and one
// after a commit with a state of its own that failed are written before
// Commit returns.
func TestCoalescerKeyOrderingWindows(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var s sends
		c := slowCoalescer(&s)
		w, err := retrystate.NewWindow(100, checkpoint.WindowLimits{})
		if err != nil {
			t.Fatal(err)
		}
		for off := int64(100); off < 110; off++ {
			if err := w.Admit(off); err != nil {
				t.Fatal(err)
			}
		}
		must := func(err error) {
			t.Helper()
			if err != nil {
				t.Fatal(err)
			}
		}
		// took commits the window and returns how long Commit took.
		took := func(what string) (string, time.Duration) {
			t.Helper()
			md := w.Encode()
			start := time.Now()
			if err := c.Commit(w.Base(), -1, md); err != nil {
				t.Fatalf("%s: %v", what, err)
			}
			return md, time.Since(start)
		}
		coalesced := func(what string) string {
			t.Helper()
			md, d := took(what)
			if d != 0 {
				t.Fatalf("%s: Commit returned after %v, want at once (coalesced)", what, d)
			}
			return md
		}
		written := func(what string) string {
			t.Helper()
			md, d := took(what)
			if d != latency {
				t.Fatalf("%s: Commit returned after %v, want %v (written first)", what, d, latency)
			}
			return md
		}
		retrying := retrystate.State{Retries: 1, FirstFailure: failedAt, NextAt: failedAt.Add(time.Millisecond)}

		must(w.Finish(101))
		md := coalesced("finished records above the base")
		time.Sleep(latency)
		expect(t, &s, "100"+md) // no commit sent yet: at once
		must(w.Finish(102))
		coalesced("more finished records")
		expect(t, &s) // within the window
		must(w.Retry(103, retrying))
		md = written("a record's failure")
		expect(t, &s, "100"+md) // it replaced the coalesced one
		must(w.Finish(104))
		coalesced("a record finished beside the one retrying")
		started := retrying
		started.NextAt, started.Started = time.Time{}, true
		must(w.Retry(103, started))
		md = written("a retry started")
		expect(t, &s, "100"+md)
		must(w.Finish(103))
		md = coalesced("the retry's success")
		time.Sleep(latency)
		expect(t, &s, "100"+md) // clears the state: sent at once, not at the interval

		givenUp := started
		givenUp.Retries, givenUp.GivenUp = 3, checkpoint.RetriesSpent
		must(w.GiveUp(100, givenUp))
		gave := written("a give-up")
		must(w.Finish(100))
		after := written("the success after a give-up")
		expect(t, &s, "100"+gave, "105"+after)
		must(w.Finish(106))
		pending := coalesced("a record finished after the give-up")

		// A state whose commit failed is not known to be written: the
		// same window again is written before Commit returns.
		must(w.Retry(107, retrying))
		s.mu.Lock()
		s.fails = 1
		s.mu.Unlock()
		md = w.Encode()
		if err := c.Commit(w.Base(), -1, md); err == nil {
			t.Fatal("a failed commit of a state: Commit returned nil")
		}
		written("the failed state's commit again")
		expect(t, &s, "105"+md+" failed", "105"+md)
		must(w.Finish(108))
		pending = coalesced("a record finished beside the one retrying, after the failure")
		c.Final()
		expect(t, &s, "105"+pending+" final") // the window's metadata with it
	})
}
