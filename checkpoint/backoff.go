package checkpoint

import (
	"math"
	"math/rand/v2"
	"time"
)

// Rand is a source of uniformly distributed numbers in [0, 1).
//
// *math/rand/v2.Rand satisfies it. A Rand is used by one goroutine at a time:
// give each partition worker its own.
type Rand interface {
	Float64() float64
}

// globalRand draws from math/rand/v2's global source, which is safe for
// concurrent use: the Rand of callers that pass none.
type globalRand struct{}

func (globalRand) Float64() float64 { return rand.Float64() }

// orGlobal returns rnd, or globalRand for a nil rnd, so that a Backoff or a
// DecideFunc is never given a nil Rand.
func orGlobal(rnd Rand) Rand {
	if rnd == nil {
		return globalRand{}
	}
	return rnd
}

// draw returns rnd's next number, or the next of math/rand/v2's global
// source for a nil rnd.
func draw(rnd Rand) float64 {
	if rnd == nil {
		return rand.Float64()
	}
	return rnd.Float64()
}

// A Backoff returns the delay before retry n. Retries are numbered from 1:
// n = 1 is the first redelivery after the first failed attempt.
//
// prev is the delay that was used before retry n-1 (0 when n = 1). Only
// [DecorrelatedJitter] uses it; it keeps every Backoff a pure function of its
// arguments, so one Backoff can be shared by any number of goroutines and
// tested exactly with a seeded Rand. rnd is never nil when a [Policy] calls a
// Backoff; a Backoff that needs no randomness ignores it, and those of this
// package draw from math/rand/v2's global source when it is nil.
//
// A Backoff should not return a negative delay; [Policy] treats one as 0.
type Backoff func(n int, prev time.Duration, rnd Rand) time.Duration

// maxDuration is the largest representable delay; every computation clamps
// to it instead of overflowing.
const maxDuration = time.Duration(math.MaxInt64)

// MaxBackoff is the ceiling of the delays that the growing backoffs of this
// package compute when nothing else caps them: [Linear], [Exponential],
// [ExponentialJitter], and [FullJitter], [DecorrelatedJitter] and
// [JitteredExponential] without a ceiling of their own. Without it, retry 64
// of Exponential(time.Second) would wait 292 years. A backoff whose first
// delay is already longer keeps that first delay as its ceiling. Set
// [Policy.MaxDelay] for a lower cap; the presets keep their SDKs' own caps.
const MaxBackoff = 24 * time.Hour

// grown clamps ns, a delay grown from a first delay of first (both in
// nanoseconds), to MaxBackoff, or to first when that is longer.
func grown(ns, first float64) time.Duration {
	return clamp(min(ns, max(float64(MaxBackoff), first)))
}

// clamp converts a float number of nanoseconds to a Duration in
// [0, maxDuration].
func clamp(ns float64) time.Duration {
	switch {
	case ns != ns || ns <= 0: // NaN or not positive
		return 0
	case ns >= float64(maxDuration):
		return maxDuration
	}
	return time.Duration(math.Round(ns))
}

// pow2 returns 2^(n-1) as a float64 for n >= 1, and 1 for smaller n.
func pow2(n int) float64 {
	if n < 1 {
		return 1
	}
	return math.Ldexp(1, n-1)
}

// Immediate retries without delay: IMMEDIATE in the Azure IoT C SDK.
func Immediate() Backoff {
	return func(int, time.Duration, Rand) time.Duration { return 0 }
}

// Fixed waits d before every retry: host.json's sleepDuration, INTERVAL in the
// Azure IoT C SDK and Azure Functions' fixedDelay strategy. A negative d
// waits 0.
func Fixed(d time.Duration) Backoff {
	d = max(d, 0)
	return func(int, time.Duration, Rand) time.Duration { return d }
}

// Linear waits initial*n before retry n: LINEAR_BACKOFF in the Azure IoT C
// SDK. With initial = 5s: 5s 10s 15s 20s ..., up to [MaxBackoff].
func Linear(initial time.Duration) Backoff {
	return func(n int, _ time.Duration, _ Rand) time.Duration {
		return grown(float64(initial)*float64(max(n, 1)), float64(initial))
	}
}

