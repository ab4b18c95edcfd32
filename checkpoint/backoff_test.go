package checkpoint_test

import (
	"errors"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/redeliver-go/redeliver/checkpoint"
	"github.com/redeliver-go/redeliver/internal/retrystate"
)

// seq is a Rand that returns its values in turn, cycling.
type seq struct {
	vals []float64
	i    int
}

func (s *seq) Float64() float64 {
	v := s.vals[s.i%len(s.vals)]
	s.i++
	return v
}

func TestBackoffs(t *testing.T) {
	const ms = time.Millisecond
	tests := []struct {
		name string
		b    checkpoint.Backoff
		u    []float64 // the random draws, in turn
		want []time.Duration
	}{
		{"immediate", checkpoint.Immediate(), []float64{0.5}, []time.Duration{0, 0, 0}},
		{"fixed", checkpoint.Fixed(5 * time.Second), []float64{0.5}, []time.Duration{5 * time.Second, 5 * time.Second, 5 * time.Second}},
		// initial*n
		{"linear", checkpoint.Linear(5 * time.Second), []float64{0.5}, []time.Duration{5 * time.Second, 10 * time.Second, 15 * time.Second, 20 * time.Second}},
		// initial*2^(n-1)
		{"exponential", checkpoint.Exponential(time.Second), []float64{0.5}, []time.Duration{time.Second, 2 * time.Second, 4 * time.Second, 8 * time.Second}},
		// initial*2^(n-1)*(1+pct/100*U): 1000ms*1*(1+0.05*0.5)=1025ms, 1000*2*(1+0.05*1/4)=2025ms, 1000*4*(1+0)=4000ms
		{"exponential jitter", checkpoint.ExponentialJitter(time.Second, 5), []float64{0.5, 0.25, 0}, []time.Duration{1025 * ms, 2025 * ms, 4000 * ms}},
		// initial*U: 5000*0.5, 5000*0.25, 5000*0.1
		{"random", checkpoint.Random(5 * time.Second), []float64{0.5, 0.25, 0.1}, []time.Duration{2500 * ms, 1250 * ms, 500 * ms}},
		// U*min(max, base*2^(n-1)): 0.5*100, 0.5*200, 0.5*400, 0.5*min(500,800), 0.5*min(500,1600)
		{"full jitter", checkpoint.FullJitter(checkpoint.Capped(500*ms, checkpoint.Exponential(100*ms))), []float64{0.5}, []time.Duration{50 * ms, 100 * ms, 200 * ms, 250 * ms, 250 * ms}},
		{"full jitter no cap", checkpoint.FullJitter(checkpoint.Exponential(100 * ms)), []float64{0.75}, []time.Duration{75 * ms, 150 * ms, 300 * ms, 600 * ms}},
		// min(cap, base + U*(3*prev-base)), prev = base at first:
		// 100+0.5*(300-100)=200; 100+0.5*(600-100)=350; 100+0.5*(1050-100)=575 -> cap 500
		{"decorrelated jitter", checkpoint.Capped(500*ms, checkpoint.DecorrelatedJitter(100*ms)), []float64{0.5}, []time.Duration{200 * ms, 350 * ms, 500 * ms}},
		// Cmin + (2^(n-1)-1)*J, J = C*(1-Jd) + U*C*(Jd+Ju); C=100, Cmin=100, Cmax=10000, Jd=.5, Ju=.25, U=.5 -> J=50+0.5*75=87.5
		// n=1: 100; n=2: 100+1*87.5=187.5; n=3: 100+3*87.5=362.5; n=9: 100+255*87.5=22412.5 -> 10000
		{"jittered exponential", checkpoint.JitteredExponential{Delta: 100 * ms, Min: 100 * ms, Max: 10 * time.Second, JitterDown: 0.5, JitterUp: 0.25}.Backoff(), []float64{0.5},
			[]time.Duration{100 * ms, 187500 * time.Microsecond, 362500 * time.Microsecond}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			rnd := &seq{vals: tt.u}
			var prev time.Duration
			for i, want := range tt.want {
				got := tt.b(i+1, prev, rnd)
				if got != want {
					t.Fatalf("retry %d: got %v, want %v", i+1, got, want)
				}
				prev = got
			}
		})
	}
}

