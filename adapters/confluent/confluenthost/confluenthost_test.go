package confluenthost_test

import (
	"context"
	"log/slog"
	"strings"
	"testing"

	"github.com/confluentinc/confluent-kafka-go/v2/kafka"

	"github.com/redeliver-go/redeliver/adapters/confluent"
	"github.com/redeliver-go/redeliver/adapters/confluent/confluenthost"
	"github.com/redeliver-go/redeliver/host"
	"github.com/redeliver-go/redeliver/stream"
)

func processor(t *testing.T) *stream.Processor {
	t.Helper()
	proc, err := stream.NewProcessor(stream.HandlerFunc(func(context.Context, *stream.Batch) error { return nil }))
	if err != nil {
		t.Fatal(err)
	}
	return proc
}

// A consumer-group trigger gets a confluent adapter's Consumer built with
// the configuration WithConfig edited; a share-group trigger is refused;
// the dead-letter producer is made (librdkafka connects later); nil
// options and adapters not made by New are errors.
func TestAdapter(t *testing.T) {
	var seen kafka.ConfigMap
	a, err := confluenthost.New(confluenthost.WithConfig(func(c kafka.ConfigMap) { seen = c }),
		confluenthost.WithProducerConfig(func(c kafka.ConfigMap) { c["log_level"] = 0 }))
	if err != nil {
		t.Fatal(err)
	}
	if a.Name() != "confluent" {
		t.Errorf("Name = %q", a.Name())
	}
	b := host.Binding{Function: "f", Trigger: host.Kafka{Adapter: "confluent", Topic: "t", Group: "g", MaxBatch: 7},
		Brokers: []string{"127.0.0.1:1"}, Logger: slog.New(slog.DiscardHandler), OnReady: func() {}}
	c, err := a.Consumer(processor(t), b)
	if _, ok := c.(*confluent.Consumer); err != nil || !ok {
		t.Fatalf("Consumer = %T, %v; want a *confluent.Consumer", c, err)
	}
	if err := c.Close(); err != nil {
		t.Errorf("Close = %v", err)
	}
	if seen["group.id"] != "g" || seen["bootstrap.servers"] != "127.0.0.1:1" || seen["auto.offset.reset"] != "earliest" {
		t.Errorf("WithConfig saw %v", seen)
	}
	b.Trigger.Share = true
	if c, err := a.Consumer(processor(t), b); c != nil || err == nil || !strings.Contains(err.Error(), "no share-group consumer") {
		t.Errorf("share trigger: Consumer = %v, %v", c, err)
	}
	pub, closePub, err := a.Publisher([]string{"127.0.0.1:1"})
	if err != nil || pub == nil {
		t.Fatalf("Publisher = %v, %v", pub, err)
	}
	if err := closePub(); err != nil {
		t.Errorf("close = %v", err)
	}
	if _, err := confluenthost.New(nil); err == nil {
		t.Error("New(nil) returned no error")
	}
	if _, err := confluenthost.New(confluenthost.WithConfig(nil)); err == nil {
		t.Error("New(WithConfig(nil)) returned no error")
	}
	var zero *confluenthost.Adapter
	if _, err := zero.Consumer(processor(t), b); err == nil {
		t.Error("a nil Adapter's Consumer returned no error")
	}
}
