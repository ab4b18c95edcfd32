package kafkaadapter

import (
	"errors"
	"fmt"
	"io"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"
)

var errTestRevoked = errors.New("revoked")

// sends records what a Coalescer sends, and fails the sends it is told to.
type sends struct {
	mu    sync.Mutex
	got   []string
	fails int // how many sends fail from now on
}

func (s *sends) send(next int64, md string, final bool) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.fails > 0 {
		s.fails--
		s.got = append(s.got, fmt.Sprintf("%d%s failed", next, md))
		return errors.New("broker says no")
	}
	f := ""
	if final {
		f = " final"
	}
	s.got = append(s.got, fmt.Sprintf("%d%s%s", next, md, f))
	return nil
}

func (s *sends) take() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	g := s.got
	s.got = nil
	return g
}

func newCoalescer(s *sends, caughtUp *bool) *Coalescer {
	c := &Coalescer{
		Interval: time.Second, Records: 100,
		Send: s.send, CaughtUp: func() bool { return *caughtUp }, Ended: func() bool { return false },
		Revoked: errTestRevoked, Log: slog.New(slog.NewTextHandler(io.Discard, nil)), Topic: "t",
	}
	c.Start(-1, "")
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
// partition to be caught up; a retry state, and the success after it, are
// sent before Commit returns; Final sends what is pending.
func TestCoalescer(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var s sends
		caughtUp := false
		c := newCoalescer(&s, &caughtUp)
		if err := c.Commit(5, ""); err != nil {
			t.Fatal(err)
		}
		expect(t, &s, "5") // no commit sent yet: at once
		for _, next := range []int64{10, 20, 30} {
			if err := c.Commit(next, ""); err != nil {
				t.Fatal(err)
			}
		}
		expect(t, &s) // within the window
		time.Sleep(time.Second)
		expect(t, &s, "30")                       // the interval: the latest only
		if err := c.Commit(200, ""); err != nil { // 170 records past 30
			t.Fatal(err)
		}
		expect(t, &s, "200") // the record threshold
		if err := c.Commit(200, "state"); err != nil {
			t.Fatal(err)
		}
		if got := s.take(); !slices.Equal(got, []string{"200state"}) {
			t.Fatalf("a retry state: sent %q before Commit returned, want [200state]", got)
		}
		if err := c.Commit(210, ""); err != nil {
			t.Fatal(err)
		}
		if got := s.take(); !slices.Equal(got, []string{"210"}) {
			t.Fatalf("the success after a retry state: sent %q before Commit returned, want [210]", got)
		}
		caughtUp = true
		if err := c.Commit(220, ""); err != nil {
			t.Fatal(err)
		}
		expect(t, &s, "220") // caught up: at once
		caughtUp = false
		if err := c.Commit(230, ""); err != nil {
			t.Fatal(err)
		}
		c.Final()
		expect(t, &s, "230 final")
		if err := c.Commit(240, ""); !errors.Is(err, errTestRevoked) {
			t.Fatalf("Commit after Final: %v, want the revoked error", err)
		}
		time.Sleep(2 * time.Second)
		expect(t, &s) // nothing after Final
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
		if err := c.Commit(10, ""); err != nil {
			t.Fatal(err)
		}
		expect(t, &s, "10 failed")
		if err := c.Commit(20, ""); err != nil { // waits for the interval after a failure
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
		c.Send = func(next int64, md string, final bool) error {
			if next == 150 {
				close(held)
				<-release
			}
			return s.send(next, md, final)
		}
		if err := c.Commit(150, ""); err != nil { // the first: flushed at once
			t.Fatal(err)
		}
		<-held
		if err := c.Commit(200, ""); err != nil { // 50 records: within the window
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
