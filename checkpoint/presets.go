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
// Azure IoT C SDK

// AzureIoTCRetry is a retry policy of the Azure IoT C SDK
// (IOTHUB_CLIENT_RETRY_POLICY); its values are those of the C enum.
type AzureIoTCRetry int

// The retry policies of the Azure IoT C SDK, in the order of the C enum.
const (
	AzureIoTCRetryNone                         AzureIoTCRetry = iota // IOTHUB_CLIENT_RETRY_NONE
	AzureIoTCRetryImmediate                                          // IOTHUB_CLIENT_RETRY_IMMEDIATE
	AzureIoTCRetryInterval                                           // IOTHUB_CLIENT_RETRY_INTERVAL
	AzureIoTCRetryLinearBackoff                                      // IOTHUB_CLIENT_RETRY_LINEAR_BACKOFF
	AzureIoTCRetryExponentialBackoff                                 // IOTHUB_CLIENT_RETRY_EXPONENTIAL_BACKOFF
	AzureIoTCRetryExponentialBackoffWithJitter                       // IOTHUB_CLIENT_RETRY_EXPONENTIAL_BACKOFF_WITH_JITTER
	AzureIoTCRetryRandom                                             // IOTHUB_CLIENT_RETRY_RANDOM
)

var azureIoTCRetryNames = [...]string{
	"IOTHUB_CLIENT_RETRY_NONE",
	"IOTHUB_CLIENT_RETRY_IMMEDIATE",
	"IOTHUB_CLIENT_RETRY_INTERVAL",
	"IOTHUB_CLIENT_RETRY_LINEAR_BACKOFF",
	"IOTHUB_CLIENT_RETRY_EXPONENTIAL_BACKOFF",
	"IOTHUB_CLIENT_RETRY_EXPONENTIAL_BACKOFF_WITH_JITTER",
	"IOTHUB_CLIENT_RETRY_RANDOM",
}

// String returns the C name of r, such as "IOTHUB_CLIENT_RETRY_RANDOM".
func (r AzureIoTCRetry) String() string {
	if r < 0 || int(r) >= len(azureIoTCRetryNames) {
		return fmt.Sprintf("AzureIoTCRetry(%d)", int(r))
	}
	return azureIoTCRetryNames[r]
}

// cRandMax is RAND_MAX of glibc, whose rand() the preset models.
const cRandMax = 1<<31 - 1

