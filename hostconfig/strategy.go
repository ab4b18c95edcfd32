package hostconfig

import (
	"errors"
	"fmt"
	"math"
	"strings"
	"time"

	"github.com/redeliver-go/redeliver/checkpoint"
)

// A param is one parameter of a strategy, stored in a field of Strategy:
// a duration, a number or a flag.
type param struct {
	name     string
	dur      func(*Strategy) *time.Duration // a duration parameter, or
	num      func(*Strategy) *float64       // a number parameter, or
	flag     func(*Strategy) *bool          // a flag parameter
	required bool
	defDur   time.Duration // default of an optional duration
	defNum   float64       // default of an optional number
	defFlag  bool          // default of an optional flag
	lo, hi   float64       // range of a number
}

// withDefault returns p, optional, with the default duration d.
func (p param) withDefault(d time.Duration) param {
	p.required, p.defDur = false, d
	return p
}

// A strategyDef describes one strategy host.json can name.
type strategyDef struct {
	name   string
	params []param
	// random says whether delays depend on the random source.
	random bool
	// build returns the delay function of a strategy whose parameters are
	// in range, or an error about how they relate.
	build func(Strategy) (checkpoint.Backoff, error)
	// describe says in words how the strategy waits before retry n.
	describe func(Strategy) string
	// upper, when set, returns the longest delay before each retry, for a
	// strategy whose longest delay does not come from the upper end of the
	// random draw. Nil means the built delays with every draw near 1.
	upper func(Strategy) checkpoint.Backoff
}

// always adapts a constructor that cannot fail to a build function.
func always(f func(Strategy) checkpoint.Backoff) func(Strategy) (checkpoint.Backoff, error) {
	return func(s Strategy) (checkpoint.Backoff, error) { return f(s), nil }
}

// fromPolicy adapts a preset that returns a checkpoint.Policy: only its
// Backoff is used, since retryCount and the limits come from host.json.
func fromPolicy(f func(Strategy) (checkpoint.Policy, error)) func(Strategy) (checkpoint.Backoff, error) {
	return func(s Strategy) (checkpoint.Backoff, error) {
		p, err := f(s)
		if err != nil {
			return nil, presetError(err)
		}
		return p.Backoff, nil
	}
}

// javaDefaults are the Azure IoT Java SDK's defaults, those of the
// azureIotJava strategy.
var javaDefaults = checkpoint.NewAzureIoTJava()

// presetError rewords an error of a checkpoint preset for host.json.
func presetError(err error) error {
	return errors.New(strings.ReplaceAll(err.Error(), "checkpoint: ", ""))
}

var (
	pDelay         = param{name: "delay", dur: func(s *Strategy) *time.Duration { return &s.Delay }, required: true}
	pDelayInterval = param{name: "delayInterval", dur: func(s *Strategy) *time.Duration { return &s.Delay }, required: true}
	pInitial       = param{name: "initialDelay", dur: func(s *Strategy) *time.Duration { return &s.InitialDelay }, required: true}
	pMin           = param{name: "minDelay", dur: func(s *Strategy) *time.Duration { return &s.MinDelay }, required: true}
	pMax           = param{name: "maxDelay", dur: func(s *Strategy) *time.Duration { return &s.MaxDelay }, required: true}
	pCeiling       = pMax.withDefault(0)
	pJitterPercent = param{name: "jitterPercent", num: func(s *Strategy) *float64 { return &s.JitterPercent }, defNum: checkpoint.DefaultJitterPercent, hi: 100}
	pMinimum       = param{name: "minimumInterval", dur: func(s *Strategy) *time.Duration { return &s.MinDelay }, required: true}
	pMaximum       = param{name: "maximumInterval", dur: func(s *Strategy) *time.Duration { return &s.MaxDelay }, required: true}
	pJitterDown    = param{name: "jitterDown", num: func(s *Strategy) *float64 { return &s.JitterDown }, defNum: 0.5, hi: 1}
	pJitterUp      = param{name: "jitterUp", num: func(s *Strategy) *float64 { return &s.JitterUp }, defNum: 0.25, hi: 1}
	pFastFirst     = param{name: "firstFastRetry", flag: func(s *Strategy) *bool { return &s.FirstFastRetry }, defFlag: true}
)

