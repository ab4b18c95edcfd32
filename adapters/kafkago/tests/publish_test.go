package tests

import (
	"context"
	"testing"
	"time"

	"github.com/segmentio/kafka-go"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/redeliver-go/redeliver/adapters/kafkago"
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
