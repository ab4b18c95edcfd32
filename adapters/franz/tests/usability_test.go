package franz_test

import (
	"context"
	"strings"
	"testing"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/redeliver-go/redeliver/adapters/franz"
	"github.com/redeliver-go/redeliver/stream"
)

// A Publisher built before the consumer, bound to its client by
// WithPublisher: the natural order (options, processor, consumer) works.
// Unbound, it says what is missing; bound to two consumers, New refuses.
func TestPublisherBoundToTheConsumer(t *testing.T) {
	addrs := newCluster(t, "t", 1)
	pub := new(franz.Publisher)
	err := pub.Publish(context.Background(), "x", []stream.Record{{Value: []byte("v")}})
	if err == nil || !strings.Contains(err.Error(), "WithPublisher") {
		t.Fatalf("Publish of an unbound publisher: %v", err)
	}
	proc := newProcessor(t, stream.HandlerFunc(func(context.Context, *stream.Batch) error { return nil }))
	r := start(t, addrs, "g", "t", proc, franz.WithPublisher(pub))
	if err := pub.Publish(context.Background(), "t", []stream.Record{{Value: []byte("v")}}); err != nil {
		t.Fatalf("Publish through the consumer's client: %v", err)
	}
	if _, err := franz.New(proc, franz.WithPublisher(pub), franz.WithKgoOptions(kgo.SeedBrokers(addrs...), kgo.ConsumerGroup("g2"), kgo.ConsumeTopics("t"))); err == nil {
		t.Fatal("a publisher bound to a second consumer accepted")
	}
	if _, err := franz.New(proc, franz.WithPublisher(nil), franz.WithKgoOptions(kgo.SeedBrokers(addrs...), kgo.ConsumerGroup("g3"), kgo.ConsumeTopics("t"))); err == nil {
		t.Fatal("WithPublisher(nil) accepted")
	}
	_ = r
}
