package checkpoint_test

import (
	"errors"
	"fmt"
	"time"

	"github.com/redeliver-go/redeliver/checkpoint"
	"github.com/redeliver-go/redeliver/internal/retrystate"
)

// decide fails one delivery after another, each with the next of errs, as
// the engine does with a batch that keeps failing, and prints what p
// decides each time.
func decide(p checkpoint.Policy, errs ...error) {
	m := retrystate.NewMachine(p)
	now := time.Unix(0, 0)
	for _, err := range errs {
		d := m.Fail(now, err, nil)
		if d.Action == retrystate.StopRetrying {
			fmt.Printf("%v: give up (%v)\n", err, d.Reason)
			return
		}
		fmt.Printf("%v: retry %d after %v\n", err, d.Retry, d.Delay)
		now = d.At
		m.Start(now)
	}
}

// A policy can decide from the retry number and the error together, as
// the Azure IoT Java SDK's custom retry policies do: a throttled request
// waits longer than a dropped connection, and an unknown error is not
// retried.
func ExamplePolicy_decide() {
	p := checkpoint.Policy{
		MaxRetries: 10,
		Decide: func(n int, err error, _ time.Duration, _ checkpoint.Rand) (time.Duration, bool) {
			switch {
			case errors.Is(err, errThrottled):
				return time.Duration(n) * 10 * time.Second, true
			case errors.Is(err, errConnection):
				return time.Second, true
			}
			return 0, false // unknown: not retried
		},
	}
	decide(p, errConnection, errThrottled, errThrottled, errors.New("bad certificate"))
	// Output:
	// connection lost: retry 1 after 1s
	// throttled: retry 2 after 20s
	// throttled: retry 3 after 30s
	// bad certificate: give up (error not retryable)
}

// An error can say when to retry, as an HTTP 429 with Retry-After does: the
// next retry waits at least that long.
func ExampleRetryAfter() {
	p := checkpoint.Policy{MaxRetries: 10, Backoff: checkpoint.Fixed(time.Second)}
	decide(p, errConnection, checkpoint.RetryAfter(errThrottled, 30*time.Second))
	// Output:
	// connection lost: retry 1 after 1s
	// throttled (retry after 30s): retry 2 after 30s
}

// A filter that retries only the errors it knows; any other is given up
// at once.
func ExampleRetryOnly() {
	p := checkpoint.Policy{
		MaxRetries: 10,
		Backoff:    checkpoint.Fixed(time.Second),
		Retryable:  checkpoint.RetryOnly(errThrottled, errConnection),
	}
	decide(p, errConnection, errThrottled, errors.New("bad certificate"))
	// Output:
	// connection lost: retry 1 after 1s
	// throttled: retry 2 after 1s
	// bad certificate: give up (error not retryable)
}

// A handler marks an error that no retry can cure, such as a record it
// cannot parse: the batch is given up at once, whatever retries are left.
func ExamplePermanent() {
	p := checkpoint.Policy{MaxRetries: 10, Backoff: checkpoint.Fixed(time.Second)}
	decide(p, errConnection, checkpoint.Permanent(errors.New("invalid order")))
	// Output:
	// connection lost: retry 1 after 1s
	// invalid order: give up (error not retryable)
}
