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
//
// The constructors of this package take one parameter of each type: a
// schedule with two durations is composed from decorators ([Capped],
// [FullJitter]), as sethvargo/go-retry composes its backoffs, or described by
// a struct with named fields ([JitteredExponential]):
//
//	checkpoint.FullJitter(checkpoint.Capped(20*time.Second, checkpoint.Exponential(time.Second)))
type Backoff func(n int, prev time.Duration, rnd Rand) time.Duration

// maxDuration is the largest representable delay; every computation clamps
// to it instead of overflowing.
const maxDuration = time.Duration(math.MaxInt64)

// MaxBackoff is the ceiling of the delays that the growing backoffs of this
// package compute: [Linear], [Exponential], [ExponentialJitter],
// [DecorrelatedJitter], and [JitteredExponential] without a Max. Without
// it, retry 64 of Exponential(time.Second) would wait 292 years. A backoff
// whose first delay is already longer keeps that first delay as its
// ceiling. [Capped] lowers the ceiling (a cap above a day leaves it at a
// day), and [Policy.MaxDelay] caps the delays after that. The presets keep
// their SDKs' own caps.
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

// DecorrelatedJitter waits a uniform pick between base and 3*prev before
// each retry, prev being the previous delay (base before the first retry):
// the "decorrelated jitter" of the AWS Architecture Blog's "Exponential
// Backoff And Jitter". The delays wander upward from base without the
// lockstep of plain exponential backoff, up to [MaxBackoff]. The article's
// min(cap, ...) is Capped(cap, DecorrelatedJitter(base)): the [Policy]
// passes the delay it used as prev, so the next pick starts from the
// capped delay.
func DecorrelatedJitter(base time.Duration) Backoff {
	return func(_ int, prev time.Duration, rnd Rand) time.Duration {
		if prev < base {
			prev = base
		}
		hi := 3 * float64(prev)
		d := float64(base) + draw(rnd)*(hi-float64(base))
		return grown(d, float64(base))
	}
}

// Capped caps each delay of b at max, as sethvargo/go-retry's
// WithCappedDuration does. max <= 0 returns b as it is, as a
// [Policy.MaxDelay] of 0 caps nothing; a nil b retries at once, as a nil
// [Policy.Backoff] does.
//
// The growing backoffs of this package ([Exponential] and the others
// [MaxBackoff] names) stop at MaxBackoff, a day, whatever is around them: a
// cap longer than a day leaves them there.
//
// Capped or MaxDelay. Capped is part of the Backoff: a decorator around it
// sees the capped delay, so FullJitter(Capped(max, b)) picks below the cap,
// evenly (the AWS formula random(0, min(max, base*2^(n-1)))), and
// [DecorrelatedJitter] under it starts its next pick from the capped delay.
// Policy.MaxDelay caps the delay the Policy is about to wait, last: after the
// Backoff, after a [DecideFunc], and after an error's [RetryAfter] hint, which
// a Capped Backoff does not cap (a hint of 1m waits 1m whatever the
// Backoff's cap). Use Capped to shape the schedule, the ceiling a backoff
// grows to or the window jitter picks from; use MaxDelay for the longest
// any wait may be, a server's hint included.
func Capped(max time.Duration, b Backoff) Backoff {
	if b == nil {
		b = Immediate()
	}
	if max <= 0 {
		return b
	}
	return func(n int, prev time.Duration, rnd Rand) time.Duration {
		return min(b(n, prev, rnd), max)
	}
}

// FullJitter waits a uniform pick in [0, d) before retry n, d being b's
// delay: the "full jitter" of the AWS Architecture Blog's "Exponential
// Backoff And Jitter", whose random(0, min(cap, base*2^(n-1))) reads
//
//	FullJitter(Capped(cap, Exponential(base)))
//
// (the backoff of the AWS IoT Device SDKs; [BackoffAlgorithm] reproduces the
// released C library's). It draws one number from rnd after b's draws. A nil
// b retries at once.
func FullJitter(b Backoff) Backoff {
	if b == nil {
		b = Immediate()
	}
	return func(n int, prev time.Duration, rnd Rand) time.Duration {
		return clamp(float64(b(n, prev, rnd)) * draw(rnd))
	}
}

// JitteredExponential is the shape of the Azure IoT Java SDK's retry guide:
//
//	Min + (2^(n-1) - 1) * J   before retry n, capped at Max,
//	J uniform in [Delta*(1-JitterDown), Delta*(1+JitterUp))
//
// with one J drawn per retry. The guide's defaults are Delta = Min = 100ms,
// Max = 10s, JitterDown = 0.5 and JitterUp = 0.25; host.json's
// jitteredExponential strategy starts from them. For the SDK's released code,
// which differs from the guide, use [AzureIoTJava].
//
// Its zero value waits 0 before every retry: each field means its own value
// at zero, not a default.
type JitteredExponential struct {
	// Delta is C, the delay that is jittered and doubled. 0 makes every
	// delay Min.
	Delta time.Duration
	// Min is Cmin, the delay before retry 1.
	Min time.Duration
	// Max is Cmax, the cap of every delay. 0 means no cap of its own: the
	// delays grow up to [MaxBackoff], or to the max of a [Capped] around
	// the Backoff.
	Max time.Duration
	// JitterDown is Jd, how far below Delta J may be, as a fraction of it
	// (0.5 for 50%). 0 means J is never below Delta.
	JitterDown float64
	// JitterUp is Ju, how far above Delta J may be, as a fraction of it. 0
	// means J is never above Delta; with JitterDown also 0, J is Delta.
	JitterUp float64
}

// Backoff returns the delays of j. It is safe for concurrent use, and j can
// be changed afterwards without changing it.
func (j JitteredExponential) Backoff() Backoff {
	return func(n int, _ time.Duration, rnd Rand) time.Duration {
		lo := float64(j.Delta) * (1 - j.JitterDown)
		hi := float64(j.Delta) * (1 + j.JitterUp)
		jj := lo + draw(rnd)*(hi-lo)
		d := float64(j.Min) + (pow2(n)-1)*jj
		if j.Max > 0 {
			return clamp(min(d, float64(j.Max)))
		}
		return grown(d, float64(j.Min))
	}
}
