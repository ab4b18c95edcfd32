package retrystate_test

import (
	"errors"
	"testing"
	"time"

	"github.com/redeliver-go/redeliver/checkpoint"
	"github.com/redeliver-go/redeliver/internal/retrystate"
)

// A retry that started under a previous owner counts as made: the next owner
// decides as after a failure, so a move during a delivery never repeats a
// retry number (issue 10, defect 6).
func TestMachineResumeCountsAStartedRetry(t *testing.T) {
	p := checkpoint.Policy{MaxRetries: 3, Backoff: checkpoint.Fixed(5 * time.Second), Retryable: func(error) bool { return false }}
	first := t0.Add(-time.Minute)

	m := retrystate.NewMachine(p)
	m.Begin(time.Time{})
	d := m.Resume(retrystate.State{Retries: 2, FirstFailure: first, LastDelay: 5 * time.Second, Started: true}, t0, nil)
	if d.Action != retrystate.RetryLater || d.Retry != 3 || !d.At.Equal(t0.Add(5*time.Second)) {
		t.Fatalf("after a started retry 2 of 3: %+v, want retry 3 at +5s (the filter does not apply)", d)
	}
	if s := m.State(); s.Retries != 3 || s.Started || !s.FirstFailure.Equal(first) || !errors.Is(m.LastError(), retrystate.ErrInterrupted) {
		t.Fatalf("state %+v, last error %v", s, m.LastError())
	}

	m.Begin(time.Time{})
	d = m.Resume(retrystate.State{Retries: 3, FirstFailure: first, Started: true}, t0, nil)
	if d.Action != retrystate.StopRetrying || d.Reason != checkpoint.RetriesSpent {
		t.Fatalf("after a started last retry: %+v, want retries spent", d)
	}
	var xerr *checkpoint.ExhaustedError
	if !errors.As(m.Err(), &xerr) || xerr.Retries != 3 || !errors.Is(xerr, retrystate.ErrInterrupted) {
		t.Fatalf("exhausted error %v", m.Err())
	}
}

// Start checks the time limits again when the retry is due: a retry restored
// late, after its budget ran out while nobody owned the partition, is not
// delivered (issue 10, defect 7).
func TestMachineStartRechecksTimeLimits(t *testing.T) {
	p := checkpoint.Policy{MaxRetries: 10, Backoff: checkpoint.Fixed(5 * time.Second), MaxRetryTime: 12 * time.Second}
	m := retrystate.NewMachine(p)
	m.Begin(time.Time{})
	d := m.Fail(t0, errBoom, nil)
	if d.Action != retrystate.RetryLater {
		t.Fatalf("first failure: %+v", d)
	}
	if d := m.Start(d.At); d.Action != retrystate.RetryNow || d.Retry != 1 || !m.State().Started || !m.State().NextAt.IsZero() {
		t.Fatalf("start when due: %+v, state %+v", d, m.State())
	}

	// The same scheduled state, restored by a next owner 20s after the
	// first failure.
	s := retrystate.State{Retries: 1, FirstFailure: t0, LastDelay: 5 * time.Second, NextAt: t0.Add(5 * time.Second)}
	m = retrystate.NewMachine(p)
	m.Begin(time.Time{})
	late := t0.Add(20 * time.Second)
	if d := m.Resume(s, late, nil); d.Action != retrystate.RetryNow {
		t.Fatalf("resume late: %+v", d)
	}
	if d := m.Start(late); d.Action != retrystate.StopRetrying || d.Reason != checkpoint.TimeBudgetSpent {
		t.Fatalf("start past the budget: %+v, want the time budget spent", d)
	}
	if m.State().Started {
		t.Fatal("a refused retry marked started")
	}

	// The record age too.
	m = retrystate.NewMachine(checkpoint.Policy{MaxRetries: 10, Backoff: checkpoint.Fixed(time.Second), MaxRecordAge: time.Hour})
	m.Begin(t0.Add(-59 * time.Minute))
	d = m.Fail(t0, errBoom, nil)
	if d := m.Start(t0.Add(time.Minute)); d.Action != retrystate.StopRetrying || d.Reason != checkpoint.RecordTooOld {
		t.Fatalf("start with the record an hour old: %+v", d)
	}
}

