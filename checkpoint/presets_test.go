package checkpoint_test

import (
	"math"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/redeliver-go/redeliver/checkpoint"
)

// presetRand returns vals in turn (0 when vals is empty) and counts the draws,
// so that a test can check that a preset draws exactly when its SDK does.
type presetRand struct {
	vals  []float64
	draws int
}

func (r *presetRand) Float64() float64 {
	var v float64
	if len(r.vals) > 0 {
		v = r.vals[r.draws%len(r.vals)]
	}
	r.draws++
	return v
}

// presetAlmostOne is the largest float64 below 1, the largest U a Rand may
// return.
var presetAlmostOne = math.Nextafter(1, 0)

// presetCase is one schedule: the first len(want) delays of a policy fed
// vals, and the number of random numbers the SDK would have drawn.
type presetCase struct {
	name  string
	p     checkpoint.Policy
	vals  []float64
	want  []time.Duration
	draws int
}

func runPresetCases(t *testing.T, cases []presetCase) {
	t.Helper()
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			rnd := &presetRand{vals: tc.vals}
			if got := tc.p.Schedule(len(tc.want), rnd); !slices.Equal(got, tc.want) {
				t.Errorf("schedule\n got %v\nwant %v", got, tc.want)
			}
			if rnd.draws != tc.draws {
				t.Errorf("drew %d random numbers, the SDK draws %d", rnd.draws, tc.draws)
			}
		})
	}
}

// mustPolicy returns a function that unwraps (Policy, error) and fails t on
// the error.
func mustPolicy(t *testing.T) func(checkpoint.Policy, error) checkpoint.Policy {
	return func(p checkpoint.Policy, err error) checkpoint.Policy {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
		return p
	}
}

