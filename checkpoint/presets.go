package checkpoint

import (
	"errors"
	"fmt"
	"math"
	"time"
)

// Compatibility presets: one per SDK that redeliver's users migrate from,
// each reproducing the schedule of that SDK's released code (defaults, caps,
// integer rounding and where the jitter goes), not the simplified formula of
// its documentation. Each preset's doc names the file it reproduces and says
// where the code and its documentation differ.
//
// Retry numbers. A preset's Backoff is called with n = 1 for the first
// redelivery after the first failed attempt; each doc says which counter of
// the SDK that n stands for.
//
// Random numbers. Every SDK has its own random source. A preset draws each
// random number the SDK draws with exactly one call of Rand.Float64, in the
// same order, and maps U in [0, 1) to the SDK's range:
//
//	glibc rand()          in [0, RAND_MAX], RAND_MAX = 2^31-1:  floor(U * 2^31)
//	backoffAlgorithm      randomValue in [0, UINT32_MAX]:       floor(U * 2^32)
//	Java nextInt(bound)   in [0, bound):                        min(floor(U * bound), bound-1)
//	.NET NextDouble()     in [0, 1):                            U
//
// Each mapping is uniform when U is. U * 2^k is exact (it only shifts the
// exponent of a float64); U * bound can round up to bound when U is within
// 2^-53 of 1, hence the min. A preset draws nothing when the SDK draws nothing
// (a fast first retry, a policy without jitter, a delay stuck at its cap), so
// a seeded Rand gives the same stream of delays as the SDK fed the same
// numbers. Floating-point expressions follow the SDK's evaluation order, and
// products are rounded before they are added (float64(x*y) + z) so that no
// platform fuses them into one multiply-add the SDK does not do.

// unitDraw returns rnd.Float64() forced into [0, 1), so that a Rand that
// breaks its contract cannot push a mapped integer out of its range.
func unitDraw(rnd Rand) float64 {
	u := draw(rnd)
	switch {
	case !(u >= 0): // negative or NaN
		return 0
	case u >= 1:
		return math.Nextafter(1, 0)
	}
	return u
}

// wholeUnits reports d as a count of unit, and whether d is a non-negative
// whole number of units no larger than limit units.
func wholeUnits(d, unit time.Duration, limit int64) (int64, bool) {
	if d < 0 || d%unit != 0 || int64(d/unit) > limit {
		return 0, false
	}
	return int64(d / unit), true
}

// ---------------------------------------------------------------------------
// AWS: FreeRTOS backoffAlgorithm

// BackoffAlgorithmRetryForever is BACKOFF_ALGORITHM_RETRY_FOREVER of the
// current backoffAlgorithm releases (UINT32_MAX): as maxAttempts, it never
// stops retrying.
const BackoffAlgorithmRetryForever = math.MaxUint32

// BackoffAlgorithm is the retry parameters of the AWS IoT Device SDK for
// Embedded C's backoff library, as BackoffAlgorithm_InitializeParams(ctx,
// backOffBase, maxBackOff, maxAttempts) sets them: "full jitter" exponential
// backoff in milliseconds, at most MaxAttempts retries
// ([BackoffAlgorithmRetryForever] for no limit). The library has no
// defaults; its MQTT demos use 500ms, 5000ms and 5. The zero
// BackoffAlgorithm never retries (maxAttempts 0).
//
// It reproduces BackoffAlgorithm_GetNextBackoff of FreeRTOS/backoffAlgorithm
// (source/backoff_algorithm.c, v1.4.1), called once per retry: retry n waits
//
//	randomValue % (nextJitterMax + 1) milliseconds
//
// where nextJitterMax starts at backOffBase and, after each retry, doubles
// while it is below maxBackOff/2 (integer division) and otherwise becomes
// maxBackOff. randomValue is the caller's uint32, drawn as floor(U * 2^32).
// Where the code differs from the retry utilities of the AWS IoT Device
// SDK for Embedded C (202009.00) and their formula random_between(0, min(2^n * base, max))
// (which is [FullJitter] of a [Capped] [Exponential]):
//   - The unit is milliseconds in uint16 (at most 65.535s), not seconds.
//   - The first window is exactly backOffBase: the SDK's reset adds a random
//     rand() % MAX_JITTER_VALUE_SECONDS to it. It is not capped either: a base
//     above maxBackOff is used once, then the window becomes maxBackOff.
//   - The pick includes the window's top (% (J+1), 0 to J); the SDK's
//     rand() % nextJitterMax excludes it.
//   - Once the window reaches maxBackOff/2 it jumps to maxBackOff, where the
//     SDK's code stops doubling and never reaches the cap. This also differs
//     from min(2^n * base, max): base 5, max 11 gives windows 5, 11, 11 where
//     the formula gives 5, 10, 11.
//   - The random number is the caller's uint32, not rand().
//   - maxAttempts counts retries; 0 means none. In the SDK's utilities, and in the
//     first backoffAlgorithm (as shipped in the SDK's 202011.00 release),
//     0 meant forever.
type BackoffAlgorithm struct {
	// BackOffBase is backOffBase, the first window: whole milliseconds up
	// to 65.535s (a uint16 of ms).
	BackOffBase time.Duration

	// MaxBackOff is maxBackOff, the largest window: whole milliseconds up
	// to 65.535s.
	MaxBackOff time.Duration

	// MaxAttempts is maxAttempts, the most retries: 0 for none,
	// [BackoffAlgorithmRetryForever] for no limit.
	MaxAttempts uint32
}

