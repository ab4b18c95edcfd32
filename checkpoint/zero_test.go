package checkpoint_test

import (
	"errors"
	"math"
	"testing"
	"time"

	"github.com/redeliver-go/redeliver/checkpoint"
	"github.com/redeliver-go/redeliver/internal/retrystate"
)

// The exported constructors and the zero values of the package, given nil
// and zero values, return a value that works or an error, never panic: a
// nil Rand draws from math/rand/v2's global source.
func TestZeroAndNilValues(t *testing.T) {
	backoffs := map[string]checkpoint.Backoff{
		"Immediate": checkpoint.Immediate(), "Fixed(0)": checkpoint.Fixed(0), "Fixed(-1)": checkpoint.Fixed(-1),
		"Linear(0)": checkpoint.Linear(0), "Exponential(0)": checkpoint.Exponential(0),
		"ExponentialJitter(0, NaN)": checkpoint.ExponentialJitter(0, math.NaN()), "Random(0)": checkpoint.Random(0),
		"FullJitter(Exponential(0))": checkpoint.FullJitter(checkpoint.Exponential(0)), "DecorrelatedJitter(0)": checkpoint.DecorrelatedJitter(0),
		"FullJitter(nil)": checkpoint.FullJitter(nil), "Capped(0, nil)": checkpoint.Capped(0, nil), "Capped(1s, nil)": checkpoint.Capped(time.Second, nil),
		"Capped(-1s, Exponential(1s))": checkpoint.Capped(-time.Second, checkpoint.Exponential(time.Second)),
		"JitteredExponential{}":        checkpoint.JitteredExponential{}.Backoff(),
		"ExponentialJitter(1s, 5)":     checkpoint.ExponentialJitter(time.Second, 5), "FullJitter(Exponential(1s))": checkpoint.FullJitter(checkpoint.Exponential(time.Second)),
		"Capped(1s, DecorrelatedJitter(1s))": checkpoint.Capped(time.Second, checkpoint.DecorrelatedJitter(time.Second)),
	}
	for name, preset := range map[string]interface {
		Policy() (checkpoint.Policy, error)
	}{
		"NewAzureIoTJava()": checkpoint.NewAzureIoTJava(), "BackoffAlgorithm{}": checkpoint.BackoffAlgorithm{},
		"AzureFunctionsExponentialBackoff{}": checkpoint.AzureFunctionsExponentialBackoff{}, "WebJobsRandomizedExponentialBackoff{}": checkpoint.WebJobsRandomizedExponentialBackoff{},
	} {
		p, err := preset.Policy()
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if p.Backoff == nil {
			t.Fatalf("%s: no Backoff", name)
		}
		backoffs[name] = p.Backoff
	}
	for name, b := range backoffs {
		for _, n := range []int{-1, 0, 1, 2, 64} {
			if d := b(n, -time.Second, nil); d < 0 {
				t.Errorf("%s(%d) with a nil Rand: %v", name, n, d)
			}
		}
		p := checkpoint.Policy{MaxRetries: 3, Backoff: b}
		_ = p.Delay(1, 0, nil)
		_ = p.Schedule(3, nil)
		m := retrystate.NewMachine(p)
		m.Begin(time.Time{})
		if d := m.Fail(time.Unix(0, 0), errors.New("x"), nil); d.Action == 0 {
			t.Errorf("%s: Fail with a nil Rand decided nothing", name)
		}
	}
	// A Decide and a user Backoff never see a nil Rand.
	seen := 0
	p := checkpoint.Policy{MaxRetries: 2,
		Decide: func(_ int, _ error, _ time.Duration, rnd checkpoint.Rand) (time.Duration, bool) {
			seen++
			return time.Duration(rnd.Float64()), true
		},
		Backoff: func(_ int, _ time.Duration, rnd checkpoint.Rand) time.Duration {
			seen++
			return time.Duration(rnd.Float64())
		}}
	m := retrystate.NewMachine(p)
	m.Begin(time.Time{})
	m.Fail(time.Unix(0, 0), errors.New("x"), nil)
	m.Request(time.Unix(1, 0), nil)
	if seen != 2 {
		t.Fatalf("Decide and Backoff called %d times, want 2", seen)
	}
	// The zero Machine and the zero Policy never retry.
	var zero retrystate.Machine
	if d := zero.Fail(time.Unix(0, 0), errors.New("x"), nil); d.Action != retrystate.StopRetrying || zero.Err() == nil {
		t.Fatalf("zero Machine: %+v", d)
	}
	if zero.Start(time.Unix(0, 0)).Action != 0 || zero.Decide(time.Unix(0, 0)).Action != retrystate.StopRetrying {
		t.Fatal("zero Machine's Start or Decide")
	}
	var fresh retrystate.Machine
	if d := fresh.Resume(retrystate.State{}, time.Unix(0, 0), nil); d.Action != 0 {
		t.Fatalf("Resume of the zero State: %+v", d)
	}
	if err := (checkpoint.Policy{}).Validate(); err != nil {
		t.Fatal(err)
	}
	if checkpoint.Permanent(nil) != nil || checkpoint.RetryAfter(nil, time.Second) != nil || checkpoint.IsPermanent(nil) {
		t.Fatal("Permanent(nil), RetryAfter(nil) or IsPermanent(nil)")
	}
	if _, ok := checkpoint.RetryAfterOf(nil); ok {
		t.Fatal("RetryAfterOf(nil)")
	}
	for _, f := range []func(error) bool{checkpoint.RetryUnless(), checkpoint.RetryUnless(nil), checkpoint.RetryOnly(), checkpoint.RetryOnly(nil),
		checkpoint.RetryUnlessType[*checkpoint.ExhaustedError](), checkpoint.DefaultRetryable} {
		_ = f(nil)
		_ = f(errors.New("x"))
	}
	if md := retrystate.EncodeState(retrystate.State{}); md != "" {
		t.Fatalf("EncodeState of the zero State: %q", md)
	}
	if s, err := retrystate.DecodeState(""); err != nil || s != (retrystate.State{}) {
		t.Fatalf("DecodeState(\"\"): %+v %v", s, err)
	}
	_ = retrystate.Describe("", 0)
	_ = (&checkpoint.ExhaustedError{}).Error()
	_ = retrystate.State{}.String()
	for _, f := range []func() error{
		func() error { _, err := checkpoint.AzureIoTC{}.Policy(); return err },
		func() error { _, err := checkpoint.NewAzureIoTC(0, 0).Policy(); return err },
		func() error { _, err := checkpoint.BackoffAlgorithm{}.Policy(); return err },
		func() error { _, err := checkpoint.AzureFunctionsExponentialBackoff{}.Policy(); return err },
		func() error { _, err := checkpoint.WebJobsRandomizedExponentialBackoff{}.Policy(); return err },
	} {
		if err := f(); err != nil {
			t.Errorf("a zero preset: %v", err)
		}
	}
	for _, f := range []func() error{
		func() error { _, err := checkpoint.AzureIoTJava{}.Policy(); return err },
		func() error { _, err := checkpoint.NewAzureIoTC(99, -1).Policy(); return err },
		func() error {
			_, err := checkpoint.AzureFunctionsExponentialBackoff{MaxRetryCount: -2, MinimumInterval: -1, MaximumInterval: -1}.Policy()
			return err
		},
		func() error {
			_, err := checkpoint.WebJobsRandomizedExponentialBackoff{MinimumInterval: -1, MaximumInterval: -1, DeltaBackoff: -1}.Policy()
			return err
		},
		func() error { _, err := checkpoint.BackoffAlgorithm{BackOffBase: -1}.Policy(); return err },
	} {
		if err := f(); err == nil {
			t.Error("a constructor accepted values out of range")
		}
	}
}
