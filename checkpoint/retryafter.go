package checkpoint

import (
	"errors"
	"fmt"
	"time"
)

// RetryAfterError is implemented by errors that say how long to wait before
// trying again: an HTTP 429 or 503 with a Retry-After header, a broker's
// throttle time. A [Policy] honours the hint by default: the next retry
// waits at least RetryAfter(), capped by MaxDelay. When the hint would put
// the retry at or past the policy's MaxRetryTime, the batch is given up for
// its spent time budget, as any delay that long would be; set
// [Policy.IgnoreRetryAfter] to keep the policy's own delays.
type RetryAfterError interface {
	error
	RetryAfter() time.Duration
}

// RetryAfter returns err with a retry-after hint of d: a [Policy] waits at
// least d before the retry it causes. err is kept for errors.Is and
// errors.As.
func RetryAfter(err error, d time.Duration) error {
	if err == nil {
		return nil
	}
	return &retryAfterError{err: err, after: d}
}

// RetryAfterOf returns the hint of the first error in err's tree that has
// one ([RetryAfterError]), and whether there is one. A negative hint counts
// as none.
func RetryAfterOf(err error) (time.Duration, bool) {
	var ra RetryAfterError
	if err == nil || !errors.As(err, &ra) || ra.RetryAfter() < 0 {
		return 0, false
	}
	return ra.RetryAfter(), true
}

type retryAfterError struct {
	err   error
	after time.Duration
}

func (e *retryAfterError) Error() string {
	return fmt.Sprintf("%v (retry after %v)", e.err, e.after)
}
func (e *retryAfterError) Unwrap() error             { return e.err }
func (e *retryAfterError) RetryAfter() time.Duration { return e.after }