func TestBackoffsNeverOverflow(t *testing.T) {
	rnd := rand.New(rand.NewPCG(1, 2))
	for _, b := range []checkpoint.Backoff{
		checkpoint.Linear(time.Hour), checkpoint.Exponential(time.Hour),
		checkpoint.ExponentialJitter(time.Hour, 100), checkpoint.FullJitter(checkpoint.Exponential(time.Hour)),
		checkpoint.DecorrelatedJitter(time.Hour), checkpoint.JitteredExponential{Delta: time.Hour, Min: time.Hour, JitterDown: 0.5, JitterUp: 0.25}.Backoff(),
	} {
		var prev time.Duration
		for _, n := range []int{1, 2, 30, 63, 64, 100, 1 << 20, 1 << 30} {
			d := b(n, prev, rnd)
			if d < 0 {
				t.Fatalf("retry %d: negative delay %v", n, d)
			}
			prev = d
		}
	}
}

func TestPolicyDelayCaps(t *testing.T) {
	p := checkpoint.Policy{MaxRetries: checkpoint.Infinite, Backoff: checkpoint.Exponential(time.Second), MaxDelay: 5 * time.Second}
	got := p.Schedule(5, nil)
	want := []time.Duration{time.Second, 2 * time.Second, 4 * time.Second, 5 * time.Second, 5 * time.Second}
	for i := range want {
		if got[i] != want[i] {
			t.Fatalf("schedule %v, want %v", got, want)
		}
	}
	neg := checkpoint.Policy{Backoff: checkpoint.Fixed(-time.Second)}
	if d := neg.Delay(1, 0, nil); d != 0 {
		t.Fatalf("negative backoff gave %v, want 0", d)
	}
	if n := len(checkpoint.Policy{MaxRetries: 2, Backoff: checkpoint.Fixed(time.Second)}.Schedule(10, nil)); n != 2 {
		t.Fatalf("schedule of a 2-retry policy has %d delays", n)
	}
}

// A growing backoff with no cap of its own stops at MaxBackoff (a day)
// instead of growing to a wait of centuries; one whose first delay is
// longer keeps that first delay.
func TestBackoffCeiling(t *testing.T) {
	half := constU(0.5)
	for _, tc := range []struct {
		name string
		b    checkpoint.Backoff
		n    int
		want time.Duration
	}{
		{"Exponential", checkpoint.Exponential(time.Second), 64, checkpoint.MaxBackoff},
		{"Exponential, below", checkpoint.Exponential(time.Second), 17, 65536 * time.Second},
		{"Exponential, a first delay over a day", checkpoint.Exponential(48 * time.Hour), 10, 48 * time.Hour},
		{"Linear", checkpoint.Linear(time.Hour), 1 << 40, checkpoint.MaxBackoff},
		{"ExponentialJitter", checkpoint.ExponentialJitter(time.Second, 100), 100, checkpoint.MaxBackoff},
		{"FullJitter", checkpoint.FullJitter(checkpoint.Exponential(time.Second)), 100, checkpoint.MaxBackoff / 2},
		{"FullJitter under a cap longer than a day", checkpoint.FullJitter(checkpoint.Capped(1<<62, checkpoint.Exponential(time.Second))), 100, checkpoint.MaxBackoff / 2},
		{"JitteredExponential", checkpoint.JitteredExponential{Delta: time.Second, Min: time.Second}.Backoff(), 100, checkpoint.MaxBackoff},
	} {
		if got := tc.b(tc.n, 0, half); got != tc.want {
			t.Errorf("%s, retry %d: %v, want %v", tc.name, tc.n, got, tc.want)
		}
	}
	d := checkpoint.DecorrelatedJitter(time.Second)
	prev := time.Duration(0)
	for n := 1; n <= 200; n++ {
		prev = d(n, prev, constU(0.99))
	}
	if prev != checkpoint.MaxBackoff {
		t.Errorf("DecorrelatedJitter after 200 retries: %v, want %v", prev, checkpoint.MaxBackoff)
	}
}

