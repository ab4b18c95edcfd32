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
