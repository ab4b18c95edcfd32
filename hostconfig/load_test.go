package hostconfig_test

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"testing/iotest"
	"time"

	"github.com/redeliver-go/redeliver/hostconfig"
)

// noEnv is a Loader that ignores the process environment.
var noEnv = hostconfig.Loader{Environ: func() []string { return nil }}

// withEnv returns a Loader whose environment is kv.
func withEnv(kv ...string) hostconfig.Loader {
	return hostconfig.Loader{Environ: func() []string { return kv }}
}

func TestLoadRealWorldFile(t *testing.T) {
	cfg, err := noEnv.Load(filepath.Join("testdata", "host.json"))
	if err != nil {
		t.Fatal(err)
	}
	want := &hostconfig.RetryPolicy{
		Origin:       "checkpointRetryPolicy (host.json:45:28)",
		RetryCount:   10,
		Strategy:     hostconfig.Strategy{Name: "fixed", Delay: 5 * time.Second},
		MaxRetryTime: 30 * time.Minute,
		OnExhausted:  hostconfig.Exhaustion{Action: hostconfig.ActionDeadLetter, Topic: "orders-dlq"},
	}
	if !reflect.DeepEqual(cfg.Host, want) {
		t.Errorf("Host = %+v\nwant %+v", cfg.Host, want)
	}
	if cfg.Version != "2.0" {
		t.Errorf("Version = %q, want 2.0", cfg.Version)
	}
	payments := hostconfig.RetryPolicy{
		Origin:       "checkpointRetryPolicy.functions.Payments (host.json:51:19)",
		RetryCount:   -1,
		Strategy:     hostconfig.Strategy{Name: "exponential", InitialDelay: time.Second},
		MaxDelay:     5 * time.Minute,
		MaxRetryTime: 30 * time.Minute, // inherited
		OnExhausted:  hostconfig.Exhaustion{Action: hostconfig.ActionStop},
	}
	if got := cfg.Functions["Payments"]; !reflect.DeepEqual(got, payments) {
		t.Errorf("Functions[Payments] = %+v\nwant %+v", got, payments)
	}
	audit := hostconfig.RetryPolicy{
		Origin:       "checkpointRetryPolicy.functions.Audit (host.json:57:16)",
		RetryCount:   0,
		Strategy:     hostconfig.Strategy{Name: "fixed", Delay: 5 * time.Second}, // inherited
		MaxRetryTime: 30 * time.Minute,
		OnExhausted:  hostconfig.Exhaustion{Action: hostconfig.ActionDeadLetter, Topic: "orders-dlq"},
	}
	if got := cfg.Functions["Audit"]; !reflect.DeepEqual(got, audit) {
		t.Errorf("Functions[Audit] = %+v\nwant %+v", got, audit)
	}
	if got := cfg.Function("payments"); got == nil || got.RetryCount != -1 {
		t.Errorf("Function(payments) = %+v, want the Payments policy (names ignore case)", got)
	}
	if got := cfg.Function("Orders"); got != cfg.Host {
		t.Errorf("Function(Orders) = %+v, want the host-wide policy", got)
	}
	wantWarn := []string{"host.json:61:12: retry is ignored: checkpointRetryPolicy (host.json:45:28) takes precedence"}
	if !reflect.DeepEqual(cfg.Warnings, wantWarn) {
		t.Errorf("Warnings = %q\nwant %q", cfg.Warnings, wantWarn)
	}
}

func TestLoadSeedFile(t *testing.T) {
	cfg, err := noEnv.Load(filepath.Join("testdata", "seed.json"))
	if err != nil {
		t.Fatal(err)
	}
	p, err := cfg.Policy()
	if err != nil {
		t.Fatal(err)
	}
	if p.MaxRetries != 10 {
		t.Errorf("MaxRetries = %d, want 10", p.MaxRetries)
	}
	if got := p.Schedule(3, nil); !reflect.DeepEqual(got, []time.Duration{5 * time.Second, 5 * time.Second, 5 * time.Second}) {
		t.Errorf("Schedule = %v, want 5s 5s 5s", got)
	}
}

func TestLoadMissingFile(t *testing.T) {
	_, err := noEnv.Load(filepath.Join("testdata", "nope.json"))
	if !errors.Is(err, os.ErrNotExist) || !strings.HasPrefix(err.Error(), "hostconfig: ") {
		t.Errorf("err = %v, want a hostconfig error wrapping os.ErrNotExist", err)
	}
}

func TestReadErrors(t *testing.T) {
	boom := errors.New("boom")
	_, err := noEnv.Read("host.json", iotest.ErrReader(boom))
	if !errors.Is(err, boom) || !strings.Contains(err.Error(), "host.json") {
		t.Errorf("err = %v, want one naming host.json and wrapping the read error", err)
	}
	cfg, err := noEnv.Read("host.json", iotest.OneByteReader(strings.NewReader(`{"checkpointRetryPolicy": {"retryCount": 1, "sleepDuration": "1s"}}`)))
	if err != nil || cfg.Host.RetryCount != 1 {
		t.Errorf("Read = %+v, %v", cfg, err)
	}
}