// The C SDK's retry control: retry 1 is immediate (retry_count 0 answers
// RETRY_NOW); retry n >= 2 waits calculate_next_wait_time with retry_count
// k = n-1, in whole seconds. rand() = floor(U * 2^31), RAND_MAX = 2^31-1.
func TestAzureIoTC(t *testing.T) {
	const ms, s = time.Millisecond, time.Second
	c := func(cfg checkpoint.AzureIoTC) checkpoint.Policy {
		return mustPolicy(t)(cfg.Policy())
	}
	def := checkpoint.NewAzureIoTC
	jitter100 := def(checkpoint.AzureIoTCRetryExponentialBackoffWithJitter, 0)
	jitter100.InitialWait, jitter100.MaxJitterPercent, jitter100.MaxDelay = 3*s, 100, 1000*s
	wrap := def(checkpoint.AzureIoTCRetryLinearBackoff, 0)
	wrap.InitialWait, wrap.MaxDelay = 3_000_000_000*s, math.MaxUint32*s
	noDelay := def(checkpoint.AzureIoTCRetryExponentialBackoff, 0)
	noDelay.MaxDelay = 0

	runPresetCases(t, []presetCase{{
		// The SDK's default: initial 1, pct 5, max 30.
		name: "exponential with jitter, defaults",
		p:    c(def(checkpoint.AzureIoTCRetryExponentialBackoffWithJitter, 0)),
		vals: []float64{0, 0.5, 0.999, 0.25, 0.5, 0.75, 0.5, 2.0 / 3},
		want: []time.Duration{
			0,      // retry_count 0: RETRY_NOW, no rand()
			1 * s,  // k=1: 2^0*1 = 1; U=0: r=0, jitter 0: (unsigned)(1*1) = 1
			2 * s,  // k=2: 2; U=.5: r=2^30, jitter = .05*2^30/(2^31-1) = .025000000012: 2*1.025 = 2.05 -> 2
			4 * s,  // k=3: 4; U=.999: r=2145336164, jitter .04995: 4.1998 -> 4
			8 * s,  // k=4: 8; U=.25: jitter .0125: 8.1 -> 8
			16 * s, // k=5: 16; U=.5: 16.4 -> 16
			31 * s, // k=6: 2^5 = 32 > 30: base 30; U=.75: jitter .0375: 30*1.0375 = 31.125 -> 31
			30 * s, // k=7: base 30; U=.5: 30.75 -> 30
			31 * s, // k=8: base 30; U=2/3: r=1431655765, jitter .0333333333411: 31.00000000023 -> 31
		},
		draws: 8, // one rand() per wait, none for retry 1
	}, {
		name:  "exponential, defaults",
		p:     c(def(checkpoint.AzureIoTCRetryExponentialBackoff, 0)),
		want:  []time.Duration{0, 1 * s, 2 * s, 4 * s, 8 * s, 16 * s, 30 * s, 30 * s}, // 2^(k-1)*1, 32 capped to 30
		draws: 0,
	}, {
		name:  "linear, defaults",
		p:     c(def(checkpoint.AzureIoTCRetryLinearBackoff, 0)),
		want:  []time.Duration{0, 5 * s, 10 * s, 15 * s, 20 * s, 25 * s, 30 * s, 30 * s}, // 5*k; 5*7 = 35 capped to 30
		draws: 0,
	}, {
		name:  "interval, defaults",
		p:     c(def(checkpoint.AzureIoTCRetryInterval, 60*s)),
		want:  []time.Duration{0, 5 * s, 5 * s, 5 * s}, // initial_wait_time_in_secs, never capped
		draws: 0,
	}, {
		name: "random, defaults",
		p:    c(def(checkpoint.AzureIoTCRetryRandom, 0)),
		vals: []float64{0, 0.5, 0.999999999, presetAlmostOne},
		want: []time.Duration{
			0,
			0,     // r=0: 5*0 = 0
			2 * s, // r=2^30: 5*0.50000000023 = 2.5000000012 -> 2
			4 * s, // r=floor(0.999999999*2^31) = 2147483645: 5*0.99999999907 = 4.999999995 -> 4
			5 * s, // r=floor((1-2^-53)*2^31) = 2^31-1 = RAND_MAX: 5*1.0 = 5, the whole initial wait
		},
		draws: 4,
	}, {
		name:  "immediate",
		p:     c(def(checkpoint.AzureIoTCRetryImmediate, 0)),
		want:  []time.Duration{0, 0, 0},
		draws: 0,
	}, {
		name: "jitter 100 percent, truncation",
		p:    c(jitter100),
		vals: []float64{0.5, 0.999999999},
		want: []time.Duration{
			0,
			4 * s,  // k=1: base 3; r=2^30: 3*(1 + 1.0*0.50000000023) = 4.5000000007 -> 4
			11 * s, // k=2: base 6; r=2147483645: 6*(1 + 0.99999999907) = 11.99999999 -> 11
		},
		draws: 2,
	}, {
		name: "linear wraps as unsigned int",
		p:    c(wrap),
		want: []time.Duration{
			0,
			3_000_000_000 * s, // 3e9 * 1
			1_705_032_704 * s, // 3e9 * 2 = 6e9 mod 2^32 = 6000000000 - 4294967296
		},
		draws: 0,
	}, {
		name:  "max delay 0",
		p:     c(noDelay),
		want:  []time.Duration{0, 0, 0, 0}, // min(2^(k-1), 0) = 0
		draws: 0,
	}})
}

