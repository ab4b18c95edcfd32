package checkpoint_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/redeliver-go/redeliver/checkpoint"
	"github.com/redeliver-go/redeliver/internal/retrystate"
)

// constU is a Rand that always draws u.
type constU float64

func (u constU) Float64() float64 { return float64(u) }

// boundaryPolicies are every delay algorithm and preset, with a retry
// count long enough to reach the budgets the test sets.
func boundaryPolicies(t *testing.T) map[string]checkpoint.Policy {
	t.Helper()
	ps := map[string]checkpoint.Policy{
		"Fixed":              {Backoff: checkpoint.Fixed(3 * time.Second)},
		"Immediate":          {Backoff: checkpoint.Immediate()},
		"Linear":             {Backoff: checkpoint.Linear(2 * time.Second)},
		"Exponential":        {Backoff: checkpoint.Exponential(time.Second)},
		"ExponentialJitter":  {Backoff: checkpoint.ExponentialJitter(time.Second, 20)},
		"Random":             {Backoff: checkpoint.Random(4 * time.Second)},
		"FullJitter":         {Backoff: checkpoint.FullJitter(checkpoint.Capped(10*time.Second, checkpoint.Exponential(time.Second)))},
		"DecorrelatedJitter": {Backoff: checkpoint.Capped(20*time.Second, checkpoint.DecorrelatedJitter(time.Second))},
		"JitteredExponential": {Backoff: checkpoint.JitteredExponential{Delta: time.Second, Min: 500 * time.Millisecond,
			Max: 30 * time.Second, JitterDown: 0.5, JitterUp: 0.25}.Backoff()},
	}
	for name, preset := range map[string]interface {
		Policy() (checkpoint.Policy, error)
	}{
		"AzureIoTJava":                        checkpoint.NewAzureIoTJava(),
		"BackoffAlgorithm":                    checkpoint.BackoffAlgorithm{BackOffBase: 500 * time.Millisecond, MaxBackOff: 5000 * time.Millisecond, MaxAttempts: checkpoint.BackoffAlgorithmRetryForever},
		"AzureFunctionsExponentialBackoff":    checkpoint.AzureFunctionsExponentialBackoff{MaxRetryCount: checkpoint.Infinite, MinimumInterval: time.Second, MaximumInterval: 30 * time.Second},
		"WebJobsRandomizedExponentialBackoff": checkpoint.WebJobsRandomizedExponentialBackoff{MinimumInterval: time.Second, MaximumInterval: 30 * time.Second, DeltaBackoff: 500 * time.Millisecond},
	} {
		p, err := preset.Policy()
		if err != nil {
			t.Fatal(err)
		}
		ps[name] = p
	}
	for _, r := range []checkpoint.AzureIoTCRetry{checkpoint.AzureIoTCRetryImmediate, checkpoint.AzureIoTCRetryInterval,
		checkpoint.AzureIoTCRetryLinearBackoff, checkpoint.AzureIoTCRetryExponentialBackoff,
		checkpoint.AzureIoTCRetryExponentialBackoffWithJitter, checkpoint.AzureIoTCRetryRandom} {
		p, err := checkpoint.NewAzureIoTC(r, 0).Policy()
		if err != nil {
			t.Fatal(err)
		}
		ps["AzureIoTC "+r.String()] = p
	}
	for name, p := range ps {
		p.MaxRetries = checkpoint.Infinite
		ps[name] = p
	}
	return ps
}

// dueTimes returns when the first n retries of p fall due, from a first
// failure at t0, for a handler that fails at once (each failure at its
// retry's due time).
func dueTimes(p checkpoint.Policy, n int, rnd checkpoint.Rand) []time.Time {
	m := retrystate.NewMachine(p)
	m.Begin(time.Time{})
	var out []time.Time
	now := t0
	for range n {
		d := m.Fail(now, errBoom, rnd)
		out = append(out, d.At)
		now = d.At
		m.Start(now)
	}
	return out
}

// At the edge of MaxRetryTime every policy decides as the Azure IoT C
// SDK's retry_control_should_retry does: a retry due at the budget or past
// it is not scheduled (STOP_RETRYING once current_time - first_retry_time
// >= max_retry_time_in_secs), one due a nanosecond before it is. Checked
// for each retry of the first six whose due time is past the first
// failure, for every delay algorithm and preset.
func TestMaxRetryTimeBoundary(t *testing.T) {
	for name, p := range boundaryPolicies(t) {
		t.Run(name, func(t *testing.T) {
			rnd := constU(0.6)
			due := dueTimes(p, 6, rnd)
			checked := 0
			for k, at := range due {
				budget := at.Sub(t0)
				if budget <= 0 {
					continue // due with the first failure: no budget reaches it
				}
				checked++
				for _, tc := range []struct {
					budget time.Duration
					want   int // retries scheduled
				}{
					{budget, k},         // retry k+1 due at the budget: not scheduled
					{budget + 1, k + 1}, // a nanosecond more: scheduled
					{budget - 1, k},     // a nanosecond less: not scheduled either
				} {
					q := p
					q.MaxRetryTime = tc.budget
					got := len(scheduled(q, rnd, k+1))
					if got != tc.want {
						t.Errorf("retry %d due at +%v, MaxRetryTime %v: %d retries scheduled, want %d", k+1, budget, tc.budget, got, tc.want)
					}
				}
			}
			if checked == 0 && name != "Immediate" && name != "AzureIoTC IOTHUB_CLIENT_RETRY_IMMEDIATE" {
				t.Fatalf("no retry due after the first failure among %v", due)
			}
		})
	}
}

// scheduled runs p's machine for at most n retries, each failing at once,
// and returns the due times of those it scheduled before it stopped.
func scheduled(p checkpoint.Policy, rnd checkpoint.Rand, n int) []time.Time {
	m := retrystate.NewMachine(p)
	m.Begin(time.Time{})
	var out []time.Time
	now := t0
	for range n {
		d := m.Fail(now, errBoom, rnd)
		if d.Action == retrystate.StopRetrying {
			break
		}
		if s := m.Start(d.At); s.Action == retrystate.StopRetrying {
			break
		}
		out = append(out, d.At)
		now = d.At
	}
	return out
}

// The Azure IoT C SDK's LINEAR_BACKOFF (5s, 10s, 15s ... after an
// immediate first retry) with max_retry_time_in_secs of 15: the retry due
// at 15s is not made, as retry_control_should_retry answers STOP_RETRYING
// when current_time - first_retry_time >= 15; with 16, it is. Each line
// shows when the retries are due.
func ExampleAzureIoTC_maxRetryTime() {
	for _, budget := range []time.Duration{15 * time.Second, 16 * time.Second} {
		p, err := checkpoint.NewAzureIoTC(checkpoint.AzureIoTCRetryLinearBackoff, budget).Policy()
		if err != nil {
			fmt.Println(err)
			return
		}
		var due []time.Duration
		for _, at := range scheduled(p, nil, 10) {
			due = append(due, at.Sub(t0))
		}
		fmt.Println(budget, due)
	}
	// Output:
	// 15s [0s 5s]
	// 16s [0s 5s 15s]
}