// AzureIoTC is the retry control of the Azure IoT C SDK: a policy plus the
// options of retry_control_set_option. [NewAzureIoTC] fills it as
// retry_control_create does; change a field as retry_control_set_option
// would, then call [AzureIoTC.Policy]. The zero AzureIoTC is the NONE policy,
// which never retries. The SDK's MQTT and AMQP transports default to
// NewAzureIoTC(AzureIoTCRetryExponentialBackoffWithJitter, 0).
//
// It reproduces iothub_client/src/iothub_client_retry_control.c of
// Azure/azure-iot-sdk-c as released since the 30-second cap was added
// (pull request #1469): calculate_next_wait_time, with retry_control_create's
// defaults and the decisions of retry_control_should_retry. Retry n of a batch
// is the C retry control's retry n: the first call of
// retry_control_should_retry answers RETRY_NOW because retry_count is 0, so
// retry 1 is immediate, and retry n >= 2 waits calculate_next_wait_time with
// retry_count = n-1 (the count after retry n-1 was granted). In whole seconds
// (initial = InitialWait, max = MaxDelay, pct = MaxJitterPercent, k = n-1):
//
//	NONE                 never retries
//	IMMEDIATE            0
//	INTERVAL             initial
//	LINEAR_BACKOFF       min(initial*k, max)                 unsigned int product
//	EXPONENTIAL_BACKOFF  (unsigned)min(2^(k-1)*initial, max)
//	..._WITH_JITTER      (unsigned)(min(2^(k-1)*initial, max) * (1 + pct/100.0 * rand()/(double)RAND_MAX))
//	RANDOM               (unsigned)(initial * (rand()/(double)RAND_MAX))
//
// Where the code differs from the SDK's requirements text (and from the
// simplified formulas usually quoted for it):
//   - The first retry is immediate and retry n waits the formula for n-1:
//     with the defaults, EXPONENTIAL_BACKOFF_WITH_JITTER waits
//     0, 1, 2, 4, 8, 16, 30 or 31, 30 or 31 ... seconds, not 1, 2, 4, ...
//   - Since pull request #1469 the linear and exponential policies are capped
//     by max_delay_in_secs, 30 seconds by default, which the requirements do not
//     have. INTERVAL and RANDOM are not capped. The jitter is applied after the
//     cap, so a jittered wait can exceed the cap by up to pct percent.
//   - Waits are unsigned int seconds: the product is truncated. 5 % of 1, 2,
//     4, 8 or 16 s is less than a second, so with the defaults the jitter only
//     shows at the cap (30 s becomes 31 s when rand() >= RAND_MAX*2/3).
//   - The requirements' formula (max_jitter_percent / 100) * (rand() / RAND_MAX) is
//     0 in C integer arithmetic (unless both quotients are 1), and releases
//     before the fix of issue #143 shipped exactly that: no jitter at all.
//     The released code divides by 100.0 and (double)RAND_MAX.
//   - rand()/(double)RAND_MAX reaches 1 when rand() returns RAND_MAX, so RANDOM
//     can wait the whole initial wait.
//   - LINEAR_BACKOFF multiplies unsigned ints, which wrap modulo 2^32 before the
//     cap; this preset wraps the same way. Where C converts a double of 2^32
//     or more to unsigned int (undefined behaviour, reachable only with a
//     MaxDelay of decades and a large jitter), the preset saturates.
//
// rand() is modelled as glibc's (RAND_MAX = 2^31-1), drawn as floor(U * 2^31)
// from one Rand.Float64 per jittered or random wait.
//
// What a Backoff cannot carry, and how the Policy maps it: the C retry control
// has no retry count (MaxRetries is [Infinite], 0 for NONE); its
// max_retry_time_in_secs is MaxRetryTime, counted from the first failure as
// the C code counts from the first retry_control_should_retry call. The C code
// measures each wait from the start of the previous retry on a whole-second
// clock polled by DoWork, where redeliver waits the exact delay from the
// failure.
type AzureIoTC struct {
	// Retry is the policy (retry_control_create's policy).
	Retry AzureIoTCRetry

	// MaxRetryTime is max_retry_time_in_secs: whole seconds, 0 for none.
	// The SDK's transports create their retry control with 0.
	MaxRetryTime time.Duration

	// InitialWait is initial_wait_time_in_secs: whole seconds, at least 1s
	// (unused, and so not checked, by NONE and IMMEDIATE). The C default is
	// 1s for the exponential policies and 5s for the others.
	InitialWait time.Duration

	// MaxJitterPercent is max_jitter_percent, 0 to 100; the C default is
	// [DefaultJitterPercent] (5). Only EXPONENTIAL_BACKOFF_WITH_JITTER uses it.
	MaxJitterPercent int

	// MaxDelay is max_delay_in_secs, whole seconds: the cap of the linear and
	// exponential policies. The C default is 30s (DEFAULT_MAX_DELAY_IN_SECS); 0 is a
	// valid setting that makes those policies retry without waiting.
	MaxDelay time.Duration
}

// NewAzureIoTC returns the retry control that retry_control_create(retry,
// maxRetryTime) makes: InitialWait 1s for the two exponential policies and 5s
// for the others, MaxJitterPercent 5, MaxDelay 30s. maxRetryTime is checked
// by [AzureIoTC.Policy].
func NewAzureIoTC(retry AzureIoTCRetry, maxRetryTime time.Duration) AzureIoTC {
	initial := 5 * time.Second
	if retry == AzureIoTCRetryExponentialBackoff || retry == AzureIoTCRetryExponentialBackoffWithJitter {
		initial = time.Second
	}
	return AzureIoTC{
		Retry:            retry,
		MaxRetryTime:     maxRetryTime,
		InitialWait:      initial,
		MaxJitterPercent: DefaultJitterPercent,
		MaxDelay:         30 * time.Second, // DEFAULT_MAX_DELAY_IN_SECS
	}
}

