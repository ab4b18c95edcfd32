package retrystate

import (
	"math/rand/v2"
	"time"

	"github.com/redeliver-go/redeliver/checkpoint"
)

// next returns the delay before retry n after err (nil for a retry a
// handler asked for), or false when Decide declines the retry: Decide's or
// Backoff's delay, raised to err's retry-after hint unless IgnoreRetryAfter,
// then capped by MaxDelay.
func policyNext(p *checkpoint.Policy, n int, prev time.Duration, err error, rnd checkpoint.Rand) (time.Duration, bool) {
	rnd = orGlobal(rnd)
	var d time.Duration
	switch {
	case p.Decide != nil && err != nil:
		var ok bool
		if d, ok = p.Decide(n, err, prev, rnd); !ok {
			return 0, false
		}
	case p.Backoff != nil:
		d = p.Backoff(n, prev, rnd)
	}
	if !p.IgnoreRetryAfter {
		if h, ok := checkpoint.RetryAfterOf(err); ok && h > d {
			d = h
		}
	}
	return capped(p, d), true
}

// capped returns d, 0 when negative, capped by MaxDelay.
func capped(p *checkpoint.Policy, d time.Duration) time.Duration {
	if d < 0 {
		d = 0
	}
	if p.MaxDelay > 0 && d > p.MaxDelay {
		d = p.MaxDelay
	}
	return d
}

func retryable(p *checkpoint.Policy, err error) bool {
	if p.Retryable == nil {
		return checkpoint.DefaultRetryable(err)
	}
	return p.Retryable(err)
}

// globalRand draws from math/rand/v2's global source.
type globalRand struct{}

func (globalRand) Float64() float64 { return rand.Float64() }

// orGlobal returns rnd, or the global source when rnd is nil.
func orGlobal(rnd checkpoint.Rand) checkpoint.Rand {
	if rnd == nil {
		return globalRand{}
	}
	return rnd
}
