package hostconfig_test

import (
	"reflect"
	"testing"
	"time"

	"github.com/redeliver-go/redeliver/hostconfig"
)

const envBase = `{
  "checkpointRetryPolicy": {
    "retryCount": 10,
    "strategy": {"name": "exponential", "initialDelay": "00:00:01"},
    "functions": {"orders": {"retryCount": 2}},
  },
}`

func TestEnvOverrides(t *testing.T) {
	for _, tc := range []struct {
		name string
		env  []string
		doc  string
		want hostconfig.RetryPolicy // the host-wide policy, without Origin
	}{
		{"no override", nil, envBase,
			hostconfig.RetryPolicy{RetryCount: 10, Strategy: hostconfig.Strategy{Name: "exponential", InitialDelay: time.Second}}},
		{"retryCount beats the file", []string{"AzureFunctionsJobHost__checkpointRetryPolicy__retryCount=3"}, envBase,
			hostconfig.RetryPolicy{RetryCount: 3, Strategy: hostconfig.Strategy{Name: "exponential", InitialDelay: time.Second}}},
		{"names ignore case", []string{"AZUREFUNCTIONSJOBHOST__CHECKPOINTRETRYPOLICY__RETRYCOUNT=-1"}, envBase,
			hostconfig.RetryPolicy{RetryCount: -1, Strategy: hostconfig.Strategy{Name: "exponential", InitialDelay: time.Second}}},
		{"a strategy parameter", []string{"AzureFunctionsJobHost__checkpointRetryPolicy__strategy__initialDelay=00:00:02"}, envBase,
			hostconfig.RetryPolicy{RetryCount: 10, Strategy: hostconfig.Strategy{Name: "exponential", InitialDelay: 2 * time.Second}}},
		// The file may name the strategy with a string: a variable
		// that sets a parameter keeps that name (the README's own
		// example), and so for an action's topic.
		{"a strategy and an action the file names by a string", []string{
			"AzureFunctionsJobHost__checkpointRetryPolicy__strategy__initialDelay=00:00:02",
			"AzureFunctionsJobHost__checkpointRetryPolicy__onExhausted__topic=orders-dlq"},
			`{"checkpointRetryPolicy": {"retryCount": 3, "strategy": "exponential", "onExhausted": "deadLetter"}}`,
			hostconfig.RetryPolicy{RetryCount: 3, Strategy: hostconfig.Strategy{Name: "exponential", InitialDelay: 2 * time.Second},
				OnExhausted: hostconfig.Exhaustion{Action: hostconfig.ActionDeadLetter, Topic: "orders-dlq"}}},
		{"a strategy's name and parameter, both from the environment", []string{
			"AzureFunctionsJobHost__checkpointRetryPolicy__strategy=linear",
			"AzureFunctionsJobHost__checkpointRetryPolicy__strategy__initialDelay=3s"}, envBase,
			hostconfig.RetryPolicy{RetryCount: 10, Strategy: hostconfig.Strategy{Name: "linear", InitialDelay: 3 * time.Second}}},
		{"sleepDuration replaces the file's strategy", []string{"AzureFunctionsJobHost__checkpointRetryPolicy__sleepDuration=5s"}, envBase,
			hostconfig.RetryPolicy{RetryCount: 10, Strategy: hostconfig.Strategy{Name: "fixed", Delay: 5 * time.Second}}},
		{"a strategy replaces the file's sleepDuration", []string{
			"AzureFunctionsJobHost__checkpointRetryPolicy__strategy=immediate"},
			`{"checkpointRetryPolicy": {"retryCount": 1, "sleepDuration": "00:00:05"}}`,
			hostconfig.RetryPolicy{RetryCount: 1, Strategy: hostconfig.Strategy{Name: "immediate"}}},
		{"a section the file lacks", []string{
			"AzureFunctionsJobHost__checkpointRetryPolicy__retryCount=4",
			"AzureFunctionsJobHost__checkpointRetryPolicy__sleepDuration=00:00:07",
			"AzureFunctionsJobHost__checkpointRetryPolicy__onExhausted__action=deadLetter",
			"AzureFunctionsJobHost__checkpointRetryPolicy__onExhausted__topic=dlq",
			"AzureFunctionsJobHost__checkpointRetryPolicy__maxRetryTime=1h",
		}, `{"version": "2.0"}`,
			hostconfig.RetryPolicy{RetryCount: 4, Strategy: hostconfig.Strategy{Name: "fixed", Delay: 7 * time.Second},
				MaxRetryTime: time.Hour, OnExhausted: hostconfig.Exhaustion{Action: hostconfig.ActionDeadLetter, Topic: "dlq"}}},
		{"numbers and flags from text", []string{
			"AzureFunctionsJobHost__checkpointRetryPolicy__strategy__name=azureIotJava",
			"AzureFunctionsJobHost__checkpointRetryPolicy__strategy__firstFastRetry=False",
			"AzureFunctionsJobHost__checkpointRetryPolicy__strategy__initialDelay=200ms",
		}, `{"checkpointRetryPolicy": {"retryCount": 1, "sleepDuration": "00:00:05"}}`,
			hostconfig.RetryPolicy{RetryCount: 1, Strategy: hostconfig.Strategy{Name: "azureIotJava", InitialDelay: 200 * time.Millisecond,
				MinDelay: 100 * time.Millisecond, MaxDelay: 10 * time.Second}}},
		{"other sections and other variables are ignored", []string{
			"AzureFunctionsJobHost__logging__logLevel__default=Trace",
			"AzureFunctionsJobHost__extensions__kafka__maxBatchSize=bad",
			"PATH=/usr/bin",
			"AzureFunctionsJobHostcheckpointRetryPolicy__retryCount=bad",
			"malformed",
		}, envBase,
			hostconfig.RetryPolicy{RetryCount: 10, Strategy: hostconfig.Strategy{Name: "exponential", InitialDelay: time.Second}}},
		{"the retry section", []string{
			"AzureFunctionsJobHost__retry__maxRetryCount=7",
		}, `{"retry": {"strategy": "fixedDelay", "maxRetryCount": 2, "delayInterval": "00:00:03"}}`,
			hostconfig.RetryPolicy{RetryCount: 7, Strategy: hostconfig.Strategy{Name: "fixedDelay", Delay: 3 * time.Second}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg, err := withEnv(tc.env...).Parse("host.json", []byte(tc.doc))
			if err != nil {
				t.Fatal(err)
			}
			if cfg.Host == nil {
				t.Fatal("Host = nil")
			}
			got := *cfg.Host
			got.Origin = ""
			if !reflect.DeepEqual(got, tc.want) {
				t.Errorf("Host = %+v\nwant %+v", got, tc.want)
			}
		})
	}
}

