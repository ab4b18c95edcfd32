package tests

import (
	"context"
	"runtime"
	"testing"
	"time"

	"github.com/segmentio/kafka-go"

	"github.com/redeliver-go/redeliver/adapters/internal/kafkatest"
)

// BenchmarkIdlePartitions measures what a consumer of many partitions
// costs while they are idle, against kafka-go's own group consumer, a
// kafka.Reader with a GroupID (kafkatest.BenchIdlePartitions). Run it with
// -benchtime=1x.
func BenchmarkIdlePartitions(b *testing.B) {
	kafkatest.BenchIdlePartitions(b, adapter, []int32{100}, readerIdle)
}

// BenchmarkWithheldBatchHeap measures the heap a withheld batch retains
// against the batch's bytes (kafkatest.BenchWithheldBatchHeap). Run it
// with -benchtime=1x.
func BenchmarkWithheldBatchHeap(b *testing.B) {
	kafkatest.BenchWithheldBatchHeap(b, adapter, readerHeld)
}

// readerIdle runs a kafka.Reader of the group until it has read and
// committed the topic's one record per partition, then leaves it waiting
// for more, and returns its stop.
func readerIdle(b *testing.B, addrs []string, topic string, partitions int32) func() {
	rd := kafka.NewReader(kafka.ReaderConfig{
		Brokers:     addrs,
		GroupID:     kafkatest.BenchGroup(topic),
		Topic:       topic,
		StartOffset: kafka.FirstOffset,
		MaxWait:     kafkatest.BenchMaxWait,
	})
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	for seen := int32(0); seen < partitions; seen++ {
		m, err := rd.FetchMessage(ctx)
		if err != nil {
			b.Fatalf("reader: %d of %d records: %v", seen, partitions, err)
		}
		if err := rd.CommitMessages(ctx, m); err != nil {
			b.Fatal(err)
		}
	}
	// Idle, as a consumer is: waiting for a record.
	waited := make(chan struct{})
	go func() {
		defer close(waited)
		rd.FetchMessage(ctx)
	}()
	return func() {
		cancel()
		<-waited
		rd.Close()
	}
}

// readerHeld runs a kafka.Reader of the group until it has read want
// records, and holds them, as a loop that waits out a backoff before
// handling them again would.
func readerHeld(b *testing.B, addrs []string, topic string, want int) (int64, func()) {
	rd := kafka.NewReader(kafka.ReaderConfig{
		Brokers:     addrs,
		GroupID:     kafkatest.BenchGroup(topic),
		Topic:       topic,
		StartOffset: kafka.FirstOffset,
		MaxWait:     kafkatest.BenchMaxWait,
	})
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	held := make([]kafka.Message, 0, want)
	var bytes int64
	for len(held) < want {
		m, err := rd.FetchMessage(ctx)
		if err != nil {
			b.Fatalf("reader: %d of %d records: %v", len(held), want, err)
		}
		bytes += int64(len(m.Key) + len(m.Value))
		for _, h := range m.Headers {
			bytes += int64(len(h.Key) + len(h.Value))
		}
		held = append(held, m)
	}
	return bytes, func() {
		runtime.KeepAlive(held)
		rd.Close()
	}
}