func TestAzureIoTCPolicyFields(t *testing.T) {
	const ms, s = time.Millisecond, time.Second
	p, err := checkpoint.NewAzureIoTC(checkpoint.AzureIoTCRetryInterval, 90*s).Policy()
	if err != nil {
		t.Fatal(err)
	}
	if p.MaxRetries != checkpoint.Infinite || p.MaxRetryTime != 90*s || p.MaxDelay != 0 {
		t.Errorf("got MaxRetries %d, MaxRetryTime %v, MaxDelay %v; want -1, 1m30s, 0", p.MaxRetries, p.MaxRetryTime, p.MaxDelay)
	}
	p, err = checkpoint.NewAzureIoTC(checkpoint.AzureIoTCRetryNone, 0).Policy()
	if err != nil {
		t.Fatal(err)
	}
	if p.MaxRetries != 0 || p.Backoff != nil {
		t.Errorf("NONE: got MaxRetries %d; want 0 and no Backoff", p.MaxRetries)
	}
	var zero checkpoint.AzureIoTC
	if p, err := zero.Policy(); err != nil || p.MaxRetries != 0 {
		t.Errorf("zero AzureIoTC: got %+v, %v; want a policy that never retries", p, err)
	}
	for _, tc := range []struct {
		retry checkpoint.AzureIoTCRetry
		want  time.Duration
	}{
		{checkpoint.AzureIoTCRetryExponentialBackoff, s},
		{checkpoint.AzureIoTCRetryExponentialBackoffWithJitter, s},
		{checkpoint.AzureIoTCRetryInterval, 5 * s},
		{checkpoint.AzureIoTCRetryLinearBackoff, 5 * s},
		{checkpoint.AzureIoTCRetryRandom, 5 * s},
	} {
		c := checkpoint.NewAzureIoTC(tc.retry, 0)
		if c.InitialWait != tc.want || c.MaxJitterPercent != 5 || c.MaxDelay != 30*s {
			t.Errorf("NewAzureIoTC(%v): got %+v; want InitialWait %v, MaxJitterPercent 5, MaxDelay 30s", tc.retry, c, tc.want)
		}
	}
	if got := checkpoint.AzureIoTCRetryExponentialBackoffWithJitter.String(); got != "IOTHUB_CLIENT_RETRY_EXPONENTIAL_BACKOFF_WITH_JITTER" {
		t.Errorf("String() = %q", got)
	}
	if got := checkpoint.AzureIoTCRetry(9).String(); got != "AzureIoTCRetry(9)" {
		t.Errorf("String() = %q", got)
	}
}

func TestAzureIoTCInvalid(t *testing.T) {
	const ms, s = time.Millisecond, time.Second
	base := checkpoint.NewAzureIoTC(checkpoint.AzureIoTCRetryInterval, 0)
	for _, tc := range []struct {
		name  string
		edit  func(*checkpoint.AzureIoTC)
		field string
	}{
		{"unknown policy", func(c *checkpoint.AzureIoTC) { c.Retry = 7 }, "Retry"},
		{"initial wait 0", func(c *checkpoint.AzureIoTC) { c.InitialWait = 0 }, "InitialWait"},
		{"initial wait not whole", func(c *checkpoint.AzureIoTC) { c.InitialWait = 1500 * ms }, "InitialWait"},
		{"jitter over 100", func(c *checkpoint.AzureIoTC) { c.MaxJitterPercent = 101 }, "MaxJitterPercent"},
		{"jitter negative", func(c *checkpoint.AzureIoTC) { c.MaxJitterPercent = -1 }, "MaxJitterPercent"},
		{"max delay negative", func(c *checkpoint.AzureIoTC) { c.MaxDelay = -s }, "MaxDelay"},
		{"max delay past unsigned int", func(c *checkpoint.AzureIoTC) { c.MaxDelay = (math.MaxUint32 + 1) * s }, "MaxDelay"},
		{"max retry time not whole", func(c *checkpoint.AzureIoTC) { c.MaxRetryTime = 2500 * ms }, "MaxRetryTime"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := base
			tc.edit(&c)
			_, err := c.Policy()
			if err == nil || !strings.Contains(err.Error(), "AzureIoTC."+tc.field) {
				t.Errorf("got %v; want an error naming AzureIoTC.%s", err, tc.field)
			}
		})
	}
}