// A variable that sets a parameter of a strategy, or the connection of a
// store, that the file names by a string keeps the file's name, and
// Settings says where each part was written.
func TestEnvOverridesShorthand(t *testing.T) {
	cfg, err := withEnv("AzureFunctionsJobHost__checkpointRetryPolicy__strategy__initialDelay=2s",
		"AzureFunctionsJobHost__redrive__store__connection=REDRIVE_URL").Parse("host.json", []byte(`{
  "checkpointRetryPolicy": {"retryCount": 3, "strategy": "linear"},
  "redrive": {"store": "postgres"}
}`))
	if err != nil {
		t.Fatal(err)
	}
	if s := cfg.Host.Strategy; s.Name != "linear" || s.InitialDelay != 2*time.Second {
		t.Errorf("Strategy = %+v, want linear from the file with initialDelay 2s from the environment", s)
	}
	if s := cfg.Redrive.Store; s.Kind != hostconfig.StorePostgres || s.Connection != "REDRIVE_URL" {
		t.Errorf("Store = %+v, want postgres from the file with the connection from the environment", s)
	}
	var got []string
	for _, s := range cfg.Settings("") {
		got = append(got, s.Field+" from "+s.Source)
	}
	want := []string{"retryCount from host.json:2:43", "strategy.name from host.json:2:58",
		"strategy.initialDelay from environment AzureFunctionsJobHost__checkpointRetryPolicy__strategy__initialDelay"}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("Settings = %q\nwant %q", got, want)
	}
}

func TestEnvOverridesFunction(t *testing.T) {
	cfg, err := withEnv("AzureFunctionsJobHost__checkpointRetryPolicy__functions__orders__retryCount=5",
		"AzureFunctionsJobHost__checkpointRetryPolicy__functions__payments__retryCount=0").Parse("host.json", []byte(envBase))
	if err != nil {
		t.Fatal(err)
	}
	if got := cfg.Function("orders").RetryCount; got != 5 {
		t.Errorf("orders RetryCount = %d, want 5", got)
	}
	if got := cfg.Function("payments"); got == nil || got.RetryCount != 0 || got.Strategy.Name != "exponential" {
		t.Errorf("payments = %+v, want a new function with retryCount 0 and the inherited strategy", got)
	}
	if got := cfg.Host.RetryCount; got != 10 {
		t.Errorf("host RetryCount = %d, want 10", got)
	}
}