// TestValid decodes valid documents; want is the host-wide policy without
// its Origin.
func TestValid(t *testing.T) {
	for _, tc := range []struct {
		name string
		doc  string
		want *hostconfig.RetryPolicy
	}{
		{"empty object", `{}`, nil},
		{"other sections only", `{"version": "2.0", "logging": {"logLevel": {"default": "Trace"}}, "functionTimeout": "00:05:00"}`, nil},
		{"seed", `{"checkpointRetryPolicy": {"retryCount": 10, "sleepDuration": "00:00:05"}}`,
			&hostconfig.RetryPolicy{RetryCount: 10, Strategy: hostconfig.Strategy{Name: "fixed", Delay: 5 * time.Second}}},
		{"infinite", `{"checkpointRetryPolicy": {"retryCount": -1, "sleepDuration": "1m30s"}}`,
			&hostconfig.RetryPolicy{RetryCount: -1, Strategy: hostconfig.Strategy{Name: "fixed", Delay: 90 * time.Second}}},
		{"no retries needs no delay", `{"checkpointRetryPolicy": {"retryCount": 0}}`,
			&hostconfig.RetryPolicy{}},
		{"keys ignore case", `{"CheckpointRetryPolicy": {"RETRYCOUNT": 2, "SleepDuration": "2s"}}`,
			&hostconfig.RetryPolicy{RetryCount: 2, Strategy: hostconfig.Strategy{Name: "fixed", Delay: 2 * time.Second}}},
		{"comments and trailing commas", "{\n// c\n\"checkpointRetryPolicy\": {/* a */ \"retryCount\": 1, \"sleepDuration\": \"1s\",},\n}",
			&hostconfig.RetryPolicy{RetryCount: 1, Strategy: hostconfig.Strategy{Name: "fixed", Delay: time.Second}}},
		{"byte order mark", "\uFEFF{\"checkpointRetryPolicy\": {\"retryCount\": 1, \"sleepDuration\": \"1s\"}}",
			&hostconfig.RetryPolicy{RetryCount: 1, Strategy: hostconfig.Strategy{Name: "fixed", Delay: time.Second}}},
		{"strategy by name", `{"checkpointRetryPolicy": {"retryCount": 3, "strategy": "immediate"}}`,
			&hostconfig.RetryPolicy{RetryCount: 3, Strategy: hostconfig.Strategy{Name: "immediate"}}},
		{"strategy name ignores case", `{"checkpointRetryPolicy": {"retryCount": 3, "strategy": {"NAME": "LINEAR", "InitialDelay": "1s"}}}`,
			&hostconfig.RetryPolicy{RetryCount: 3, Strategy: hostconfig.Strategy{Name: "linear", InitialDelay: time.Second}}},
		{"exponentialJitter default percent", `{"checkpointRetryPolicy": {"retryCount": 3, "strategy": {"name": "exponentialJitter", "initialDelay": "1s"}}}`,
			&hostconfig.RetryPolicy{RetryCount: 3, Strategy: hostconfig.Strategy{Name: "exponentialJitter", InitialDelay: time.Second, JitterPercent: 5}}},
		{"fullJitter with ceiling and limits", `{"checkpointRetryPolicy": {"retryCount": 3, "strategy": {"name": "fullJitter", "initialDelay": "100ms", "maxDelay": "00:00:30"},
			"maxDelay": "00:00:20", "maxRetryTime": "00:10:00", "maxRecordAge": "1.00:00:00", "onExhausted": "skip"}}`,
			&hostconfig.RetryPolicy{RetryCount: 3, Strategy: hostconfig.Strategy{Name: "fullJitter", InitialDelay: 100 * time.Millisecond, MaxDelay: 30 * time.Second},
				MaxDelay: 20 * time.Second, MaxRetryTime: 10 * time.Minute, MaxRecordAge: 24 * time.Hour}},
		{"jitteredExponential defaults", `{"checkpointRetryPolicy": {"retryCount": 3, "strategy": "jitteredExponential"}}`,
			&hostconfig.RetryPolicy{RetryCount: 3, Strategy: hostconfig.Strategy{Name: "jitteredExponential", InitialDelay: 100 * time.Millisecond,
				MinDelay: 100 * time.Millisecond, MaxDelay: 10 * time.Second, JitterDown: 0.5, JitterUp: 0.25}}},
		{"azureIotJava defaults", `{"checkpointRetryPolicy": {"retryCount": 3, "strategy": "azureIotJava"}}`,
			&hostconfig.RetryPolicy{RetryCount: 3, Strategy: hostconfig.Strategy{Name: "azureIotJava", InitialDelay: 100 * time.Millisecond,
				MinDelay: 100 * time.Millisecond, MaxDelay: 10 * time.Second, FirstFastRetry: true}}},
		{"azureIotJava slow first retry", `{"checkpointRetryPolicy": {"retryCount": 3, "strategy": {"name": "azureIotJava", "firstFastRetry": false}}}`,
			&hostconfig.RetryPolicy{RetryCount: 3, Strategy: hostconfig.Strategy{Name: "azureIotJava", InitialDelay: 100 * time.Millisecond,
				MinDelay: 100 * time.Millisecond, MaxDelay: 10 * time.Second}}},
		{"azureIotC exponential with jitter", `{"checkpointRetryPolicy": {"retryCount": 3, "strategy": "azureIotCExponentialBackoffWithJitter"}}`,
			&hostconfig.RetryPolicy{RetryCount: 3, Strategy: hostconfig.Strategy{Name: "azureIotCExponentialBackoffWithJitter", InitialDelay: time.Second,
				MaxDelay: 30 * time.Second, JitterPercent: 5}}},
		{"backoffAlgorithm", `{"checkpointRetryPolicy": {"retryCount": 5, "strategy": {"name": "backoffAlgorithm", "initialDelay": "500ms", "maxDelay": "5s"}}}`,
			&hostconfig.RetryPolicy{RetryCount: 5, Strategy: hostconfig.Strategy{Name: "backoffAlgorithm", InitialDelay: 500 * time.Millisecond, MaxDelay: 5 * time.Second}}},
		{"dead letter", `{"checkpointRetryPolicy": {"retryCount": 1, "sleepDuration": "1s", "onExhausted": {"action": "deadLetter", "topic": "dlq"}}}`,
			&hostconfig.RetryPolicy{RetryCount: 1, Strategy: hostconfig.Strategy{Name: "fixed", Delay: time.Second},
				OnExhausted: hostconfig.Exhaustion{Action: hostconfig.ActionDeadLetter, Topic: "dlq"}}},
		{"stop", `{"checkpointRetryPolicy": {"retryCount": 1, "sleepDuration": "1s", "onExhausted": {"action": "stop"}}}`,
			&hostconfig.RetryPolicy{RetryCount: 1, Strategy: hostconfig.Strategy{Name: "fixed", Delay: time.Second},
				OnExhausted: hostconfig.Exhaustion{Action: hostconfig.ActionStop}}},
		{"azure fixedDelay", `{"retry": {"strategy": "fixedDelay", "maxRetryCount": 2, "delayInterval": "00:00:03"}}`,
			&hostconfig.RetryPolicy{RetryCount: 2, Strategy: hostconfig.Strategy{Name: "fixedDelay", Delay: 3 * time.Second}}},
		{"azure exponentialBackoff", `{"retry": {"strategy": "exponentialBackoff", "maxRetryCount": -1, "minimumInterval": "00:00:10", "maximumInterval": "00:15:00"}}`,
			&hostconfig.RetryPolicy{RetryCount: -1, Strategy: hostconfig.Strategy{Name: "exponentialBackoff", MinDelay: 10 * time.Second, MaxDelay: 15 * time.Minute}}},
		// The Functions host binds the retry section through .NET's
		// configuration binder, which reads numbers written as strings.
		{"azure maxRetryCount as a string", `{"retry": {"strategy": "fixedDelay", "maxRetryCount": "3", "delayInterval": "00:00:03"}}`,
			&hostconfig.RetryPolicy{RetryCount: 3, Strategy: hostconfig.Strategy{Name: "fixedDelay", Delay: 3 * time.Second}}},
		{"azure maxRetryCount as a string, -1", `{"retry": {"strategy": "fixedDelay", "maxRetryCount": " -1 ", "delayInterval": "00:00:03"}}`,
			&hostconfig.RetryPolicy{RetryCount: -1, Strategy: hostconfig.Strategy{Name: "fixedDelay", Delay: 3 * time.Second}}},
		{"functions only: the retry section is host-wide", `{"checkpointRetryPolicy": {"functions": {"a": {"retryCount": 0}}},
			"retry": {"strategy": "fixedDelay", "maxRetryCount": 2, "delayInterval": "00:00:03"}}`,
			&hostconfig.RetryPolicy{RetryCount: 2, Strategy: hostconfig.Strategy{Name: "fixedDelay", Delay: 3 * time.Second}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg, err := noEnv.Parse("host.json", []byte(tc.doc))
			if err != nil {
				t.Fatal(err)
			}
			got := cfg.Host
			if got != nil {
				if !strings.Contains(got.Origin, "(host.json:") {
					t.Errorf("Origin = %q, want a file position", got.Origin)
				}
				c := *got
				c.Origin = ""
				got = &c
			}
			if !reflect.DeepEqual(got, tc.want) {
				t.Errorf("Host = %+v\nwant %+v", got, tc.want)
			}
			if _, err := cfg.Policy(); err != nil {
				t.Errorf("Policy: %v", err)
			}
			for name := range cfg.Functions {
				if _, err := cfg.Policy(hostconfig.Function(name)); err != nil {
					t.Errorf("Policy(Function(%s)): %v", name, err)
				}
			}
		})
	}
}

