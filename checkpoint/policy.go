package checkpoint

import (
	"context"
	"errors"
	"fmt"
	"time"
)

// Infinite is the MaxRetries of a policy that never runs out of retries
// (retryCount -1 in host.json).
const Infinite = -1

// Policy decides whether and when a failed batch is delivered again.
//
// MaxRetries counts retries, not attempts: a policy with MaxRetries 10
// delivers a batch at most 11 times. The zero Policy never retries, which is
// the behaviour of a host.json without a checkpointRetryPolicy.
//
// A Policy is plain data: copy it freely. It is safe for concurrent use as
// long as its Backoff and Retryable functions are, which every function of
// this package is.
type Policy struct {
	// MaxRetries is the number of retries after the first attempt: 0 never
	// retries, [Infinite] (-1) never stops, n retries at most n times.
	// Infinite needs a delay between retries (a Backoff that waits) or a
	// MaxRetryTime or MaxRecordAge: see [Policy.Validate].
	MaxRetries int

	// Backoff computes the delay before each retry. Nil retries at once.
	Backoff Backoff

	// MaxDelay caps every delay the Backoff returns. 0 means no cap.
	MaxDelay time.Duration

	// MaxRetryTime ends retrying once a retry would start this long or
	// longer after the batch's first failure (max_retry_time_in_secs in the
	// Azure IoT C SDK). 0 means no budget.
	MaxRetryTime time.Duration

	// MaxRecordAge ends retrying once a retry would start when the batch's
	// oldest record is this old or older. 0 means no limit.
	MaxRecordAge time.Duration

	// Retryable reports whether an error may be retried. Nil means
	// [DefaultRetryable].
	Retryable func(error) bool

	// Decide, when set, decides a failure's retry from the retry's number
	// and the error together, as the Azure IoT Java SDK's
	// RetryPolicy.getRetryDecision does: whether to retry, and after how
	// long. It runs after Retryable accepted the error, and its delay
	// replaces Backoff's. The retry count, MaxDelay, MaxRetryTime,
	// MaxRecordAge and a retry-after hint still apply on top. A retry a
	// handler asks for (a RetryResult, which carries no error) takes
	// Backoff's delay.
	Decide DecideFunc

	// IgnoreRetryAfter turns off the retry-after hints of errors (see
	// [RetryAfter]). By default a retry waits at least the hint.
	IgnoreRetryAfter bool
}

// Validate reports what is wrong with p, or nil.
//
// A policy that would redeliver a failing batch without pause and without
// end is refused: MaxRetries [Infinite] with no delay between retries (a
// nil Backoff, or one such as [Immediate] that returns 0) and neither a
// MaxRetryTime nor a MaxRecordAge. A poison batch would be delivered, and
// its retry state committed, as fast as the broker answers, for ever (a
// test saw 18,780 deliveries in 3s). It is refused rather than slowed to a
// floor the library picks: the fix is a choice only the program can make
// (a Backoff that waits, a finite MaxRetries, or a time budget), and an
// error at construction is found on the first run. A policy with Decide
// is not refused: Decide's delays depend on the errors.
func (p Policy) Validate() error {
	var errs []error
	if p.MaxRetries < Infinite {
		errs = append(errs, fmt.Errorf("checkpoint: MaxRetries is %d: want -1 (infinite), 0 (none) or a positive count", p.MaxRetries))
	}
	for _, f := range []struct {
		name string
		d    time.Duration
	}{{"MaxDelay", p.MaxDelay}, {"MaxRetryTime", p.MaxRetryTime}, {"MaxRecordAge", p.MaxRecordAge}} {
		if f.d < 0 {
			errs = append(errs, fmt.Errorf("checkpoint: %s is %v: want 0 (none) or a positive duration", f.name, f.d))
		}
	}
	if p.spins() {
		errs = append(errs, errors.New("checkpoint: MaxRetries is Infinite with no delay between retries (Backoff is nil or returns 0) and no MaxRetryTime or MaxRecordAge: "+
			"a batch that always fails would be delivered again without pause, for ever; set a Backoff that waits (e.g. Exponential(time.Second) with a MaxDelay), a finite MaxRetries, or a MaxRetryTime"))
	}
	return errors.Join(errs...)
}