// ExponentialBackoffWithJitter.getRetryDecision with currentRetryCount
// x = n-1: lo = (int)(delta*0.8), hi = (int)(delta*1.2), r = nextInt(hi-lo)
// = floor(U*(hi-lo)), wait = (int)min(min + (int)((2^x - 1)*(r+lo)), max) ms.
func TestAzureIoTJava(t *testing.T) {
	const ms, s = time.Millisecond, time.Second
	slow := mustPolicy(t)(checkpoint.AzureIoTJava{RetryCount: 3, MinBackoff: 50 * ms, MaxBackoff: time.Hour, DeltaBackoff: 1000 * ms}.Policy())
	def := mustPolicy(t)(checkpoint.NewAzureIoTJava().Policy())
	runPresetCases(t, []presetCase{{
		// Defaults: lo = (int)(100*0.8) = 80, hi = (int)(100*1.2) = 120, bound 40.
		name: "defaults",
		p:    def,
		vals: []float64{0, 0, 0.999, 0.5, 0.5, 0.5, 0.5, 0.25},
		want: []time.Duration{
			0,         // x=0, firstFastRetry: no draw
			180 * ms,  // x=1: U=0: r=0, J=80: (2-1)*80 = 80; 100+80
			340 * ms,  // x=2: U=0: J=80: 3*80 = 240; 100+240
			933 * ms,  // x=3: U=.999: r=floor(39.96)=39, J=119: 7*119 = 833; 100+833
			1600 * ms, // x=4: U=.5: r=20, J=100: 15*100; 100+1500
			3200 * ms, // x=5: 31*100; 100+3100
			6400 * ms, // x=6: 63*100; 100+6300
			10 * s,    // x=7: 127*100 = 12700; min(12800, 10000)
			10 * s,    // x=8: U=.25: r=10, J=90: 255*90 = 22950; min(23050, 10000)
		},
		draws: 8,
	}, {
		// delta 1000: lo = (int)800.0 = 800, hi = (int)1200.0 = 1200, bound 400.
		name: "first retry not fast",
		p:    slow,
		vals: []float64{0.5, 0, 0.999},
		want: []time.Duration{
			50 * ms,   // x=0: draws r=200 anyway; (2^0-1)*1000 = 0; min(50+0, 3600000)
			850 * ms,  // x=1: U=0: r=0, J=800; 50+800
			3647 * ms, // x=2: U=.999: r=floor(399.6)=399, J=1199: 3*1199 = 3597; 50+3597
		},
		draws: 3,
	}})

	// Java's (int) casts saturate: with maxBackoff 3e9 ms (34.7 days), delta
	// 1000 (J=800 at U=0) and minBackoff 7:
	big := mustPolicy(t)(checkpoint.AzureIoTJava{RetryCount: 40, MinBackoff: 7 * ms, MaxBackoff: 3_000_000_000 * ms, DeltaBackoff: 1000 * ms, FirstFastRetry: true}.Policy())
	for _, tc := range []struct {
		n    int
		want time.Duration
	}{
		{22, 1_677_720_807 * ms}, // x=21: (2^21-1)*800 = 1677720800; 7+1677720800
		{23, math.MaxInt32 * ms}, // x=22: 4194303*800 = 3355442400 -> (int) 2^31-1; 7 + that < 3e9,
		// and the final (int) saturates again: 24.8 days, not maxBackoff
	} {
		if got := big.Backoff(tc.n, 0, &presetRand{}); got != tc.want {
			t.Errorf("retry %d: got %v, want %v", tc.n, got, tc.want)
		}
	}

	if def.MaxRetries != math.MaxInt32 || def.MaxRetryTime != 4*time.Minute {
		t.Errorf("defaults: got MaxRetries %d, MaxRetryTime %v; want 2147483647, 4m0s", def.MaxRetries, def.MaxRetryTime)
	}
	if want := (checkpoint.AzureIoTJava{RetryCount: math.MaxInt32, MinBackoff: 100 * ms, MaxBackoff: 10 * s,
		DeltaBackoff: 100 * ms, FirstFastRetry: true, OperationTimeout: 4 * time.Minute}); checkpoint.NewAzureIoTJava() != want {
		t.Errorf("NewAzureIoTJava() = %+v, want %+v", checkpoint.NewAzureIoTJava(), want)
	}
	if slow.MaxRetries != 3 || slow.MaxRetryTime != 0 {
		t.Errorf("RetryCount 3, no OperationTimeout: got MaxRetries %d, MaxRetryTime %v", slow.MaxRetries, slow.MaxRetryTime)
	}
}