// TestInvalid checks that each document fails with exactly the problems
// listed, each given as the start of its text after "hostconfig: ".
func TestInvalid(t *testing.T) {
	for _, tc := range []struct {
		name string
		doc  string
		want []string
	}{
		{"empty", ``, []string{`host.json:1:1: syntax error: parsing value: unexpected EOF`}},
		{"syntax", "{\n  \"retry\": {,}\n}", []string{`host.json:2:13: syntax error: invalid character ','`}},
		{"unterminated comment", "{ /* ", []string{`host.json:1:3: syntax error: parsing comment: unexpected EOF`}},
		// An editor shows U+2028 as a line break: inside a // comment it
		// would hide the setting after it. TestLineSeparators has more.
		{"line separator in a line comment", "{\"version\": \"2.0\", // note\u2028\"checkpointRetryPolicy\": {\"retryCount\": 99}\n}", []string{
			`host.json:1:27: syntax error: invalid character '\u2028' in line comment`}},
		{"not an object", `[1]`, []string{`host.json:1:1: the document is an array: want a JSON object`}},
		{"version", `{"version": "1.0"}`, []string{`host.json:1:13: version: want "2.0", got "1.0"`}},
		{"version number", `{"version": 2.0}`, []string{`host.json:1:13: version: want the string "2.0", got the number 2.0`}},
		{"section not an object", `{"checkpointRetryPolicy": 10}`, []string{`host.json:1:27: checkpointRetryPolicy: want an object, got the number 10`}},
		{"duplicate section", `{"retry": {}, "Retry": {}}`, []string{
			`host.json:1:11: retry: maxRetryCount is missing`,
			`host.json:1:11: retry: strategy is missing`,
			`host.json:1:15: Retry: duplicate section: also at host.json:1:11`}},
		{"unknown field with suggestion", "{\"checkpointRetryPolicy\": {\n  \"retryCount\": 1,\n  \"sleepDuraton\": \"00:00:05\"}}", []string{
			`host.json:1:27: checkpointRetryPolicy: the delay is missing`,
			`host.json:3:3: checkpointRetryPolicy: unknown field "sleepDuraton": did you mean sleepDuration?`}},
		{"unknown field without suggestion", `{"checkpointRetryPolicy": {"retryCount": 0, "colour": 1}}`, []string{
			`host.json:1:45: checkpointRetryPolicy: unknown field "colour": want one of retryCount, sleepDuration, strategy, maxRetryTime, maxDelay, maxRecordAge, honorRetryAfter, onExhausted, functions`}},
		{"strategy parameter at the policy level", `{"checkpointRetryPolicy": {"retryCount": 0, "initialDelay": "1s"}}`, []string{
			`host.json:1:45: checkpointRetryPolicy: unknown field "initialDelay": initialDelay is a parameter of a strategy, e.g. "strategy": {"name": "linear", "initialDelay": ...}`}},
		{"duplicate field", `{"checkpointRetryPolicy": {"retryCount": 1, "retrycount": 2, "sleepDuration": "1s"}}`, []string{
			`host.json:1:45: checkpointRetryPolicy.retrycount: duplicate field: also at host.json:1:42`}},
		{"retryCount below -1", `{"checkpointRetryPolicy": {"retryCount": -2}}`, []string{
			`host.json:1:42: checkpointRetryPolicy.retryCount: -2 is below -1: want -1 (retry forever), 0 (never) or a number of retries`}},
		{"retryCount not an integer", `{"checkpointRetryPolicy": {"retryCount": 1.5}}`, []string{
			`host.json:1:42: checkpointRetryPolicy.retryCount: want an integer, got the number 1.5`}},
		{"retryCount a string", `{"checkpointRetryPolicy": {"retryCount": "3"}}`, []string{
			`host.json:1:42: checkpointRetryPolicy.retryCount: want an integer, got the string "3"`}},
		{"azure maxRetryCount a string that is not a number", `{"retry": {"strategy": "fixedDelay", "maxRetryCount": "three", "delayInterval": "1s"}}`, []string{
			`host.json:1:55: retry.maxRetryCount: want an integer, got the string "three"`}},
		{"azure maxRetryCount a string below -1", `{"retry": {"strategy": "fixedDelay", "maxRetryCount": "-2", "delayInterval": "1s"}}`, []string{
			`host.json:1:55: retry.maxRetryCount: -2 is below -1`}},
		{"retryCount overflow", `{"checkpointRetryPolicy": {"retryCount": 99999999999999999999}}`, []string{
			`host.json:1:42: checkpointRetryPolicy.retryCount: 99999999999999999999 is out of range`}},
		{"retryCount missing", `{"checkpointRetryPolicy": {"sleepDuration": "1s"}}`, []string{
			`host.json:1:27: checkpointRetryPolicy: retryCount is missing: want -1 (retry forever), 0 (never) or a number of retries`}},
		{"delay missing", `{"checkpointRetryPolicy": {"retryCount": 3}}`, []string{
			`host.json:1:27: checkpointRetryPolicy: the delay is missing: set sleepDuration (e.g. "00:00:05") or strategy`}},
		{"sleepDuration and strategy", `{"checkpointRetryPolicy": {"retryCount": 3, "sleepDuration": "1s", "strategy": "immediate"}}`, []string{
			`host.json:1:68: checkpointRetryPolicy.strategy: sleepDuration (host.json:1:62) and strategy (host.json:1:80) exclude each other`}},
		{"sleepDuration a number", `{"checkpointRetryPolicy": {"retryCount": 3, "sleepDuration": 5}}`, []string{
			`host.json:1:62: checkpointRetryPolicy.sleepDuration: want a string such as "00:00:05" or "5s", got the number 5 (a bare number is ambiguous)`}},
		{"sleepDuration hours 24", `{"checkpointRetryPolicy": {"retryCount": 3, "sleepDuration": "24:00:00"}}`, []string{
			`host.json:1:62: checkpointRetryPolicy.sleepDuration: "24:00:00": hours: 24 is out of range: want 0 to 23`}},
		{"sleepDuration minutes 60", `{"checkpointRetryPolicy": {"retryCount": 3, "sleepDuration": "00:60"}}`, []string{
			`host.json:1:62: checkpointRetryPolicy.sleepDuration: "00:60": minutes: 60 is out of range: want 0 to 59`}},
		{"sleepDuration empty", `{"checkpointRetryPolicy": {"retryCount": 3, "sleepDuration": ""}}`, []string{
			`host.json:1:62: checkpointRetryPolicy.sleepDuration: "": empty interval`}},
		{"sleepDuration garbage", `{"checkpointRetryPolicy": {"retryCount": 3, "sleepDuration": "soon"}}`, []string{
			`host.json:1:62: checkpointRetryPolicy.sleepDuration: "soon": not an interval: want a TimeSpan such as "00:00:05" or a Go duration such as "5s"`}},
		{"sleepDuration negative", `{"checkpointRetryPolicy": {"retryCount": 3, "sleepDuration": "-00:00:01"}}`, []string{
			`host.json:1:62: checkpointRetryPolicy.sleepDuration: "-00:00:01" is negative: want an interval of 0 or more`}},
		{"sleepDuration overflow", `{"checkpointRetryPolicy": {"retryCount": 3, "sleepDuration": "10675199.02:48:05.4775807"}}`, []string{
			`host.json:1:62: checkpointRetryPolicy.sleepDuration: "10675199.02:48:05.4775807": days: 10675199 is out of range: want 0 to 106751`}},
		{"sleepDuration null", `{"checkpointRetryPolicy": {"retryCount": 3, "sleepDuration": null}}`, []string{
			`host.json:1:62: checkpointRetryPolicy.sleepDuration: want a string such as "00:00:05" or "5s", got null`}},
		{"unknown strategy", `{"checkpointRetryPolicy": {"retryCount": 3, "strategy": "exponental"}}`, []string{
			`host.json:1:57: checkpointRetryPolicy.strategy: unknown strategy "exponental": did you mean exponential?`}},
		{"strategy without name", `{"checkpointRetryPolicy": {"retryCount": 3, "strategy": {"initialDelay": "1s"}}}`, []string{
			`host.json:1:57: checkpointRetryPolicy.strategy: name is missing: want one of fixed, immediate, linear`}},
		// Retrying for ever without waiting would redeliver a poison
		// batch as fast as the broker answers: refused, as
		// checkpoint.Policy.Validate refuses it. A time budget bounds it.
		{"for ever at once in retry", `{"retry": {"strategy": "fixedDelay", "maxRetryCount": -1, "delayInterval": "00:00:00"}}`, []string{
			`host.json:1:11: retry: maxRetryCount -1 with no delay between retries (fixedDelay with a zero interval)`}},
		{"for ever at once", `{"checkpointRetryPolicy": {"retryCount": -1, "strategy": "immediate"}}`, []string{
			`host.json:1:27: checkpointRetryPolicy: retryCount -1 with no delay between retries (immediate) and no maxRetryTime or maxRecordAge: a batch that always fails would be delivered again without pause, for ever; set a delay`}},
		{"for ever at once, a function's", `{"checkpointRetryPolicy": {"retryCount": 3, "sleepDuration": "1s", "functions": {"a": {"retryCount": -1, "sleepDuration": "00:00:00"}}}}`, []string{
			`host.json:1:87: checkpointRetryPolicy.functions.a: retryCount -1 with no delay between retries (fixed)`}},
		{"strategy parameter missing", `{"checkpointRetryPolicy": {"retryCount": 3, "strategy": "linear"}}`, []string{
			`host.json:1:57: checkpointRetryPolicy.strategy: strategy linear needs initialDelay`}},
		{"strategy parameter of another strategy", `{"checkpointRetryPolicy": {"retryCount": 3, "strategy": {"name": "fixed", "delay": "1s", "jitterPercent": 5}}}`, []string{
			`host.json:1:90: checkpointRetryPolicy.strategy.jitterPercent: fixed takes delay: jitterPercent is a parameter of exponentialJitter`}},
		{"strategy parameter misspelt", `{"checkpointRetryPolicy": {"retryCount": 3, "strategy": {"name": "linear", "initialDelai": "1s"}}}`, []string{
			`host.json:1:57: checkpointRetryPolicy.strategy: strategy linear needs initialDelay`,
			`host.json:1:76: checkpointRetryPolicy.strategy.initialDelai: linear takes initialDelay: "initialDelai" is unknown: did you mean initialDelay?`}},
		{"jitter out of range", `{"checkpointRetryPolicy": {"retryCount": 3, "strategy": {"name": "exponentialJitter", "initialDelay": "1s", "jitterPercent": 101}}}`, []string{
			`host.json:1:126: checkpointRetryPolicy.strategy.jitterPercent: want a number from 0 to 100, got the number 101`}},
		{"ceiling below base", `{"checkpointRetryPolicy": {"retryCount": 3, "strategy": {"name": "fullJitter", "initialDelay": "10s", "maxDelay": "1s"}}}`, []string{
			`host.json:1:57: checkpointRetryPolicy.strategy: strategy fullJitter: maxDelay 1s is below initialDelay 10s`}},
		// A strategy's own cap below its first delay would make that
		// delay a setting that never takes effect.
		{"minDelay above the default maxDelay", `{"checkpointRetryPolicy": {"retryCount": 3, "strategy": {"name": "jitteredExponential", "minDelay": "20s"}}}`, []string{
			`host.json:1:57: checkpointRetryPolicy.strategy: strategy jitteredExponential: maxDelay 10s is below minDelay 20s`}},
		{"azureIotJava minDelay above maxDelay", `{"checkpointRetryPolicy": {"retryCount": 3, "strategy": {"name": "azureIotJava", "minDelay": "20s", "maxDelay": "10s"}}}`, []string{
			`host.json:1:57: checkpointRetryPolicy.strategy: strategy azureIotJava: maxDelay 10s is below minDelay 20s`}},
		{"azureIotC initialDelay above maxDelay", `{"checkpointRetryPolicy": {"retryCount": 3, "strategy": {"name": "azureIotCLinearBackoff", "initialDelay": "20s", "maxDelay": "10s"}}}`, []string{
			`host.json:1:57: checkpointRetryPolicy.strategy: strategy azureIotCLinearBackoff: maxDelay 10s is below initialDelay 20s`}},
		{"backoffAlgorithm window above maxDelay", `{"checkpointRetryPolicy": {"retryCount": 3, "strategy": {"name": "backoffAlgorithm", "initialDelay": "20s", "maxDelay": "10s"}}}`, []string{
			`host.json:1:57: checkpointRetryPolicy.strategy: strategy backoffAlgorithm: maxDelay 10s is below initialDelay 20s`}},
		{"azureIotC needs whole seconds", `{"checkpointRetryPolicy": {"retryCount": 3, "strategy": {"name": "azureIotCInterval", "initialDelay": "1.5s"}}}`, []string{
			`host.json:1:57: checkpointRetryPolicy.strategy: strategy azureIotCInterval: initialDelay is 1.5s: want whole seconds`}},
		// In the file's words, not the Go fields of the presets.
		{"exponentialBackoff minimum above maximum", `{"retry": {"strategy": "exponentialBackoff", "maxRetryCount": 3, "minimumInterval": "00:00:20", "maximumInterval": "00:00:10"}}`, []string{
			`host.json:1:11: retry: strategy exponentialBackoff: maximumInterval 10s is below minimumInterval 20s`}},
		{"exponentialBackoff in 100ns ticks", `{"retry": {"strategy": "exponentialBackoff", "maxRetryCount": 3, "minimumInterval": "1ns", "maximumInterval": "00:00:10"}}`, []string{
			`host.json:1:11: retry: strategy exponentialBackoff: minimumInterval is 1ns: want a TimeSpan`}},
		{"azureIotJava initialDelay 0", `{"checkpointRetryPolicy": {"retryCount": 3, "strategy": {"name": "azureIotJava", "initialDelay": "0"}}}`, []string{
			`host.json:1:57: checkpointRetryPolicy.strategy: strategy azureIotJava: initialDelay is 0s: (int)(delta*1.2) - (int)(delta*0.8) = 0, and Java's nextInt needs a positive bound`}},
		{"backoffAlgorithm range", `{"checkpointRetryPolicy": {"retryCount": 3, "strategy": {"name": "backoffAlgorithm", "initialDelay": "1s", "maxDelay": "70s"}}}`, []string{
			`host.json:1:57: checkpointRetryPolicy.strategy: strategy backoffAlgorithm: maxDelay is 1m10s: want whole milliseconds up to 1m5.535s`}},
		{"flag not a bool", `{"checkpointRetryPolicy": {"retryCount": 3, "strategy": {"name": "azureIotJava", "firstFastRetry": "yes"}}}`, []string{
			`host.json:1:100: checkpointRetryPolicy.strategy.firstFastRetry: want true or false, got the string "yes"`}},
		{"dead letter without topic", `{"checkpointRetryPolicy": {"retryCount": 0, "onExhausted": "deadLetter"}}`, []string{
			`host.json:1:60: checkpointRetryPolicy.onExhausted: deadLetter needs a topic`}},
		{"topic on skip", `{"checkpointRetryPolicy": {"retryCount": 0, "onExhausted": {"action": "skip", "topic": "t"}}}`, []string{
			`host.json:1:88: checkpointRetryPolicy.onExhausted.topic: a topic only applies to deadLetter, not skip`}},
		{"empty topic", `{"checkpointRetryPolicy": {"retryCount": 0, "onExhausted": {"action": "deadLetter", "topic": " "}}}`, []string{
			`host.json:1:94: checkpointRetryPolicy.onExhausted.topic: empty topic`}},
		{"unknown action", `{"checkpointRetryPolicy": {"retryCount": 0, "onExhausted": "stopp"}}`, []string{
			`host.json:1:60: checkpointRetryPolicy.onExhausted: unknown action "stopp": did you mean stop?`}},
		{"azure retry without strategy", `{"retry": {"maxRetryCount": 1}}`, []string{
			`host.json:1:11: retry: strategy is missing: want fixedDelay or exponentialBackoff`}},
		{"azure retry unknown strategy", `{"retry": {"strategy": "fixed", "maxRetryCount": 1}}`, []string{
			`host.json:1:24: retry.strategy: unknown strategy "fixed": want fixedDelay or exponentialBackoff`}},
		{"azure retry wrong interval", `{"retry": {"strategy": "fixedDelay", "maxRetryCount": 1, "delayInterval": "1s", "minimumInterval": "1s"}}`, []string{
			`host.json:1:81: retry.minimumInterval: fixedDelay takes delayInterval: minimumInterval is a parameter of exponentialBackoff`}},
		{"azure retry min above max", `{"retry": {"strategy": "exponentialBackoff", "maxRetryCount": 1, "minimumInterval": "00:10:00", "maximumInterval": "00:01:00"}}`, []string{
			`host.json:1:11: retry: strategy exponentialBackoff: maximumInterval 1m0s is below minimumInterval 10m0s`}},
		{"azure retry count", `{"retry": {"strategy": "fixedDelay", "maxRetryCount": -3, "delayInterval": "1s"}}`, []string{
			`host.json:1:55: retry.maxRetryCount: -3 is below -1`}},
		{"functions not an object", `{"checkpointRetryPolicy": {"functions": []}}`, []string{
			`host.json:1:41: checkpointRetryPolicy.functions: want an object of policies by function name, got an array`}},
		{"function without retryCount", `{"checkpointRetryPolicy": {"functions": {"a": {"sleepDuration": "1s"}}}}`, []string{
			`host.json:1:47: checkpointRetryPolicy.functions.a: retryCount is missing (set it here or in checkpointRetryPolicy)`}},
		{"function unknown field", `{"checkpointRetryPolicy": {"retryCount": 0, "functions": {"a": {"retryCont": 1}}}}`, []string{
			`host.json:1:65: checkpointRetryPolicy.functions.a: unknown field "retryCont": did you mean retryCount?`}},
		{"duplicate function", `{"checkpointRetryPolicy": {"retryCount": 0, "functions": {"a": {}, "A": {}}}}`, []string{
			`host.json:1:68: checkpointRetryPolicy.functions.A: duplicate function (names ignore case): also at host.json:1:64`}},
		{"function name with a dot", `{"checkpointRetryPolicy": {"functions": {"a.b": {"retryCount": -5}}}}`, []string{
			`host.json:1:64: checkpointRetryPolicy.functions["a.b"].retryCount: -5 is below -1`}},
		{"inherited problem is reported once", `{"checkpointRetryPolicy": {"retryCount": 1, "sleepDuration": "x", "functions": {"a": {}, "b": {}}}}`, []string{
			`host.json:1:62: checkpointRetryPolicy.sleepDuration: "x": not an interval`}},
		{"many problems together", `{
  "version": "3.0",
  "checkpointRetryPolicy": {
    "retryCount": -2,
    "sleepDuration": "00:00:61",
    "maxDelay": 5,
  },
}`, []string{
			`host.json:2:14: version: want "2.0", got "3.0"`,
			`host.json:4:19: checkpointRetryPolicy.retryCount: -2 is below -1`,
			`host.json:5:22: checkpointRetryPolicy.sleepDuration: "00:00:61": seconds: 61 is out of range: want 0 to 59`,
			`host.json:6:17: checkpointRetryPolicy.maxDelay: want a string such as "00:00:05" or "5s", got the number 5`}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg, err := noEnv.Parse("host.json", []byte(tc.doc))
			if err == nil {
				t.Fatalf("Parse = %+v, want an error", cfg)
			}
			checkProblems(t, err, tc.want)
		})
	}
}