// strategies lists every strategy host.json can name, in the order the
// README documents them.
var strategies = append([]*strategyDef{
	{
		name:     "fixed",
		params:   []param{pDelay},
		build:    always(func(s Strategy) checkpoint.Backoff { return checkpoint.Fixed(s.Delay) }),
		describe: func(s Strategy) string { return fmt.Sprintf("waits %v before each retry", s.Delay) },
	},
	{
		name:     "immediate",
		build:    always(func(Strategy) checkpoint.Backoff { return checkpoint.Immediate() }),
		describe: func(Strategy) string { return "retries at once, without waiting" },
	},
	{
		name:     "linear",
		params:   []param{pInitial},
		build:    always(func(s Strategy) checkpoint.Backoff { return checkpoint.Linear(s.InitialDelay) }),
		describe: func(s Strategy) string { return fmt.Sprintf("waits %v * n before retry n", s.InitialDelay) },
	},
	{
		name:     "exponential",
		params:   []param{pInitial},
		build:    always(func(s Strategy) checkpoint.Backoff { return checkpoint.Exponential(s.InitialDelay) }),
		describe: func(s Strategy) string { return fmt.Sprintf("waits %v * 2^(n-1) before retry n", s.InitialDelay) },
	},
	{
		name:   "exponentialJitter",
		params: []param{pInitial, pJitterPercent},
		random: true,
		build: always(func(s Strategy) checkpoint.Backoff {
			return checkpoint.ExponentialJitter(s.InitialDelay, s.JitterPercent)
		}),
		describe: func(s Strategy) string {
			return fmt.Sprintf("waits %v * 2^(n-1) before retry n, lengthened at random by up to %v%%", s.InitialDelay, s.JitterPercent)
		},
	},
	{
		name:   "random",
		params: []param{pInitial},
		random: true,
		build:  always(func(s Strategy) checkpoint.Backoff { return checkpoint.Random(s.InitialDelay) }),
		describe: func(s Strategy) string {
			return fmt.Sprintf("waits a random time below %v before each retry", s.InitialDelay)
		},
	},
	{
		name:   "fullJitter",
		params: []param{pInitial, pCeiling},
		random: true,
		build: always(func(s Strategy) checkpoint.Backoff {
			return checkpoint.FullJitter(checkpoint.Capped(s.MaxDelay, checkpoint.Exponential(s.InitialDelay)))
		}),
		describe: func(s Strategy) string {
			if s.MaxDelay > 0 {
				return fmt.Sprintf("waits a random time below min(%v * 2^(n-1), %v) before retry n", s.InitialDelay, s.MaxDelay)
			}
			return fmt.Sprintf("waits a random time below %v * 2^(n-1) before retry n", s.InitialDelay)
		},
	},
	{
		name:   "decorrelatedJitter",
		params: []param{pInitial, pCeiling},
		random: true,
		build: always(func(s Strategy) checkpoint.Backoff {
			return checkpoint.Capped(s.MaxDelay, checkpoint.DecorrelatedJitter(s.InitialDelay))
		}),
		describe: func(s Strategy) string {
			d := fmt.Sprintf("waits a random time between %v and 3 * the previous delay before each retry", s.InitialDelay)
			if s.MaxDelay > 0 {
				d += fmt.Sprintf(", at most %v", s.MaxDelay)
			}
			return d
		},
	},
	{
		// The formula and defaults of the Azure IoT Java SDK's retry guide.
		name: "jitteredExponential",
		params: []param{
			pInitial.withDefault(100 * time.Millisecond), pMin.withDefault(100 * time.Millisecond),
			pMax.withDefault(10 * time.Second), pJitterDown, pJitterUp,
		},
		random: true,
		build: always(func(s Strategy) checkpoint.Backoff {
			return checkpoint.JitteredExponential{
				Delta: s.InitialDelay, Min: s.MinDelay, Max: s.MaxDelay, JitterDown: s.JitterDown, JitterUp: s.JitterUp,
			}.Backoff()
		}),
		describe: func(s Strategy) string {
			return fmt.Sprintf("waits %v + (2^(n-1) - 1) * a random pick in [%v, %v) before retry n, at most %v (the formula of the Azure IoT Java SDK's retry guide)",
				s.MinDelay, scale(s.InitialDelay, 1-s.JitterDown), scale(s.InitialDelay, 1+s.JitterUp), s.MaxDelay)
		},
	},
	{
		name:   "fixedDelay",
		params: []param{pDelayInterval},
		build:  always(func(s Strategy) checkpoint.Backoff { return checkpoint.Fixed(s.Delay) }),
		describe: func(s Strategy) string {
			return fmt.Sprintf("waits %v before each retry (Azure Functions fixedDelay)", s.Delay)
		},
	},
	{
		name:   "exponentialBackoff",
		params: []param{pMinimum, pMaximum},
		random: true,
		build: fromPolicy(func(s Strategy) (checkpoint.Policy, error) {
			return checkpoint.AzureFunctionsExponentialBackoff{
				MaxRetryCount: checkpoint.Infinite, MinimumInterval: s.MinDelay, MaximumInterval: s.MaxDelay,
			}.Policy()
		}),
		describe: func(s Strategy) string {
			return fmt.Sprintf("waits %v before retry 1, then %v + R * 2^(n-2) * %v with R random in [0.8, 1.2), until a delay reaches %v, which later retries keep (Azure Functions exponentialBackoff)",
				s.MinDelay, s.MinDelay, s.MinDelay, s.MaxDelay)
		},
	},
	{
		name:   "azureIotJava",
		params: []param{pInitial.withDefault(javaDefaults.DeltaBackoff), pMin.withDefault(javaDefaults.MinBackoff), pMax.withDefault(javaDefaults.MaxBackoff), pFastFirst},
		random: true,
		build: fromPolicy(func(s Strategy) (checkpoint.Policy, error) {
			j := javaDefaults
			j.MinBackoff, j.MaxBackoff, j.DeltaBackoff, j.FirstFastRetry = s.MinDelay, s.MaxDelay, s.InitialDelay, s.FirstFastRetry
			return j.Policy()
		}),
		describe: func(s Strategy) string {
			first := ""
			if s.FirstFastRetry {
				first = "retries at once the first time, then "
			}
			return fmt.Sprintf("%swaits min(%v + (2^(n-1) - 1) * J, %v) before retry n, J a whole number of ms from %v to %v (the Azure IoT Java SDK's ExponentialBackoffWithJitter; the SDK also stops after its %v operation timeout, which maxRetryTime can reproduce)",
				first, s.MinDelay, s.MaxDelay, scale(s.InitialDelay, 0.8).Truncate(time.Millisecond), scale(s.InitialDelay, 1.2).Truncate(time.Millisecond)-time.Millisecond, javaDefaults.OperationTimeout)
		},
	},
	{
		name:   "backoffAlgorithm",
		params: []param{pInitial, pMax},
		random: true,
		build: func(s Strategy) (checkpoint.Backoff, error) {
			const limit = math.MaxUint16 * time.Millisecond
			for _, d := range []struct {
				name string
				v    time.Duration
			}{{"initialDelay", s.InitialDelay}, {"maxDelay", s.MaxDelay}} {
				if d.v%time.Millisecond != 0 || d.v > limit {
					return nil, fmt.Errorf("%s is %v: want whole milliseconds up to %v (a uint16 of ms)", d.name, d.v, limit)
				}
			}
			p, err := checkpoint.BackoffAlgorithm{
				BackOffBase: s.InitialDelay, MaxBackOff: s.MaxDelay, MaxAttempts: checkpoint.BackoffAlgorithmRetryForever,
			}.Policy()
			if err != nil {
				return nil, presetError(err)
			}
			return p.Backoff, nil
		},
		describe: func(s Strategy) string {
			return fmt.Sprintf("waits a random whole number of ms from 0 to a window that starts at %v and doubles after each retry up to %v (AWS backoffAlgorithm, full jitter)", s.InitialDelay, s.MaxDelay)
		},
		// The library takes its random number modulo the window: the
		// longest delay is the window itself, as checkpoint.BackoffAlgorithm
		// grows it.
		upper: func(s Strategy) checkpoint.Backoff {
			return func(n int, _ time.Duration, _ checkpoint.Rand) time.Duration {
				window, ceiling := s.InitialDelay/time.Millisecond, s.MaxDelay/time.Millisecond
				for i := 1; i < n; i++ {
					next := ceiling
					if window < ceiling/2 {
						next = 2 * window
					}
					if next == window {
						break
					}
					window = next
				}
				window *= time.Millisecond
				return window
			}
		},
	},
}, azureIoTCStrategies()...)