// Policy returns the Policy that reproduces c, or an error that names each
// field the C SDK could not hold or would reject.
func (c AzureIoTC) Policy() (Policy, error) {
	var errs []error
	if c.Retry < AzureIoTCRetryNone || c.Retry > AzureIoTCRetryRandom {
		errs = append(errs, fmt.Errorf("checkpoint: AzureIoTC.Retry is %v: want one of the IOTHUB_CLIENT_RETRY_* policies", c.Retry))
	}
	maxRetryTime, ok := wholeUnits(c.MaxRetryTime, time.Second, math.MaxUint32)
	if !ok {
		errs = append(errs, fmt.Errorf("checkpoint: AzureIoTC.MaxRetryTime is %v: want 0 (none) or whole seconds up to 2^32-1 (max_retry_time_in_secs)", c.MaxRetryTime))
	}
	initial, ok := wholeUnits(c.InitialWait, time.Second, math.MaxUint32)
	if (!ok || initial < 1) && c.Retry > AzureIoTCRetryImmediate {
		errs = append(errs, fmt.Errorf("checkpoint: AzureIoTC.InitialWait is %v: want whole seconds from 1s up to 2^32-1 s (initial_wait_time_in_secs)", c.InitialWait))
	}
	if c.MaxJitterPercent < 0 || c.MaxJitterPercent > 100 {
		errs = append(errs, fmt.Errorf("checkpoint: AzureIoTC.MaxJitterPercent is %d: want 0 to 100 (max_jitter_percent)", c.MaxJitterPercent))
	}
	maxDelay, ok := wholeUnits(c.MaxDelay, time.Second, math.MaxUint32)
	if !ok {
		errs = append(errs, fmt.Errorf("checkpoint: AzureIoTC.MaxDelay is %v: want whole seconds up to 2^32-1 s (max_delay_in_secs)", c.MaxDelay))
	}
	if err := errors.Join(errs...); err != nil {
		return Policy{}, err
	}
	if c.Retry == AzureIoTCRetryNone {
		return Policy{MaxRetries: 0}, nil
	}
	return Policy{
		MaxRetries:   Infinite,
		Backoff:      azureIoTCBackoff(c.Retry, uint32(initial), uint32(c.MaxJitterPercent), uint32(maxDelay)),
		MaxRetryTime: time.Duration(maxRetryTime) * time.Second,
	}, nil
}

// azureIoTCBackoff is calculate_next_wait_time, shifted by one retry: see
// [AzureIoTC].
func azureIoTCBackoff(retry AzureIoTCRetry, initial, pct, maxDelay uint32) Backoff {
	return func(n int, _ time.Duration, rnd Rand) time.Duration {
		if n <= 1 {
			return 0 // retry_count 0: RETRY_NOW without a wait
		}
		// retry_count after retry n-1 was granted; an unsigned int in C,
		// so it wraps as C's would.
		count := uint32(n - 1)
		return time.Duration(azureIoTCWait(retry, initial, pct, maxDelay, count, rnd)) * time.Second
	}
}

// azureIoTCWait is calculate_next_wait_time for retry_count = count, in
// seconds.
func azureIoTCWait(retry AzureIoTCRetry, initial, pct, maxDelay, count uint32, rnd Rand) uint32 {
	// pow(2, retry_count - 1) * initial_wait_time_in_secs: retry_count - 1 is
	// unsigned arithmetic, and a power of two times an integer is exact in a
	// double, as Ldexp computes it (+Inf past the double range, as pow).
	exponential := func() float64 {
		base := math.Ldexp(float64(initial), int(count-1))
		if base > float64(maxDelay) {
			base = float64(maxDelay)
		}
		return base
	}
	switch retry {
	case AzureIoTCRetryInterval:
		return initial
	case AzureIoTCRetryLinearBackoff:
		base := initial * count // unsigned int: wraps
		return min(base, maxDelay)
	case AzureIoTCRetryExponentialBackoff:
		return cUnsigned(exponential())
	case AzureIoTCRetryExponentialBackoffWithJitter:
		// The C code draws rand() first, then computes the base.
		r := glibcRand(rnd)
		jitter := float64(float64(pct) / 100.0 * (float64(r) / cRandMax))
		return cUnsigned(exponential() * (1 + jitter))
	case AzureIoTCRetryRandom:
		r := glibcRand(rnd)
		return cUnsigned(float64(initial) * (float64(r) / cRandMax))
	}
	return 0 // IMMEDIATE: the C code computes no wait
}

// glibcRand draws a glibc rand() value, [0, 2^31-1], as floor(U * 2^31).
func glibcRand(rnd Rand) int32 {
	return int32(unitDraw(rnd) * (1 << 31))
}

// cUnsigned is C's (unsigned int) conversion of a non-negative double:
// truncation toward zero. It saturates where C is undefined.
func cUnsigned(x float64) uint32 {
	switch {
	case !(x > 0):
		return 0
	case x >= math.MaxUint32:
		return math.MaxUint32
	}
	return uint32(x)
}

// ---------------------------------------------------------------------------
// Azure IoT Java SDK

