package tests

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/segmentio/kafka-go"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/redeliver-go/redeliver/adapters/franz/franzhost"
	"github.com/redeliver-go/redeliver/adapters/kafkago/kafkagohost"
	"github.com/redeliver-go/redeliver/host"
	"github.com/redeliver-go/redeliver/stream"
)

// clientHooks counts what franz-go's clients fetch and produce.
type clientHooks struct{ fetched, produced atomic.Int64 }

func (h *clientHooks) OnFetchBatchRead(_ kgo.BrokerMetadata, _ string, _ int32, m kgo.FetchBatchMetrics) {
	h.fetched.Add(int64(m.NumRecords))
}

func (h *clientHooks) OnProduceBatchWritten(_ kgo.BrokerMetadata, _ string, _ int32, m kgo.ProduceBatchMetrics) {
	h.produced.Add(int64(m.NumRecords))
}

// TestEachClientAlone runs a host with one adapter only, as a program that
// uses one client does: its function consumes through that client, and
// the dead-letter producer, which the adapter builds, is that client too,
// with the adapter's options; a dead letter does not wait for a batch
// timer.
func TestEachClientAlone(t *testing.T) {
	for _, name := range []string{"franz", "kafkago"} {
		t.Run(name, func(t *testing.T) {
			addrs := newCluster(t, 1, "orders", "orders.dlq")
			produce(t, addrs, "orders", 0, 3)
			var (
				adapter   host.Adapter
				hooks     clientHooks
				written   atomic.Int64
				groupSeen atomic.Bool
			)
			switch name {
			case "franz":
				a, err := franzhost.New(franzhost.WithKgoOptions(kgo.WithHooks(&hooks)))
				if err != nil {
					t.Fatal(err)
				}
				adapter = a
			case "kafkago":
				a, err := kafkagohost.New(
					kafkagohost.WithGroupConfig(func(gc *kafka.ConsumerGroupConfig) { fastKafkaGo(gc); groupSeen.Store(true) }),
					kafkagohost.WithWriter(func(w *kafka.Writer) {
						w.Completion = func(msgs []kafka.Message, err error) {
							if err == nil {
								written.Add(int64(len(msgs)))
							}
						}
					}))
				if err != nil {
					t.Fatal(err)
				}
				adapter = a
			}
			cfg := parse(t, `{"checkpointRetryPolicy": {"retryCount": 0, "onExhausted": {"action": "deadLetter", "topic": "orders.dlq"}}}`)
			h, err := host.New(cfg, host.WithAdapter(adapter), host.WithBrokers(addrs...))
			if err != nil {
				t.Fatal(err)
			}
			var first atomic.Int64 // when the first record was delivered, unix ns
			fail := stream.HandlerFunc(func(context.Context, *stream.Batch) error {
				first.CompareAndSwap(0, time.Now().UnixNano())
				return errBoom
			})
			if err := h.Register("orders", fail, host.Kafka{Adapter: name, Topic: "orders", Group: "orders-app", MaxBatch: 1}); err != nil {
				t.Fatal(err)
			}
			start(t, h)
			waitCommitted(t, addrs, "orders-app", "orders", 0, 3)
			took := time.Since(time.Unix(0, first.Load()))
			// Each record is dead-lettered before the next is delivered:
			// a producer that waits for kafka-go's default batch timer
			// (1s) would take 3s.
			if took > 1500*time.Millisecond {
				t.Errorf("3 dead letters took %v, want well under the 3s of a 1s batch timer each", took)
			}
			if n := len(consumeAll(t, addrs, "orders.dlq", 3)); n != 3 {
				t.Errorf("%d records in orders.dlq, want 3", n)
			}
			if st := h.Status(); st.Functions[0].Adapter != name {
				t.Errorf("status adapter %q, want %q", st.Functions[0].Adapter, name)
			}
			switch name {
			case "franz":
				if hooks.fetched.Load() < 3 || hooks.produced.Load() != 3 {
					t.Errorf("WithKgoOptions' hooks saw %d fetched and %d produced, want 3 and 3: the options reach the consumer and the producer",
						hooks.fetched.Load(), hooks.produced.Load())
				}
			case "kafkago":
				if !groupSeen.Load() || written.Load() != 3 {
					t.Errorf("WithGroupConfig called: %v; WithWriter's writer wrote %d, want 3", groupSeen.Load(), written.Load())
				}
			}
		})
	}
}

// consumeAll reads n records of topic from its start.
func consumeAll(t testing.TB, addrs []string, topic string, n int) []*kgo.Record {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(addrs...), kgo.ConsumeTopics(topic), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), wait)
	defer cancel()
	var recs []*kgo.Record
	for len(recs) < n && ctx.Err() == nil {
		recs = append(recs, cl.PollFetches(ctx).Records()...)
	}
	return recs
}
