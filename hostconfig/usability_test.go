package hostconfig_test

import (
	"reflect"
	"strings"
	"testing"

	"github.com/redeliver-go/redeliver/hostconfig"
	"github.com/redeliver-go/redeliver/stream"
)

// An environment variable that looks like an override but is not one
// (a single underscore, ':' as separator, a misspelt prefix) is named in a
// warning with the name it should have had; one with the exact prefix and
// a misspelt section is an error, as the same section in the file is.
func TestEnvNearMisses(t *testing.T) {
	const right = "AzureFunctionsJobHost__checkpointRetryPolicy__retryCount"
	for _, tc := range []struct {
		name    string
		env     string
		want    string
		problem bool // a misspelt section after the exact prefix is an error
	}{
		{"misspelt section", "AzureFunctionsJobHost__checkpointRetryPolcy__retryCount=3",
			"environment AzureFunctionsJobHost__checkpointRetryPolcy__retryCount: \"checkpointRetryPolcy\" is not a section redeliver reads: did you mean " + right + "?", true},
		{"single underscore", "AzureFunctionsJobHost_checkpointRetryPolicy_retryCount=3",
			"environment AzureFunctionsJobHost_checkpointRetryPolicy_retryCount: ignored: keys are separated by a double underscore: did you mean " + right + "?", false},
		{"single underscore after the prefix", "AzureFunctionsJobHost__checkpointRetryPolicy_retryCount=3",
			"environment AzureFunctionsJobHost__checkpointRetryPolicy_retryCount: ignored: keys are separated by a double underscore: did you mean " + right + "?", false},
		{"colon", "AzureFunctionsJobHost:checkpointRetryPolicy:retryCount=3",
			"environment AzureFunctionsJobHost:checkpointRetryPolicy:retryCount: ignored: keys are separated by a double underscore: did you mean " + right + "?", false},
		{"misspelt prefix", "AzureFunctionJobHost__checkpointRetryPolicy__retryCount=3",
			"environment AzureFunctionJobHost__checkpointRetryPolicy__retryCount: ignored: did you mean " + right + "?", false},
		{"retry section", "AzureFunctionsJobHost_retry_maxRetryCount=3",
			"environment AzureFunctionsJobHost_retry_maxRetryCount: ignored: keys are separated by a double underscore: did you mean AzureFunctionsJobHost__retry__maxRetryCount?", false},
		// A misspelt name of every section is named, not only
		// checkpointRetryPolicy's.
		{"misspelt outageBudget", "AzureFunctionsJobHost__outageBudgt__enabled=false",
			"environment AzureFunctionsJobHost__outageBudgt__enabled: \"outageBudgt\" is not a section redeliver reads: did you mean AzureFunctionsJobHost__outageBudget__enabled?", true},
		{"misspelt triggers", "AzureFunctionsJobHost__trigers__orders__topic=orders-blue",
			"environment AzureFunctionsJobHost__trigers__orders__topic: \"trigers\" is not a section redeliver reads: did you mean AzureFunctionsJobHost__triggers__orders__topic?", true},
		{"misspelt redrive", "AzureFunctionsJobHost__redrve__interval=00:01:00",
			"environment AzureFunctionsJobHost__redrve__interval: \"redrve\" is not a section redeliver reads: did you mean AzureFunctionsJobHost__redrive__interval?", true},
		{"misspelt retry", "AzureFunctionsJobHost__rety__maxRetryCount=3",
			"environment AzureFunctionsJobHost__rety__maxRetryCount: \"rety\" is not a section redeliver reads: did you mean AzureFunctionsJobHost__retry__maxRetryCount?", true},
		{"swapped letters", "AzureFunctionsJobHost__retyr__maxRetryCount=3",
			"environment AzureFunctionsJobHost__retyr__maxRetryCount: \"retyr\" is not a section redeliver reads: did you mean AzureFunctionsJobHost__retry__maxRetryCount?", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg, err := withEnv(tc.env).Parse("host.json", []byte(envBase))
			if tc.problem {
				checkProblems(t, err, []string{tc.want})
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if cfg.Host.RetryCount != 10 {
				t.Errorf("retryCount %d: the near miss was applied", cfg.Host.RetryCount)
			}
			if !reflect.DeepEqual(cfg.Warnings, []string{tc.want}) {
				t.Errorf("Warnings = %q\nwant %q", cfg.Warnings, []string{tc.want})
			}
		})
	}
	// Variables of other sections and of other programs stay quiet.
	cfg, err := withEnv("AzureFunctionsJobHost__logging__logLevel__default=Trace", "PATH=/usr/bin", "HOME=/root",
		"AzureWebJobsStorage=x", "retry_count=3", "AzureFunctionsJobHost__extensions__kafka__maxRetries=2").Parse("host.json", []byte(envBase))
	if err != nil {
		t.Fatal(err)
	}
	if len(cfg.Warnings) != 0 {
		t.Errorf("Warnings = %q, want none", cfg.Warnings)
	}
}

