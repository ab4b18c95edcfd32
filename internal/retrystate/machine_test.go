package retrystate_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/redeliver-go/redeliver/checkpoint"
	"github.com/redeliver-go/redeliver/internal/retrystate"
)

var t0 = time.Date(2026, 11, 22, 12, 0, 0, 0, time.UTC)

var errBoom = errors.New("boom")

// deliveries runs a batch that always fails through m and returns how many
// deliveries it got before the machine stopped (capped at limit).
func deliveries(m *retrystate.Machine, limit int) (int, retrystate.Decision) {
	now := t0
	m.Begin(time.Time{})
	for n := 1; ; n++ {
		d := m.Fail(now, errBoom, nil)
		if d.Action == retrystate.StopRetrying || n == limit {
			return n, d
		}
		now = d.At
	}
}

func TestMachineRetryCount(t *testing.T) {
	for _, tt := range []struct {
		maxRetries int
		want       int // deliveries
	}{
		{0, 1}, {1, 2}, {3, 4}, {10, 11},
		{checkpoint.Infinite, 1000}, // never stops: capped by the test
	} {
		t.Run(fmt.Sprint(tt.maxRetries), func(t *testing.T) {
			m := retrystate.NewMachine(checkpoint.Policy{MaxRetries: tt.maxRetries, Backoff: checkpoint.Fixed(time.Second)})
			got, d := deliveries(&m, 1000)
			if got != tt.want {
				t.Fatalf("MaxRetries %d: %d deliveries, want %d", tt.maxRetries, got, tt.want)
			}
			if tt.maxRetries >= 0 && d.Reason != checkpoint.RetriesSpent {
				t.Fatalf("stopped for %v, want retries spent", d.Reason)
			}
			if tt.maxRetries < 0 && d.Action == retrystate.StopRetrying {
				t.Fatalf("infinite policy stopped: %v", d.Reason)
			}
		})
	}
}

func TestMachineLastAndState(t *testing.T) {
	m := retrystate.NewMachine(checkpoint.Policy{MaxRetries: 2, Backoff: checkpoint.Linear(time.Second)})
	m.Begin(time.Time{})
	if m.Last() {
		t.Fatal("first of 3 deliveries reported as last")
	}
	d := m.Fail(t0, errBoom, nil)
	if d.Action != retrystate.RetryLater || d.Retry != 1 || d.Delay != time.Second || !d.At.Equal(t0.Add(time.Second)) {
		t.Fatalf("first failure: %+v", d)
	}
	if m.Last() {
		t.Fatal("second of 3 deliveries reported as last")
	}
	d = m.Fail(d.At, errBoom, nil)
	if d.Retry != 2 || d.Delay != 2*time.Second {
		t.Fatalf("second failure: %+v", d)
	}
	if !m.Last() {
		t.Fatal("third of 3 deliveries not reported as last")
	}
	s := m.State()
	if s.Retries != 2 || !s.FirstFailure.Equal(t0) || s.LastDelay != 2*time.Second || !s.NextAt.Equal(t0.Add(3*time.Second)) {
		t.Fatalf("state %+v", s)
	}
	if !errors.Is(m.LastError(), errBoom) {
		t.Fatalf("last error %v", m.LastError())
	}
	d = m.Fail(s.NextAt, errBoom, nil)
	if d.Action != retrystate.StopRetrying || d.Reason != checkpoint.RetriesSpent {
		t.Fatalf("third failure: %+v", d)
	}
	var xerr *checkpoint.ExhaustedError
	if err := m.Err(); !errors.Is(err, checkpoint.ErrExhausted) || !errors.Is(err, errBoom) || !errors.As(err, &xerr) || xerr.Retries != 2 {
		t.Fatalf("Err() = %v", err)
	}
	m.Begin(time.Time{})
	if m.State() != (retrystate.State{}) || m.Err() != nil || m.LastError() != nil {
		t.Fatal("Begin kept the previous batch's state")
	}
}

