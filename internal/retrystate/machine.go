package retrystate

import (
	"errors"
	"fmt"
	"math"
	"time"
	"unicode/utf8"

	"github.com/redeliver-go/redeliver/checkpoint"
)

// Action is what a [Decision] tells the caller to do.
type Action uint8

const (
	// RetryNow delivers the batch again at once.
	RetryNow Action = iota + 1
	// RetryLater delivers the batch again at [Decision.At].
	RetryLater
	// StopRetrying gives the batch up; [Decision.Reason] says why.
	StopRetrying
)

func (a Action) String() string {
	switch a {
	case RetryNow:
		return "retry now"
	case RetryLater:
		return "retry later"
	case StopRetrying:
		return "stop retrying"
	}
	return "none"
}

// Decision is the answer of a [Machine]: retry now, retry later at a time, or
// stop retrying for a reason.
type Decision struct {
	// Action is what the caller does next: RetryNow, RetryLater or
	// StopRetrying. The zero Action (its String is "none") is no decision:
	// the batch has not failed, or nothing is scheduled.
	Action Action
	// At is when the retry is due (RetryNow and RetryLater).
	At time.Time
	// Delay is the backoff that led to At.
	Delay time.Duration
	// Retry is the number of the retry that is due, from 1.
	Retry int
	// Reason is set when Action is StopRetrying.
	Reason checkpoint.Reason
}

// State is the retry state of one pending batch: what must survive a
// rebalance or a crash for the next owner to continue the count. The zero
// State is a batch that has not failed.
//
// A batch's State goes through two forms per retry: scheduled (Retries
// counts the retry to come, NextAt says when it is due) and, once that
// retry is due and about to be delivered, started (see [Machine.Start]). A
// caller that stores both before acting on them keeps the retry bound
// across any move: a next owner that reads a started State counts that
// retry as made, whatever became of it.
type State struct {
	// Offset is the offset of the record the state belongs to: the first
	// record of the withheld range, whose retries it counts. The Machine
	// does not use it: whoever stores the state sets it, so that a next
	// owner applies the count to that record only. -1 when unknown
	// (metadata written before states named their record).
	Offset int64
	// Retries is the number of retries scheduled so far. While the batch is
	// being delivered, it has been delivered Retries+1 times.
	Retries int
	// FirstFailure is when the batch first failed.
	FirstFailure time.Time
	// LastDelay is the backoff before the latest retry.
	LastDelay time.Duration
	// NextAt is when the scheduled retry is due; zero when none is (before
	// the first failure, and once the retry has started).
	NextAt time.Time
	// OutageTime is how long the batch has waited out outages since its
	// first failure (see stream.Budget): MaxRetryTime does not count it.
	OutageTime time.Duration
	// Request is the handler's own request for retries in force for the
	// batch (stream's RetryResult), which replaces the policy; the zero
	// Request is none.
	Request Request
	// LastError is the text of the last error (its first 128 bytes): of
	// a batch GivenUp, for the exhaustion action of a next owner, and of
	// the latest failed delivery of a scheduled or started retry, for a
	// next owner that refuses the retry ([Machine.Start]) and gives the
	// batch up with it. Empty after a retry request with no error.
	LastError string
	// Records is how many records from Offset the state covers: for a
	// State GivenUp, how many were given up (1 for a record given up
	// alone, stream.FailedAt; the batch's size otherwise); for a retry
	// of a batch that failed as a whole, the batch's size. Like Offset,
	// the Machine does not use it: whoever stores the state sets it, so
	// that a next owner, whose fetch may hold more records or fewer,
	// retries or gives up those records only: it delivers the ones after
	// them as a next batch, and fetches the ones its first fetch did not
	// return before it goes on. 0 when unknown (metadata written before
	// states said so) or with Alone.
	Records int
	// Started reports that the retry counted by Retries has started. Its
	// outcome is not part of the State: a next owner counts it as made and
	// decides as after a failure (see [Machine.Resume]).
	Started bool
	// GivenUp, when set, says that the batch was given up for this reason
	// and its exhaustion action has not succeeded yet: Retries is then the
	// retries it was given up after, and [Machine.Resume] gives it up
	// again at once, without a delivery. Started is set with it, so that a
	// reader that does not know GivenUp counts every retry as made.
	GivenUp checkpoint.Reason
	// Alone says that the latest failure counted was at the record at
	// Offset alone (stream.FailedAt, stream.PerRecord), not at the whole
	// batch: if a next owner gives the record up, it gives up that record
	// only, whatever its fetch holds. The Machine does not use it either.
	Alone bool
	// Halted, with GivenUp, says that the partition was stopped at the
	// batch (stream.StopPartition) until an operator resumes or skips it:
	// a next owner delivers the batch again with a fresh count, as a
	// resume would.
	Halted bool
}

