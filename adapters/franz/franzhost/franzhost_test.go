package franzhost_test

import (
	"context"
	"log/slog"
	"strings"
	"testing"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/redeliver-go/redeliver/adapters/franz"
	"github.com/redeliver-go/redeliver/adapters/franz/franzhost"
	"github.com/redeliver-go/redeliver/adapters/franz/share"
	"github.com/redeliver-go/redeliver/host"
	"github.com/redeliver-go/redeliver/stream"
)

// Its tests on an embedded Kafka are in the module host/tests, so that
// this module requires no test-only module.

func processor(t *testing.T) *stream.Processor {
	t.Helper()
	proc, err := stream.NewProcessor(stream.HandlerFunc(func(context.Context, *stream.Batch) error { return nil }))
	if err != nil {
		t.Fatal(err)
	}
	return proc
}

// TestConsumer: a consumer-group trigger gets a franz.Consumer, a
// share-group trigger a share.Consumer; neither reaches the broker before
// Run, and Close releases it.
func TestConsumer(t *testing.T) {
	a, err := franzhost.New(franzhost.WithKgoOptions(kgo.ClientID("test")))
	if err != nil {
		t.Fatal(err)
	}
	if a.Name() != "franz" {
		t.Errorf("Name = %q", a.Name())
	}
	b := host.Binding{Function: "f", Trigger: host.Kafka{Adapter: "franz", Topic: "t", Group: "g", MaxBatch: 7},
		Brokers: []string{"127.0.0.1:1"}, Logger: slog.New(slog.DiscardHandler), OnReady: func() {}}
	c, err := a.Consumer(processor(t), b)
	if _, ok := c.(*franz.Consumer); err != nil || !ok {
		t.Fatalf("Consumer = %T, %v; want a *franz.Consumer", c, err)
	}
	if err := c.Close(); err != nil {
		t.Errorf("Close = %v", err)
	}
	b.Trigger.Share = true
	c, err = a.Consumer(processor(t), b)
	if _, ok := c.(*share.Consumer); err != nil || !ok {
		t.Fatalf("share trigger: Consumer = %T, %v; want a *share.Consumer", c, err)
	}
	if err := c.Close(); err != nil {
		t.Errorf("Close = %v", err)
	}
	// The adapter's own checks reach the caller.
	b.Trigger.Share = false
	if _, err := a.Consumer(nil, b); err == nil || !strings.Contains(err.Error(), "nil processor") {
		t.Errorf("Consumer(nil processor) = %v", err)
	}
}

func TestPublisher(t *testing.T) {
	a, err := franzhost.New()
	if err != nil {
		t.Fatal(err)
	}
	p, closeP, err := a.Publisher([]string{"127.0.0.1:1"})
	if _, ok := p.(*franz.Publisher); err != nil || !ok || closeP == nil {
		t.Fatalf("Publisher = %T, %v, %v; want a *franz.Publisher and a close function", p, closeP != nil, err)
	}
	if err := closeP(); err != nil {
		t.Errorf("close = %v", err)
	}
}

// TestMistakes: nil options and an Adapter not made by New are errors,
// never panics.
func TestMistakes(t *testing.T) {
	for _, tc := range []struct {
		name string
		opts []franzhost.Option
		want string
	}{
		{"nil option", []franzhost.Option{franzhost.WithKgoOptions(), nil}, "franzhost: option 2 of 2 is nil"},
		{"nil kgo option", []franzhost.Option{franzhost.WithKgoOptions(kgo.ClientID("x"), nil)}, "franzhost: WithKgoOptions: kgo option 2 of 2 is nil"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if a, err := franzhost.New(tc.opts...); err == nil || err.Error() != tc.want || a != nil {
				t.Errorf("New = %v, %v; want nil, %q", a, err, tc.want)
			}
		})
	}
	var a *franzhost.Adapter
	const want = "franzhost: this Adapter was not made by franzhost.New: create it with franzhost.New(options...)"
	if _, err := a.Consumer(processor(t), host.Binding{}); err == nil || err.Error() != want {
		t.Errorf("nil Adapter's Consumer = %v", err)
	}
	if _, _, err := a.Publisher(nil); err == nil || err.Error() != want {
		t.Errorf("nil Adapter's Publisher = %v", err)
	}
	if a.Name() != "franz" {
		t.Errorf("nil Adapter's Name = %q", a.Name())
	}
}