func TestEnvProblems(t *testing.T) {
	const name = "AzureFunctionsJobHost__checkpointRetryPolicy__retryCount"
	for _, tc := range []struct {
		name string
		env  []string
		want []string
	}{
		{"not an integer", []string{name + "=three"}, []string{
			`environment ` + name + `: checkpointRetryPolicy.retryCount: want an integer, got "three"`}},
		{"below -1", []string{name + "=-5"}, []string{
			`environment ` + name + `: checkpointRetryPolicy.retryCount: -5 is below -1`}},
		{"unknown key", []string{"AzureFunctionsJobHost__checkpointRetryPolicy__sleepDuraton=5s"}, []string{
			`environment AzureFunctionsJobHost__checkpointRetryPolicy__sleepDuraton: checkpointRetryPolicy: unknown field "sleepDuraton": did you mean sleepDuration?`}},
		{"bad interval", []string{"AzureFunctionsJobHost__checkpointRetryPolicy__strategy__initialDelay=00:61"}, []string{
			`environment AzureFunctionsJobHost__checkpointRetryPolicy__strategy__initialDelay: checkpointRetryPolicy.strategy.initialDelay: "00:61": minutes: 61 is out of range`}},
		{"same setting twice", []string{name + "=1", "AZUREFUNCTIONSJOBHOST__checkpointretrypolicy__retrycount=2"}, []string{
			`environment ` + name + `: sets the same setting as AZUREFUNCTIONSJOBHOST__checkpointretrypolicy__retrycount (names ignore case)`}},
		{"a value and a key inside it", []string{
			"AzureFunctionsJobHost__checkpointRetryPolicy__maxDelay=1s",
			"AzureFunctionsJobHost__checkpointRetryPolicy__maxDelay__unit=s"}, []string{
			`environment AzureFunctionsJobHost__checkpointRetryPolicy__maxDelay__unit: conflicts with AzureFunctionsJobHost__checkpointRetryPolicy__maxDelay, which gives a value`}},
		// onExhausted=stop is short for onExhausted__action=stop: a topic
		// beside it is checked as one in the file would be.
		{"an action and a topic", []string{
			"AzureFunctionsJobHost__checkpointRetryPolicy__onExhausted=stop",
			"AzureFunctionsJobHost__checkpointRetryPolicy__onExhausted__topic=t"}, []string{
			`environment AzureFunctionsJobHost__checkpointRetryPolicy__onExhausted__topic: checkpointRetryPolicy.onExhausted.topic: a topic only applies to deadLetter, not stop`}},
		// A dead letter set by a variable needs its topic from another.
		{"deadLetter without a topic", []string{"AzureFunctionsJobHost__checkpointRetryPolicy__onExhausted=deadLetter"}, []string{
			`environment AzureFunctionsJobHost__checkpointRetryPolicy__onExhausted: checkpointRetryPolicy.onExhausted: deadLetter needs a topic: set AzureFunctionsJobHost__checkpointRetryPolicy__onExhausted__topic=orders-dlq too`}},
		{"deadLetter action without a topic", []string{"AzureFunctionsJobHost__checkpointRetryPolicy__functions__a__onExhausted__action=deadLetter"}, []string{
			`environment AzureFunctionsJobHost__checkpointRetryPolicy__functions__a__onExhausted__action: checkpointRetryPolicy.functions.a.onExhausted: deadLetter needs a topic: set AzureFunctionsJobHost__checkpointRetryPolicy__functions__a__onExhausted__topic=orders-dlq too`}},
		{"empty key", []string{"AzureFunctionsJobHost__checkpointRetryPolicy____retryCount=1"}, []string{
			`environment AzureFunctionsJobHost__checkpointRetryPolicy____retryCount: empty key in the name`}},
		{"sleepDuration and strategy both from the environment", []string{
			"AzureFunctionsJobHost__checkpointRetryPolicy__sleepDuration=1s",
			"AzureFunctionsJobHost__checkpointRetryPolicy__strategy=immediate"}, []string{
			`environment AzureFunctionsJobHost__checkpointRetryPolicy__sleepDuration: checkpointRetryPolicy.sleepDuration: sleepDuration (environment AzureFunctionsJobHost__checkpointRetryPolicy__sleepDuration) and strategy (environment AzureFunctionsJobHost__checkpointRetryPolicy__strategy) exclude each other`}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := withEnv(tc.env...).Parse("host.json", []byte(envBase))
			if err == nil {
				t.Fatal("Parse succeeded, want an error")
			}
			checkProblems(t, err, tc.want)
		})
	}
}

func TestEnvProblemsComeAfterFileProblems(t *testing.T) {
	_, err := withEnv("AzureFunctionsJobHost__checkpointRetryPolicy__maxDelay=x").Parse("host.json",
		[]byte(`{"checkpointRetryPolicy": {"retryCount": -9, "sleepDuration": "1s"}}`))
	checkProblems(t, err, []string{
		`host.json:1:42: checkpointRetryPolicy.retryCount: -9 is below -1`,
		`environment AzureFunctionsJobHost__checkpointRetryPolicy__maxDelay: checkpointRetryPolicy.maxDelay: "x": not an interval`,
	})
}
