package retrystate_test

import (
	"errors"
	"testing"
	"time"

	"github.com/redeliver-go/redeliver/checkpoint"
	"github.com/redeliver-go/redeliver/internal/retrystate"
)

// An ExhaustedError reads as one sentence: how many deliveries, why it
// stopped, the last error (issue 11: "retries exhausted after 3 retries:
// retries spent").
func TestExhaustedErrorMessage(t *testing.T) {
	last := errors.New("inventory service timed out")
	for _, tt := range []struct {
		err  checkpoint.ExhaustedError
		want string
	}{
		{checkpoint.ExhaustedError{Reason: checkpoint.RetriesSpent, Retries: 3, Last: last},
			"given up after 4 deliveries (the retry limit, 3 retries, is reached): inventory service timed out"},
		{checkpoint.ExhaustedError{Reason: checkpoint.RetriesSpent, Retries: 0, Last: last},
			"given up after 1 delivery (no retry allowed): inventory service timed out"},
		{checkpoint.ExhaustedError{Reason: checkpoint.RetriesSpent, Retries: 1, Last: last},
			"given up after 2 deliveries (the retry limit, 1 retry, is reached): inventory service timed out"},
		{checkpoint.ExhaustedError{Reason: checkpoint.TimeBudgetSpent, Retries: 2, Last: last},
			"given up after 3 deliveries (the retry time budget is spent): inventory service timed out"},
		{checkpoint.ExhaustedError{Reason: checkpoint.RecordTooOld, Retries: 2, Last: last},
			"given up after 3 deliveries (the record is too old to retry): inventory service timed out"},
		{checkpoint.ExhaustedError{Reason: checkpoint.NotRetryable, Retries: 0, Last: last},
			"given up after 1 delivery (the error is not retryable): inventory service timed out"},
		{checkpoint.ExhaustedError{Reason: checkpoint.RetriesSpent, Retries: 2},
			"given up after 3 deliveries (the retry limit, 2 retries, is reached)"},
	} {
		if got := tt.err.Error(); got != tt.want {
			t.Errorf("Error() = %q\nwant      %q", got, tt.want)
		}
	}
}

// A retry refused when due (its time budget ran out meanwhile) was never
// delivered: the ExhaustedError does not count it.
func TestExhaustedErrorCountsDeliveredRetries(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	m := retrystate.NewMachine(checkpoint.Policy{MaxRetries: 5, Backoff: checkpoint.Fixed(time.Second), MaxRetryTime: 10 * time.Second})
	m.Begin(t0)
	if d := m.Fail(t0, errors.New("x"), nil); d.Action != retrystate.RetryLater {
		t.Fatalf("decision %+v", d)
	}
	if d := m.Start(t0.Add(time.Minute)); d.Action != retrystate.StopRetrying {
		t.Fatalf("Start past the budget: %+v", d)
	}
	var xerr *checkpoint.ExhaustedError
	if !errors.As(m.Err(), &xerr) || xerr.Retries != 0 {
		t.Fatalf("Err() = %v, want 0 retries delivered", m.Err())
	}
	if want := "given up after 1 delivery (the retry time budget is spent): x"; xerr.Error() != want {
		t.Fatalf("Error() = %q, want %q", xerr.Error(), want)
	}
}

// Retry state reads as words, not as metadata.
func TestDescribeState(t *testing.T) {
	at := time.Date(2026, 1, 1, 12, 0, 1, 500e6, time.UTC)
	for _, tt := range []struct {
		s    retrystate.State
		max  int
		want string
	}{
		{retrystate.State{}, 5, "no retry"},
		{retrystate.State{Retries: 2, NextAt: at, FirstFailure: at}, 5, "retry 2 of 5, due at 12:00:01.5 UTC"},
		{retrystate.State{Retries: 2, Started: true}, 5, "retry 2 of 5, started"},
		{retrystate.State{Retries: 1, NextAt: at}, checkpoint.Infinite, "retry 1 (no limit), due at 12:00:01.5 UTC"},
		{retrystate.State{Retries: 1, NextAt: at, Request: retrystate.Request{MaxRetries: 3, Delay: 10 * time.Second}}, 5,
			"retry 1 of 3, due at 12:00:01.5 UTC (RetryResult: 3 retries, 10s apart)"},
	} {
		if got := retrystate.Describe(retrystate.EncodeState(tt.s), tt.max); got != tt.want {
			t.Errorf("Describe(%+v) = %q, want %q", tt.s, got, tt.want)
		}
	}
	for md, want := range map[string]string{
		"rd1;o=3;r=2;s=1;x=1;e=time%3Bout":     "given up after 3 deliveries (retries spent), its exhaustion action not done; last error: time;out",
		"rd1;o=3;r=2;s=1;x=1;c=1;e=x":          "given up after 3 deliveries (retries spent), the record alone, its exhaustion action not done; last error: x",
		"rd1;o=3;r=0;s=1;x=4;c=5":              "given up after 1 delivery (error not retryable), with the 5 records from it, its exhaustion action not done",
		"rd1;o=3;r=0;s=1;x=4;h=1":              "stopped by StopPartition after 1 delivery (error not retryable): a next owner delivers it again with a fresh count",
		"rd1;o=3;r=1;f=1;d=1000;s=1;rr=2:1000": "retry 1 of 2, started (RetryResult: 2 retries, 1s apart)",
	} {
		if got := retrystate.Describe(md, 5); got != want {
			t.Errorf("Describe(%q) = %q, want %q", md, got, want)
		}
	}
	if got := retrystate.Describe("offset=3", 5); got != `not redeliver's metadata ("offset=3")` {
		t.Errorf("Describe of foreign metadata = %q", got)
	}
	if got := (retrystate.State{Retries: 2, NextAt: at}).String(); got != "retry 2 due at 12:00:01.5 UTC" {
		t.Errorf("String() = %q", got)
	}
}
