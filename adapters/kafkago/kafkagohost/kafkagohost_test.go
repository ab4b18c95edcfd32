package kafkagohost_test

import (
	"context"
	"log/slog"
	"strings"
	"testing"

	"github.com/segmentio/kafka-go"

	"github.com/redeliver-go/redeliver/adapters/kafkago"
	"github.com/redeliver-go/redeliver/adapters/kafkago/kafkagohost"
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

// TestConsumer: a consumer-group trigger gets a kafkago.Consumer whose
// group configuration the host set and WithGroupConfig edited; a
// share-group trigger is refused, saying which adapter has them.
func TestConsumer(t *testing.T) {
	var seen []kafka.ConsumerGroupConfig
	a, err := kafkagohost.New(kafkagohost.WithGroupConfig(func(gc *kafka.ConsumerGroupConfig) { seen = append(seen, *gc) }))
	if err != nil {
		t.Fatal(err)
	}
	if a.Name() != "kafkago" {
		t.Errorf("Name = %q", a.Name())
	}
	b := host.Binding{Function: "f", Trigger: host.Kafka{Adapter: "kafkago", Topic: "t", Group: "g", MaxBatch: 7},
		Brokers: []string{"127.0.0.1:1"}, Logger: slog.New(slog.DiscardHandler), OnReady: func() {}}
	c, err := a.Consumer(processor(t), b)
	if _, ok := c.(*kafkago.Consumer); err != nil || !ok {
		t.Fatalf("Consumer = %T, %v; want a *kafkago.Consumer", c, err)
	}
	if err := c.Close(); err != nil {
		t.Errorf("Close = %v", err)
	}
	if len(seen) != 1 || seen[0].ID != "g" || len(seen[0].Topics) != 1 || seen[0].Topics[0] != "t" || len(seen[0].Brokers) != 1 || seen[0].Brokers[0] != "127.0.0.1:1" {
		t.Errorf("WithGroupConfig saw %+v, want group g on topic t and the brokers", seen)
	}
	b.Trigger.Share = true
	if c, err := a.Consumer(processor(t), b); c != nil || err == nil ||
		!strings.Contains(err.Error(), `kafka-go has no share-group consumer: a share group needs the franz adapter ("adapter": "franz", module github.com/redeliver-go/redeliver/adapters/franz/franzhost)`) {
		t.Errorf("share trigger: Consumer = %v, %v", c, err)
	}
}

// TestPublisher: the writer is synchronous, acknowledged and quick to
// send (no 1s batch timer); WithWriter edits it, and a writer it breaks
// is refused with the reason.
func TestPublisher(t *testing.T) {
	var w *kafka.Writer
	a, err := kafkagohost.New(kafkagohost.WithWriter(func(got *kafka.Writer) { w = got }))
	if err != nil {
		t.Fatal(err)
	}
	p, closeP, err := a.Publisher([]string{"127.0.0.1:1"})
	if _, ok := p.(*kafkago.Publisher); err != nil || !ok || closeP == nil {
		t.Fatalf("Publisher = %T, %v, %v", p, closeP != nil, err)
	}
	if err := closeP(); err != nil {
		t.Errorf("close = %v", err)
	}
	if w == nil {
		t.Fatal("WithWriter's function was not called")
	}
	if w.Addr == nil || w.Addr.String() != "127.0.0.1:1" || w.RequiredAcks != kafka.RequireAll || w.Async || w.BatchTimeout <= 0 || w.BatchTimeout > 10e6 {
		t.Errorf("writer at %v, acks %v, async %v, batch timeout %v; want on the brokers, RequireAll, synchronous, a batch timeout of a few ms at most", w.Addr, w.RequiredAcks, w.Async, w.BatchTimeout)
	}
	a, err = kafkagohost.New(kafkagohost.WithWriter(func(w *kafka.Writer) { w.Async = true }))
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := a.Publisher([]string{"127.0.0.1:1"}); err == nil || !strings.Contains(err.Error(), "kafkagohost: WithWriter: kafkago: the publisher's writer is Async") {
		t.Errorf("Publisher with an Async writer = %v", err)
	}
}

// TestMistakes: nil options and an Adapter not made by New are errors,
// never panics.
func TestMistakes(t *testing.T) {
	for _, tc := range []struct {
		name string
		opts []kafkagohost.Option
		want string
	}{
		{"nil option", []kafkagohost.Option{nil}, "kafkagohost: option 1 of 1 is nil"},
		{"nil group edit", []kafkagohost.Option{kafkagohost.WithGroupConfig(nil)}, "kafkagohost: WithGroupConfig: nil function"},
		{"nil writer edit", []kafkagohost.Option{kafkagohost.WithWriter(nil)}, "kafkagohost: WithWriter: nil function"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if a, err := kafkagohost.New(tc.opts...); err == nil || err.Error() != tc.want || a != nil {
				t.Errorf("New = %v, %v; want nil, %q", a, err, tc.want)
			}
		})
	}
	var a *kafkagohost.Adapter
	const want = "kafkagohost: this Adapter was not made by kafkagohost.New: create it with kafkagohost.New(options...)"
	if _, err := a.Consumer(processor(t), host.Binding{}); err == nil || err.Error() != want {
		t.Errorf("nil Adapter's Consumer = %v", err)
	}
	if _, _, err := a.Publisher(nil); err == nil || err.Error() != want {
		t.Errorf("nil Adapter's Publisher = %v", err)
	}
}