// The environment prefix can be set: a service that is not an Azure
// Function names its own.
func TestEnvPrefix(t *testing.T) {
	l := hostconfig.Loader{EnvPrefix: "ORDERS", Environ: func() []string {
		return []string{"ORDERS__checkpointRetryPolicy__retryCount=4", "AzureFunctionsJobHost__checkpointRetryPolicy__retryCount=7"}
	}}
	cfg, err := l.Parse("host.json", []byte(envBase))
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Host.RetryCount != 4 {
		t.Errorf("retryCount %d, want 4 from ORDERS__checkpointRetryPolicy__retryCount", cfg.Host.RetryCount)
	}
	// Under another prefix, the Azure Functions name is a near miss.
	if len(cfg.Warnings) != 1 || !strings.Contains(cfg.Warnings[0], "did you mean ORDERS__checkpointRetryPolicy__retryCount?") {
		t.Errorf("Warnings = %q", cfg.Warnings)
	}
}

// A function selected by a name one letter from a function with a policy
// of its own, which the file names nowhere, is an error with a suggestion,
// not the host-wide policy; a function the file names nowhere else follows
// the host-wide policy.
func TestUnknownFunction(t *testing.T) {
	cfg, err := noEnv.Parse("host.json", []byte(envBase))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := cfg.Policy(hostconfig.Function("orders")); err != nil {
		t.Fatalf("Policy(Function(orders)): %v", err)
	}
	_, err = cfg.Policy(hostconfig.Function("ordres"))
	if err == nil || !strings.Contains(err.Error(), `"ordres"`) || !strings.Contains(err.Error(), "did you mean orders?") {
		t.Fatalf("Policy(Function(ordres)): %v", err)
	}
	if _, err := cfg.Options(nil, hostconfig.Function("ordres")); err == nil || !strings.Contains(err.Error(), "did you mean orders?") {
		t.Fatalf("Options(nil, Function(ordres)): %v", err)
	}
	host, err := cfg.Policy()
	if err != nil {
		t.Fatal(err)
	}
	billing, err := cfg.Policy(hostconfig.Function("billing"))
	if err != nil || billing.MaxRetries != host.MaxRetries {
		t.Fatalf("Policy(Function(billing)) = %+v, %v; want the host-wide policy %+v", billing, err, host)
	}
	if _, err := cfg.Options(nil, nil); err == nil || !strings.Contains(err.Error(), "option 1 of 1 is nil") {
		t.Fatalf("Options with a nil option: %v", err)
	}
	// Options that cannot mean what they say: an error each, not the
	// last one given or the host-wide policy in silence.
	for _, tc := range []struct {
		name string
		opts []hostconfig.Option
		want string
	}{
		{"two functions", []hostconfig.Option{hostconfig.Function("orders"), hostconfig.Function("billing")},
			`hostconfig: Function("billing") after Function("orders"): one function per call`},
		{"empty function name", []hostconfig.Option{hostconfig.Function("")},
			`hostconfig: Function(""): empty name: leave Function out for the host-wide policy`},
		{"nil park action", []hostconfig.Option{hostconfig.Park(nil)},
			`hostconfig: Park(nil): want the action of redrive.Park`},
		{"two park actions", []hostconfig.Option{hostconfig.Park(stream.StopPartition), hostconfig.Park(stream.StopPartition)},
			`hostconfig: Park given twice: one park action per call`},
		{"nil park option", []hostconfig.Option{hostconfig.ParkOption(nil)},
			`hostconfig: ParkOption(nil): want the option of redrive.ParkByKey`},
		{"park and park option", []hostconfig.Option{hostconfig.Park(stream.StopPartition), hostconfig.ParkOption(stream.WithExhaustionAction(stream.StopPartition))},
			`hostconfig: ParkOption beside Park or another ParkOption: one park per call`},
		{"park option and park", []hostconfig.Option{hostconfig.ParkOption(stream.WithExhaustionAction(stream.StopPartition)), hostconfig.Park(stream.StopPartition)},
			`hostconfig: Park beside ParkOption: one park per call`},
	} {
		if _, err := cfg.Options(nil, tc.opts...); err == nil || err.Error() != tc.want {
			t.Errorf("Options, %s: %v\nwant %s", tc.name, err, tc.want)
		}
		if _, err := cfg.Policy(tc.opts...); err == nil || err.Error() != tc.want {
			t.Errorf("Policy, %s: %v\nwant %s", tc.name, err, tc.want)
		}
	}
	var none *hostconfig.Config
	if _, err := none.Options(nil); err == nil || !strings.Contains(err.Error(), "nil *Config") {
		t.Fatalf("Options of a nil Config: %v", err)
	}
}