// A scheduled retry restored under a policy with fewer retries (a
// redeploy that lowered the retry count) is not started past the policy's
// limit: it is given up, after the retries it had, for spent retries. One
// at the limit is started, and a started one at the limit is given up.
func TestMachineStartRechecksTheCount(t *testing.T) {
	p := checkpoint.Policy{MaxRetries: 2, Backoff: checkpoint.Fixed(time.Second)}
	for _, tt := range []struct {
		s       retrystate.State
		started bool // the retry is started
		retries int  // else given up after these
	}{
		{retrystate.State{Retries: 4, FirstFailure: t0, LastDelay: time.Second, NextAt: t0}, false, 3},
		{retrystate.State{Retries: 3, FirstFailure: t0, LastDelay: time.Second, NextAt: t0}, false, 2},
		{retrystate.State{Retries: 2, FirstFailure: t0, LastDelay: time.Second, NextAt: t0}, true, 0},
		{retrystate.State{Retries: 2, FirstFailure: t0, LastDelay: time.Second, Started: true}, false, 2},
	} {
		m := retrystate.NewMachine(p)
		m.Begin(time.Time{})
		d := m.Resume(tt.s, t0, nil)
		if d.Action != retrystate.StopRetrying {
			d = m.Start(t0)
		}
		var xerr *checkpoint.ExhaustedError
		switch {
		case tt.started && d.Action != retrystate.RetryNow:
			t.Errorf("%v: %+v, want retry %d started", tt.s, d, tt.s.Retries)
		case !tt.started && (d.Action != retrystate.StopRetrying || d.Reason != checkpoint.RetriesSpent || !errors.As(m.Err(), &xerr) || xerr.Retries != tt.retries):
			t.Errorf("%v: %+v (%v), want given up for spent retries after %d", tt.s, d, m.Err(), tt.retries)
		}
	}
}

// A restored due time further than the policy allows (a skewed clock, a
// foreign writer) is brought back to what the policy allows; a nearer one
// is kept (issue 10, defect 10).
func TestMachineResumeCapsTheWait(t *testing.T) {
	for _, tc := range []struct {
		name   string
		p      checkpoint.Policy
		next   time.Time
		wantAt time.Time
	}{
		{"fixed, far", checkpoint.Policy{MaxRetries: 5, Backoff: checkpoint.Fixed(5 * time.Second)}, t0.Add(90 * 24 * time.Hour), t0.Add(5 * time.Second)},
		{"fixed, near", checkpoint.Policy{MaxRetries: 5, Backoff: checkpoint.Fixed(5 * time.Second)}, t0.Add(3 * time.Second), t0.Add(3 * time.Second)},
		// Retry 2's full jitter window is [0, 2s]: the longest draw.
		{"jitter, far", checkpoint.Policy{MaxRetries: 5, Backoff: checkpoint.FullJitter(checkpoint.Capped(time.Hour, checkpoint.Exponential(time.Second)))}, t0.Add(time.Hour), t0.Add(2 * time.Second)},
		{"max delay", checkpoint.Policy{MaxRetries: 5, Backoff: checkpoint.Fixed(time.Hour), MaxDelay: time.Minute}, t0.Add(time.Hour), t0.Add(time.Minute)},
		{"no due time: due now", checkpoint.Policy{MaxRetries: 5, Backoff: checkpoint.Fixed(5 * time.Second)}, time.Time{}, t0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m := retrystate.NewMachine(tc.p)
			m.Begin(time.Time{})
			d := m.Resume(retrystate.State{Retries: 2, FirstFailure: t0, LastDelay: time.Second, NextAt: tc.next}, t0, nil)
			want := retrystate.RetryLater
			if tc.wantAt.Equal(t0) {
				want = retrystate.RetryNow
			}
			if d.Action != want || d.At.Sub(tc.wantAt).Abs() > time.Microsecond {
				t.Fatalf("%+v, want a retry at +%v", d, tc.wantAt.Sub(t0))
			}
		})
	}
}