// GivenUpState returns the State that records, for a next owner, that the
// current batch was given up with err and that its exhaustion action has
// not succeeded yet; the zero State when the machine has not stopped.
func (m *Machine) GivenUpState() State {
	var xerr *checkpoint.ExhaustedError
	if !errors.As(m.Err(), &xerr) {
		return State{}
	}
	s := State{Offset: m.state.Offset, Retries: xerr.Retries, FirstFailure: xerr.FirstFailure, LastDelay: m.state.LastDelay,
		OutageTime: m.state.OutageTime, Started: true, Request: m.state.Request, GivenUp: xerr.Reason}
	if xerr.Last != nil {
		s.LastError = truncate(xerr.Last.Error(), maxLastError)
	}
	return s
}

// maxLastError is how many bytes of a given-up batch's last error a State
// keeps.
const maxLastError = 128

// truncate returns the first n bytes of s at most, cut at a rune's start.
func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n]
}

// restoredError is the last error of a batch given up by a previous
// owner, of which only the text is kept.
type restoredError struct{ msg string }

func (e *restoredError) Error() string { return e.msg }

// Request is a handler's own request for retries, MaxRetries of them
// ([checkpoint.Infinite] for no limit) Delay apart: stream's RetryResult. While it is
// in force it replaces the policy of its batch, error filter and time
// limits included ([Request.Policy]). It is part of the [State], so that a
// next owner keeps it. The zero Request stands for none: it asks for no
// retry, so no State that schedules one holds it.
type Request struct {
	MaxRetries int
	Delay      time.Duration
}

// Policy returns the policy r puts in force: MaxRetries retries, a fixed
// Delay before each, no time limit and no error filter beyond the default.
func (r Request) Policy() checkpoint.Policy {
	return checkpoint.Policy{MaxRetries: r.MaxRetries, Backoff: checkpoint.Fixed(r.Delay)}
}

// Machine is the retry state machine of one partition: it follows one batch
// at a time from its first delivery until it succeeds or is given up.
//
// A Machine never sleeps, starts no goroutine and reads no clock or global
// random source: the caller passes the time and the randomness in, as in the
// Azure IoT C SDK's retry control. The zero Machine has the zero Policy, which
// never retries. A Machine is not safe for concurrent use; give each
// partition its own.
type Machine struct {
	// base is the policy the Machine applies, a copy (a pointer to the
	// processor's own measured slower on the success path); override, when
	// not nil, the policy of a RetryResult in force for the current batch,
	// never written through.
	base     checkpoint.Policy
	override *checkpoint.Policy
	state    State
	oldest   time.Time
	last     error
	stopped  checkpoint.Reason
	refused  bool // Start refused the scheduled retry: it was never delivered
}

// NewMachine returns a Machine that applies p.
func NewMachine(p checkpoint.Policy) Machine {
	return Machine{base: p}
}

// NewMachineOf returns a Machine that applies a copy of *p.
func NewMachineOf(p *checkpoint.Policy) Machine {
	return Machine{base: *p}
}

// Begin starts following a new batch whose oldest record was written at
// oldest (zero when unknown). It forgets the previous batch's state and the
// policy of any [Machine.RequestRetries].
func (m *Machine) Begin(oldest time.Time) {
	m.override = nil
	m.state, m.oldest, m.last, m.stopped, m.refused = State{}, oldest, nil, 0, false
}

// Restore sets the state of the current batch, as read back from a durable
// checkpoint, and puts its Request in force. [Machine.Resume] does more: a
// next owner uses it.
func (m *Machine) Restore(s State) {
	m.state = s
	if s.Request != (Request{}) {
		p := s.Request.Policy()
		m.override = &p
	}
}

// ErrInterrupted is the last error of a batch whose retry started under a
// previous owner and never reported its outcome (a revocation or a crash
// during the delivery): [Machine.Resume] counts that retry as failed with
// it.
var ErrInterrupted = errors.New("checkpoint: a retry started by a previous owner never reported its outcome")

