package hostconfig_test

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/redeliver-go/redeliver/checkpoint"
	"github.com/redeliver-go/redeliver/hostconfig"
	"github.com/redeliver-go/redeliver/stream"
	"github.com/redeliver-go/redeliver/stream/streamtest"
)

// The host.json of the design proposal, comments included, converted into a
// checkpoint policy.
func ExampleParse() {
	cfg, err := hostconfig.Parse("host.json", []byte(`{
  "version": "2.0",
  // This host.json would only be valid for checkpoint based triggers
  "checkpointRetryPolicy": {
    "retryCount": 10, // -1 for infinite
    "sleepDuration": "00:00:05",
  },
}`))
	if err != nil {
		fmt.Println(err)
		return
	}
	p, err := cfg.Policy()
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println(p.MaxRetries, p.Schedule(3, nil))
	// Output: 10 [5s 5s 5s]
}

// Every problem of a document is reported at once, each with its place.
func ExampleParse_errors() {
	_, err := hostconfig.Parse("host.json", []byte(`{
  "version": "2.0",
  "checkpointRetryPolicy": {
    "retryCount": -2,
    "sleepDuraton": "00:00:05",
    "maxDelay": "24:00:00",
  },
}`))
	fmt.Println(err)
	// Output:
	// hostconfig: host.json:4:19: checkpointRetryPolicy.retryCount: -2 is below -1: want -1 (retry forever), 0 (never) or a number of retries
	// hostconfig: host.json:5:5: checkpointRetryPolicy: unknown field "sleepDuraton": did you mean sleepDuration?
	// hostconfig: host.json:6:17: checkpointRetryPolicy.maxDelay: "24:00:00": hours: 24 is out of range: want 0 to 23
}

// App settings override host.json as in Azure Functions; the environment is
// injected here.
func ExampleLoader() {
	l := hostconfig.Loader{Environ: func() []string {
		return []string{"AzureFunctionsJobHost__checkpointRetryPolicy__retryCount=3"}
	}}
	cfg, err := l.Parse("host.json", []byte(`{"checkpointRetryPolicy": {"retryCount": 10, "sleepDuration": "00:00:05"}}`))
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println(cfg.Host.RetryCount)
	// Output: 3
}

// Each function of a host can have its own policy, inheriting what it
// does not set; Function selects it.
func ExampleFunction() {
	cfg, err := hostconfig.Parse("host.json", []byte(`{
  "checkpointRetryPolicy": {
    "retryCount": 10,
    "sleepDuration": "00:00:05",
    "functions": {
      "payments": {"strategy": {"name": "exponential", "initialDelay": "1s"}, "maxDelay": "00:01:00"},
    },
  },
}`))
	if err != nil {
		fmt.Println(err)
		return
	}
	orders, err := cfg.Policy() // a function with no policy of its own follows the host-wide one
	if err != nil {
		fmt.Println(err)
		return
	}
	payments, err := cfg.Policy(hostconfig.Function("payments"))
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println("orders", orders.MaxRetries, orders.Schedule(8, nil))
	fmt.Println("payments", payments.MaxRetries, payments.Schedule(8, nil))
	// Output:
	// orders 10 [5s 5s 5s 5s 5s 5s 5s 5s]
	// payments 10 [1s 2s 4s 8s 16s 32s 1m0s 1m0s]
}

// A misspelt function name is an error, not the host-wide policy.
func ExampleFunction_misspelt() {
	cfg, err := hostconfig.Parse("host.json", []byte(`{
  "checkpointRetryPolicy": {"retryCount": 10, "sleepDuration": "00:00:05", "functions": {"payments": {"retryCount": -1}}}
}`))
	if err != nil {
		fmt.Println(err)
		return
	}
	_, err = cfg.Policy(hostconfig.Function("paymnets"))
	fmt.Println(err)
	// Output:
	// hostconfig: host.json: function "paymnets" has no policy of its own in checkpointRetryPolicy.functions: did you mean payments? (a function that follows the host-wide policy needs no Function option)
}

// CheckFunctions flags an entry of host.json that names none of the
// functions a program runs.
func ExampleConfig_CheckFunctions() {
	cfg, err := hostconfig.Parse("host.json", []byte(`{
  "checkpointRetryPolicy": {
    "retryCount": 3,
    "sleepDuration": "00:00:05",
    "functions": {"payments": {"retryCount": -1}},
  },
}`))
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println(cfg.CheckFunctions([]string{"orders", "payment"}))
	// Output:
	// hostconfig: host.json:5:19: checkpointRetryPolicy.functions.payments: a policy for function "payments", which the host does not run: did you mean payment?
}

