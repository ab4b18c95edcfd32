package hostconfig_test

import (
	"context"
	"errors"
	"math/rand/v2"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redeliver-go/redeliver/checkpoint"
	"github.com/redeliver-go/redeliver/hostconfig"
	"github.com/redeliver-go/redeliver/internal/retrystate"
	"github.com/redeliver-go/redeliver/stream"
	"github.com/redeliver-go/redeliver/stream/streamtest"
)

// TestPolicyDelays checks that each strategy converts to the delays of the
// checkpoint constructor it names, draw for draw.
func TestPolicyDelays(t *testing.T) {
	javaDefault, err := checkpoint.NewAzureIoTJava().Policy()
	if err != nil {
		t.Fatal(err)
	}
	webJobs, err := checkpoint.WebJobsRandomizedExponentialBackoff{MinimumInterval: 10 * time.Second, MaximumInterval: 15 * time.Minute, DeltaBackoff: 10 * time.Second}.Policy()
	if err != nil {
		t.Fatal(err)
	}
	awsDemo, err := checkpoint.BackoffAlgorithm{BackOffBase: 500 * time.Millisecond, MaxBackOff: 5 * time.Second, MaxAttempts: 5}.Policy()
	if err != nil {
		t.Fatal(err)
	}
	cExp, err := checkpoint.NewAzureIoTC(checkpoint.AzureIoTCRetryExponentialBackoffWithJitter, 0).Policy()
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		strategy string
		want     checkpoint.Backoff
	}{
		{`"immediate"`, checkpoint.Immediate()},
		{`{"name": "fixed", "delay": "00:00:05"}`, checkpoint.Fixed(5 * time.Second)},
		{`{"name": "linear", "initialDelay": "2s"}`, checkpoint.Linear(2 * time.Second)},
		{`{"name": "exponential", "initialDelay": "1s"}`, checkpoint.Exponential(time.Second)},
		{`{"name": "exponentialJitter", "initialDelay": "1s"}`, checkpoint.ExponentialJitter(time.Second, 5)},
		{`{"name": "random", "initialDelay": "1s"}`, checkpoint.Random(time.Second)},
		{`{"name": "fullJitter", "initialDelay": "1s", "maxDelay": "20s"}`, checkpoint.FullJitter(checkpoint.Capped(20*time.Second, checkpoint.Exponential(time.Second)))},
		{`{"name": "decorrelatedJitter", "initialDelay": "1s", "maxDelay": "20s"}`, checkpoint.Capped(20*time.Second, checkpoint.DecorrelatedJitter(time.Second))},
		{`"jitteredExponential"`, checkpoint.JitteredExponential{
			Delta: 100 * time.Millisecond, Min: 100 * time.Millisecond, Max: 10 * time.Second, JitterDown: 0.5, JitterUp: 0.25,
		}.Backoff()},
		{`{"name": "fixedDelay", "delayInterval": "00:00:03"}`, checkpoint.Fixed(3 * time.Second)},
		{`{"name": "exponentialBackoff", "minimumInterval": "00:00:10", "maximumInterval": "00:15:00"}`, webJobs.Backoff},
		{`"azureIotJava"`, javaDefault.Backoff},
		{`"azureIotCExponentialBackoffWithJitter"`, cExp.Backoff},
		{`{"name": "backoffAlgorithm", "initialDelay": "500ms", "maxDelay": "5s"}`, awsDemo.Backoff},
	} {
		t.Run(tc.strategy, func(t *testing.T) {
			cfg, err := noEnv.Parse("host.json", []byte(`{"checkpointRetryPolicy": {"retryCount": 30, "strategy": `+tc.strategy+`}}`))
			if err != nil {
				t.Fatal(err)
			}
			p, err := cfg.Policy()
			if err != nil {
				t.Fatal(err)
			}
			want := checkpoint.Policy{MaxRetries: 30, Backoff: tc.want}
			got := p.Schedule(30, rand.New(rand.NewPCG(1, 2)))
			if w := want.Schedule(30, rand.New(rand.NewPCG(1, 2))); !reflect.DeepEqual(got, w) {
				t.Errorf("delays = %v\nwant %v", got, w)
			}
		})
	}
}