// azureIoTCStrategies returns one strategy per policy of the Azure IoT C
// SDK, with the SDK's defaults.
func azureIoTCStrategies() []*strategyDef {
	var defs []*strategyDef
	for _, v := range []struct {
		name   string
		retry  checkpoint.AzureIoTCRetry
		params []param
		random bool
	}{
		{"azureIotCImmediate", checkpoint.AzureIoTCRetryImmediate, nil, false},
		{"azureIotCInterval", checkpoint.AzureIoTCRetryInterval, []param{pInitial}, false},
		{"azureIotCLinearBackoff", checkpoint.AzureIoTCRetryLinearBackoff, []param{pInitial, pMax}, false},
		{"azureIotCExponentialBackoff", checkpoint.AzureIoTCRetryExponentialBackoff, []param{pInitial, pMax}, false},
		{"azureIotCExponentialBackoffWithJitter", checkpoint.AzureIoTCRetryExponentialBackoffWithJitter, []param{pInitial, pMax, pJitterPercent}, true},
		{"azureIotCRandom", checkpoint.AzureIoTCRetryRandom, []param{pInitial}, true},
	} {
		retry := v.retry
		// The parameters default to retry_control_create's values.
		def := checkpoint.NewAzureIoTC(retry, 0)
		for i, p := range v.params {
			switch p.name {
			case pInitial.name:
				v.params[i] = p.withDefault(def.InitialWait)
			case pMax.name:
				v.params[i] = p.withDefault(def.MaxDelay)
			}
		}
		defs = append(defs, &strategyDef{
			name:   v.name,
			params: v.params,
			random: v.random,
			build: fromPolicy(func(s Strategy) (checkpoint.Policy, error) {
				c := checkpoint.NewAzureIoTC(retry, 0)
				for _, p := range v.params {
					switch p.name {
					case "initialDelay":
						c.InitialWait = s.InitialDelay
					case "maxDelay":
						c.MaxDelay = s.MaxDelay
					case "jitterPercent":
						if s.JitterPercent != math.Trunc(s.JitterPercent) {
							return checkpoint.Policy{}, fmt.Errorf("jitterPercent is %v: want a whole number (max_jitter_percent is an unsigned int)", s.JitterPercent)
						}
						c.MaxJitterPercent = int(s.JitterPercent)
					}
				}
				return c.Policy()
			}),
			describe: func(s Strategy) string {
				return fmt.Sprintf("retries at once the first time, then waits as the Azure IoT C SDK's %v policy does (initial wait %v%s)", retry, s.InitialDelay, cExtras(v.params, s))
			},
		})
	}
	return defs
}