// TestLineSeparators checks where a U+2028 or U+2029 is refused: inside
// a // comment, where JavaScript and editors end the comment and show the
// rest of the line as a setting that the parser does not read. The wanted
// errors are what the newer hujson versions report, which stop at the
// separator; the older ones read on, and the loader must give the same
// answer with either (scripts/test.sh runs this test with both).
func TestLineSeparators(t *testing.T) {
	for _, tc := range []struct {
		name string
		doc  string
		want string // the only problem; "" for a document that loads
	}{
		{"U+2028 in a line comment", "{\"version\": \"2.0\", // note\u2028\"checkpointRetryPolicy\": {\"retryCount\": 99}\n}",
			`host.json:1:27: syntax error: invalid character '\u2028' in line comment`},
		{"U+2029 in a line comment", "{\"version\": \"2.0\" // note\u2029\"x\": 1\n}",
			`host.json:1:26: syntax error: invalid character '\u2029' in line comment`},
		{"the first of two", "{\"version\": \"2.0\", // x\u2029 y \u2028\n}",
			`host.json:1:24: syntax error: invalid character '\u2029' in line comment`},
		{"column in bytes", "{\"version\": \"2.0\"}\n\n   // é\u2028\n",
			`host.json:3:9: syntax error: invalid character '\u2028' in line comment`},
		{"comment after a number", "{\"version\": \"2.0\", \"a\": 1// x\u2028\n}",
			`host.json:1:30: syntax error: invalid character '\u2028' in line comment`},
		{"last comment with no newline", "{\"version\": \"2.0\"}\n// hidden\u2028",
			`host.json:2:10: syntax error: invalid character '\u2028' in line comment`},
		{"last comment with no newline and a bad byte", "{\"version\": \"2.0\"} // x\xff\u2028",
			`host.json:1:25: syntax error: invalid character '\u2028' in line comment`},
		{"a comment with a bad byte", "{\"version\": \"2.0\", // x\xff\u2028\n}",
			`host.json:1:20: syntax error: invalid UTF-8 in comment`},
		{"an earlier syntax error", "{\"version\": \"2.0\",, // x\u2028\n}",
			`host.json:1:19: syntax error: invalid character ',' at start of value`},
		{"a later syntax error", "{\"version\": \"2.0\", // x\u2028\n ,}",
			`host.json:1:24: syntax error: invalid character '\u2028' in line comment`},
		{"a last comment with no newline", "{\"version\": \"2.0\"} // x",
			`host.json:1:20: syntax error: parsing comment: unexpected EOF`},
		{"as white space", "{\"version\": \"2.0\"}\u2028",
			`host.json:1:19: syntax error: invalid character '\u2028' after top-level value`},
		{"in a key", "{\"version\": \"2.0\", \"a\u2028b\": 1}", ""},
		{"in a string that looks like a comment", "{\"version\": \"2.0\", \"a\": \"// x\u2028\"}", ""},
		{"in a block comment", "{\"version\": \"2.0\" /* a\u2028b */}", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg, err := noEnv.Parse("host.json", []byte(tc.doc))
			switch {
			case tc.want == "" && err != nil:
				t.Fatalf("Parse: %v, want no error", err)
			case tc.want == "":
				if cfg.Version != "2.0" {
					t.Fatalf("Version = %q, want 2.0", cfg.Version)
				}
			case err == nil:
				t.Fatalf("Parse = %+v, want an error", cfg)
			default:
				var e *hostconfig.Error
				if !errors.As(err, &e) || len(e.Problems) != 1 || e.Problems[0].Error() != "hostconfig: "+tc.want {
					t.Fatalf("Parse: %v, want hostconfig: %s", err, tc.want)
				}
			}
		})
	}
}