// A handler's own request is part of the State: a next owner keeps its count
// and delay instead of the configured policy (issue 10, defect 8).
func TestMachineRequestSurvivesResume(t *testing.T) {
	never := checkpoint.Policy{} // retries nothing
	m := retrystate.NewMachine(never)
	m.Begin(time.Time{})
	d := m.RequestRetries(t0, retrystate.Request{MaxRetries: 3, Delay: 2 * time.Second}, nil)
	if d.Action != retrystate.RetryLater || d.Retry != 1 {
		t.Fatalf("request: %+v", d)
	}
	s := m.State()
	if s.Request != (retrystate.Request{MaxRetries: 3, Delay: 2 * time.Second}) {
		t.Fatalf("state %+v holds no request", s)
	}
	back, err := retrystate.DecodeState(retrystate.EncodeState(s))
	if err != nil {
		t.Fatal(err)
	}
	next := retrystate.NewMachine(never)
	next.Begin(time.Time{})
	now := t0.Add(2 * time.Second)
	next.Resume(back, now, nil)
	if next.MaxRetries() != 3 {
		t.Fatalf("next owner's limit %d, want the request's 3", next.MaxRetries())
	}
	next.Start(now)
	d = next.Request(now, nil)
	if d.Action != retrystate.RetryLater || d.Retry != 2 || d.Delay != 2*time.Second {
		t.Fatalf("next owner's decision %+v, want retry 2 after the request's 2s", d)
	}
	next.Begin(time.Time{})
	if next.MaxRetries() != 0 || next.State().Request != (retrystate.Request{}) {
		t.Fatal("the request outlived its batch")
	}
}

// A restored due time is capped by the delay its retry was scheduled with
// when that was longer than the Backoff's: a Decide delay or a retry-after
// hint is kept across a move, and a Decide-only policy (no Backoff) does
// not make the retry due at once.
func TestMachineResumeKeepsAThrottledDelay(t *testing.T) {
	for _, tc := range []struct {
		name string
		p    checkpoint.Policy
	}{
		{"Decide", checkpoint.Policy{MaxRetries: 5, Backoff: checkpoint.Fixed(time.Second),
			Decide: func(int, error, time.Duration, checkpoint.Rand) (time.Duration, bool) { return 30 * time.Second, true }}},
		{"Decide only", checkpoint.Policy{MaxRetries: 5,
			Decide: func(int, error, time.Duration, checkpoint.Rand) (time.Duration, bool) { return 30 * time.Second, true }}},
		{"retry-after hint", checkpoint.Policy{MaxRetries: 5, Backoff: checkpoint.Fixed(time.Second)}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m := retrystate.NewMachine(tc.p)
			m.Begin(time.Time{})
			d := m.Fail(t0, checkpoint.RetryAfter(errBoom, 30*time.Second), nil)
			if !d.At.Equal(t0.Add(30 * time.Second)) {
				t.Fatalf("first failure: %+v, want a retry at +30s", d)
			}
			back, err := retrystate.DecodeState(retrystate.EncodeState(m.State()))
			if err != nil {
				t.Fatal(err)
			}
			next := retrystate.NewMachine(tc.p)
			next.Begin(time.Time{})
			now := t0.Add(10 * time.Second) // a move 10s later
			if d := next.Resume(back, now, nil); d.Action != retrystate.RetryLater || !d.At.Equal(t0.Add(30*time.Second)) {
				t.Fatalf("after a move: %+v, want the retry still at +30s", d)
			}
		})
	}
}

