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
	cl := newTestEngine(t, 0).claims[tp{"t", 0}]
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

// newTestEngine returns the engine of a consumer of topic "t" that is
// not running, with a claim of each of partitions and no librdkafka
// consumer, for tests of what the poll goroutine does with what Poll
// returned.
func newTestEngine(t *testing.T, partitions ...int32) *engine {
	t.Helper()
	proc, err := stream.NewProcessor(stream.HandlerFunc(func(context.Context, *stream.Batch) error { return nil }))
	if err != nil {
		t.Fatal(err)
	}
	c, err := New(proc, WithGroup(kafka.ConfigMap{"bootstrap.servers": "localhost:9092", "group.id": "g"}, "t"))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	c.e.runCtx, c.e.claims = ctx, make(map[tp]*claim)
	for _, p := range partitions {
		c.e.claims[tp{"t", p}] = newClaim(c.e, nil, tp{"t", p}, -1, "")
	}
	return c.e
}

// TestDeliverKeepsMessagesAsPolled: the poll goroutine, which every
// partition's messages go through one by one, keeps each message as Poll
// returned it, with no allocation of its own per message; the worker makes
// it a record (its headers copied) as it takes it. The poll goroutine copied
// each message into a record there, with its headers, and looked its
// partition up in the map of claims: 56 to 82 ns a message against 10 to 15
// (BenchmarkDeliver), on the one goroutine every message goes through
// (docs/BENCHMARKS.md, "confluent: the hand-off to the workers, measured").
func TestDeliverKeepsMessagesAsPolled(t *testing.T) {
	e := newTestEngine(t, 0, 1)
	topic := "t"
	var msgs []*kafka.Message
	for i := range 400 {
		p := int32(i / 100 % 2) // runs of 100 messages of each partition, as Poll returns a fetch's
		msgs = append(msgs, &kafka.Message{
			TopicPartition: kafka.TopicPartition{Topic: &topic, Partition: p, Offset: kafka.Offset(i)},
			Key:            []byte{byte(i)}, Value: []byte("v"),
			Headers: []kafka.Header{{Key: "h", Value: []byte{byte(i)}}, {Key: "g", Value: nil}},
		})
	}
	// The claims' slices grow in the first run; none of the messages is
	// kept from one run to the next.
	allocs := testing.AllocsPerRun(10, func() {
		for _, m := range msgs {
			e.deliver(m)
		}
		for _, cl := range e.claims {
			cl.pending = cl.pending[:0]
		}
	})
	if allocs != 0 {
		t.Errorf("delivering %d polled messages allocated %v times, want 0", len(msgs), allocs)
	}
	for _, m := range msgs {
		e.deliver(m)
	}
	e.flush()
	for _, p := range []int32{0, 1} {
		cl := e.claims[tp{"t", p}]
		recs, err := cl.Fetch(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		if len(recs) != 200 {
			t.Fatalf("partition %d: a batch of %d records, want 200", p, len(recs))
		}
		for _, r := range recs {
			i := r.Offset
			if r.Topic != "t" || r.Partition != p || int32(i/100%2) != p || r.Key[0] != byte(i) || string(r.Value) != "v" ||
				len(r.Headers) != 2 || r.Headers[0].Key != "h" || r.Headers[0].Value[0] != byte(i) || r.Headers[1].Key != "g" {
				t.Fatalf("partition %d: record %+v, not the message at offset %d", p, r, i)
			}
		}
	}
}

// TestDeliverAfterItsClaimEnded: a message of a partition whose claim
// ended (given up, revoked) is dropped, although the message before it was
// that claim's (the poll goroutine remembers the last message's claim).
func TestDeliverAfterItsClaimEnded(t *testing.T) {
	e := newTestEngine(t, 0, 1)
	topic := "t"
	msg := func(p int32, off int64) *kafka.Message {
		return &kafka.Message{TopicPartition: kafka.TopicPartition{Topic: &topic, Partition: p, Offset: kafka.Offset(off)}}
	}
	old := e.claims[tp{"t", 0}]
	e.deliver(msg(0, 0))
	close(old.done) // no worker runs it
	e.endClaims([]*claim{old}, errRevoked)
	e.deliver(msg(0, 1))
	e.deliver(msg(1, 0))
	if len(old.pending) != 1 {
		t.Errorf("the ended claim kept %d messages, want the 1 polled before it ended", len(old.pending))
	}
	if got := len(e.claims[tp{"t", 1}].pending); got != 1 {
		t.Errorf("partition 1 kept %d messages, want 1", got)
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

// BenchmarkDeliver: what the poll goroutine does per message Poll returned
// (deliver, and its part of the flush after each burst of 500), at 8
// partitions; the buffers are taken after each burst, as by workers that
// keep up (what the workers do with them is not counted).
func BenchmarkDeliver(b *testing.B) {
	parts := []int32{0, 1, 2, 3, 4, 5, 6, 7}
	e := newTestEngine(&testing.T{}, parts...)
	topic := "t"
	msgs := make([]*kafka.Message, 500)
	for i := range msgs {
		msgs[i] = &kafka.Message{TopicPartition: kafka.TopicPartition{Topic: &topic, Partition: int32(i / 63), Offset: kafka.Offset(i)},
			Value: make([]byte, 100)}
	}
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i += len(msgs) {
		for _, m := range msgs {
			e.deliver(m)
		}
		e.flush()
		for _, cl := range e.claims {
			if cl.idle() {
				continue
			}
			// Taken, not made records: the worker's part is not counted.
			if err := cl.buf.Next(context.Background(), len(msgs), 0, func([]*kafka.Message) {}); err != nil {
				b.Fatal(err)
			}
		}
	}
}
