package checkpoint_test

import (
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/redeliver-go/redeliver/checkpoint"
	"github.com/redeliver-go/redeliver/internal/retrystate"
)

var (
	errThrottled  = errors.New("throttled")
	errConnection = errors.New("connection lost")
	errUnknown    = errors.New("something else")
)

// kinds decides as the Azure IoT Java SDK's custom policy example: a
// throttled request waits 10s times the retry number, a lost connection 1s,
// and any other error is not retried.
func kinds(n int, err error, _ time.Duration, _ checkpoint.Rand) (time.Duration, bool) {
	switch {
	case errors.Is(err, errThrottled):
		return time.Duration(n) * 10 * time.Second, true
	case errors.Is(err, errConnection):
		return time.Second, true
	}
	return 0, false
}

func TestDecide(t *testing.T) {
	now := time.Unix(1_700_000_000, 0)
	for _, tc := range []struct {
		name   string
		policy checkpoint.Policy
		errs   []error // one failure each, in order
		want   []string
	}{
		{"by kind and count", checkpoint.Policy{MaxRetries: 5, Decide: kinds},
			[]error{errThrottled, errConnection, errThrottled},
			[]string{"retry 1 in 10s", "retry 2 in 1s", "retry 3 in 30s"}},
		{"unknown errors are terminal", checkpoint.Policy{MaxRetries: 5, Decide: kinds},
			[]error{errConnection, errUnknown},
			[]string{"retry 1 in 1s", "stop: error not retryable"}},
		{"the filter runs first", checkpoint.Policy{MaxRetries: 5, Decide: kinds, Retryable: checkpoint.RetryUnless(errThrottled)},
			[]error{errThrottled},
			[]string{"stop: error not retryable"}},
		{"the retry count still ends it", checkpoint.Policy{MaxRetries: 1, Decide: kinds},
			[]error{errConnection, errConnection},
			[]string{"retry 1 in 1s", "stop: retries spent"}},
		{"MaxDelay caps the decision", checkpoint.Policy{MaxRetries: 5, Decide: kinds, MaxDelay: 15 * time.Second},
			[]error{errThrottled, errThrottled},
			[]string{"retry 1 in 10s", "retry 2 in 15s"}},
		{"the time budget still ends it", checkpoint.Policy{MaxRetries: 5, Decide: kinds, MaxRetryTime: 25 * time.Second},
			[]error{errThrottled, errThrottled},
			[]string{"retry 1 in 10s", "stop: retry time budget spent"}},
		{"a hint raises the backoff", checkpoint.Policy{MaxRetries: 5, Backoff: checkpoint.Fixed(time.Second)},
			[]error{checkpoint.RetryAfter(errThrottled, 30*time.Second), errConnection},
			[]string{"retry 1 in 30s", "retry 2 in 1s"}},
		{"a hint below the backoff changes nothing", checkpoint.Policy{MaxRetries: 5, Backoff: checkpoint.Fixed(time.Second)},
			[]error{checkpoint.RetryAfter(errThrottled, time.Millisecond)},
			[]string{"retry 1 in 1s"}},
		{"a hint raises a decision", checkpoint.Policy{MaxRetries: 5, Decide: kinds},
			[]error{fmt.Errorf("send: %w", checkpoint.RetryAfter(errConnection, 5*time.Second))},
			[]string{"retry 1 in 5s"}},
		{"MaxDelay caps a hint", checkpoint.Policy{MaxRetries: 5, Backoff: checkpoint.Fixed(time.Second), MaxDelay: 10 * time.Second},
			[]error{checkpoint.RetryAfter(errThrottled, time.Minute)},
			[]string{"retry 1 in 10s"}},
		{"a hint past the time budget gives up", checkpoint.Policy{MaxRetries: 5, Backoff: checkpoint.Fixed(time.Second), MaxRetryTime: 20 * time.Second},
			[]error{checkpoint.RetryAfter(errThrottled, 30*time.Second)},
			[]string{"stop: retry time budget spent"}},
		{"hints can be ignored", checkpoint.Policy{MaxRetries: 5, Backoff: checkpoint.Fixed(time.Second), IgnoreRetryAfter: true},
			[]error{checkpoint.RetryAfter(errThrottled, 30*time.Second)},
			[]string{"retry 1 in 1s"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m := retrystate.NewMachine(tc.policy)
			m.Begin(time.Time{})
			at := now
			var got []string
			for _, err := range tc.errs {
				d := m.Fail(at, err, nil)
				if d.Action == retrystate.StopRetrying {
					got = append(got, "stop: "+d.Reason.String())
					break
				}
				got = append(got, fmt.Sprintf("retry %d in %v", d.Retry, d.Delay))
				if !d.At.Equal(at.Add(d.Delay)) {
					t.Errorf("due at %v, want %v after the failure", d.At.Sub(at), d.Delay)
				}
				at = d.At
				m.Start(at)
			}
			if fmt.Sprint(got) != fmt.Sprint(tc.want) {
				t.Errorf("got %q, want %q", got, tc.want)
			}
		})
	}
}

func TestRetryAfterOf(t *testing.T) {
	if _, ok := checkpoint.RetryAfterOf(errThrottled); ok {
		t.Error("a plain error has a hint")
	}
	if _, ok := checkpoint.RetryAfterOf(nil); ok {
		t.Error("nil has a hint")
	}
	err := fmt.Errorf("wrapped: %w", checkpoint.RetryAfter(errThrottled, 2*time.Second))
	if d, ok := checkpoint.RetryAfterOf(err); !ok || d != 2*time.Second {
		t.Errorf("hint %v %v, want 2s", d, ok)
	}
	if !errors.Is(err, errThrottled) {
		t.Error("the hint hides the error it wraps")
	}
	if checkpoint.RetryAfter(nil, time.Second) != nil {
		t.Error("RetryAfter(nil) is not nil")
	}
}