// cExtras describes the optional settings of an Azure IoT C strategy.
func cExtras(params []param, s Strategy) string {
	var b strings.Builder
	for _, p := range params {
		switch p.name {
		case "maxDelay":
			fmt.Fprintf(&b, ", max delay %v", s.MaxDelay)
		case "jitterPercent":
			fmt.Fprintf(&b, ", jitter up to %v%%", s.JitterPercent)
		}
	}
	return b.String()
}

// scale returns d*f, for descriptions.
func scale(d time.Duration, f float64) time.Duration { return time.Duration(float64(d) * f) }

// lookupStrategy finds a strategy by name, case-insensitively; nil when
// there is none.
func lookupStrategy(name string) *strategyDef {
	for _, s := range strategies {
		if strings.EqualFold(s.name, name) {
			return s
		}
	}
	return nil
}

// strategyNames lists the names of every strategy.
func strategyNames() []string {
	names := make([]string, len(strategies))
	for i, s := range strategies {
		names[i] = s.name
	}
	return names
}

// param finds a parameter of s by name, case-insensitively.
func (def *strategyDef) param(name string) (param, bool) {
	for _, p := range def.params {
		if strings.EqualFold(p.name, name) {
			return p, true
		}
	}
	return param{}, false
}

// paramNames lists the parameters of def for messages.
func (def *strategyDef) paramNames() string {
	if len(def.params) == 0 {
		return "no parameters"
	}
	names := make([]string, len(def.params))
	for i, p := range def.params {
		names[i] = p.name
	}
	return strings.Join(names, ", ")
}