// Resume continues at now, as the batch's next owner, a State read back
// from a durable checkpoint, and answers what follows:
//
//   - a started State (its retry began under the previous owner, which may
//     have been interrupted at any point of it): that retry counts as made
//     and as failed, with [ErrInterrupted] as its error, since its outcome
//     is not known. The next retry's delay is the policy's Backoff for it
//     (the last delay again when the policy has no Backoff, only Decide):
//     neither the error filter nor Decide sees ErrInterrupted, which is no
//     error of the handler's. The answer is a retry later, or StopRetrying
//     once the limits are reached;
//   - a scheduled State: RetryLater at its NextAt, or RetryNow once due (or
//     when it has no NextAt); its LastError becomes the last error, so
//     that a retry that [Machine.Start] then refuses is given up with it.
//     A NextAt further than now plus the delay the retry was scheduled
//     with (LastDelay: a Decide delay or a retry-after hint included), or
//     than the policy's Backoff with the largest random draw when that is
//     longer, is brought back to that (a skewed clock, a foreign writer);
//   - a State given up by the previous owner ([State.GivenUp], its
//     exhaustion action not done): StopRetrying for the same reason, at
//     once, with the same retries, first failure and last error (its text);
//     but the zero Decision, a fresh count, for a State [State.Halted];
//   - a State with no retry (the zero State): the zero Decision.
//
// A State without a first failure time, or with one after now (the clocks
// of two owners disagree), is taken to have first failed at now, and its
// OutageTime is at most the time since its first failure.
func (m *Machine) Resume(s State, now time.Time, rnd checkpoint.Rand) Decision {
	m.Restore(s)
	if s.Halted {
		// A partition stopped at the batch: delivered again, with a
		// fresh count, as Resume of the stopped partition would.
		m.Begin(m.oldest)
		return Decision{}
	}
	if s.GivenUp != 0 {
		// Given up by the previous owner, whose exhaustion action had
		// not succeeded: given up again, with what it was given up with.
		m.state.GivenUp, m.state.LastError, m.state.Started = 0, "", false
		m.restoredTimes(now)
		m.last = nil
		if s.LastError != "" {
			m.last = &restoredError{s.LastError}
		}
		return m.stop(s.GivenUp)
	}
	if m.state.Retries <= 0 {
		if m.state.Started || !m.state.NextAt.IsZero() {
			m.state.Started, m.state.NextAt = false, time.Time{}
		}
		return Decision{}
	}
	m.restoredTimes(now)
	if s.LastError != "" {
		// The error of the latest failed delivery: a retry refused
		// when due is given up with it.
		m.last, m.state.LastError = &restoredError{s.LastError}, ""
	}
	if m.state.Started {
		return m.interrupted(now, rnd)
	}
	p := m.policyRef()
	longest := p.Delay(m.state.Retries, m.state.LastDelay, topDraw{})
	if last := capped(p, m.state.LastDelay); last > longest {
		longest = last
	}
	limit := now.Add(longest)
	switch {
	case m.state.NextAt.IsZero(): // a scheduled retry with no due time: due now
		m.state.NextAt = now
	case m.state.NextAt.After(limit):
		m.state.NextAt = limit
	}
	return m.Decide(now)
}

// restoredTimes brings a restored state's times within what now allows:
// a first failure that is missing or after now (the clocks of two owners
// disagree) is taken as now, and the time waited out in outages is at
// most the time since the first failure, so that neither stretches
// MaxRetryTime.
func (m *Machine) restoredTimes(now time.Time) {
	if m.state.FirstFailure.IsZero() || m.state.FirstFailure.After(now) {
		m.state.FirstFailure = now
	}
	m.state.OutageTime = max(min(m.state.OutageTime, now.Sub(m.state.FirstFailure)), 0)
}

// interrupted counts the started retry of a restored State as failed at
// now with ErrInterrupted, and decides the next one with the policy's
// Backoff, or the last delay again when it has none.
func (m *Machine) interrupted(now time.Time, rnd checkpoint.Rand) Decision {
	m.last, m.refused = ErrInterrupted, false
	m.state.NextAt, m.state.Started = time.Time{}, false
	p := m.policyRef()
	if p.MaxRetries != checkpoint.Infinite && m.state.Retries >= p.MaxRetries {
		return m.stop(checkpoint.RetriesSpent)
	}
	n := next(m.state.Retries)
	d := m.state.LastDelay
	if p.Backoff != nil {
		d = p.Backoff(n, m.state.LastDelay, orGlobal(rnd))
	}
	return m.schedule(now, n, capped(p, d))
}

