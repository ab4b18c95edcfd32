package tests

import (
	"context"
	"testing"
	"time"

	"github.com/segmentio/kafka-go"
	"github.com/twmb/franz-go/pkg/kfake"

	"github.com/redeliver-go/redeliver/adapters/kafkago"
	"github.com/redeliver-go/redeliver/stream"
)

// A dead letter does not wait for kafka-go's 1s batch timer: a writer with
// kafka-go's defaults gets kafkago.PublisherBatchTimeout, and publishing
// one record takes milliseconds, not a second.
func TestPublishDoesNotWaitForTheBatchTimer(t *testing.T) {
	_, addrs := newCluster(t, "t", 1, kfake.SeedTopics(1, "dlq"))
	w := &kafka.Writer{Addr: kafka.TCP(addrs...), RequiredAcks: kafka.RequireAll}
	defer w.Close()
	pub, err := kafkago.NewPublisher(w)
	if err != nil {
		t.Fatal(err)
	}
	if w.BatchTimeout != kafkago.PublisherBatchTimeout {
		t.Errorf("BatchTimeout %v, want %v", w.BatchTimeout, kafkago.PublisherBatchTimeout)
	}
	ctx, cancel := context.WithTimeout(context.Background(), wait)
	defer cancel()
	if err := pub.Publish(ctx, "dlq", []stream.Record{{Value: []byte("warm-up")}}); err != nil {
		t.Fatal(err) // the first one connects and reads metadata
	}
	var worst time.Duration
	for range 5 {
		began := time.Now()
		if err := pub.Publish(ctx, "dlq", []stream.Record{{Value: []byte("v")}}); err != nil {
			t.Fatal(err)
		}
		worst = max(worst, time.Since(began))
	}
	t.Logf("slowest publish of one record: %v", worst)
	if worst > 300*time.Millisecond {
		t.Errorf("publishing one record took %v: it waited for the writer's batch timer", worst)
	}
	// A BatchTimeout the caller set is kept.
	own := &kafka.Writer{Addr: kafka.TCP(addrs...), RequiredAcks: kafka.RequireAll, BatchTimeout: 50 * time.Millisecond}
	defer own.Close()
	if _, err := kafkago.NewPublisher(own); err != nil || own.BatchTimeout != 50*time.Millisecond {
		t.Errorf("NewPublisher: %v; BatchTimeout %v, want the 50ms given", err, own.BatchTimeout)
	}
	neg := &kafka.Writer{Addr: kafka.TCP(addrs...), RequiredAcks: kafka.RequireAll, BatchTimeout: -time.Second}
	if _, err := kafkago.NewPublisher(neg); err == nil {
		t.Error("NewPublisher accepted a negative BatchTimeout")
	}
}
