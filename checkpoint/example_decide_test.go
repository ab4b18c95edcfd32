package checkpoint_test

import (
	"errors"
	"fmt"
	"time"

	"github.com/redeliver-go/redeliver/checkpoint"
)

// The Azure IoT Java SDK's retry guide lets a custom policy decide from the
// retry count and the last error together. Here, as in its example, a
// throttled request waits longer than a dropped connection, and an unknown
// error is not retried: the SDK's conservative stance.
func ExamplePolicy_decide() {
	var (
		errThrottled  = errors.New("throttled")
		errConnection = errors.New("connection lost")
	)
	p := checkpoint.Policy{
		MaxRetries: 10,
		Decide: func(n int, err error, _ time.Duration, _ checkpoint.Rand) (time.Duration, bool) {
			switch {
			case errors.Is(err, errThrottled):
				return time.Duration(n) * 10 * time.Second, true
			case errors.Is(err, errConnection):
				return time.Second, true
			}
			return 0, false // unknown: terminal
		},
	}
	m := checkpoint.NewMachine(p)
	now := time.Unix(0, 0)
	for _, err := range []error{errConnection, errThrottled, errThrottled, errors.New("bad certificate")} {
		d := m.Fail(now, err, nil)
		if d.Action == checkpoint.StopRetrying {
			fmt.Printf("%v: give up (%v)\n", err, d.Reason)
			break
		}
		fmt.Printf("%v: retry %d after %v\n", err, d.Retry, d.Delay)
		now = d.At
		m.Start(now)
	}
	// Output:
	// connection lost: retry 1 after 1s
	// throttled: retry 2 after 20s
	// throttled: retry 3 after 30s
	// bad certificate: give up (error not retryable)
}

// The same stance the other way: a filter lets only the known errors
// retry, on the policy's own backoff, and a throttled request carries the
// server's retry-after hint, which the next retry waits at least.
func ExampleRetryAfter() {
	var (
		errThrottled  = errors.New("throttled")
		errConnection = errors.New("connection lost")
	)
	p := checkpoint.Policy{
		MaxRetries: 10,
		Backoff:    checkpoint.Fixed(time.Second),
		Retryable:  checkpoint.RetryOnly(errThrottled, errConnection),
	}
	m := checkpoint.NewMachine(p)
	now := time.Unix(0, 0)
	for _, err := range []error{
		errConnection,
		checkpoint.RetryAfter(errThrottled, 30*time.Second), // a 429 with Retry-After: 30
		errors.New("bad certificate"),
	} {
		d := m.Fail(now, err, nil)
		if d.Action == checkpoint.StopRetrying {
			fmt.Printf("%v: give up (%v)\n", err, d.Reason)
			break
		}
		fmt.Printf("%v: retry %d after %v\n", err, d.Retry, d.Delay)
		now = d.At
		m.Start(now)
	}
	// Output:
	// connection lost: retry 1 after 1s
	// throttled (retry after 30s): retry 2 after 30s
	// bad certificate: give up (error not retryable)
}