// checkProblems checks that err is an *hostconfig.Error whose problems
// start with want, in order.
func checkProblems(t *testing.T, err error, want []string) {
	t.Helper()
	var e *hostconfig.Error
	if !errors.As(err, &e) {
		t.Fatalf("err = %v (%T), want an *hostconfig.Error", err, err)
	}
	var got []string
	for _, p := range e.Problems {
		got = append(got, strings.TrimPrefix(p.Error(), "hostconfig: "))
	}
	ok := len(got) == len(want)
	for i := 0; ok && i < len(got); i++ {
		ok = strings.HasPrefix(got[i], want[i])
	}
	if !ok {
		t.Errorf("problems:\n  %s\nwant (prefixes):\n  %s", strings.Join(got, "\n  "), strings.Join(want, "\n  "))
	}
	if !strings.HasPrefix(err.Error(), "hostconfig: ") || strings.Count(err.Error(), "\n") != len(e.Problems)-1 {
		t.Errorf("Error() = %q, want one line per problem", err.Error())
	}
}

// TestDeepNesting checks that a document nested millions deep is an error,
// not a stack overflow, and that deep but reasonable nesting loads.
func TestDeepNesting(t *testing.T) {
	deep := `{"logging": ` + strings.Repeat("[", 5_000_000) + strings.Repeat("]", 5_000_000) + `}`
	_, err := noEnv.Parse("host.json", []byte(deep))
	checkProblems(t, err, []string{`host.json:1:1012: nesting deeper than 1000 levels`})

	ok := `{"logging": /* [[[ */ "[[[\"", // [[[
"extensions": ` + strings.Repeat("[", 998) + strings.Repeat("]", 998) + `}`
	if _, err := noEnv.Parse("host.json", []byte(ok)); err != nil {
		t.Errorf("998 levels inside a section: %v", err)
	}
}

