package tests

import (
	"context"
	"errors"
	"strconv"
	"testing"
	"time"

	"github.com/segmentio/kafka-go"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

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

// TestDeadLetterThroughPublisher gives up a batch that always fails and
// dead-letters it through a kafka-go Writer: the dead-letter topic holds its
// records, with their keys, values and headers and the redeliver headers,
// and the checkpoint moves past the batch.
func TestDeadLetterThroughPublisher(t *testing.T) {
	_, addrs := newCluster(t, "t", 1, kfake.SeedTopics(1, "dlq"))
	cl, err := kgo.NewClient(kgo.SeedBrokers(addrs...))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), wait)
	defer cancel()
	recs := make([]*kgo.Record, 6)
	for i := range recs {
		recs[i] = &kgo.Record{Topic: "t", Key: []byte("k" + strconv.Itoa(i)), Value: []byte(valueOf(0, int64(i))),
			Headers: []kgo.RecordHeader{{Key: "trace", Value: []byte("x" + strconv.Itoa(i))}}}
	}
	if err := cl.ProduceSync(ctx, recs...).FirstErr(); err != nil {
		t.Fatal(err)
	}

	w := &kafka.Writer{Addr: kafka.TCP(addrs...), RequiredAcks: kafka.RequireAll, BatchTimeout: time.Millisecond}
	defer w.Close()
	pub, err := kafkago.NewPublisher(w)
	if err != nil {
		t.Fatal(err)
	}
	h := stream.HandlerFunc(func(_ context.Context, b *stream.Batch) error {
		if b.FirstOffset() == 3 {
			return errors.New("poison")
		}
		return nil
	})
	dl, err := stream.DeadLetter(pub, "dlq")
	if err != nil {
		t.Fatal(err)
	}
	proc := newProcessor(t, h, stream.WithExhaustionAction(dl),
		stream.WithPolicy(checkpoint.Policy{MaxRetries: 1, Backoff: checkpoint.Fixed(10 * time.Millisecond)}))
	start(t, addrs, "g", "t", proc, kafkago.WithMaxBatch(3))
	waitCommitted(t, addrs, "g", "t", map[int32]int64{0: 6})

	rd, err := kgo.NewClient(kgo.SeedBrokers(addrs...), kgo.ConsumeTopics("dlq"), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	if err != nil {
		t.Fatal(err)
	}
	defer rd.Close()
	var got []*kgo.Record
	for len(got) < 3 && ctx.Err() == nil {
		got = append(got, rd.PollFetches(ctx).Records()...)
	}
	if len(got) != 3 {
		t.Fatalf("%d dead letters, want the 3 records of batch 3-5", len(got))
	}
	for i, r := range got {
		off := int64(3 + i)
		hs := map[string]string{}
		for _, h := range r.Headers {
			hs[h.Key] = string(h.Value)
		}
		if string(r.Key) != "k"+strconv.FormatInt(off, 10) || string(r.Value) != valueOf(0, off) ||
			hs["trace"] != "x"+strconv.FormatInt(off, 10) || hs[stream.HeaderTopic] != "t" ||
			hs[stream.HeaderOffset] != strconv.FormatInt(off, 10) || hs[stream.HeaderDeliveries] != "2" ||
			hs[stream.HeaderError] != "poison" {
			t.Errorf("dead letter %d: key %q value %q headers %v", i, r.Key, r.Value, hs)
		}
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
