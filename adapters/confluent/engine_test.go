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