// topDraw is the largest random draw: with it a Backoff gives the longest
// delay its jitter allows.
type topDraw struct{}

func (topDraw) Float64() float64 { return 1 - 1.0/(1<<53) }

// Start is called when the scheduled retry is due, just before it is
// delivered, and answers whether it may start at now. The policy's time
// limits are checked again, as the Azure IoT C SDK does when a retry is
// due: a retry that would start MaxRetryTime or more after the first
// failure, or when the oldest record is MaxRecordAge old or older, is not
// started (StopRetrying; a retry restored from a previous owner late, say),
// nor is one past the policy's MaxRetries (restored from an owner whose
// policy allowed more).
// Otherwise the State becomes started and the answer is RetryNow. With no
// retry scheduled, Start returns the zero Decision.
func (m *Machine) Start(now time.Time) Decision {
	if m.state.Retries <= 0 || m.stopped != 0 {
		return Decision{}
	}
	p := m.policyRef()
	if p.MaxRetries != checkpoint.Infinite && m.state.Retries > p.MaxRetries {
		// Past the limit of the policy in force: a state scheduled under
		// a policy with more retries (a redeploy that lowered the count).
		m.refused = true
		return m.stop(checkpoint.RetriesSpent)
	}
	if p.MaxRetryTime > 0 && !m.state.FirstFailure.IsZero() && m.spent(now) >= p.MaxRetryTime {
		m.refused = true
		return m.stop(checkpoint.TimeBudgetSpent)
	}
	if p.MaxRecordAge > 0 && !m.oldest.IsZero() && now.Sub(m.oldest) >= p.MaxRecordAge {
		m.refused = true
		return m.stop(checkpoint.RecordTooOld)
	}
	m.state.Started, m.state.NextAt = true, time.Time{}
	return Decision{Action: RetryNow, At: now, Delay: m.state.LastDelay, Retry: m.state.Retries}
}

// State returns the state of the current batch.
func (m *Machine) State() State { return m.state }

// Retries returns the state's Retries: how many retries were scheduled so
// far for the current batch. It reads one field where State copies them
// all (a handler's Attempt is filled on every delivery).
func (m *Machine) Retries() int { return m.state.Retries }

// FirstFailure returns the state's FirstFailure, zero before the current
// batch first failed.
func (m *Machine) FirstFailure() time.Time { return m.state.FirstFailure }

// Policy returns the policy in force for the current batch.
func (m *Machine) Policy() checkpoint.Policy { return *m.policyRef() }

// MaxRetries returns the MaxRetries of the policy in force.
func (m *Machine) MaxRetries() int { return m.policyRef().MaxRetries }

// LastError returns the error of the latest failed delivery, or nil.
func (m *Machine) LastError() error { return m.last }

// Last reports whether the delivery under way is the last one the policy
// allows by count. A time budget or a record age can still end retrying
// earlier.
func (m *Machine) Last() bool {
	p := m.policyRef()
	return p.MaxRetries != checkpoint.Infinite && m.state.Retries >= p.MaxRetries
}

func (m *Machine) policyRef() *checkpoint.Policy {
	if m.override != nil {
		return m.override
	}
	return &m.base
}

// Fail records that the delivery under way failed with err at now and decides
// what follows: a retry (now or later) or, when the policy's filter rejects
// err or its limits are reached, a stop. rnd is the random source of the
// policy's Backoff or Decide; nil draws from math/rand/v2's global source.
func (m *Machine) Fail(now time.Time, err error, rnd checkpoint.Rand) Decision {
	return m.fail(now, err, rnd, true)
}

// Request records that the handler asked for a retry at now without failing:
// like [Machine.Fail], but the error filter does not apply. The policy in
// force decides; see [Machine.RequestRetries] for a request that brings its
// own.
func (m *Machine) Request(now time.Time, rnd checkpoint.Rand) Decision {
	return m.fail(now, nil, rnd, false)
}