// backoff checks the parameters of s and builds its delay function.
func (def *strategyDef) backoff(s Strategy) (checkpoint.Backoff, error) {
	for _, p := range def.params {
		switch {
		case p.dur != nil:
			if d := *p.dur(&s); d < 0 {
				return nil, fmt.Errorf("%s is %v: want a duration of 0 or more", p.name, d)
			}
		case p.num != nil:
			if v := *p.num(&s); !(v >= p.lo && v <= p.hi) {
				return nil, fmt.Errorf("%s is %v: want %v to %v", p.name, v, p.lo, p.hi)
			}
		}
	}
	// The strategy's own cap (Azure Functions' exponentialBackoff names
	// it maximumInterval, where 0 is no exception) must not be below its
	// first delay (or first window), or that setting could never take
	// effect.
	capName := pMax.name
	if _, ok := def.param(pMaximum.name); ok {
		capName = pMaximum.name
	}
	if c, capped := def.param(capName); capped && (s.MaxDelay > 0 || capName == pMaximum.name) {
		for _, name := range []string{pMinimum.name, pMin.name, pInitial.name} {
			if v, ok := def.param(name); ok {
				if *v.dur(&s) > s.MaxDelay {
					return nil, fmt.Errorf("%s %v is below %s %v", c.name, s.MaxDelay, v.name, *v.dur(&s))
				}
				break
			}
		}
	}
	b, err := def.build(s)
	if err != nil {
		// In the file's words: the presets name their Go fields.
		err = errors.New(presetNames.Replace(err.Error()))
	}
	return b, err
}

// presetNames turns the checkpoint presets' field names in their errors
// into the host.json parameters that set them.
var presetNames = strings.NewReplacer(
	"AzureIoTJava.DeltaBackoff", "initialDelay",
	"AzureIoTJava.MinBackoff", "minDelay",
	"AzureIoTJava.MaxBackoff", "maxDelay",
	"AzureFunctionsExponentialBackoff.MinimumInterval", "minimumInterval",
	"AzureFunctionsExponentialBackoff.MaximumInterval", "maximumInterval",
	"AzureIoTC.InitialWait", "initialDelay",
	"AzureIoTC.MaxDelay", "maxDelay",
	"AzureIoTC.MaxJitterPercent", "jitterPercent",
	"BackoffAlgorithm.BackOffBase", "initialDelay",
	"BackoffAlgorithm.MaxBackOff", "maxDelay",
)
