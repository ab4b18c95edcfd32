package saramahost_test

import (
	"context"
	"log/slog"
	"strings"
	"testing"

	"github.com/IBM/sarama"

	rdsarama "github.com/redeliver-go/redeliver/adapters/sarama"
	"github.com/redeliver-go/redeliver/adapters/sarama/saramahost"
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

// A consumer-group trigger gets a sarama adapter's Consumer built with the
// configuration WithConfig edited; a share-group trigger is refused,
// saying which adapter has them; nil options and adapters not made by New
// are errors.
func TestConsumer(t *testing.T) {
	edited := 0
	a, err := saramahost.New(saramahost.WithConfig(func(c *sarama.Config) {
		edited++
		if c.Consumer.Offsets.Initial != sarama.OffsetOldest {
			t.Errorf("the configuration starts at %d, want sarama.OffsetOldest", c.Consumer.Offsets.Initial)
		}
	}))
	if err != nil {
		t.Fatal(err)
	}
	if a.Name() != "sarama" {
		t.Errorf("Name = %q", a.Name())
	}
	b := host.Binding{Function: "f", Trigger: host.Kafka{Adapter: "sarama", Topic: "t", Group: "g", MaxBatch: 7},
		Brokers: []string{"127.0.0.1:1"}, Logger: slog.New(slog.DiscardHandler), OnReady: func() {}}
	c, err := a.Consumer(processor(t), b)
	if _, ok := c.(*rdsarama.Consumer); err != nil || !ok {
		t.Fatalf("Consumer = %T, %v; want a *sarama.Consumer", c, err)
	}
	if err := c.Close(); err != nil {
		t.Errorf("Close = %v", err)
	}
	if edited != 1 {
		t.Errorf("WithConfig's function called %d times, want 1", edited)
	}
	b.Trigger.Share = true
	if c, err := a.Consumer(processor(t), b); c != nil || err == nil || !strings.Contains(err.Error(), "sarama has no share-group consumer") {
		t.Errorf("share trigger: Consumer = %v, %v", c, err)
	}
	if _, err := saramahost.New(nil); err == nil {
		t.Error("New(nil) returned no error")
	}
	if _, err := saramahost.New(saramahost.WithConfig(nil)); err == nil {
		t.Error("New(WithConfig(nil)) returned no error")
	}
	var zero *saramahost.Adapter
	if _, err := zero.Consumer(processor(t), b); err == nil {
		t.Error("a nil Adapter's Consumer returned no error")
	}
	if _, _, err := zero.Publisher(nil); err == nil {
		t.Error("a nil Adapter's Publisher returned no error")
	}
	pub, closePub, err := a.Publisher([]string{"127.0.0.1:1"})
	if err != nil {
		t.Fatalf("Publisher on brokers that do not answer: %v, want it made (its client is made at the first publish)", err)
	}
	if err := pub.Publish(context.Background(), "dlq", []stream.Record{{}}); err == nil || !strings.Contains(err.Error(), "dead-letter producer's client") {
		t.Errorf("Publish on brokers that do not answer: %v", err)
	}
	if err := closePub(); err != nil {
		t.Errorf("close: %v", err)
	}
}
