package tests

import (
	"strings"
	"testing"
	"time"

	"github.com/confluentinc/confluent-kafka-go/v2/kafka"

	"github.com/redeliver-go/redeliver/adapters/internal/kafkatest"
)

// The throughput benchmarks run the shared harness (kafkatest.RunLeaves):
// the Processor and this adapter ("redeliver") against the fastest
// at-least-once loop confluent-kafka-go itself offers ("raw"), on the same
// cluster in the same run, with the same librdkafka configuration
// (auto.offset.reset earliest, fetch.wait.max.ms kafkatest.BenchMaxWait,
// fetch.queue.backoff.ms 10 as the adapter sets it):
// a Poll loop that takes what Poll has ready, at most
// kafkatest.BenchBatch records, handles each partition's records as a
// batch, touching every record, and stores the offset past it
// (StoreOffsets, enable.auto.offset.store false), with librdkafka's
// automatic commits (every 5s) and one Commit at the end. It commits less
// often than the adapter, which commits each batch synchronously with its
// retry state. A failing batch sleeps kafkatest.FailDelay and is handled
// again in place.

// BenchmarkSuccessPath: every batch succeeds. The leaves "handoff" run the
// raw loop with its handling moved to a goroutine of its own (handoffLoop),
// as the adapter's workers are: what a hand-off from the polling goroutine
// costs in librdkafka's own loop.
func BenchmarkSuccessPath(b *testing.B) {
	loops := []kafkatest.Loop{{Name: "raw", Run: rawLoop}, kafkatest.RedeliverLoop(adapter), {Name: "handoff", Run: handoffLoop}}
	kafkatest.RunLeaves(b, loops, []int32{1, 8}, false, kafkatest.Success)
}

// BenchmarkFailurePath: every 10th batch (counting first deliveries) fails
// once and succeeds on a retry 1ms later.
func BenchmarkFailurePath(b *testing.B) {
	loops := []kafkatest.Loop{{Name: "raw", Run: rawLoop}, kafkatest.RedeliverLoop(adapter)}
	kafkatest.RunLeaves(b, loops, []int32{1, 8}, false, kafkatest.FailEveryTenth)
}

// rawLoop consumes the topic with confluent-kafka-go's own at-least-once
// loop.
func rawLoop(l *kafkatest.Leaf, addrs []string, topic string) time.Duration {
	b := l.B
	c := rawConsumer(l, addrs, topic)
	defer c.Close()
	var total, handled int64
	for _, n := range l.Per {
		total += n
	}
	byPartition := make(map[int32][]*kafka.Message)
	deadline := time.Now().Add(5 * time.Minute)
	for handled < total {
		if time.Now().After(deadline) {
			b.Fatal("the raw loop did not handle every record in 5 minutes")
		}
		pollBurst(c, func(m *kafka.Message) {
			byPartition[m.TopicPartition.Partition] = append(byPartition[m.TopicPartition.Partition], m)
		})
		for p, ms := range byPartition {
			if len(ms) == 0 {
				continue
			}
			l.Started()
			if l.FailsFirst() {
				time.Sleep(kafkatest.FailDelay) // then handled again, in place
			}
			bytes := 0
			for _, m := range ms {
				bytes += len(m.Value)
			}
			last := ms[len(ms)-1].TopicPartition
			l.Handled(p, int64(ms[0].TopicPartition.Offset), int64(last.Offset), bytes)
			last.Offset++
			if _, err := c.StoreOffsets([]kafka.TopicPartition{last}); err != nil {
				b.Fatal(err)
			}
			handled += int64(len(ms))
			byPartition[p] = ms[:0]
		}
	}
	began := time.Now()
	if _, err := c.Commit(); err != nil {
		b.Fatal(err)
	}
	l.Committed()
	took := time.Since(l.Start())
	// How long the last Commit took, as the sarama raw loop reports
	// its own (there it waits behind a held fetch).
	b.ReportMetric(float64(time.Since(began).Microseconds())/1000, "final-commit-ms")
	return took
}