// spins reports whether p would redeliver a failing batch without pause
// and without end: MaxRetries [Infinite], no Decide, no MaxRetryTime or
// MaxRecordAge, and a Backoff that is nil or returns 0 for each of the
// first retries. [Policy.Validate] refuses such a policy.
func (p Policy) spins() bool {
	if p.MaxRetries != Infinite || p.Decide != nil || p.MaxRetryTime > 0 || p.MaxRecordAge > 0 {
		return false
	}
	if p.Backoff == nil {
		return true
	}
	var prev time.Duration
	for n := 1; n <= 8; n++ {
		if prev = p.Backoff(n, prev, midRand{}); prev > 0 {
			return false
		}
	}
	return true
}

// midRand always draws 0.5: a jittered Backoff's middle delay, which is
// above 0 for every jittered strategy of this package that waits at all.
type midRand struct{}

func (midRand) Float64() float64 { return 0.5 }

// Delay returns the delay before retry n (1-based) after a delay of prev,
// capped by MaxDelay and never negative. A nil rnd draws from
// math/rand/v2's global source.
func (p Policy) Delay(n int, prev time.Duration, rnd Rand) time.Duration {
	if p.Backoff == nil {
		return 0
	}
	d := p.Backoff(n, prev, orGlobal(rnd))
	if d < 0 {
		d = 0
	}
	if p.MaxDelay > 0 && d > p.MaxDelay {
		d = p.MaxDelay
	}
	return d
}

// Schedule returns the delays before the first n retries the policy allows
// (fewer when MaxRetries is smaller), drawing randomness from rnd. It ignores
// MaxRetryTime and MaxRecordAge, which depend on when failures happen.
func (p Policy) Schedule(n int, rnd Rand) []time.Duration {
	if p.MaxRetries >= 0 && n > p.MaxRetries {
		n = p.MaxRetries
	}
	out := make([]time.Duration, 0, max(n, 0))
	var prev time.Duration
	for i := 1; i <= n; i++ {
		prev = p.Delay(i, prev, rnd)
		out = append(out, prev)
	}
	return out
}

// DecideFunc decides a retry from n, the number of the retry about to
// happen (from 1), err, the error that failed the delivery, and prev, the
// delay before the previous retry (0 before the first). It returns the
// delay before the retry, and false to give the batch up instead. It must
// be a pure function of its inputs and rnd (its only random source), so
// that a policy can be shared by goroutines and tested exactly.
type DecideFunc func(n int, err error, prev time.Duration, rnd Rand) (delay time.Duration, retry bool)

// DefaultRetryable is the error filter of a Policy whose Retryable is nil:
// every error may be retried except those marked with [Permanent] and context
// cancellation.
func DefaultRetryable(err error) bool {
	return !IsPermanent(err) && !errors.Is(err, context.Canceled)
}

// RetryUnless returns an error filter that retries every error DefaultRetryable
// retries, except those that match one of targets with errors.Is.
func RetryUnless(targets ...error) func(error) bool {
	return func(err error) bool {
		for _, t := range targets {
			if errors.Is(err, t) {
				return false
			}
		}
		return DefaultRetryable(err)
	}
}

// RetryOnly returns an error filter that retries only errors that match one
// of targets with errors.Is and are not marked Permanent. It suits the
// conservative stance of the Azure IoT Java SDK: unknown errors are terminal.
func RetryOnly(targets ...error) func(error) bool {
	return func(err error) bool {
		if !DefaultRetryable(err) {
			return false
		}
		for _, t := range targets {
			if errors.Is(err, t) {
				return true
			}
		}
		return false
	}
}

// RetryUnlessType returns an error filter that retries every error
// DefaultRetryable retries, except those for which errors.As finds an error of
// type T in the chain.
func RetryUnlessType[T error]() func(error) bool {
	return func(err error) bool {
		var target T
		if errors.As(err, &target) {
			return false
		}
		return DefaultRetryable(err)
	}
}

// permanentError marks an error as not retryable.
type permanentError struct{ err error }

func (e *permanentError) Error() string { return e.err.Error() }
func (e *permanentError) Unwrap() error { return e.err }

// Permanent marks err as not retryable: a policy that uses DefaultRetryable (or
// one of the filters of this package) stops at once and the batch goes to the
// exhaustion action. Permanent(nil) is nil.
func Permanent(err error) error {
	if err == nil {
		return nil
	}
	return &permanentError{err}
}

// IsPermanent reports whether err or an error it wraps was marked with
// [Permanent].
func IsPermanent(err error) bool {
	var p *permanentError
	return errors.As(err, &p)
}