// Exponential waits initial*2^(n-1) before retry n: EXPONENTIAL_BACKOFF in the
// Azure IoT C SDK. With initial = 1s: 1s 2s 4s 8s ..., up to [MaxBackoff]
// (from retry 18 on).
func Exponential(initial time.Duration) Backoff {
	return func(n int, _ time.Duration, _ Rand) time.Duration {
		return grown(float64(initial)*pow2(n), float64(initial))
	}
}

// ExponentialJitter waits initial*2^(n-1)*(1 + percent/100*U) before retry n,
// U uniform in [0, 1): EXPONENTIAL_BACKOFF_WITH_JITTER in the Azure IoT C SDK's
// requirements, whose default percent is 5 (see [DefaultJitterPercent]). The
// jitter only lengthens a delay, by at most percent. Delays grow up to
// [MaxBackoff].
func ExponentialJitter(initial time.Duration, percent float64) Backoff {
	return func(n int, _ time.Duration, rnd Rand) time.Duration {
		j := 1 + percent/100*draw(rnd)
		return grown(float64(initial)*pow2(n)*j, float64(initial)*j)
	}
}

// DefaultJitterPercent is the jitter of [ExponentialJitter] in the Azure IoT C
// SDK's defaults.
const DefaultJitterPercent = 5

// Random waits initial*U before each retry, U uniform in [0, 1): RANDOM in the
// Azure IoT C SDK.
func Random(initial time.Duration) Backoff {
	return func(_ int, _ time.Duration, rnd Rand) time.Duration {
		return clamp(float64(initial) * draw(rnd))
	}
}

// FullJitter waits a uniform pick in [0, min(maxDelay, base*2^(n-1))) before
// retry n: the AWS IoT Device SDK's exponential backoff with full jitter.
// maxDelay <= 0 means no ceiling of its own: the window grows up to
// [MaxBackoff].
func FullJitter(base, maxDelay time.Duration) Backoff {
	return func(n int, _ time.Duration, rnd Rand) time.Duration {
		window := float64(base) * pow2(n)
		if maxDelay > 0 && window > float64(maxDelay) {
			window = float64(maxDelay)
		} else if maxDelay <= 0 {
			window = min(window, max(float64(MaxBackoff), float64(base)))
		}
		return clamp(window * draw(rnd))
	}
}

// DecorrelatedJitter waits min(ceiling, a uniform pick between base and
// 3*prev) before each retry, prev being the previous delay (base before the
// first retry). The delays wander upward from base without the lockstep of
// plain exponential backoff. ceiling <= 0 means no ceiling of its own: the
// delays grow up to [MaxBackoff].
func DecorrelatedJitter(base, ceiling time.Duration) Backoff {
	return func(_ int, prev time.Duration, rnd Rand) time.Duration {
		if prev < base {
			prev = base
		}
		hi := 3 * float64(prev)
		d := float64(base) + draw(rnd)*(hi-float64(base))
		if ceiling > 0 && d > float64(ceiling) {
			d = float64(ceiling)
		}
		if ceiling <= 0 {
			return grown(d, float64(base))
		}
		return clamp(d)
	}
}

// JitteredExponential is the shape of the Azure IoT Java SDK's documented
// default: Cmin + (2^(n-1) - 1) * J, capped at Cmax, where J is c jittered
// uniformly in [c*(1-jitterDown), c*(1+jitterUp)). cmax <= 0 means no cap
// of its own: the delays grow up to [MaxBackoff]. For the SDK's released
// code, defaults included, use [AzureIoTJava].
func JitteredExponential(c, cmin, cmax time.Duration, jitterDown, jitterUp float64) Backoff {
	return func(n int, _ time.Duration, rnd Rand) time.Duration {
		lo := float64(c) * (1 - jitterDown)
		hi := float64(c) * (1 + jitterUp)
		j := lo + draw(rnd)*(hi-lo)
		d := float64(cmin) + (pow2(n)-1)*j
		if cmax > 0 && d > float64(cmax) {
			d = float64(cmax)
		}
		if cmax <= 0 {
			return grown(d, float64(cmin))
		}
		return clamp(d)
	}
}
