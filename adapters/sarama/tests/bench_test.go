package tests

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/IBM/sarama"

	"github.com/redeliver-go/redeliver/adapters/internal/kafkatest"
)

// The throughput benchmarks run the shared harness (kafkatest.RunLeaves):
// the Processor and this adapter ("redeliver") against the fastest
// at-least-once loop sarama itself offers ("raw"), on the same cluster in
// the same run, with the same sarama configuration (Version 3.9.0, the
// partition's start, kafkatest.BenchMaxWait as the fetch's MaxWaitTime):
// a ConsumerGroupHandler whose ConsumeClaim takes what sarama has
// delivered, at most kafkatest.BenchBatch records, touches every record,
// and marks the last one (MarkMessage), with sarama's automatic commits
// (every second) and one Commit at the end. It commits less often than the
// adapter, which commits each batch synchronously with its retry state. A
// failing batch sleeps kafkatest.FailDelay and is handled again in place.
//
// The raw loop's last Commit goes over the consumer group's connection to
// the broker, behind its fetch, which the broker holds for up to
// MaxWaitTime once every partition is caught up; the adapter commits on a
// connection of its own. The raw leaves report how long that last Commit
// took (final-commit-ms): about 500ms (BenchMaxWait) in most rounds, near
// 0 when it went out before the next fetch, which makes the raw loop's
// records/s bimodal.

// BenchmarkSuccessPath: every batch succeeds.
func BenchmarkSuccessPath(b *testing.B) {
	loops := []kafkatest.Loop{{Name: "raw", Run: rawLoop}, kafkatest.RedeliverLoop(adapter)}
	kafkatest.RunLeaves(b, loops, []int32{1, 8}, false, kafkatest.Success)
}

// BenchmarkFailurePath: every 10th batch (counting first deliveries) fails
// once and succeeds on a retry 1ms later.
func BenchmarkFailurePath(b *testing.B) {
	loops := []kafkatest.Loop{{Name: "raw", Run: rawLoop}, kafkatest.RedeliverLoop(adapter)}
	kafkatest.RunLeaves(b, loops, []int32{1, 8}, false, kafkatest.FailEveryTenth)
}

// rawHandler is the raw loop's sarama.ConsumerGroupHandler.
type rawHandler struct {
	l       *kafkatest.Leaf
	total   int64
	handled atomic.Int64
	once    sync.Once
	done    chan time.Time
	// lastCommit is how long the last Commit took (set before done).
	lastCommit time.Duration
}

func (h *rawHandler) Setup(sarama.ConsumerGroupSession) error   { return nil }
func (h *rawHandler) Cleanup(sarama.ConsumerGroupSession) error { return nil }

func (h *rawHandler) ConsumeClaim(sess sarama.ConsumerGroupSession, claim sarama.ConsumerGroupClaim) error {
	msgs := claim.Messages()
	batch := make([]*sarama.ConsumerMessage, 0, kafkatest.BenchBatch)
	for {
		var (
			m  *sarama.ConsumerMessage
			ok bool
		)
		select {
		case m, ok = <-msgs:
		case <-sess.Context().Done():
			return nil
		}
		if !ok {
			return nil
		}
		batch = append(batch[:0], m)
	drain:
		for len(batch) < kafkatest.BenchBatch {
			select {
			case m, ok = <-msgs:
				if !ok {
					break drain
				}
				batch = append(batch, m)
			default:
				break drain
			}
		}
		h.l.Started()
		if h.l.FailsFirst() {
			time.Sleep(kafkatest.FailDelay) // then handled again, in place
		}
		n := 0
		for _, m := range batch {
			n += len(m.Value)
		}
		last := batch[len(batch)-1]
		h.l.Handled(last.Partition, batch[0].Offset, last.Offset, n)
		sess.MarkMessage(last, "")
		if h.handled.Add(int64(len(batch))) == h.total {
			began := time.Now()
			sess.Commit()
			h.lastCommit = time.Since(began)
			h.l.Committed()
			h.once.Do(func() { h.done <- time.Now() })
		}
	}
}

// rawLoop consumes the topic with sarama's own at-least-once loop.
func rawLoop(l *kafkatest.Leaf, addrs []string, topic string) time.Duration {
	b := l.B
	cfg := sarama.NewConfig()
	cfg.Version = sarama.V3_9_0_0
	cfg.Consumer.Offsets.Initial = sarama.OffsetOldest
	cfg.Consumer.MaxWaitTime = kafkatest.BenchMaxWait
	group, err := sarama.NewConsumerGroup(addrs, kafkatest.BenchGroup(topic), cfg)
	if err != nil {
		b.Fatal(err)
	}
	var total int64
	for _, n := range l.Per {
		total += n
	}
	h := &rawHandler{l: l, total: total, done: make(chan time.Time, 1)}
	ctx, cancel := context.WithCancel(context.Background())
	consumed := make(chan struct{})
	go func() {
		defer close(consumed)
		for ctx.Err() == nil {
			if err := group.Consume(ctx, []string{topic}, h); err != nil && ctx.Err() == nil {
				b.Error(err)
				return
			}
		}
	}()
	var end time.Time
	select {
	case end = <-h.done:
	case <-time.After(5 * time.Minute):
		b.Fatal("the raw loop did not handle every record in 5 minutes")
	}
	cancel()
	<-consumed
	if err := group.Close(); err != nil {
		b.Error(err)
	}
	b.ReportMetric(float64(h.lastCommit.Microseconds())/1000, "final-commit-ms")
	return end.Sub(l.Start())
}