// AzureIoTJava is the Azure IoT Java device SDK's retry policy,
// ExponentialBackoffWithJitter(retryCount, minBackoff, maxBackoff,
// deltaBackoff, firstFastRetry), together with the client's operation
// timeout. [NewAzureIoTJava] fills it with the SDK's defaults, those of
// new ExponentialBackoffWithJitter(); change a field as the constructor's
// arguments would, then call [AzureIoTJava.Policy]. With the defaults: up to
// Integer.MAX_VALUE retries, a fast first retry, then
//
//	min(100ms + (2^(n-1) - 1) * J, 10s)   J uniform in whole ms 80 ... 119
//
// before retry n, all within the client's default operation timeout of 4
// minutes (MaxRetryTime; the SDK's retry policy document: "the retry
// mechanism will stop after DefaultOperationTimeoutInMilliseconds", 4
// minutes, which the SDK counts from the start of the operation, redeliver
// from the first failure). With n = 1 .. 8 and every J at 100ms: 0s 200ms
// 400ms 800ms 1.6s 3.2s 6.4s 10s.
//
// It reproduces getRetryDecision of ExponentialBackoffWithJitter.java in
// Azure/azure-iot-sdk-java (device/iot-device-client/src/main/java/com/
// microsoft/azure/sdk/iot/device/transport/, under iothub/ in later trees),
// with x = n-1 as IotHubTransport passes it when it reconnects or opens the
// connection (0 for the first retry):
//
//	x == 0 && firstFastRetry:  0
//	x >= retryCount:           no retry (MaxRetries = retryCount)
//	otherwise:
//	  lo = (int)(deltaBackoff * 0.8), hi = (int)(deltaBackoff * 1.2)
//	  r  = SecureRandom.nextInt(hi - lo)               drawn as floor(U * (hi-lo)), at most hi-lo-1
//	  e  = (int)((Math.pow(2, x) - 1) * (r + lo))
//	  wait = (int)Math.min(minBackoff + (double)e, maxBackoff) milliseconds
//
// with Java's saturating (int) casts. Where the code differs from the SDK's retry guide
// (whose formula is [JitteredExponential]):
//   - The guide gives the jitter as rand(C*(1-Jd), C*(1-Ju)) with Jd = 0.5 and
//     Ju = 0.25, that is 50ms to 75ms (and a "1-Ju" that should read "1+Ju");
//     the code draws a whole number of milliseconds in [0.8*delta, 1.2*delta),
//     80ms to 119ms by default, through nextInt's exclusive bound.
//   - The first retry is immediate (firstFastRetry, true by default), which
//     the guide does not mention; without it, the first retry waits minBackoff.
//   - The exponent is 2^x - 1 of the 0-based retry count: 0, 1, 3, 7, ...
//     times J, the guide's 2^(x-1) - 1 read with a 1-based x.
//   - Every intermediate is truncated to a Java int of milliseconds, and the
//     cap applies after minBackoff is added.
//   - The retry count (Integer.MAX_VALUE by default) and the operation timeout
//     (4 minutes) bound the retries; the guide names neither.
//
// IotHubTransport's message resend path passes the retry number after
// incrementing it (x = n); to reproduce that path, note that its schedule is
// this one shifted by one retry. A DeltaBackoff for which hi - lo <= 0 (0ms,
// or one so large that both bounds saturate) makes nextInt throw in Java at
// the first delayed retry; Policy returns an error for it instead, unless no
// retry can draw.
//
// The SDK's error filter treats unknown errors as terminal; the Policy keeps
// [DefaultRetryable]: set Retryable (for example to [RetryOnly]) to match.
//
// The zero AzureIoTJava is not valid (the SDK demands a positive
// retryCount): start from NewAzureIoTJava.
type AzureIoTJava struct {
	// RetryCount is retryCount, the most retries: 1 to 2^31-1 (a Java int
	// greater than 0). The SDK's default is Integer.MAX_VALUE.
	RetryCount int

	// MinBackoff is minBackoff, the base of every delayed retry's wait:
	// whole milliseconds, not negative (a Java long of ms). The SDK's
	// default is 100ms.
	MinBackoff time.Duration

	// MaxBackoff is maxBackoff, the cap of every wait: whole milliseconds,
	// not negative. The SDK's default is 10s.
	MaxBackoff time.Duration

	// DeltaBackoff is deltaBackoff, the delay that is jittered by -20% to
	// +20% and doubled: whole milliseconds, from 1ms up to where both
	// bounds of the jitter saturate a Java int (about 31 days). The SDK's
	// default is 100ms.
	DeltaBackoff time.Duration

	// FirstFastRetry is firstFastRetry: the first retry waits nothing. The
	// SDK's default is true.
	FirstFastRetry bool

	// OperationTimeout is the device client's operation timeout, which
	// ends the retries of an operation: the Policy's MaxRetryTime. Whole
	// milliseconds, not negative; 0 sets no time limit, which the SDK does
	// not offer. The SDK's default is 4 minutes.
	OperationTimeout time.Duration
}