func TestProblemFields(t *testing.T) {
	_, err := noEnv.Parse("host.json", []byte("{\n  \"checkpointRetryPolicy\": {\"retryCount\": 1, \"sleepDuration\": \"00:00:60\"}}"))
	var p *hostconfig.Problem
	if !errors.As(err, &p) {
		t.Fatalf("err = %v, want a *hostconfig.Problem inside", err)
	}
	want := hostconfig.Problem{File: "host.json", Line: 2, Col: 63, Path: "checkpointRetryPolicy.sleepDuration",
		Msg: `"00:00:60": seconds: 60 is out of range: want 0 to 59`}
	if *p != want {
		t.Errorf("Problem = %+v\nwant %+v", *p, want)
	}
}

// A file with problems still reports its warnings, with the problems.
func TestWarningsWithProblems(t *testing.T) {
	_, err := noEnv.Parse("host.json", []byte(`{"retry": {"strategy": "fixedDelay", "maxRetryCount": 1, "delayInterval": "00:00:01"}, "checkpointRetryPolicy": {"retryCount": -5}}`))
	var e *hostconfig.Error
	if !errors.As(err, &e) {
		t.Fatalf("err = %v, want an *hostconfig.Error", err)
	}
	checkProblems(t, err, []string{`host.json:1:128: checkpointRetryPolicy.retryCount: -5 is below -1`})
	want := []string{`host.json:1:11: retry is ignored: checkpointRetryPolicy (host.json:1:113) takes precedence`}
	if !reflect.DeepEqual(e.Warnings, want) {
		t.Errorf("Warnings = %q\nwant %q", e.Warnings, want)
	}
	if strings.Contains(err.Error(), "precedence") {
		t.Errorf("Error() = %q: want the problems only", err)
	}
}