// Policy returns the Policy that reproduces a: at most MaxAttempts retries
// and the waits of BackoffAlgorithm_GetNextBackoff. It returns an error
// that names each field the library could not hold.
func (a BackoffAlgorithm) Policy() (Policy, error) {
	var errs []error
	ms := make([]uint32, 2)
	for i, f := range []struct {
		name, c string
		d       time.Duration
	}{{"BackOffBase", "backOffBase", a.BackOffBase}, {"MaxBackOff", "maxBackOff", a.MaxBackOff}} {
		v, ok := wholeUnits(f.d, time.Millisecond, math.MaxUint16)
		if !ok {
			errs = append(errs, fmt.Errorf("checkpoint: BackoffAlgorithm.%s is %v: want whole milliseconds up to %v (%s, a uint16 of ms)", f.name, f.d, math.MaxUint16*time.Millisecond, f.c))
		}
		ms[i] = uint32(v)
	}
	if err := errors.Join(errs...); err != nil {
		return Policy{}, err
	}
	retries := Infinite
	if a.MaxAttempts != BackoffAlgorithmRetryForever {
		retries = int(min(uint64(a.MaxAttempts), uint64(math.MaxInt)))
	}
	base, ceiling := ms[0], ms[1]
	return Policy{
		MaxRetries: retries,
		Backoff: func(n int, _ time.Duration, rnd Rand) time.Duration {
			jitterMax := base
			for i := 1; i < n; i++ {
				next := ceiling
				if jitterMax < ceiling/2 {
					next = jitterMax + jitterMax // below 2^16: no uint16 overflow
				}
				if next == jitterMax {
					break // a fixed point: 0 or maxBackOff
				}
				jitterMax = next
			}
			randomValue := uint32(unitDraw(rnd) * (1 << 32))
			return time.Duration(randomValue%(jitterMax+1)) * time.Millisecond
		},
	}, nil
}

// ---------------------------------------------------------------------------
// Azure WebJobs SDK / Azure Functions

// webJobsRandomizationFactor is RandomizationFactor of
// RandomizedExponentialBackoffStrategy.
const webJobsRandomizationFactor = 0.2

// tick is the resolution of .NET's TimeSpan.
const tick = 100 * time.Nanosecond