// A started retry resumed by a next owner is not shown to Decide or the
// error filter as ErrInterrupted, which is no error of the handler's: a
// Decide that retries only the errors it knows goes on retrying after an
// ordinary move. Its delay is the last one when there is no Backoff.
func TestMachineResumeStartedRetryWithDecide(t *testing.T) {
	known := errors.New("known")
	p := checkpoint.Policy{MaxRetries: 5, Decide: func(_ int, err error, _ time.Duration, _ checkpoint.Rand) (time.Duration, bool) {
		return 7 * time.Second, errors.Is(err, known)
	}, Retryable: func(err error) bool { return errors.Is(err, known) }}
	m := retrystate.NewMachine(p)
	m.Begin(time.Time{})
	d := m.Resume(retrystate.State{Retries: 2, FirstFailure: t0, LastDelay: 7 * time.Second, Started: true}, t0, nil)
	if d.Action != retrystate.RetryLater || d.Retry != 3 || d.Delay != 7*time.Second {
		t.Fatalf("resumed started retry: %+v, want retry 3 after the last 7s", d)
	}
	if !errors.Is(m.LastError(), retrystate.ErrInterrupted) {
		t.Fatalf("last error %v, want ErrInterrupted (the outcome is not known)", m.LastError())
	}
}

// Permanent is never retried, whatever the policy's error filter says.
func TestPermanentIgnoresTheFilter(t *testing.T) {
	for _, p := range []checkpoint.Policy{
		{MaxRetries: 5, Retryable: func(error) bool { return true }},
		{MaxRetries: 5, Retryable: checkpoint.RetryOnly(errBoom)},
		{MaxRetries: 5, Decide: func(int, error, time.Duration, checkpoint.Rand) (time.Duration, bool) { return 0, true }},
	} {
		m := retrystate.NewMachine(p)
		m.Begin(time.Time{})
		if d := m.Fail(t0, checkpoint.Permanent(errBoom), nil); d.Action != retrystate.StopRetrying || d.Reason != checkpoint.NotRetryable {
			t.Fatalf("Permanent(err) with a custom filter: %+v, want not retryable", d)
		}
	}
}

// A restored first failure after now (the clocks of two owners disagree)
// is taken as now: a 10s MaxRetryTime then allows 10s of retries, not the
// skew on top.
//
// Likewise, time waited out in outages (OutageTime, which MaxRetryTime
// does not count) is at most the time since the first failure: a state
// that says more (a foreign writer, a first failure brought back to now)
// does not buy an hour of retries either.
func TestMachineResumeCapsAFutureFirstFailure(t *testing.T) {
	for _, tt := range []struct {
		name string
		s    retrystate.State
	}{
		{"first failure ahead", retrystate.State{Retries: 1, FirstFailure: t0.Add(time.Hour), LastDelay: 10 * time.Millisecond, Started: true}},
		{"outage time past the first failure", retrystate.State{Retries: 1, FirstFailure: t0.Add(-time.Second), LastDelay: 10 * time.Millisecond,
			Started: true, OutageTime: time.Hour}},
		{"first failure ahead with outage time", retrystate.State{Retries: 1, FirstFailure: t0.Add(time.Hour), LastDelay: 10 * time.Millisecond,
			NextAt: t0, OutageTime: 30 * time.Minute}},
	} {
		t.Run(tt.name, func(t *testing.T) { resumeWithinBudget(t, tt.s) })
	}
}

func resumeWithinBudget(t *testing.T, s retrystate.State) {
	p := checkpoint.Policy{MaxRetries: checkpoint.Infinite, Backoff: checkpoint.Fixed(10 * time.Millisecond), MaxRetryTime: 10 * time.Second}
	m := retrystate.NewMachine(p)
	m.Begin(time.Time{})
	now := t0
	d := m.Resume(s, now, nil)
	retries := 0
	for d.Action != retrystate.StopRetrying {
		now = d.At
		if s := m.Start(now); s.Action == retrystate.StopRetrying {
			break
		}
		retries++
		d = m.Fail(now, errBoom, nil)
		if retries > 5000 {
			break
		}
	}
	if now.Sub(t0) > 10*time.Second || retries > 1000 {
		t.Fatalf("%d retries over %v after a move with %+v, want at most 10s of them", retries, now.Sub(t0), s)
	}
}