func TestMachineDecide(t *testing.T) {
	m := retrystate.NewMachine(checkpoint.Policy{MaxRetries: 1, Backoff: checkpoint.Fixed(5 * time.Second)})
	m.Begin(time.Time{})
	if d := m.Decide(t0); d.Action != 0 {
		t.Fatalf("decision before any failure: %v", d.Action)
	}
	m.Fail(t0, errBoom, nil)
	if d := m.Decide(t0.Add(4 * time.Second)); d.Action != retrystate.RetryLater {
		t.Fatalf("before due: %v", d.Action)
	}
	if d := m.Decide(t0.Add(5 * time.Second)); d.Action != retrystate.RetryNow || d.Retry != 1 {
		t.Fatalf("when due: %+v", d)
	}
	m.Fail(t0.Add(5*time.Second), errBoom, nil)
	if d := m.Decide(t0.Add(time.Hour)); d.Action != retrystate.StopRetrying {
		t.Fatalf("after exhaustion: %v", d.Action)
	}
}

func TestMachineTimeBudget(t *testing.T) {
	// Retries at +5s and +10s start inside the 12s budget; the one at +15s
	// would not, so the machine stops after the third delivery.
	m := retrystate.NewMachine(checkpoint.Policy{MaxRetries: checkpoint.Infinite, Backoff: checkpoint.Fixed(5 * time.Second), MaxRetryTime: 12 * time.Second})
	got, d := deliveries(&m, 100)
	if got != 3 || d.Reason != checkpoint.TimeBudgetSpent {
		t.Fatalf("%d deliveries, stopped for %v; want 3, time budget", got, d.Reason)
	}
}

func TestMachineRecordAge(t *testing.T) {
	m := retrystate.NewMachine(checkpoint.Policy{MaxRetries: checkpoint.Infinite, Backoff: checkpoint.Fixed(time.Minute), MaxRecordAge: time.Hour})
	m.Begin(t0.Add(-57 * time.Minute)) // written 57 minutes before the first failure
	d := m.Fail(t0, errBoom, nil)      // retry at age 58m: allowed
	if d.Action != retrystate.RetryLater {
		t.Fatalf("first failure: %v", d.Action)
	}
	d = m.Fail(d.At, errBoom, nil) // retry at age 59m: allowed
	if d.Action != retrystate.RetryLater {
		t.Fatalf("second failure: %v", d.Action)
	}
	d = m.Fail(d.At, errBoom, nil) // retry at age 60m: refused
	if d.Action != retrystate.StopRetrying || d.Reason != checkpoint.RecordTooOld {
		t.Fatalf("third failure: %+v", d)
	}
}

type codeErr struct{ code int }

func (e codeErr) Error() string { return fmt.Sprint("code ", e.code) }

func TestErrorFilters(t *testing.T) {
	wrapped := fmt.Errorf("wrapped: %w", checkpoint.Permanent(errBoom))
	tests := []struct {
		name   string
		filter func(error) bool
		err    error
		want   bool
	}{
		{"default retries plain errors", nil, errBoom, true},
		{"default stops on Permanent", nil, wrapped, false},
		{"default stops on cancellation", nil, fmt.Errorf("x: %w", context.Canceled), false},
		{"default retries deadline", nil, context.DeadlineExceeded, true},
		{"unless matches", checkpoint.RetryUnless(io.EOF), fmt.Errorf("read: %w", io.EOF), false},
		{"unless other", checkpoint.RetryUnless(io.EOF), errBoom, true},
		{"unless keeps Permanent", checkpoint.RetryUnless(io.EOF), wrapped, false},
		{"only matches", checkpoint.RetryOnly(io.EOF), io.EOF, true},
		{"only other", checkpoint.RetryOnly(io.EOF), errBoom, false},
		{"only Permanent", checkpoint.RetryOnly(errBoom), wrapped, false},
		{"unless type", checkpoint.RetryUnlessType[codeErr](), fmt.Errorf("x: %w", codeErr{3}), false},
		{"unless type other", checkpoint.RetryUnlessType[codeErr](), errBoom, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			m := retrystate.NewMachine(checkpoint.Policy{MaxRetries: 5, Retryable: tt.filter})
			m.Begin(time.Time{})
			d := m.Fail(t0, tt.err, nil)
			if got := d.Action != retrystate.StopRetrying; got != tt.want {
				t.Fatalf("retried = %v, want %v (%+v)", got, tt.want, d)
			}
			if !tt.want && d.Reason != checkpoint.NotRetryable {
				t.Fatalf("reason %v", d.Reason)
			}
		})
	}
	if checkpoint.Permanent(nil) != nil {
		t.Fatal("Permanent(nil) != nil")
	}
	if !errors.Is(wrapped, errBoom) {
		t.Fatal("Permanent hides the wrapped error")
	}
}