// WebJobsRandomizedExponentialBackoff is the WebJobs SDK's
// RandomizedExponentialBackoffStrategy(minimumInterval, maximumInterval,
// deltaBackoff), fresh and called with GetNextDelay(executionSucceeded:
// false) once per retry. The strategy is only a schedule of delays, with no
// retry count (the WebJobs host polls with it for as long as it runs): its
// Policy retries forever (MaxRetries is [Infinite]); set MaxRetries on the
// Policy to bound it, or see [AzureFunctionsExponentialBackoff] for Azure
// Functions' use of it. The zero value waits 0 before every retry.
//
// It reproduces src/Microsoft.Azure.WebJobs.Host/Timers/
// RandomizedExponentialBackoffStrategy.cs of Azure/azure-webjobs-sdk, with
// Random.Next(min, max) = (max - min) * NextDouble() + min from
// RandomExtensions.cs (read from the copy of that file in
// Azure/azure-sdk-for-net; the WebJobs copy is not in the index), and .NET 7+
// TimeSpan arithmetic (Azure Functions v4 runs on .NET 8): TotalMilliseconds
// is ticks / 10000.0 and FromMilliseconds truncates ms * 10000 to whole
// ticks. Retry 1 waits minimumInterval; retry n >= 2 waits
//
//	b = minimumInterval + FromMilliseconds(R * 2^(n-2) * deltaBackoff.TotalMilliseconds)
//	R = (1.2 - 0.8) * NextDouble() + 0.8
//
// when b < maximumInterval, and maximumInterval otherwise; once the strategy
// returns maximumInterval it returns it for every later retry without
// drawing. The Backoff returns the strategy's TimeSpan; Task.Delay then waits
// it in whole milliseconds. Past the range of a Duration (292 years) the
// arithmetic saturates where .NET would throw an OverflowException.
type WebJobsRandomizedExponentialBackoff struct {
	// MinimumInterval is minimumInterval, the delay before retry 1 and the
	// base of every later one: a TimeSpan (a non-negative multiple of
	// 100ns), not above MaximumInterval (ValidateIntervals).
	MinimumInterval time.Duration

	// MaximumInterval is maximumInterval, the longest delay: a TimeSpan.
	MaximumInterval time.Duration

	// DeltaBackoff is deltaBackoff, the increment that is randomized and
	// doubled: a TimeSpan. A negative one, which the SDK would accept, is
	// refused.
	DeltaBackoff time.Duration
}

// Policy returns the Policy that reproduces w: the strategy's delays,
// retried forever. It returns an error that names each field a TimeSpan
// could not hold or ValidateIntervals would reject.
func (w WebJobsRandomizedExponentialBackoff) Policy() (Policy, error) {
	err := webJobsCheck("WebJobsRandomizedExponentialBackoff",
		timeSpan{"MinimumInterval", w.MinimumInterval}, timeSpan{"MaximumInterval", w.MaximumInterval}, timeSpan{"DeltaBackoff", w.DeltaBackoff})
	if err != nil {
		return Policy{}, err
	}
	return Policy{MaxRetries: Infinite, Backoff: webJobsBackoff(w.MinimumInterval, w.MaximumInterval, w.DeltaBackoff)}, nil
}

// timeSpan is a field of a WebJobs preset that holds a .NET TimeSpan.
type timeSpan struct {
	name string
	d    time.Duration
}

// webJobsCheck checks the TimeSpan fields of the preset typ, and that its
// minimum (fields[0]) is not above its maximum (fields[1]), as the
// strategy's ValidateIntervals does.
func webJobsCheck(typ string, fields ...timeSpan) error {
	var errs []error
	for _, f := range fields {
		if _, ok := wholeUnits(f.d, tick, math.MaxInt64); !ok {
			errs = append(errs, fmt.Errorf("checkpoint: %s.%s is %v: want a TimeSpan, a non-negative multiple of 100ns", typ, f.name, f.d))
		}
	}
	if lo, hi := fields[0], fields[1]; lo.d > hi.d {
		errs = append(errs, fmt.Errorf("checkpoint: %s.%s %v is greater than %s %v", typ, lo.name, lo.d, hi.name, hi.d))
	}
	return errors.Join(errs...)
}

// webJobsBackoff is the strategy's schedule: see
// [WebJobsRandomizedExponentialBackoff].
func webJobsBackoff(minimum, maximum, delta time.Duration) Backoff {
	minTicks, maxTicks, deltaTicks := int64(minimum/tick), int64(maximum/tick), int64(delta/tick)
	// Computed at run time, as the C# compiler folds them: 1.0 - 0.2 and
	// 1.0 + 0.2 round to the doubles nearest 0.8 and 1.2, but their
	// difference, computed in Random.Next, is 0.3999999999999999, not 0.4.
	lo, hi := 1.0-webJobsRandomizationFactor, 1.0+webJobsRandomizationFactor
	span := hi - lo
	deltaMs := float64(deltaTicks) / 10000 // TimeSpan.TotalMilliseconds
	return func(n int, prev time.Duration, rnd Rand) time.Duration {
		if n <= 1 {
			// _backoffExponent 0: no increment. The strategy returns
			// minimumInterval, or maximumInterval if they are equal.
			return time.Duration(minTicks) * tick
		}
		if minTicks >= maxTicks || prev >= maximum {
			// _currentInterval == _maximumInterval: kept without drawing.
			// (Without prev the computation below also gives the maximum:
			// the increment's lower bound doubles at each retry, above the
			// upper bound of the retry that reached the maximum.)
			return maximum
		}
		r := float64(span*unitDraw(rnd)) + lo            // Random.Next(0.8, 1.2)
		incMs := float64(r*math.Ldexp(1, n-2)) * deltaMs // * Math.Pow(2.0, exponent-1) * TotalMilliseconds
		incTicks := incMs * 10000                        // TimeSpan.FromMilliseconds, before truncation
		switch {
		case incTicks != incTicks:
			// NaN: a deltaBackoff of 0 times 2^(n-2) = +Inf, past retry
			// 1025. .NET throws; every earlier increment was 0.
			return time.Duration(minTicks) * tick
		case incTicks >= float64(maxTicks-minTicks):
			return maximum // also +Inf, where .NET would overflow
		}
		backoff := minTicks + int64(incTicks) // truncated to whole ticks
		if backoff < maxTicks {
			return time.Duration(backoff) * tick
		}
		return maximum
	}
}