// pollBurst takes what Poll has ready, waiting up to 100ms for the first
// event, and gives add each message of it, at most kafkatest.BenchBatch:
// the raw loops' poll.
func pollBurst(c *kafka.Consumer, add func(*kafka.Message)) {
	timeout, n := 100, 0
	for n < kafkatest.BenchBatch {
		ev := c.Poll(timeout)
		if ev == nil {
			return
		}
		timeout = 0
		if m, ok := ev.(*kafka.Message); ok && m.TopicPartition.Error == nil {
			add(m)
			n++
		}
	}
}

// rawConsumer makes the raw loops' consumer and subscribes it to topic.
func rawConsumer(l *kafkatest.Leaf, addrs []string, topic string) *kafka.Consumer {
	b := l.B
	c, err := kafka.NewConsumer(&kafka.ConfigMap{
		"bootstrap.servers":        strings.Join(addrs, ","),
		"group.id":                 kafkatest.BenchGroup(topic),
		"auto.offset.reset":        "earliest",
		"enable.auto.offset.store": false,
		"fetch.wait.max.ms":        int(kafkatest.BenchMaxWait / time.Millisecond),
		// What the adapter sets (librdkafka's default, 1000ms, stalls this
		// loop too whenever librdkafka's queue reaches queued.min.messages).
		"fetch.queue.backoff.ms": 10,
		"log_level":              3,
	})
	if err != nil {
		b.Fatal(err)
	}
	if err := c.SubscribeTopics([]string{topic}, nil); err != nil {
		_ = c.Close()
		b.Fatal(err)
	}
	return c
}

// handoffLoop is rawLoop with the handling on a goroutine of its own: the
// polling goroutine polls as rawLoop does and hands each partition's
// records of a burst to one worker goroutine (up to 4 batches queued,
// about what the adapter's buffer holds at one partition), which touches
// them and stores the offset past them; the same automatic commits and
// final Commit. It has the adapter's threads (one polling, one handling,
// librdkafka's) without the adapter.
func handoffLoop(l *kafkatest.Leaf, addrs []string, topic string) time.Duration {
	b := l.B
	c := rawConsumer(l, addrs, topic)
	defer c.Close()
	var total int64
	for _, n := range l.Per {
		total += n
	}
	type batch struct {
		p  int32
		ms []*kafka.Message
	}
	work := make(chan batch, 4)
	free := make(chan []*kafka.Message, 8)
	failed := make(chan error, 1)
	done := make(chan struct{})
	go func() {
		defer close(done)
		for w := range work {
			l.Started()
			bytes := 0
			for _, m := range w.ms {
				bytes += len(m.Value)
			}
			last := w.ms[len(w.ms)-1].TopicPartition
			l.Handled(w.p, int64(w.ms[0].TopicPartition.Offset), int64(last.Offset), bytes)
			last.Offset++
			if _, err := c.StoreOffsets([]kafka.TopicPartition{last}); err != nil {
				failed <- err
				for range work {
				}
				return
			}
			clear(w.ms)
			select {
			case free <- w.ms[:0]:
			default:
			}
		}
	}()
	byPartition := make(map[int32][]*kafka.Message)
	var polled int64
	deadline := time.Now().Add(5 * time.Minute)
	for polled < total {
		if time.Now().After(deadline) {
			close(work)
			b.Fatal("the hand-off loop did not poll every record in 5 minutes")
		}
		pollBurst(c, func(m *kafka.Message) {
			ms := byPartition[m.TopicPartition.Partition]
			if ms == nil {
				select {
				case ms = <-free:
				default:
					ms = make([]*kafka.Message, 0, kafkatest.BenchBatch)
				}
			}
			byPartition[m.TopicPartition.Partition] = append(ms, m)
		})
		for p, ms := range byPartition {
			polled += int64(len(ms))
			work <- batch{p, ms}
			delete(byPartition, p)
		}
	}
	close(work)
	<-done
	select {
	case err := <-failed:
		b.Fatal(err)
	default:
	}
	began := time.Now()
	if _, err := c.Commit(); err != nil {
		b.Fatal(err)
	}
	l.Committed()
	took := time.Since(l.Start())
	b.ReportMetric(float64(time.Since(began).Microseconds())/1000, "final-commit-ms")
	return took
}