func TestAzureIoTJavaInvalid(t *testing.T) {
	const ms, s = time.Millisecond, time.Second
	for _, tc := range []struct {
		name  string
		edit  func(*checkpoint.AzureIoTJava)
		field string
	}{
		{"RetryCount 0", func(j *checkpoint.AzureIoTJava) { j.RetryCount = 0 }, "RetryCount"},
		{"RetryCount past int", func(j *checkpoint.AzureIoTJava) { j.RetryCount = math.MaxInt32 + 1 }, "RetryCount"},
		{"MinBackoff not whole ms", func(j *checkpoint.AzureIoTJava) { j.MinBackoff = 1500 * time.Microsecond }, "MinBackoff"},
		{"MaxBackoff negative", func(j *checkpoint.AzureIoTJava) { j.MaxBackoff = -s }, "MaxBackoff"},
		{"DeltaBackoff 0", func(j *checkpoint.AzureIoTJava) { j.RetryCount, j.DeltaBackoff = 3, 0 }, "DeltaBackoff"},
		{"DeltaBackoff 0, first retry slow", func(j *checkpoint.AzureIoTJava) { j.RetryCount, j.DeltaBackoff, j.FirstFastRetry = 1, 0, false }, "DeltaBackoff"},
		{"OperationTimeout negative", func(j *checkpoint.AzureIoTJava) { j.OperationTimeout = -ms }, "OperationTimeout"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			j := checkpoint.NewAzureIoTJava()
			tc.edit(&j)
			_, err := j.Policy()
			if err == nil || !strings.Contains(err.Error(), "AzureIoTJava."+tc.field) {
				t.Errorf("got %v; want an error naming AzureIoTJava.%s", err, tc.field)
			}
		})
	}
	// One fast retry never draws: Java never calls nextInt(0).
	if _, err := (checkpoint.AzureIoTJava{RetryCount: 1, MinBackoff: 100 * ms, MaxBackoff: s, FirstFastRetry: true}).Policy(); err != nil {
		t.Errorf("RetryCount 1, FirstFastRetry, DeltaBackoff 0: %v", err)
	}
	if _, err := (checkpoint.AzureIoTJava{}).Policy(); err == nil || !strings.Contains(err.Error(), "NewAzureIoTJava") {
		t.Errorf("the zero AzureIoTJava: got %v; want an error that points to NewAzureIoTJava", err)
	}
}