// Capped caps each delay of the backoff it wraps; max <= 0 caps nothing; a
// cap longer than MaxBackoff leaves the growing backoffs at MaxBackoff.
func TestCapped(t *testing.T) {
	const s = time.Second
	user := func(n int, _ time.Duration, _ checkpoint.Rand) time.Duration { return time.Duration(n) * 100 * s }
	for _, tc := range []struct {
		name string
		b    checkpoint.Backoff
		n    int
		want time.Duration
	}{
		{"below the cap", checkpoint.Capped(10*s, checkpoint.Exponential(s)), 4, 8 * s},
		{"at the cap", checkpoint.Capped(10*s, checkpoint.Exponential(s)), 5, 10 * s},
		{"a first delay above the cap", checkpoint.Capped(10*s, checkpoint.Fixed(time.Minute)), 1, 10 * s},
		{"a function of the user's", checkpoint.Capped(250*s, user), 3, 250 * s},
		{"max 0 caps nothing", checkpoint.Capped(0, checkpoint.Exponential(s)), 10, 512 * s},
		{"negative max caps nothing", checkpoint.Capped(-s, checkpoint.Fixed(time.Hour)), 1, time.Hour},
		// A cap above MaxBackoff: the growing backoffs stop at a day.
		{"a cap above MaxBackoff", checkpoint.Capped(48*time.Hour, checkpoint.Exponential(s)), 200, checkpoint.MaxBackoff},
		{"Linear under a cap above MaxBackoff", checkpoint.Capped(72*time.Hour, checkpoint.Linear(time.Hour)), 50, checkpoint.MaxBackoff},
		{"a function of the user's above MaxBackoff", checkpoint.Capped(72*time.Hour, user), 3000, 72 * time.Hour},
		// Nested: the lower cap rules.
		{"inner cap lower", checkpoint.Capped(20*time.Hour, checkpoint.Capped(10*time.Hour, checkpoint.Exponential(s))), 200, 10 * time.Hour},
		{"inner cap higher", checkpoint.Capped(10*time.Hour, checkpoint.Capped(20*time.Hour, checkpoint.Exponential(s))), 200, 10 * time.Hour},
		// A FullJitter picks below the cap inside it; a cap outside cuts its pick.
		{"jitter between caps", checkpoint.Capped(time.Hour, checkpoint.FullJitter(checkpoint.Capped(20*time.Hour, checkpoint.Exponential(s)))), 200, time.Hour},
		{"jitter under a cap", checkpoint.FullJitter(checkpoint.Capped(20*time.Hour, checkpoint.Exponential(s))), 200, 10 * time.Hour},
	} {
		if got := tc.b(tc.n, 0, constU(0.5)); got != tc.want {
			t.Errorf("%s, retry %d: %v, want %v", tc.name, tc.n, got, tc.want)
		}
	}
	// Capped draws from the caller's Rand: a FullJitter inside it makes
	// the same one draw per retry as without the cap.
	r := &seq{vals: []float64{0.25, 0.5, 0.75}}
	b := checkpoint.Capped(time.Hour, checkpoint.FullJitter(checkpoint.Exponential(4*s)))
	for i, want := range []time.Duration{s, 4 * s, 12 * s, 8 * s} {
		if got := b(i+1, 0, r); got != want {
			t.Errorf("retry %d: %v, want %v", i+1, got, want)
		}
	}
	if r.i != 4 {
		t.Errorf("%d draws for 4 retries, want 4", r.i)
	}
}

// Capped is part of the Backoff: an error's retry-after hint is not capped
// by it, as MaxDelay caps it. Capped caps the schedule, MaxDelay every wait.
func TestCappedAndMaxDelay(t *testing.T) {
	const s = time.Second
	hinted := checkpoint.RetryAfter(errors.New("throttled"), time.Minute)
	for _, tc := range []struct {
		name string
		p    checkpoint.Policy
		want time.Duration
	}{
		{"Capped keeps the hint", checkpoint.Policy{MaxRetries: 1, Backoff: checkpoint.Capped(5*s, checkpoint.Fixed(10*s))}, time.Minute},
		{"MaxDelay caps the hint", checkpoint.Policy{MaxRetries: 1, Backoff: checkpoint.Fixed(10 * s), MaxDelay: 5 * s}, 5 * s},
	} {
		m := retrystate.NewMachine(tc.p)
		m.Begin(time.Time{})
		if d := m.Fail(t0, hinted, constU(0.5)); d.Delay != tc.want {
			t.Errorf("%s: waits %v, want %v", tc.name, d.Delay, tc.want)
		}
	}
	// Without a hint both cap the Backoff's delay, but jitter outside a
	// Capped picks below the cap, where MaxDelay cuts the picked delay:
	// with U = 0.9 and a 10s delay capped at 5s, 4.5s against 5s.
	jitter := checkpoint.Policy{Backoff: checkpoint.FullJitter(checkpoint.Capped(5*s, checkpoint.Fixed(10*s)))}
	maxDelay := checkpoint.Policy{Backoff: checkpoint.FullJitter(checkpoint.Fixed(10 * s)), MaxDelay: 5 * s}
	if a, b := jitter.Delay(1, 0, constU(0.9)), maxDelay.Delay(1, 0, constU(0.9)); a != 4500*time.Millisecond || b != 5*s {
		t.Errorf("FullJitter(Capped): %v, want 4.5s; MaxDelay over FullJitter: %v, want 5s", a, b)
	}
}