// AzureFunctionsExponentialBackoff is Azure Functions' exponentialBackoff
// retry strategy ("retry": {"strategy": "exponentialBackoff",
// "maxRetryCount": ..., "minimumInterval": ..., "maximumInterval": ...}): at
// most MaxRetryCount retries (-1 for no limit) with the delays of
// [WebJobsRandomizedExponentialBackoff] with DeltaBackoff = MinimumInterval,
// a fresh strategy per batch:
//
//	min, then min + R*min, min + 2*R*min, min + 4*R*min, ...   R uniform in [0.8, 1.2)
//
// until a delay reaches MaximumInterval, which every later retry then waits.
// The zero value never retries (maxRetryCount 0).
//
// It reproduces src/Microsoft.Azure.WebJobs.Host/ExponentialBackoffRetryAttribute.cs
// and Executors/FunctionExecutorExtensions.cs of Azure/azure-webjobs-sdk: the
// attribute keeps one RandomizedExponentialBackoffStrategy(minimumInterval,
// maximumInterval) in the RetryContext.State of one invocation, and the
// executor gives retry n RetryCount n, stopping after maxRetryCount retries.
// Where the code differs from the common description, "between minimumInterval and
// maximumInterval, randomized" (Azure Functions documents nothing more precise):
//   - The first retry waits exactly minimumInterval: nothing is random.
//   - Only the increment over minimumInterval is randomized, by +-20%, and it
//     doubles at each retry starting from deltaBackoff = minimumInterval.
//   - A delay that reaches maximumInterval sticks there without randomness.
//   - A minimumInterval of 0 makes every delay 0: the increments are
//     multiples of it.
//   - Delays have the 100ns resolution of TimeSpan.
//
// Azure Functions' fixedDelay strategy is [Fixed] with MaxRetries set to its
// maxRetryCount.
type AzureFunctionsExponentialBackoff struct {
	// MaxRetryCount is maxRetryCount, the most retries: -1 ([Infinite]) for
	// no limit, 0 for none.
	MaxRetryCount int

	// MinimumInterval is minimumInterval, the delay before retry 1 and the
	// increment that is randomized and doubled: a TimeSpan (a non-negative
	// multiple of 100ns), not above MaximumInterval.
	MinimumInterval time.Duration

	// MaximumInterval is maximumInterval, the longest delay: a TimeSpan.
	MaximumInterval time.Duration
}

// Policy returns the Policy that reproduces f: at most MaxRetryCount retries
// and the strategy's delays. It returns an error that names each field
// Azure Functions would reject.
func (f AzureFunctionsExponentialBackoff) Policy() (Policy, error) {
	err := webJobsCheck("AzureFunctionsExponentialBackoff", timeSpan{"MinimumInterval", f.MinimumInterval}, timeSpan{"MaximumInterval", f.MaximumInterval})
	if f.MaxRetryCount < Infinite {
		err = errors.Join(err, fmt.Errorf("checkpoint: AzureFunctionsExponentialBackoff.MaxRetryCount is %d: want -1 (infinite) or a count of retries", f.MaxRetryCount))
	}
	if err != nil {
		return Policy{}, err
	}
	return Policy{MaxRetries: f.MaxRetryCount, Backoff: webJobsBackoff(f.MinimumInterval, f.MaximumInterval, f.MinimumInterval)}, nil
}
