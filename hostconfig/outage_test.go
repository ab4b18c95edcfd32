package hostconfig_test

import (
	"context"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/redeliver-go/redeliver/hostconfig"
	"github.com/redeliver-go/redeliver/stream"
)

func TestOutageBudgetSection(t *testing.T) {
	cfg, err := noEnv.Parse("host.json", []byte(`{
  "version": "2.0",
  "checkpointRetryPolicy": { "retryCount": 3, "sleepDuration": "00:00:01" },
  "outageBudget": { "maxTokens": 20, "tokenRatio": 0.5, "minPartitions": 3, "probeDelay": "00:00:02", "maxProbeDelay": "1m" },
}`))
	if err != nil {
		t.Fatal(err)
	}
	o := cfg.OutageBudget
	if o == nil {
		t.Fatal("no OutageBudget")
	}
	want := hostconfig.OutageBudget{Origin: o.Origin, Enabled: true, MaxTokens: 20, TokenRatio: 0.5, MinPartitions: 3,
		ProbeDelay: 2 * time.Second, MaxProbeDelay: time.Minute, Settings: o.Settings}
	if !reflect.DeepEqual(*o, want) {
		t.Fatalf("OutageBudget = %+v\nwant           %+v", *o, want)
	}
	if !strings.Contains(o.Origin, "host.json:4:") {
		t.Fatalf("origin %q", o.Origin)
	}
	var source string
	for _, st := range o.Settings {
		if st.Field == "minPartitions" {
			source = st.Source
		}
	}
	if source != "host.json:4:74" {
		t.Fatalf("source of minPartitions %q, settings %+v", source, o.Settings)
	}
	ex := cfg.Explain()
	for _, w := range []string{"Outage budget: 20 tokens", "refills 0.5", "10 or fewer are left while 3 or more partitions", "2s after the outage began", "up to every 1m0s"} {
		if !strings.Contains(ex, w) {
			t.Errorf("Explain lacks %q:\n%s", w, ex)
		}
	}
	bc := o.Config()
	if bc.MaxTokens != 20 || bc.TokenRatio != 0.5 || bc.MinPartitions != 3 {
		t.Fatalf("BudgetConfig %+v", bc)
	}
	// A first probe delay at its cap does not double.
	same, err := noEnv.Parse("host.json", []byte(`{"outageBudget": {"probeDelay": "00:00:40", "maxProbeDelay": "00:00:40"}}`))
	if err != nil {
		t.Fatal(err)
	}
	if ex := same.OutageBudget.Explain(); !strings.Contains(ex, "40s after the outage began, then every 40s, until") {
		t.Errorf("Explain of probeDelay = maxProbeDelay: want \"40s after the outage began, then every 40s, until\"\n%s", ex)
	}
	var delays []time.Duration
	for n := 1; n <= 7; n++ {
		delays = append(delays, bc.ProbeBackoff(n, 0, nil))
	}
	if got := fmtDurs(delays); got != "2s 4s 8s 16s 32s 1m0s 1m0s" {
		t.Fatalf("probe delays %s", got)
	}

	// Each processor built from the options gets a budget of its own.
	var budgets []*stream.Budget
	for range 2 {
		opts, err := cfg.Options(nil)
		if err != nil {
			t.Fatal(err)
		}
		proc, err := stream.NewProcessor(stream.HandlerFunc(func(context.Context, *stream.Batch) error { return nil }), opts...)
		if err != nil {
			t.Fatal(err)
		}
		b := proc.OutageBudget()
		if b == nil || b.Config().MaxTokens != 20 {
			t.Fatalf("processor budget %v", b)
		}
		budgets = append(budgets, b)
	}
	if budgets[0] == budgets[1] {
		t.Fatal("two processors share a budget made by Options")
	}
}

func fmtDurs(ds []time.Duration) string {
	s := make([]string, len(ds))
	for i, d := range ds {
		s[i] = d.String()
	}
	return strings.Join(s, " ")
}

