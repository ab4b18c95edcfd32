package host_test

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/redeliver-go/redeliver/host"
	"github.com/redeliver-go/redeliver/hostconfig"
	"github.com/redeliver-go/redeliver/stream"
	"github.com/redeliver-go/redeliver/stream/streamtest"
)

// source is a host.Source on in-memory partitions, for the examples: a
// real program binds a Kafka topic (host.Kafka, or host.json's triggers)
// or an Event Hub.
func source(parts ...*streamtest.Partition) host.Source {
	return host.Source{
		Describe: "in-memory orders",
		Topic:    "orders",
		New: func(proc *stream.Processor) (func(context.Context) error, error) {
			return func(ctx context.Context) error {
				if err := streamtest.Run(ctx, proc, parts...); err != nil && ctx.Err() == nil {
					return err
				}
				return nil
			}, nil
		},
	}
}

// A function retried under its policy from host.json; Run returns nil once
// its context is cancelled.
func ExampleHost_Run() {
	cfg, err := hostconfig.Loader{}.Parse("host.json", []byte(`{
  "checkpointRetryPolicy": {"functions": {"orders": {"retryCount": 2, "sleepDuration": "00:00:00"}}}
}`))
	if err != nil {
		fmt.Println(err)
		return
	}
	h, err := host.New(cfg)
	if err != nil {
		fmt.Println(err)
		return
	}
	orders := streamtest.NewPartition("orders", 0, 1)
	orders.AppendN(time.Now(), 3)
	err = h.Register("orders", stream.HandlerFunc(func(_ context.Context, b *stream.Batch) error {
		if b.FirstOffset() == 1 && b.Attempt.Retries == 0 {
			fmt.Printf("offset %d, attempt %d: fails\n", b.FirstOffset(), b.Attempt.Number())
			return errors.New("inventory timed out")
		}
		fmt.Printf("offset %d, attempt %d\n", b.FirstOffset(), b.Attempt.Number())
		return nil
	}), source(orders))
	if err != nil {
		fmt.Println(err)
		return
	}
	ctx, stop := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- h.Run(ctx) }()
	if err := orders.WaitCommitted(ctx, 3); err != nil {
		fmt.Println(err)
	}
	stop() // as an interrupt would
	fmt.Println("Run:", <-done)
	// Output:
	// offset 0, attempt 1
	// offset 1, attempt 1: fails
	// offset 1, attempt 2
	// offset 2, attempt 1
	// Run: <nil>
}

// The status of a partition that the policy stopped, as the status page
// and /status.json show it.
func ExampleHost_Status() {
	cfg, err := hostconfig.Loader{}.Parse("host.json", []byte(`{
  "checkpointRetryPolicy": {"retryCount": 1, "sleepDuration": "00:00:00", "onExhausted": "stop"}
}`))
	if err != nil {
		fmt.Println(err)
		return
	}
	stopped := make(chan struct{})
	h, err := host.New(cfg, host.WithHooks(stream.Hooks{Stopped: func(stream.StoppedEvent) { close(stopped) }}))
	if err != nil {
		fmt.Println(err)
		return
	}
	orders := streamtest.NewPartition("orders", 0, 5)
	orders.AppendN(time.Now(), 2)
	fail := stream.HandlerFunc(func(context.Context, *stream.Batch) error { return errors.New("card processor rejects currency XTS") })
	if err := h.Register("orders", fail, source(orders)); err != nil {
		fmt.Println(err)
		return
	}
	defer runUntilDone(h)()
	<-stopped
	f := h.Status().Functions[0]
	p := f.Partitions[0]
	fmt.Println("policy:", f.Policy)
	fmt.Printf("%s/%d: %s at offsets %d-%d after %d retry\n", p.Topic, p.Partition, p.State, p.FirstOffset, p.LastOffset, p.Retry)
	fmt.Println(p.LastError)
	// Output:
	// policy: 1 retry, 0s apart, then stop
	// orders/0: stopped at offsets 0-1 after 1 retry
	// given up (retries spent): card processor rejects currency XTS
}

// Run checks the bindings before it starts anything, and reports every
// problem at once: here, two functions that would split one group's
// records between them, on a host that was given no Kafka client (a
// program gives it the one its triggers use with host.WithAdapter, from
// the module adapters/franz/franzhost or adapters/kafkago/kafkagohost).
func ExampleHost_Register_sharedGroup() {
	h, err := host.New(nil, host.WithBrokers("127.0.0.1:9092"))
	if err != nil {
		fmt.Println(err)
		return
	}
	ok := stream.HandlerFunc(func(context.Context, *stream.Batch) error { return nil })
	_ = h.Register("billing", ok, host.Kafka{Topic: "orders", Group: "orders-app"})
	_ = h.Register("shipping", ok, host.Kafka{Topic: "orders", Group: "orders-app"})
	fmt.Println(h.Run(context.Background()))
	// Output:
	// host: function billing (trigger from code): adapter "franz" (the default: the trigger names no adapter) was not given to the host (it has none): give host.WithAdapter(a) with a from franzhost.New() (module github.com/redeliver-go/redeliver/adapters/franz/franzhost, on twmb/franz-go)
	// host: function shipping (trigger from code): adapter "franz" (the default: the trigger names no adapter) was not given to the host (it has none): give host.WithAdapter(a) with a from franzhost.New() (module github.com/redeliver-go/redeliver/adapters/franz/franzhost, on twmb/franz-go)
	// host: functions billing (trigger from code) and shipping (trigger from code) both consume topic "orders" in group "orders-app": the group would split the topic's records between them, each function getting a part; give each function a group of its own
}

// runUntilDone runs h until the function it returns is called.
func runUntilDone(h *host.Host) (stop func()) {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- h.Run(ctx) }()
	return func() { cancel(); <-done }
}