// BackoffAlgorithm_GetNextBackoff: randomValue = floor(U * 2^32), wait =
// randomValue % (nextJitterMax + 1) ms; nextJitterMax starts at the base,
// doubles while below maxBackOff/2 and then becomes maxBackOff.
func TestBackoffAlgorithm(t *testing.T) {
	const ms, s = time.Millisecond, time.Second
	const two32 = 1 << 32
	ba := func(a checkpoint.BackoffAlgorithm) checkpoint.Policy { return mustPolicy(t)(a.Policy()) }
	runPresetCases(t, []presetCase{{
		// The MQTT demos' values: windows 500, 1000, 2000, 4000, 5000.
		name: "demo values",
		p:    ba(checkpoint.BackoffAlgorithm{BackOffBase: 500 * ms, MaxBackOff: 5000 * ms, MaxAttempts: 5}),
		vals: []float64{0.5, 0.5, presetAlmostOne, 0.25, 0.75},
		want: []time.Duration{
			254 * ms,  // 2147483648 = 501*4286394 + 254
			310 * ms,  // 2147483648 = 1001*2145338 + 310
			885 * ms,  // floor((1-2^-53)*2^32) = 4294967295 = 2001*2146410 + 885
			1456 * ms, // 2000 < 5000/2: window 4000; 1073741824 = 4001*268368 + 1456
			1356 * ms, // 4000 >= 2500: window 5000; 3221225472 = 5001*644116 + 1356
		},
		draws: 5,
	}, {
		// Windows 5, 11, 11 where min(2^n*5, 11) would give 5, 10, 11; the top
		// of each window is reachable: randomValue = J gives J.
		name: "window jumps to the cap, inclusive top",
		p:    ba(checkpoint.BackoffAlgorithm{BackOffBase: 5 * ms, MaxBackOff: 11 * ms, MaxAttempts: checkpoint.BackoffAlgorithmRetryForever}),
		vals: []float64{5.0 / two32, 11.0 / two32, 11.0 / two32, presetAlmostOne},
		want: []time.Duration{
			5 * ms,  // 5 % 6
			11 * ms, // 5 >= 11/2 = 5: window 11; 11 % 12
			11 * ms, // 11 % 12
			3 * ms,  // 4294967295 % 12 = 3 (2^32 = 12*357913941 + 4)
		},
		draws: 4,
	}, {
		name: "base above the cap is used once",
		p:    ba(checkpoint.BackoffAlgorithm{BackOffBase: 9 * ms, MaxBackOff: 3 * ms, MaxAttempts: checkpoint.BackoffAlgorithmRetryForever}),
		vals: []float64{9.0 / two32, presetAlmostOne},
		want: []time.Duration{
			9 * ms, // window 9, not capped
			3 * ms, // 9 >= 3/2: window 3; 4294967295 % 4 = 3
		},
		draws: 2,
	}, {
		name:  "base 0 stays 0",
		p:     ba(checkpoint.BackoffAlgorithm{BackOffBase: 0, MaxBackOff: 100 * ms, MaxAttempts: 3}),
		vals:  []float64{presetAlmostOne},
		want:  []time.Duration{0, 0, 0}, // 0 < 50: 0+0 = 0; x % 1 = 0
		draws: 3,
	}})

	for _, tc := range []struct {
		attempts uint32
		want     int
	}{{5, 5}, {0, 0}, {checkpoint.BackoffAlgorithmRetryForever, checkpoint.Infinite}} {
		if got := ba(checkpoint.BackoffAlgorithm{BackOffBase: 500 * ms, MaxBackOff: 5000 * ms, MaxAttempts: tc.attempts}).MaxRetries; got != tc.want {
			t.Errorf("maxAttempts %d: MaxRetries %d, want %d", tc.attempts, got, tc.want)
		}
	}
	// maxAttempts counts retries: 5 means 5 delays.
	if got := ba(checkpoint.BackoffAlgorithm{BackOffBase: 500 * ms, MaxBackOff: 5000 * ms, MaxAttempts: 5}).Schedule(10, &presetRand{}); len(got) != 5 {
		t.Errorf("maxAttempts 5 gave %d retries", len(got))
	}
}

// The library's parameters are uint16 milliseconds: a duration it could not
// hold is an error that names the field, not a wrapped uint16.
func TestBackoffAlgorithmInvalid(t *testing.T) {
	const ms = time.Millisecond
	for _, tc := range []struct {
		name  string
		a     checkpoint.BackoffAlgorithm
		field string
	}{
		{"base past uint16", checkpoint.BackoffAlgorithm{BackOffBase: 65536 * ms, MaxBackOff: 5000 * ms}, "BackOffBase"},
		{"base not whole ms", checkpoint.BackoffAlgorithm{BackOffBase: 1500 * time.Microsecond, MaxBackOff: 5000 * ms}, "BackOffBase"},
		{"max negative", checkpoint.BackoffAlgorithm{BackOffBase: 500 * ms, MaxBackOff: -ms}, "MaxBackOff"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := tc.a.Policy()
			if err == nil || !strings.Contains(err.Error(), "BackoffAlgorithm."+tc.field) {
				t.Errorf("got %v; want an error naming BackoffAlgorithm.%s", err, tc.field)
			}
		})
	}
	// The largest values the library holds are accepted.
	if _, err := (checkpoint.BackoffAlgorithm{BackOffBase: 65535 * ms, MaxBackOff: 65535 * ms}).Policy(); err != nil {
		t.Errorf("65535ms: %v", err)
	}
}