func TestPolicyLimits(t *testing.T) {
	cfg, err := noEnv.Parse("host.json", []byte(`{"checkpointRetryPolicy": {"retryCount": -1, "sleepDuration": "1m",
		"maxDelay": "30s", "maxRetryTime": "00:10:00", "maxRecordAge": "1.00:00:00"}}`))
	if err != nil {
		t.Fatal(err)
	}
	p, err := cfg.Policy()
	if err != nil {
		t.Fatal(err)
	}
	if p.MaxRetries != checkpoint.Infinite || p.MaxDelay != 30*time.Second || p.MaxRetryTime != 10*time.Minute || p.MaxRecordAge != 24*time.Hour {
		t.Errorf("Policy = %+v", p)
	}
	if d := p.Delay(1, 0, nil); d != 30*time.Second {
		t.Errorf("first delay = %v, want 30s (capped)", d)
	}
}

// Retry-after hints are honoured unless honorRetryAfter is false, in the
// file or from the environment; a value that is not a boolean is an error.
func TestHonorRetryAfter(t *testing.T) {
	hinted := checkpoint.RetryAfter(errors.New("throttled"), time.Minute)
	for _, tc := range []struct {
		name, json string
		env        []string
		want       time.Duration
	}{
		{"default", `{"checkpointRetryPolicy": {"retryCount": 3, "sleepDuration": "1s"}}`, nil, time.Minute},
		{"off", `{"checkpointRetryPolicy": {"retryCount": 3, "sleepDuration": "1s", "honorRetryAfter": false}}`, nil, time.Second},
		{"off by environment", `{"checkpointRetryPolicy": {"retryCount": 3, "sleepDuration": "1s"}}`,
			[]string{"AzureFunctionsJobHost__checkpointRetryPolicy__honorRetryAfter=false"}, time.Second},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg, err := (&hostconfig.Loader{Environ: func() []string { return tc.env }}).Parse("host.json", []byte(tc.json))
			if err != nil {
				t.Fatal(err)
			}
			p, err := cfg.Policy()
			if err != nil {
				t.Fatal(err)
			}
			m := retrystate.NewMachine(p)
			if d := m.Fail(time.Unix(0, 0), hinted, nil); d.Delay != tc.want {
				t.Errorf("delay %v, want %v", d.Delay, tc.want)
			}
		})
	}
	_, err := noEnv.Parse("host.json", []byte(`{"checkpointRetryPolicy": {"retryCount": 3, "sleepDuration": "1s", "honorRetryAfter": "no"}}`))
	if err == nil || !strings.Contains(err.Error(), "host.json:1:87: checkpointRetryPolicy.honorRetryAfter: want true or false") {
		t.Errorf("error %v, want one naming honorRetryAfter at 1:87", err)
	}
}

func TestPolicyOfNothing(t *testing.T) {
	cfg, err := noEnv.Parse("host.json", []byte(`{}`))
	if err != nil {
		t.Fatal(err)
	}
	p, err := cfg.Policy()
	if err != nil || p.MaxRetries != 0 || p.Backoff != nil {
		t.Errorf("Policy = %+v, %v; want the zero Policy", p, err)
	}
	if p := cfg.Function("any"); p != nil {
		t.Errorf("Function = %+v, want nil (the host-wide policy: none)", p)
	}
	if p, err := cfg.Policy(hostconfig.Function("any")); err != nil || p.MaxRetries != 0 {
		t.Errorf("Policy(Function) of a function without a policy = %+v, %v; want the host-wide policy (none)", p, err)
	}
}

func TestPolicyOfHandBuiltValues(t *testing.T) {
	for _, tc := range []struct {
		p    hostconfig.RetryPolicy
		want string
	}{
		{hostconfig.RetryPolicy{Origin: "o", RetryCount: 1, Strategy: hostconfig.Strategy{Name: "nope"}}, `hostconfig: o: unknown strategy "nope"`},
		{hostconfig.RetryPolicy{Origin: "o", RetryCount: 1}, `hostconfig: o: unknown strategy ""`},
		{hostconfig.RetryPolicy{Origin: "o", RetryCount: 1, Strategy: hostconfig.Strategy{Name: "fixed", Delay: -1}}, `hostconfig: o: strategy fixed: delay is -1ns`},
		{hostconfig.RetryPolicy{Origin: "o", RetryCount: 1, Strategy: hostconfig.Strategy{Name: "exponentialJitter", JitterPercent: 200}}, `hostconfig: o: strategy exponentialJitter: jitterPercent is 200: want 0 to 100`},
		{hostconfig.RetryPolicy{Origin: "o", RetryCount: -2, Strategy: hostconfig.Strategy{Name: "immediate"}}, `hostconfig: o: checkpoint: MaxRetries is -2`},
		{hostconfig.RetryPolicy{Origin: "o", MaxDelay: -1}, `hostconfig: o: checkpoint: MaxDelay is -1ns`},
	} {
		_, err := tc.p.Policy()
		if err == nil || !strings.HasPrefix(err.Error(), tc.want) {
			t.Errorf("Policy(%+v) = %v, want an error starting %q", tc.p, err, tc.want)
		}
	}
}