// NewAzureIoTJava returns the defaults of the Azure IoT Java device SDK:
// new ExponentialBackoffWithJitter() (RetryCount Integer.MAX_VALUE,
// MinBackoff 100ms, MaxBackoff 10s, DeltaBackoff 100ms, FirstFastRetry)
// and the client's default operation timeout of 4 minutes.
func NewAzureIoTJava() AzureIoTJava {
	return AzureIoTJava{
		RetryCount:       math.MaxInt32,
		MinBackoff:       100 * time.Millisecond,
		MaxBackoff:       10 * time.Second,
		DeltaBackoff:     100 * time.Millisecond,
		FirstFastRetry:   true,
		OperationTimeout: 4 * time.Minute,
	}
}

// Policy returns the Policy that reproduces j: at most RetryCount retries
// (MaxRetries), the waits of getRetryDecision, and MaxRetryTime set to
// OperationTimeout. It returns an error that names each field the Java SDK
// could not hold or would reject.
func (j AzureIoTJava) Policy() (Policy, error) {
	var errs []error
	if j.RetryCount <= 0 || j.RetryCount > math.MaxInt32 {
		errs = append(errs, fmt.Errorf("checkpoint: AzureIoTJava.RetryCount is %d: want 1 to 2^31-1 (retryCount, a Java int greater than 0; NewAzureIoTJava gives the SDK's defaults)", j.RetryCount))
	}
	ms := make([]int64, 4)
	for i, f := range []struct {
		name, java string
		d          time.Duration
	}{{"MinBackoff", "minBackoff", j.MinBackoff}, {"MaxBackoff", "maxBackoff", j.MaxBackoff},
		{"DeltaBackoff", "deltaBackoff", j.DeltaBackoff}, {"OperationTimeout", "the operation timeout", j.OperationTimeout}} {
		v, ok := wholeUnits(f.d, time.Millisecond, math.MaxInt64)
		if !ok {
			errs = append(errs, fmt.Errorf("checkpoint: AzureIoTJava.%s is %v: want whole milliseconds, not negative (%s, a Java long of ms)", f.name, f.d, f.java))
		}
		ms[i] = v
	}
	if len(errs) == 0 && (j.RetryCount > 1 || !j.FirstFastRetry) {
		if lo, hi := azureIoTJavaBounds(ms[2]); hi-lo <= 0 {
			errs = append(errs, fmt.Errorf("checkpoint: AzureIoTJava.DeltaBackoff is %v: (int)(delta*1.2) - (int)(delta*0.8) = %d, and Java's nextInt needs a positive bound", j.DeltaBackoff, hi-lo))
		}
	}
	if err := errors.Join(errs...); err != nil {
		return Policy{}, err
	}
	return Policy{
		MaxRetries:   j.RetryCount,
		Backoff:      azureIoTJavaBackoff(ms[0], ms[1], ms[2], j.FirstFastRetry),
		MaxRetryTime: j.OperationTimeout,
	}, nil
}

// azureIoTJavaBounds returns deltaBackoffLowbound and deltaBackoffUpperbound
// of getRetryDecision; their difference is computed in Java int arithmetic.
func azureIoTJavaBounds(deltaMs int64) (lo, hi int32) {
	return javaD2I(float64(deltaMs) * 0.8), javaD2I(float64(deltaMs) * 1.2)
}

// azureIoTJavaBackoff is getRetryDecision's wait: see [AzureIoTJava].
func azureIoTJavaBackoff(minMs, maxMs, deltaMs int64, firstFastRetry bool) Backoff {
	lo, hi := azureIoTJavaBounds(deltaMs)
	bound := hi - lo // Java int subtraction (wraps)
	return func(n int, _ time.Duration, rnd Rand) time.Duration {
		x := max(n-1, 0) // currentRetryCount
		if x == 0 && firstFastRetry {
			return 0
		}
		r := min(int64(unitDraw(rnd)*float64(bound)), int64(bound)-1)        // random.nextInt(bound)
		e := javaD2I((math.Ldexp(1, x) - 1.0) * float64(r+int64(lo)))        // (int)((Math.pow(2.0, x) - 1.0) * (r + lo))
		wait := javaD2I(math.Min(float64(minMs)+float64(e), float64(maxMs))) // (int)Math.min(minBackoff + (double)e, maxBackoff)
		return time.Duration(wait) * time.Millisecond
	}
}

// javaD2I is Java's (int) cast of a double: truncation toward zero, NaN to 0,
// saturation at the int range.
func javaD2I(x float64) int32 {
	switch {
	case x != x:
		return 0
	case x >= math.MaxInt32:
		return math.MaxInt32
	case x <= math.MinInt32:
		return math.MinInt32
	}
	return int32(x)
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