// A key spelt almost like a section redeliver reads is an error, not a
// warning: loaded as written, the section it meant would be missing (a
// misspelt checkpointRetryPolicy turns retries off), and a check that
// passes with warnings would let it through. Keys far from every section
// stay quiet: host.json holds other programs' sections.
func TestMisspeltSectionIsAProblem(t *testing.T) {
	for _, tc := range []struct{ name, doc, want string }{
		{"checkpointRetryPolicy", `{"checkpointRetryPolcy": {"retryCount": 3, "sleepDuration": "00:00:01"}}`,
			`host.json:1:2: "checkpointRetryPolcy" is not a section redeliver reads: did you mean checkpointRetryPolicy? (as written the whole section would be ignored)`},
		{"retry", `{"retyr": {}}`, `host.json:1:2: "retyr" is not a section redeliver reads: did you mean retry?`},
		{"retries", `{"retrys": {}}`, `host.json:1:2: "retrys" is not a section redeliver reads: did you mean retry?`},
		{"triggers", `{"trigers": {}}`, `host.json:1:2: "trigers" is not a section redeliver reads: did you mean triggers?`},
		{"statusPage", `{"statuspge": {}}`, `host.json:1:2: "statuspge" is not a section redeliver reads: did you mean statusPage?`},
		{"outageBudget", `{"outageBugdet": {}}`, `host.json:1:2: "outageBugdet" is not a section redeliver reads: did you mean outageBudget?`},
		{"redrive", `{"redirve": {}}`, `host.json:1:2: "redirve" is not a section redeliver reads: did you mean redrive?`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := noEnv.Parse("host.json", []byte(tc.doc))
			checkProblems(t, err, []string{tc.want})
		})
	}
	cfg, err := noEnv.Parse("host.json", []byte(`{"myAppSettings": {"retryCount": 3}, "logging": {}}`))
	if err != nil || len(cfg.Warnings) != 0 {
		t.Errorf("far-off keys: err %v, warnings %q: want neither", err, cfg.Warnings)
	}
}