// publisher records what a dead-letter action publishes.
type publisher struct {
	mu     sync.Mutex
	topics []string
	values []string
}

func (p *publisher) Publish(_ context.Context, topic string, recs []stream.Record) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, r := range recs {
		p.topics = append(p.topics, topic)
		p.values = append(p.values, string(r.Value))
	}
	return nil
}

// TestOptionsRun runs a Processor configured by a host.json over a
// partition whose batches always fail.
func TestOptionsRun(t *testing.T) {
	cfg, err := noEnv.Parse("host.json", []byte(`{"checkpointRetryPolicy": {"retryCount": 2, "strategy": "immediate",
		"onExhausted": {"action": "deadLetter", "topic": "dlq"},
		"functions": {"audit": {"onExhausted": "stop"}, "lax": {"onExhausted": "skip"}}}}`))
	if err != nil {
		t.Fatal(err)
	}
	failing := stream.HandlerFunc(func(context.Context, *stream.Batch) error { return errors.New("down") })
	run := func(t *testing.T, opts []stream.Option, until func(*stream.Processor, *streamtest.Partition) bool) *streamtest.Recorder {
		t.Helper()
		rec := &streamtest.Recorder{}
		proc, err := stream.NewProcessor(rec.Middleware()(failing), opts...)
		if err != nil {
			t.Fatal(err)
		}
		part := streamtest.NewPartition("orders", 0, 2)
		part.Append(time.Now(), "a", "b")
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		reached := make(chan bool, 1)
		go func() {
			for ctx.Err() == nil && !until(proc, part) {
				time.Sleep(time.Millisecond)
			}
			reached <- ctx.Err() == nil
			cancel()
		}()
		_ = streamtest.Run(ctx, proc, part)
		if !<-reached {
			t.Fatal("the partition never reached the expected state")
		}
		return rec
	}
	committed := func(_ *stream.Processor, part *streamtest.Partition) bool {
		next, _ := part.Committed()
		return next == part.End()
	}

	t.Run("deadLetter", func(t *testing.T) {
		pub := &publisher{}
		opts, err := cfg.Options(pub)
		if err != nil {
			t.Fatal(err)
		}
		rec := run(t, opts, committed)
		if n := len(rec.Deliveries()); n != 3 {
			t.Errorf("%d deliveries, want 3 (retryCount 2)", n)
		}
		pub.mu.Lock()
		defer pub.mu.Unlock()
		if !reflect.DeepEqual(pub.topics, []string{"dlq", "dlq"}) || !reflect.DeepEqual(pub.values, []string{"a", "b"}) {
			t.Errorf("published %v %v, want a and b to dlq", pub.topics, pub.values)
		}
	})
	t.Run("stop", func(t *testing.T) {
		opts, err := cfg.Options(nil, hostconfig.Function("audit"))
		if err != nil {
			t.Fatal(err)
		}
		run(t, opts, func(proc *stream.Processor, _ *streamtest.Partition) bool { return len(proc.Stopped()) == 1 })
	})
	t.Run("skip", func(t *testing.T) {
		opts, err := cfg.Options(nil, hostconfig.Function("lax"))
		if err != nil {
			t.Fatal(err)
		}
		run(t, opts, committed)
	})
	t.Run("deadLetter without a publisher", func(t *testing.T) {
		if _, err := cfg.Options(nil); err == nil || !strings.Contains(err.Error(), "needs a stream.Publisher") {
			t.Errorf("Options(nil) = %v, want an error asking for a publisher", err)
		}
	})
}
