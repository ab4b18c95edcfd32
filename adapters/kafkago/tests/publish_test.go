package tests

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/segmentio/kafka-go"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/redeliver-go/redeliver/adapters/internal/kafkatest"
	"github.com/redeliver-go/redeliver/adapters/kafkago"
	"github.com/redeliver-go/redeliver/checkpoint"
	"github.com/redeliver-go/redeliver/stream"
)

func TestNewPublisherErrors(t *testing.T) {
	addr := kafka.TCP("localhost:9092")
	for _, tc := range []struct {
		name string
		w    *kafka.Writer
	}{
		{"nil writer", nil},
		{"async", &kafka.Writer{Addr: addr, Async: true, RequiredAcks: kafka.RequireAll}},
		{"no acks", &kafka.Writer{Addr: addr}},
		{"own topic", &kafka.Writer{Addr: addr, Topic: "t", RequiredAcks: kafka.RequireAll}},
		{"no address", &kafka.Writer{RequiredAcks: kafka.RequireAll}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if _, err := kafkago.NewPublisher(tc.w); err == nil {
				t.Fatal("NewPublisher returned no error")
			} else {
				t.Log(err)
			}
		})
	}
}
func TestPublisherWritesHeadersAndRefusesBadWriters(t *testing.T) {
	_, addrs := newCluster(t, "dlq", 1)
	for _, w := range []*kafka.Writer{nil, {Topic: "x"}, {Async: true}} {
		if _, err := kafkago.NewPublisher(w); err == nil {
			t.Errorf("NewPublisher(%+v) accepted", w)
		}
	}
	w := &kafka.Writer{Addr: kafka.TCP(addrs...), RequiredAcks: kafka.RequireAll, BatchTimeout: time.Millisecond}
	defer w.Close()
	pub, err := kafkago.NewPublisher(w)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), wait)
	defer cancel()
	recs := []stream.Record{
		{Key: []byte("k0"), Value: []byte("v0"), Headers: []stream.Header{{Key: stream.HeaderOffset, Value: []byte("7")}}},
		{Value: []byte("v1")},
	}
	if err := pub.Publish(ctx, "dlq", recs); err != nil {
		t.Fatal(err)
	}
	cl, err := kgo.NewClient(kgo.SeedBrokers(addrs...), kgo.ConsumeTopics("dlq"), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	var got []*kgo.Record
	for len(got) < 2 {
		fs := cl.PollFetches(ctx)
		if ctx.Err() != nil {
			t.Fatalf("read %d records back, want 2", len(got))
		}
		got = append(got, fs.Records()...)
	}
	if string(got[0].Key) != "k0" || string(got[0].Value) != "v0" || len(got[0].Headers) != 1 ||
		got[0].Headers[0].Key != stream.HeaderOffset || string(got[0].Headers[0].Value) != "7" || string(got[1].Value) != "v1" {
		t.Fatalf("read back %+v, %+v", got[0], got[1])
	}
}

// An empty Publisher given to New with WithPublisher dead-letters through
// a writer on the consumer's own brokers, as franz's WithPublisher binds a
// Publisher to the consumer's client: one way to build the dead-letter
// publisher on either adapter. A nil or already-written-through publisher
// is refused, and so is a processor that dead-letters through an empty
// Publisher not given with WithPublisher.
func TestWithPublisherBindsToTheConsumersBrokers(t *testing.T) {
	_, addrs := newCluster(t, "orders", 1)
	kafkatest.CreateTopics(t, addrs, "orders.dlq")
	produce(t, addrs, "orders", 0, 0, 3)
	pub := new(kafkago.Publisher)
	dl, err := stream.DeadLetter(pub, "orders.dlq")
	if err != nil {
		t.Fatal(err)
	}
	h := stream.HandlerFunc(func(context.Context, *stream.Batch) error { return checkpoint.Permanent(errors.New("schema mismatch")) })
	proc := newProcessor(t, h, stream.WithExhaustionAction(dl))

	if _, err := kafkago.New(proc, kafkago.WithGroupConfig(groupConfig(addrs, "g0", "orders"))); err == nil || !strings.Contains(err.Error(), "give it to New with WithPublisher") {
		t.Errorf("New with an empty Publisher not given with WithPublisher: %v", err)
	}
	if _, err := kafkago.New(proc, kafkago.WithGroupConfig(groupConfig(addrs, "g0", "orders")), kafkago.WithPublisher(nil)); err == nil {
		t.Error("WithPublisher(nil) accepted")
	}

	start(t, addrs, "g", "orders", proc, kafkago.WithPublisher(pub))
	waitCommitted(t, addrs, "g", "orders", map[int32]int64{0: 3})
	if _, err := kafkago.New(proc, kafkago.WithGroupConfig(groupConfig(addrs, "g2", "orders")), kafkago.WithPublisher(pub)); err == nil || !strings.Contains(err.Error(), "has a writer already") {
		t.Errorf("a publisher bound twice: %v", err)
	}

	ctx, cancel := context.WithTimeout(context.Background(), wait)
	defer cancel()
	cl, err := kgo.NewClient(kgo.SeedBrokers(addrs...), kgo.ConsumeTopics("orders.dlq"), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	var got []*kgo.Record
	for len(got) < 3 && ctx.Err() == nil {
		got = append(got, cl.PollFetches(ctx).Records()...)
	}
	if len(got) != 3 {
		t.Fatalf("%d dead letters, want 3", len(got))
	}
}