func TestWarnings(t *testing.T) {
	for _, tc := range []struct {
		name, doc string
		want      []string
	}{
		{"policy for a misspelt function", `{
  "checkpointRetryPolicy": {"retryCount": 0, "functions": {"paymnets": {"retryCount": 3, "sleepDuration": "1s"}, "orders": {}}},
  "triggers": {
    "payments": {"type": "kafka", "topic": "payments", "consumerGroup": "g"},
    "orders": {"type": "kafka", "topic": "orders", "consumerGroup": "g"},
    "audit": {"type": "kafka", "topic": "audit", "consumerGroup": "g"}
  }
}`, []string{
			`host.json:2:60: checkpointRetryPolicy.functions.paymnets: a policy for function "paymnets", which no trigger names: did you mean payments (the trigger at host.json:4:5)?`}},
		{"policies for functions of the code", `{
  "checkpointRetryPolicy": {"retryCount": 0, "functions": {"billing": {}}},
  "triggers": {"payments": {"type": "kafka", "topic": "payments", "consumerGroup": "g"}}
}`, nil},
		// Hundreds of each: one warning, not a search quadratic in the
		// file's size.
		{"too many policies and triggers apart", manyApart(300), []string{
			`host.json:1:59: checkpointRetryPolicy.functions.p000: a policy for function "p000", which no trigger names, and 299 more such policies, beside 300 triggers of functions without a policy: too many names to look for misspellings among them`}},
		{"one policy beside too many triggers", manyApartN(1, 70000), []string{
			`host.json:1:59: checkpointRetryPolicy.functions.p000: a policy for function "p000", which no trigger names, beside 70000 triggers of functions without a policy: too many names to look for misspellings among them`}},
		{"Azure sections are quiet", `{"functions": ["a"], "http": {}, "queues": {}, "logging": {}}`, nil},
		// Settings that load but cannot take effect as written.
		{"time budget below the first delay", `{"checkpointRetryPolicy": {"retryCount": 10, "sleepDuration": "00:00:05", "maxRetryTime": "00:00:01",
  "functions": {"a": {"onExhausted": "stop"}, "b": {"sleepDuration": "00:00:10"}, "c": {"sleepDuration": "100ms"}}}}`, []string{
			`host.json:1:27: checkpointRetryPolicy: maxRetryTime 1s (host.json:1:91) is not longer than the first retry's delay (5s): no retry ever starts, so a failed batch is given up at once`,
			`host.json:2:52: checkpointRetryPolicy.functions.b: maxRetryTime 1s (host.json:1:91) is not longer than the first retry's delay (10s): no retry ever starts, so a failed batch is given up at once`}},
		{"time budget below a random first delay", `{"checkpointRetryPolicy": {"retryCount": 3, "strategy": {"name": "decorrelatedJitter", "initialDelay": "2s"}, "maxRetryTime": "1s"}}`, []string{
			`host.json:1:27: checkpointRetryPolicy: maxRetryTime 1s (host.json:1:127) is not longer than the first retry's delay (at least 2s): no retry ever starts, so a failed batch is given up at once`}},
		{"time budget with a random first delay that may be short", `{"checkpointRetryPolicy": {"retryCount": 3, "strategy": {"name": "random", "initialDelay": "2s"}, "maxRetryTime": "1s"}}`, nil},
		{"maxDelay below the first delay", `{"checkpointRetryPolicy": {"retryCount": 3, "strategy": {"name": "exponential", "initialDelay": "00:01:00"}, "maxDelay": "00:00:30"}}`, []string{
			`host.json:1:27: checkpointRetryPolicy: maxDelay 30s (host.json:1:122) is below the first retry's delay (1m0s), so every delay is 30s`}},
		{"no warning without retries", `{"checkpointRetryPolicy": {"retryCount": 0, "sleepDuration": "00:00:05", "maxRetryTime": "00:00:01", "maxDelay": "1s"}}`, nil},
		{"other sections are quiet", `{"aggregator": {}, "retries": {}, "version": "2.0", "extensionBundle": {}}`, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg, err := noEnv.Parse("host.json", []byte(tc.doc))
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(cfg.Warnings, tc.want) {
				t.Errorf("Warnings = %q\nwant %q", cfg.Warnings, tc.want)
			}
		})
	}
}

// manyApart returns a host.json with n policies, for functions p000, p001,
// ..., and n triggers, for functions t000, t001, ...: each policy's name
// one edit from a trigger's.
func manyApart(n int) string { return manyApartN(n, n) }

// manyApartN is manyApart with np policies and nt triggers.
func manyApartN(np, nt int) string {
	var policies, triggers []string
	for i := range np {
		policies = append(policies, fmt.Sprintf(`"p%03d": {}`, i))
	}
	for i := range nt {
		triggers = append(triggers, fmt.Sprintf(`"t%03d": {"type": "kafka", "topic": "t", "consumerGroup": "g"}`, i))
	}
	return `{"checkpointRetryPolicy": {"retryCount": 0, "functions": {` + strings.Join(policies, ", ") + `}}, "triggers": {` + strings.Join(triggers, ", ") + `}}`
}