func TestOutageBudgetDefaultsOffAndEnv(t *testing.T) {
	// No section: no budget.
	cfg, err := noEnv.Parse("host.json", []byte(`{"checkpointRetryPolicy": {"retryCount": 1, "sleepDuration": "1s"}}`))
	if err != nil {
		t.Fatal(err)
	}
	opts, err := cfg.Options(nil)
	if err != nil {
		t.Fatal(err)
	}
	proc, err := stream.NewProcessor(stream.HandlerFunc(func(context.Context, *stream.Batch) error { return nil }), opts...)
	if err != nil {
		t.Fatal(err)
	}
	if cfg.OutageBudget != nil || proc.OutageBudget() != nil {
		t.Fatal("a budget without the section")
	}
	if strings.Contains(cfg.Explain(), "Outage budget") {
		t.Fatalf("Explain names an outage budget:\n%s", cfg.Explain())
	}

	// An empty section: on, with the defaults.
	cfg, err = noEnv.Parse("host.json", []byte(`{"outageBudget": {}}`))
	if err != nil {
		t.Fatal(err)
	}
	want := hostconfig.OutageBudget{Origin: cfg.OutageBudget.Origin, Enabled: true, MaxTokens: 10, TokenRatio: 0.1, MinPartitions: 2,
		ProbeDelay: time.Second, MaxProbeDelay: 30 * time.Second}
	if !reflect.DeepEqual(*cfg.OutageBudget, want) {
		t.Fatalf("defaults %+v", *cfg.OutageBudget)
	}

	// Turned off by the environment.
	l := hostconfig.Loader{Environ: func() []string {
		return []string{"AzureFunctionsJobHost__outageBudget__enabled=false", "AzureFunctionsJobHost__outageBudget__maxTokens=50"}
	}}
	cfg, err = l.Parse("host.json", []byte(`{"outageBudget": {"enabled": true}}`))
	if err != nil {
		t.Fatal(err)
	}
	if o := cfg.OutageBudget; o.Enabled || o.MaxTokens != 50 {
		t.Fatalf("with the environment: %+v", *o)
	}
	if b, err := cfg.OutageBudget.Budget(); b != nil || err != nil {
		t.Fatalf("Budget of a section turned off: %v %v", b, err)
	}
	if !strings.Contains(cfg.Explain(), "Outage budget: off") {
		t.Fatalf("Explain:\n%s", cfg.Explain())
	}
}

func TestOutageBudgetErrors(t *testing.T) {
	for _, c := range []struct{ name, doc, want string }{
		{"zero tokens", `{"outageBudget": {"maxTokens": 0}}`,
			`host.json:1:32: outageBudget.maxTokens: want a number from 1 to 1000, got the number 0`},
		{"ratio above tokens", `{"outageBudget": {"maxTokens": 2, "tokenRatio": 5}}`,
			`host.json:1:49: outageBudget.tokenRatio: 5 is more than maxTokens (2)`},
		{"one partition", `{"outageBudget": {"minPartitions": 1}}`,
			`host.json:1:36: outageBudget.minPartitions: 1: want 2 or more`},
		{"zero probe delay", `{"outageBudget": {"probeDelay": "0s"}}`,
			`host.json:1:33: outageBudget.probeDelay: want an interval greater than 0`},
		{"max below first", `{"outageBudget": {"probeDelay": "10s", "maxProbeDelay": "5s"}}`,
			`host.json:1:57: outageBudget.maxProbeDelay: 5s is less than probeDelay (10s)`},
		{"first above the default max", `{"outageBudget": {"probeDelay": "00:01:00"}}`,
			`host.json:1:33: outageBudget.probeDelay: 1m0s is more than maxProbeDelay, whose default is 30s: the first probe would wait 30s; set maxProbeDelay to 1m0s or more`},
		{"first above the default max, from the environment", `{"outageBudget": {}}`,
			`environment AzureFunctionsJobHost__outageBudget__probeDelay: outageBudget.probeDelay: 2m0s is more than maxProbeDelay, whose default is 30s`},
		{"misspelt field", `{"outageBudget": {"minPartition": 3}}`,
			`host.json:1:19: outageBudget: unknown field "minPartition": did you mean minPartitions?`},
		{"not a flag", `{"outageBudget": {"enabled": "yes"}}`,
			`host.json:1:30: outageBudget.enabled: want true or false`},
		{"not an object", `{"outageBudget": true}`,
			`host.json:1:18: outageBudget: want an object, got true`},
		{"misspelt section", `{"outageBudgte": {}}`,
			`host.json:1:2: "outageBudgte" is not a section redeliver reads: did you mean outageBudget?`},
	} {
		t.Run(c.name, func(t *testing.T) {
			var env []string
			if strings.Contains(c.want, "environment") {
				env = []string{"AzureFunctionsJobHost__outageBudget__probeDelay=2m"}
			}
			_, err := withEnv(env...).Parse("host.json", []byte(c.doc))
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("error:\n%v\nwant it to contain:\n%s", err, c.want)
			}
		})
	}
}
