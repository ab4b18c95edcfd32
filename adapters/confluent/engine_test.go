package confluent

import (
	"context"
	"testing"

	"github.com/confluentinc/confluent-kafka-go/v2/kafka"

	"github.com/redeliver-go/redeliver/stream"
)

// TestQueueBackoff: the consumer fetches a partition again 10ms after
// librdkafka's local queue was over its bound, not after librdkafka's
// default second (which held the adapter at 160 k records/s at 8
// partitions), and keeps a fetch.queue.backoff.ms the configuration sets.
func TestQueueBackoff(t *testing.T) {
	proc, err := stream.NewProcessor(stream.HandlerFunc(func(context.Context, *stream.Batch) error { return nil }))
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		set  any // fetch.queue.backoff.ms in WithGroup's configuration; nil: not set
		want any
	}{
		{"default", nil, 10},
		{"set", 250, 250},
		{"set as string", "0", "0"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			conf := kafka.ConfigMap{"bootstrap.servers": "localhost:9092", "group.id": "g"}
			if tc.set != nil {
				conf["fetch.queue.backoff.ms"] = tc.set
			}
			c, err := New(proc, WithGroup(conf, "t"))
			if err != nil {
				t.Fatal(err)
			}
			if got := c.e.cfg.conf["fetch.queue.backoff.ms"]; got != tc.want {
				t.Errorf("fetch.queue.backoff.ms = %v (%T), want %v", got, got, tc.want)
			}
			if _, set := conf["fetch.queue.backoff.ms"]; set != (tc.set != nil) {
				t.Error("New changed the caller's configuration")
			}
		})
	}
}

// TestFlushSizesTheNextSlice: with no spent slice to fill again (the
// worker is behind, so the buffer holds every push), the poll goroutine's
// next slice is made the size of the last push, not grown from nothing by
// doubling as messages are added (which allocated about 80 bytes a record
// more than librdkafka's own Poll loop, docs/BENCHMARKS.md).
func TestFlushSizesTheNextSlice(t *testing.T) {
	proc, err := stream.NewProcessor(stream.HandlerFunc(func(context.Context, *stream.Batch) error { return nil }))
	if err != nil {
		t.Fatal(err)
	}
	c, err := New(proc, WithGroup(kafka.ConfigMap{"bootstrap.servers": "localhost:9092", "group.id": "g"}, "t"))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	c.e.runCtx = ctx
	cl := newClaim(c.e, nil, tp{"t", 0}, -1, "")
	topic := "t"
	off := int64(0)
	for push := range 3 {
		for range 400 {
			cl.add(&kafka.Message{TopicPartition: kafka.TopicPartition{Topic: &topic, Offset: kafka.Offset(off)}})
			off++
		}
		cl.flush()
		if got := cap(cl.pending); got < 400 {
			t.Fatalf("after push %d, nothing taken: the next slice holds %d records, want room for 400", push+1, got)
		}
	}
	if got := cl.buf.Len(); got != 1200 {
		t.Errorf("buffered %d records, want 1200", got)
	}
}

// TestProducerConfig: the producer of WithPublisher takes from the
// consumer's configuration its bootstrap.servers and security settings
// only (a consumer's property would be warned about by librdkafka, and a
// producer's tuning is the user's own producer's), and asks for acks from
// every in-sync replica and idempotence, whatever the consumer's says.
func TestProducerConfig(t *testing.T) {
	got := producerConfig(kafka.ConfigMap{
		"bootstrap.servers": "b:9092", "group.id": "g", "security.protocol": "SASL_SSL",
		"sasl.mechanisms": "PLAIN", "sasl.username": "u", "sasl.password": "p", "ssl.ca.location": "/ca",
		"enable.ssl.certificate.verification": false, "session.timeout.ms": 6000, "acks": 1,
		"enable.idempotence": false, "auto.offset.reset": "earliest",
	})
	want := kafka.ConfigMap{
		"bootstrap.servers": "b:9092", "security.protocol": "SASL_SSL", "sasl.mechanisms": "PLAIN",
		"sasl.username": "u", "sasl.password": "p", "ssl.ca.location": "/ca",
		"enable.ssl.certificate.verification": false, "acks": "all", "enable.idempotence": true,
	}
	if len(got) != len(want) {
		t.Errorf("producer configuration %v, want %v", got, want)
	}
	for k, v := range want {
		if got[k] != v {
			t.Errorf("producer configuration: %s = %v, want %v", k, got[k], v)
		}
	}
}