func TestMachineRequestRetriesOverridesThePolicy(t *testing.T) {
	// The configured policy would never retry; a RetryResult's request
	// brings its own policy, which retries twice, and the filter does not
	// apply.
	m := retrystate.NewMachine(checkpoint.Policy{MaxRetries: 0, Retryable: func(error) bool { return false }})
	m.Begin(time.Time{})
	now := t0
	var got []retrystate.Action
	for range 3 {
		d := m.RequestRetries(now, retrystate.Request{MaxRetries: 2, Delay: time.Second}, nil)
		got = append(got, d.Action)
		now = d.At
	}
	want := []retrystate.Action{retrystate.RetryLater, retrystate.RetryLater, retrystate.StopRetrying}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("got %v, want %v", got, want)
	}
	if p := m.Policy(); p.MaxRetries != 2 {
		t.Fatalf("policy in force %+v, want the request's", p)
	}
	m.Begin(time.Time{})
	if m.Policy().MaxRetries != 0 {
		t.Fatal("the request's policy survived Begin")
	}
}

func TestPolicyValidate(t *testing.T) {
	if err := (checkpoint.Policy{MaxRetries: -2, MaxDelay: -1}).Validate(); err == nil {
		t.Fatal("invalid policy accepted")
	}
	if err := (checkpoint.Policy{MaxRetries: -1, Backoff: checkpoint.Fixed(time.Second)}).Validate(); err != nil {
		t.Fatal(err)
	}
}

// Infinite retries with no delay would redeliver a poison batch as fast as
// the broker answers, for ever: refused, with what to set instead. A time
// budget, a record age limit, a delay or Decide makes the policy valid.
func TestPolicyValidateRefusesSpin(t *testing.T) {
	for _, p := range []checkpoint.Policy{
		{MaxRetries: checkpoint.Infinite},
		{MaxRetries: checkpoint.Infinite, Backoff: checkpoint.Immediate()},
		{MaxRetries: checkpoint.Infinite, Backoff: checkpoint.Fixed(0)},
	} {
		err := p.Validate()
		if err == nil || !strings.Contains(err.Error(), "no delay between retries") || !strings.Contains(err.Error(), "set a Backoff that waits") {
			t.Errorf("%+v: Validate() = %v, want the spin refused with what to set", p, err)
		}
	}
	for _, p := range []checkpoint.Policy{
		{MaxRetries: checkpoint.Infinite, Backoff: checkpoint.Fixed(time.Millisecond)},
		{MaxRetries: checkpoint.Infinite, Backoff: checkpoint.FullJitter(checkpoint.Exponential(time.Second))},
		{MaxRetries: checkpoint.Infinite, MaxRetryTime: time.Second},
		{MaxRetries: checkpoint.Infinite, MaxRecordAge: time.Hour},
		{MaxRetries: checkpoint.Infinite, Decide: func(int, error, time.Duration, checkpoint.Rand) (time.Duration, bool) { return time.Second, true }},
		{MaxRetries: 1000},
	} {
		if err := p.Validate(); err != nil {
			t.Errorf("%+v: Validate() = %v, want nil", p, err)
		}
	}
}

func BenchmarkMachineSuccess(b *testing.B) {
	m := retrystate.NewMachine(checkpoint.Policy{MaxRetries: 10, Backoff: checkpoint.Exponential(time.Second)})
	b.ReportAllocs()
	for b.Loop() {
		m.Begin(t0)
		if m.Last() {
			b.Fatal("last")
		}
	}
}

func BenchmarkMachineFailure(b *testing.B) {
	m := retrystate.NewMachine(checkpoint.Policy{MaxRetries: 10, Backoff: checkpoint.Exponential(time.Second)})
	b.ReportAllocs()
	for b.Loop() {
		m.Begin(t0)
		m.Fail(t0, errBoom, nil)
	}
}
