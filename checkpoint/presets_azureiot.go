package checkpoint

import (
	"errors"
	"fmt"
	"math"
	"time"
)

// Compatibility presets of the Azure IoT SDKs (C and Java); presets.go
// says how every preset reproduces its SDK.

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