// RandomizedExponentialBackoffStrategy: retry 1 waits the minimum; retry n
// waits min + trunc(R * 2^(n-2) * delta_ms * 10000) ticks, R = 0.3999999999999999*U
// + 0.8, until that reaches the maximum, which then sticks.
func TestAzureFunctionsExponentialBackoff(t *testing.T) {
	const ms, s = time.Millisecond, time.Second
	const tick = 100 * time.Nanosecond // a .NET TimeSpan tick
	fn := func(count int, lo, hi time.Duration) checkpoint.Policy {
		return mustPolicy(t)(checkpoint.AzureFunctionsExponentialBackoff{MaxRetryCount: count, MinimumInterval: lo, MaximumInterval: hi}.Policy())
	}
	delta := mustPolicy(t)(checkpoint.WebJobsRandomizedExponentialBackoff{MinimumInterval: s, MaximumInterval: time.Minute, DeltaBackoff: 250 * ms}.Policy())
	if delta.MaxRetries != checkpoint.Infinite {
		t.Errorf("WebJobs strategy: MaxRetries %d, want %d (the strategy has no retry count)", delta.MaxRetries, checkpoint.Infinite)
	}
	runPresetCases(t, []presetCase{{
		name: "1s to 1m",
		p:    fn(-1, s, time.Minute),
		vals: []float64{0, 0.5, presetAlmostOne, 1.0 / 3, 0.5, 0.5, 0.5},
		want: []time.Duration{
			s,                 // exponent 0: the minimum, no draw
			1800 * ms,         // U=0: R=0.8: 0.8*1*1000 = 800ms
			3 * s,             // U=.5: R = 0.19999999999999996 + 0.8 = 1.0: 2000ms
			5800 * ms,         // U=1-2^-53: R rounds to 1.2: 1.2*4*1000 = 4800ms
			s + 74666666*tick, // U=1/3: R=0.9333333333333333: *8*1000 = 7466.666666666666ms = 74666666.67 ticks, truncated
			17 * s,            // R=1: 16000ms
			33 * s,            // R=1: 32000ms
			time.Minute,       // R=1: 1s+64s >= 1m: the maximum
			time.Minute,       // stuck at the maximum: no draw
			time.Minute,
		},
		draws: 7,
	}, {
		// Random.Next computes 1.2 - 0.8 = 0.3999999999999999 at run time:
		// 0.3999999999999999*0.9375 + 0.8 = 1.1749999999999998 (with 0.4 it
		// would be 1.175), so 1174.9999999999998ms = 11749999.999999998
		// ticks, truncated to 11749999.
		name:  "span of Random.Next",
		p:     fn(-1, s, time.Minute),
		vals:  []float64{15.0 / 16},
		want:  []time.Duration{s, s + 11749999*tick},
		draws: 1,
	}, {
		name:  "minimum equals maximum",
		p:     fn(3, 5*s, 5*s),
		want:  []time.Duration{5 * s, 5 * s, 5 * s},
		draws: 0,
	}, {
		name:  "minimum 0",
		p:     fn(-1, 0, time.Hour),
		vals:  []float64{0.5},
		want:  []time.Duration{0, 0, 0}, // the increments are multiples of deltaBackoff = 0
		draws: 2,
	}, {
		name: "deltaBackoff apart from the minimum",
		p:    delta,
		vals: []float64{0, 0},
		want: []time.Duration{
			s,
			1200 * ms, // 0.8*1*250 = 200ms
			1400 * ms, // 0.8*2*250 = 400ms
		},
		draws: 2,
	}})

	// The maximum sticks even when prev is lost (a restart without durable
	// state): R's lower bound 0.8 doubled exceeds its upper bound 1.2.
	p := fn(-1, s, time.Minute)
	if got := p.Backoff(9, 0, &presetRand{vals: []float64{0}}); got != time.Minute {
		t.Errorf("retry 9 without prev, U=0: got %v, want 1m0s (1s + 0.8*128s)", got)
	}
	if p := fn(5, s, time.Minute); p.MaxRetries != 5 {
		t.Errorf("maxRetryCount 5: MaxRetries %d", p.MaxRetries)
	}
}

