package franz_test

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/redeliver-go/redeliver/adapters/franz"
	"github.com/redeliver-go/redeliver/adapters/franz/share"
	"github.com/redeliver-go/redeliver/stream"
)

// A processor that dead-letters through an unbound franz.Publisher is
// refused when the consumer is built, unless the consumer binds it with
// WithPublisher: it was found at the first record given up, which then
// waited for ever. The share consumer, which binds none, refuses it too.
func TestUnboundDeadLetterPublisherRefused(t *testing.T) {
	pub := new(franz.Publisher)
	dl, err := stream.DeadLetter(pub, "orders.dlq")
	if err != nil {
		t.Fatal(err)
	}
	proc, err := stream.NewProcessor(stream.HandlerFunc(func(context.Context, *stream.Batch) error { return nil }), stream.WithExhaustionAction(dl))
	if err != nil {
		t.Fatal(err)
	}
	opts := franz.WithKgoOptions(kgo.SeedBrokers("127.0.0.1:1"), kgo.ConsumerGroup("g"), kgo.ConsumeTopics("orders"))
	if c, err := franz.New(proc, opts); err == nil || !strings.Contains(err.Error(), "WithPublisher") {
		t.Fatalf("franz.New without WithPublisher: %v, %v; want an error naming WithPublisher", c, err)
	}
	if _, err := share.New(proc, share.WithKgoOptions(kgo.SeedBrokers("127.0.0.1:1"), kgo.ShareGroup("g"), kgo.ConsumeTopics("orders"))); err == nil ||
		!strings.Contains(err.Error(), "NewPublisher") {
		t.Fatalf("share.New with an unbound publisher: %v; want an error naming NewPublisher", err)
	}
	c, err := franz.New(proc, opts, franz.WithPublisher(pub))
	if err != nil {
		t.Fatalf("franz.New with WithPublisher: %v", err)
	}
	if !pub.Bound() {
		t.Fatal("the publisher is not bound")
	}
	if err := c.Close(); err != nil && !errors.Is(err, stream.ErrClosed) {
		t.Errorf("Close: %v", err)
	}
}
