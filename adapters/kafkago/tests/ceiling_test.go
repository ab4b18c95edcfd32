package tests

import (
	"context"
	"time"

	"testing"

	"github.com/segmentio/kafka-go"

	"github.com/redeliver-go/redeliver/adapters/internal/kafkatest"
)

// BenchmarkCeiling runs the scenarios of the franz-go adapter's
// BenchmarkCeiling (success, failure, poison at 1, 8 and 1,000 partitions)
// through the fastest at-least-once kafka-go loops beside this adapter:
//
//   - reader: a kafka.Reader with a GroupID and a CommitInterval of 1s,
//     the way kafka-go's documentation consumes a group: FetchMessage
//     for every partition in turn, batches of 500 messages (a failing
//     batch is handled again in place after its delay), CommitMessages
//     (queued; the reader commits every second in the background), and
//     Close at the end, which makes the last commit.
//   - rawconn: the raw kafka.Conn loop of BenchmarkFailurePath (a
//     synchronous commit per batch).
//
// Leaves: <scenario>/<loop>/partitions=<P>.
func BenchmarkCeiling(b *testing.B) {
	loops := []kafkatest.Loop{{Name: "reader", Run: readerIntervalLoop}, {Name: "rawconn", Run: rawConnLoop}, kafkatest.RedeliverLoop(adapter),
		kafkatest.RedeliverRecordLoop(adapter), kafkatest.RedeliverKeyLoop(adapter)}
	counts := []int32{1, 8, 1000}
	b.Run("success", func(b *testing.B) { kafkatest.RunLeaves(b, loops, counts, false, kafkatest.Success) })
	b.Run("failure", func(b *testing.B) { kafkatest.RunLeaves(b, loops, counts, false, kafkatest.FailEveryTenth) })
	b.Run("poison", func(b *testing.B) { kafkatest.RunLeaves(b, loops, counts, false, kafkatest.PoisonInTheMiddle) })
}

// readerIntervalLoop reads the group with one kafka.Reader that commits in
// the background.
func readerIntervalLoop(l *kafkatest.Leaf, addrs []string, topic string) time.Duration {
	b := l.B
	rd := kafka.NewReader(kafka.ReaderConfig{
		Brokers:        addrs,
		GroupID:        kafkatest.BenchGroup(topic),
		Topic:          topic,
		StartOffset:    kafka.FirstOffset,
		MaxWait:        kafkatest.BenchMaxWait,
		CommitInterval: time.Second,
	})
	closed := false
	defer func() {
		if !closed {
			rd.Close()
		}
	}()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	type run struct{ first, last int64 }
	var (
		batch = make([]kafka.Message, 0, kafkatest.BenchBatch)
		runs  = make(map[int32]*run)
	)
	handle := func() {
		if l.FailsFirst() {
			time.Sleep(kafkatest.FailDelay)
		}
		clear(runs)
		bytes := make(map[int32]int)
		for _, m := range batch {
			p := int32(m.Partition)
			if r := runs[p]; r != nil {
				r.last = m.Offset
			} else {
				runs[p] = &run{m.Offset, m.Offset}
			}
			bytes[p] += len(m.Value)
		}
		for p, r := range runs {
			if l.Poisoned(p, r.first, r.last) {
				for retry := 0; ; retry++ {
					l.PoisonFailed(retry == kafkatest.PoisonRetries)
					if retry == kafkatest.PoisonRetries {
						break
					}
					time.Sleep(kafkatest.PoisonDelay)
				}
			}
			l.Handled(p, r.first, r.last, bytes[p])
		}
		if err := rd.CommitMessages(ctx, batch...); err != nil {
			b.Fatalf("commit: %v", err)
		}
		clear(batch)
		batch = batch[:0]
	}
	for seen := 0; seen < b.N; seen++ {
		m, err := rd.FetchMessage(ctx)
		if err != nil {
			b.Fatalf("%d of %d records: %v", seen, b.N, err)
		}
		l.Started()
		batch = append(batch, m)
		if len(batch) == kafkatest.BenchBatch || seen == b.N-1 {
			handle()
		}
	}
	// Close makes the last commit.
	closed = true
	if err := rd.Close(); err != nil {
		b.Fatalf("close: %v", err)
	}
	l.Committed()
	return time.Since(l.Start())
}