func TestAzureFunctionsInvalid(t *testing.T) {
	const ms, s = time.Millisecond, time.Second
	for _, tc := range []struct {
		name   string
		count  int
		lo, hi time.Duration
		want   string
	}{
		{"minimum above maximum", 3, time.Minute, s, "AzureFunctionsExponentialBackoff.MinimumInterval 1m0s is greater than MaximumInterval 1s"},
		{"negative minimum", 3, -s, s, "AzureFunctionsExponentialBackoff.MinimumInterval is -1s"},
		{"not whole ticks", 3, 50 * time.Nanosecond, s, "100ns"},
		{"maxRetryCount -2", -2, s, time.Minute, "AzureFunctionsExponentialBackoff.MaxRetryCount"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := checkpoint.AzureFunctionsExponentialBackoff{MaxRetryCount: tc.count, MinimumInterval: tc.lo, MaximumInterval: tc.hi}.Policy()
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("got %v; want an error with %q", err, tc.want)
			}
		})
	}
	for _, w := range []checkpoint.WebJobsRandomizedExponentialBackoff{
		{MinimumInterval: s, MaximumInterval: time.Minute, DeltaBackoff: -s},
		{MinimumInterval: s, MaximumInterval: time.Minute, DeltaBackoff: 150 * time.Nanosecond},
	} {
		if _, err := w.Policy(); err == nil || !strings.Contains(err.Error(), "WebJobsRandomizedExponentialBackoff.DeltaBackoff") {
			t.Errorf("DeltaBackoff %v: got %v; want an error naming WebJobsRandomizedExponentialBackoff.DeltaBackoff", w.DeltaBackoff, err)
		}
	}
}

// A Rand that breaks its contract cannot push a preset out of the SDK's range.
func TestPresetsOutOfRangeRand(t *testing.T) {
	const ms, s = time.Millisecond, time.Second
	jitter := mustPolicy(t)(checkpoint.NewAzureIoTC(checkpoint.AzureIoTCRetryExponentialBackoffWithJitter, 0).Policy())
	java := mustPolicy(t)(checkpoint.NewAzureIoTJava().Policy())
	backoffAlgorithm := mustPolicy(t)(checkpoint.BackoffAlgorithm{BackOffBase: 500 * ms, MaxBackOff: 5000 * ms, MaxAttempts: 5}.Policy())
	for _, u := range []float64{-1, 1, 2, math.NaN(), math.Inf(1)} {
		rnd := &presetRand{vals: []float64{u}}
		if d := jitter.Backoff(8, 0, rnd); d < 30*s || d > 31*s {
			t.Errorf("C, U=%v: %v", u, d)
		}
		if d := java.Backoff(2, 0, rnd); d < 180*ms || d > 219*ms {
			t.Errorf("Java, U=%v: %v", u, d)
		}
		if d := backoffAlgorithm.Backoff(1, 0, rnd); d > 500*ms {
			t.Errorf("backoffAlgorithm, U=%v: %v", u, d)
		}
	}
}