// CheckFunctions flags a function entry that names none of the program's
// functions.
func TestCheckFunctionsSuggests(t *testing.T) {
	cfg, err := noEnv.Parse("host.json", []byte(`{
  "checkpointRetryPolicy": {
    "retryCount": 1, "sleepDuration": "1s",
    "functions": {"ordres": {"retryCount": 2}, "payments": {"retryCount": 3}},
  },
}`))
	if err != nil {
		t.Fatal(err)
	}
	err = cfg.CheckFunctions([]string{"orders", "payments", "audit"})
	if err == nil || !strings.Contains(err.Error(), "host.json:4:19") || !strings.Contains(err.Error(), `"ordres"`) ||
		!strings.Contains(err.Error(), "did you mean orders?") {
		t.Fatalf("CheckFunctions: %v, want host.json:4:19 naming ordres with a suggestion", err)
	}
	if err := cfg.CheckFunctions([]string{"ordres", "payments"}); err != nil {
		t.Fatalf("CheckFunctions of the right names: %v", err)
	}
}

// Explain says where each value came from: the file's line and column, or
// the environment variable.
func TestExplainSources(t *testing.T) {
	cfg, err := withEnv("AzureFunctionsJobHost__checkpointRetryPolicy__retryCount=3").Parse("host.json", []byte(`{
  "checkpointRetryPolicy": {
    "retryCount": 10,
    "sleepDuration": "00:00:05",
    "functions": {"orders": {"maxDelay": "1m"}},
  },
}`))
	if err != nil {
		t.Fatal(err)
	}
	source := func(function, field string) (string, bool) {
		for _, s := range cfg.Settings(function) {
			if s.Field == field {
				return s.Source, s.Inherited
			}
		}
		return "", false
	}
	for _, c := range []struct {
		function, field, want string
		inherited             bool
	}{
		{"", "retryCount", "environment AzureFunctionsJobHost__checkpointRetryPolicy__retryCount", false},
		{"", "sleepDuration", "host.json:4:22", false},
		{"orders", "retryCount", "environment AzureFunctionsJobHost__checkpointRetryPolicy__retryCount", true},
		{"orders", "maxDelay", "host.json:5:42", false},
		{"payments", "sleepDuration", "host.json:4:22", true}, // no policy of its own: the host-wide one's
	} {
		if got, inh := source(c.function, c.field); got != c.want || inh != c.inherited {
			t.Errorf("Settings(%q) %s from %q (inherited %v), want %q (inherited %v)", c.function, c.field, got, inh, c.want, c.inherited)
		}
	}
	out := cfg.Explain()
	for _, want := range []string{
		"retryCount from environment AzureFunctionsJobHost__checkpointRetryPolicy__retryCount",
		"sleepDuration from host.json:4:22",
		"maxDelay from host.json:5:42",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("Explain lacks %q:\n%s", want, out)
		}
	}
}
