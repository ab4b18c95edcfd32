package checkpoint

import (
	"errors"
	"fmt"
	"time"
)

// Reason says why the engine stopped retrying a batch or a record: the
// [ExhaustedError.Reason] of one given up.
type Reason uint8

const (
	// RetriesSpent: the policy's MaxRetries were all used.
	RetriesSpent Reason = iota + 1
	// TimeBudgetSpent: the next retry would start past MaxRetryTime.
	TimeBudgetSpent
	// RecordTooOld: the next retry would start past MaxRecordAge.
	RecordTooOld
	// NotRetryable: the policy's error filter rejected the error.
	NotRetryable
	// DeliveryLimitReached: the broker's delivery count limit is reached
	// (a Kafka share group's): the record's retry could not be held, and
	// released it would be archived.
	DeliveryLimitReached
)

func (r Reason) String() string {
	switch r {
	case RetriesSpent:
		return "retries spent"
	case TimeBudgetSpent:
		return "retry time budget spent"
	case RecordTooOld:
		return "record too old"
	case NotRetryable:
		return "error not retryable"
	case DeliveryLimitReached:
		return "delivery limit reached"
	}
	return "none"
}

// ErrExhausted is matched by every [*ExhaustedError] with errors.Is.
var ErrExhausted = errors.New("given up")

// ExhaustedError says that a batch (or a record, see stream.FailedAt) was
// given up: why, after how many retries, and the error of its last
// delivery. Its message reads
//
//	given up after 4 deliveries (the retry limit, 3 retries, is reached): inventory service timed out
type ExhaustedError struct {
	// Reason says why retrying stopped.
	Reason Reason
	// Retries is how many retries were delivered: the batch was delivered
	// Retries+1 times.
	Retries int
	// FirstFailure is when the batch first failed (or first asked for a
	// retry).
	FirstFailure time.Time
	// Last is the error of the last delivery; nil when it asked for a
	// retry without failing, or when that delivery was cut short under a
	// previous owner.
	Last error
}

func (e *ExhaustedError) Error() string {
	var why string
	switch e.Reason {
	case RetriesSpent:
		if e.Retries == 0 {
			why = "no retry allowed"
		} else {
			why = fmt.Sprintf("the retry limit, %s, is reached", count(e.Retries, "retry", "retries"))
		}
	case TimeBudgetSpent:
		why = "the retry time budget is spent"
	case RecordTooOld:
		why = "the record is too old to retry"
	case NotRetryable:
		why = "the error is not retryable"
	case DeliveryLimitReached:
		why = "the broker's delivery count limit is reached"
	default:
		why = e.Reason.String()
	}
	msg := fmt.Sprintf("given up after %s (%s)", count(e.Retries+1, "delivery", "deliveries"), why)
	if e.Last == nil {
		return msg
	}
	return msg + ": " + e.Last.Error()
}

func count(n int, one, many string) string {
	if n == 1 {
		return "1 " + one
	}
	return fmt.Sprintf("%d %s", n, many)
}

// Unwrap returns the last error.
func (e *ExhaustedError) Unwrap() error { return e.Last }

// Is reports whether target is [ErrExhausted].
func (e *ExhaustedError) Is(target error) bool { return target == ErrExhausted }