// RequestRetries records that the handler asked at now for r (a
// RetryResult): r replaces the policy for the rest of the batch (until the
// next [Machine.Begin]) and becomes part of the State; then it decides as
// [Machine.Request]. The retries already made still count.
func (m *Machine) RequestRetries(now time.Time, r Request, rnd checkpoint.Rand) Decision {
	p := r.Policy()
	m.override = &p
	m.state.Request = r
	return m.fail(now, nil, rnd, false)
}

func (m *Machine) fail(now time.Time, err error, rnd checkpoint.Rand, filter bool) Decision {
	if m.state.FirstFailure.IsZero() {
		m.state.FirstFailure = now
	}
	m.last, m.refused = err, false
	m.state.NextAt, m.state.Started = time.Time{}, false
	p := m.policyRef()
	if filter && (checkpoint.IsPermanent(err) || !retryable(p, err)) {
		// Permanent is never retried, whatever the policy's filter says.
		return m.stop(checkpoint.NotRetryable)
	}
	if p.MaxRetries != checkpoint.Infinite && m.state.Retries >= p.MaxRetries {
		return m.stop(checkpoint.RetriesSpent)
	}
	n := next(m.state.Retries)
	d, ok := policyNext(p, n, m.state.LastDelay, err, rnd)
	if !ok {
		return m.stop(checkpoint.NotRetryable)
	}
	return m.schedule(now, n, d)
}

// next returns the number of the retry after retries: retries+1, or the
// largest int for a count that has reached it (an infinite policy's).
func next(retries int) int {
	if retries == math.MaxInt {
		return retries
	}
	return retries + 1
}

// schedule schedules retry n after a delay of d from now, unless it would
// start past the policy's time limits.
func (m *Machine) schedule(now time.Time, n int, d time.Duration) Decision {
	p := m.policyRef()
	at := addClamped(now, d)
	if p.MaxRetryTime > 0 && m.spent(at) >= p.MaxRetryTime {
		return m.stop(checkpoint.TimeBudgetSpent)
	}
	if p.MaxRecordAge > 0 && !m.oldest.IsZero() && at.Sub(m.oldest) >= p.MaxRecordAge {
		return m.stop(checkpoint.RecordTooOld)
	}
	m.state.Retries, m.state.LastDelay, m.state.NextAt = n, d, at
	m.stopped = 0
	a := RetryLater
	if d == 0 {
		a = RetryNow
	}
	return Decision{Action: a, At: at, Delay: d, Retry: n}
}

// spent returns the part of MaxRetryTime used at t: the time since the
// first failure, less the time spent waiting out outages.
func (m *Machine) spent(t time.Time) time.Duration {
	return t.Sub(m.state.FirstFailure) - m.state.OutageTime
}

// addClamped returns t+d, or the latest time a Duration from t reaches
// when that overflows.
func addClamped(t time.Time, d time.Duration) time.Time {
	at := t.Add(d)
	if d > 0 && at.Before(t) {
		return t.Add(maxDuration)
	}
	return at
}

func (m *Machine) stop(r checkpoint.Reason) Decision {
	m.stopped = r
	return Decision{Action: StopRetrying, Reason: r}
}

// Decide answers, at now, what the latest [Machine.Fail] or
// [Machine.Request] decided: RetryLater until the retry is due, RetryNow from
// then on, or StopRetrying. Before any failure it returns the zero Decision.
func (m *Machine) Decide(now time.Time) Decision {
	switch {
	case m.stopped != 0:
		return Decision{Action: StopRetrying, Reason: m.stopped}
	case m.state.NextAt.IsZero():
		return Decision{}
	}
	d := Decision{Action: RetryNow, At: m.state.NextAt, Delay: m.state.LastDelay, Retry: m.state.Retries}
	if now.Before(m.state.NextAt) {
		d.Action = RetryLater
	}
	return d
}

// Err returns, once the machine has stopped retrying, an [*checkpoint.ExhaustedError]
// that carries the reason and the last error; nil before.
func (m *Machine) Err() error {
	if m.stopped == 0 {
		return nil
	}
	retries := m.state.Retries
	if m.refused {
		retries-- // the scheduled retry was refused when due
	}
	return &checkpoint.ExhaustedError{Reason: m.stopped, Retries: retries, FirstFailure: m.state.FirstFailure, Last: m.last}
}

// maxDuration is the longest time.Duration.
const maxDuration = time.Duration(math.MaxInt64)

func count(n int, one, many string) string {
	if n == 1 {
		return "1 " + one
	}
	return fmt.Sprintf("%d %s", n, many)
}