func ExampleConfig_Explain() {
	cfg, err := hostconfig.Parse("host.json", []byte(`{
  "checkpointRetryPolicy": {
    "retryCount": 6,
    "strategy": {"name": "fullJitter", "initialDelay": "1s", "maxDelay": "00:00:10"},
    "maxRetryTime": "00:00:30",
    "onExhausted": {"action": "deadLetter", "topic": "orders-dlq"},
  },
}`))
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Print(cfg.Explain())
	// Output:
	// checkpointRetryPolicy (host.json:2:28): retries a failed batch up to 6 times (at most 7 deliveries).
	// It waits a random time below min(1s * 2^(n-1), 10s) before retry n (strategy fullJitter).
	// No retry starts 30s or more after the batch's first failure.
	// First retry delays: 0s..1s, 0s..2s, 0s..4s, 0s..8s, 0s..10s, 0s..10s (random within each range).
	// Worst case, every random draw at its upper end: 25s of waiting over 5 retries, when the retry time budget of 30s ends them (the handler's run time not included).
	// Then the batch is sent to topic "orders-dlq" and the checkpoint advances past it.
	// Values: maxRetryTime from host.json:5:21; onExhausted.action from host.json:6:31; onExhausted.topic from host.json:6:54; retryCount from host.json:3:19; strategy.initialDelay from host.json:4:56; strategy.maxDelay from host.json:4:74; strategy.name from host.json:4:26; anything else is a default.
}

// Options turns host.json's policy and exhaustion action into processor
// options. Here a batch is delivered three times (retryCount 2), then
// dead-lettered through the publisher given to Options (in a program,
// franz.Publisher or kafkago.Publisher).
func ExampleConfig_Options() {
	cfg, err := hostconfig.Parse("host.json", []byte(`{
  "checkpointRetryPolicy": {
    "retryCount": 2,
    "strategy": "immediate",
    "onExhausted": {"action": "deadLetter", "topic": "orders-dlq"},
  },
}`))
	if err != nil {
		fmt.Println(err)
		return
	}
	opts, err := cfg.Options(printPublisher{})
	if err != nil {
		fmt.Println(err)
		return
	}
	handler := stream.HandlerFunc(func(ctx context.Context, b *stream.Batch) error {
		fmt.Println("delivery", b.Attempt.Number())
		return errors.New("downstream unavailable")
	})
	proc, err := stream.NewProcessor(handler, opts...)
	if err != nil {
		fmt.Println(err)
		return
	}
	runToEnd(proc, "order-7")
	// Output:
	// delivery 1
	// delivery 2
	// delivery 3
	// to orders-dlq: order-7
}

func ExampleParseDuration() {
	for _, s := range []string{"00:00:05", "1.02:03:04.5", "1m30s", "24:00:00", "5"} {
		d, err := hostconfig.ParseDuration(s)
		if err != nil {
			fmt.Println(err)
			continue
		}
		fmt.Println(d)
	}
	// Output:
	// 5s
	// 26h3m4.5s
	// 1m30s
	// hostconfig: "24:00:00": hours: 24 is out of range: want 0 to 23
	// hostconfig: "5": a bare number is ambiguous (.NET reads "5" as 5 days): write "5s" for seconds or "5.00:00:00" for days
}

// A Strategy converts to the checkpoint Backoff it names.
func ExampleStrategy_Backoff() {
	b, err := hostconfig.Strategy{Name: "exponential", InitialDelay: time.Second}.Backoff()
	if err != nil {
		fmt.Println(err)
		return
	}
	p := checkpoint.Policy{MaxRetries: 5, Backoff: b}
	fmt.Println(p.Schedule(5, nil))
	// Output: [1s 2s 4s 8s 16s]
}

// runToEnd runs proc over an in-memory partition holding values until its
// checkpoint is past the last one.
func runToEnd(proc *stream.Processor, values ...string) {
	part := streamtest.NewPartition("orders", 0, 10)
	part.Append(time.Now(), values...)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	go func() {
		_ = part.WaitCommitted(ctx, part.End())
		cancel()
	}()
	_ = streamtest.Run(ctx, proc, part)
}

// printPublisher is a stream.Publisher that prints what it is given.
type printPublisher struct{}

func (printPublisher) Publish(_ context.Context, topic string, recs []stream.Record) error {
	for _, r := range recs {
		fmt.Printf("to %s: %s\n", topic, r.Value)
	}
	return nil
}
