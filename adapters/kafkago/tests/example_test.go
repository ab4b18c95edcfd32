package tests

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/segmentio/kafka-go"
	"github.com/twmb/franz-go/pkg/kfake"

	"github.com/redeliver-go/redeliver/adapters/kafkago"
	"github.com/redeliver-go/redeliver/checkpoint"
	"github.com/redeliver-go/redeliver/stream"
)

// A consumer group of kafka-go with a retry policy: the batch at offset 5
// fails once, its checkpoint is withheld, and it is delivered again after
// the backoff. The example runs on an embedded Kafka (kfake); give real
// brokers in Brokers instead.
func Example() {
	cluster, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(1, "orders"))
	if err != nil {
		fmt.Println(err)
		return
	}
	defer cluster.Close()
	brokers := cluster.ListenAddrs()

	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	w := &kafka.Writer{Addr: kafka.TCP(brokers...), Topic: "orders", BatchSize: 10, BatchTimeout: time.Millisecond}
	msgs := make([]kafka.Message, 10)
	for i := range msgs {
		msgs[i] = kafka.Message{Value: fmt.Appendf(nil, "order-%d", i)}
	}
	if err := w.WriteMessages(ctx, msgs...); err != nil {
		fmt.Println(err)
		return
	}
	w.Close()

	handler := stream.HandlerFunc(func(ctx context.Context, b *stream.Batch) error {
		fmt.Printf("offsets %d-%d, attempt %d\n", b.FirstOffset(), b.LastOffset(), b.Attempt.Number())
		if b.FirstOffset() == 5 && b.Attempt.Retries == 0 {
			return errors.New("downstream unavailable")
		}
		return nil
	})
	runCtx, stop := context.WithCancel(ctx)
	proc, err := stream.NewProcessor(handler,
		stream.WithPolicy(checkpoint.Policy{MaxRetries: 3, Backoff: checkpoint.Fixed(100 * time.Millisecond)}),
		stream.WithHooks(stream.Hooks{Checkpointed: func(e stream.CheckpointEvent) {
			if e.Metadata == "" { // not the retry state of a withheld batch
				fmt.Println("checkpoint", e.Next)
			}
			if e.Next == 10 {
				stop()
			}
		}}))
	if err != nil {
		fmt.Println(err)
		return
	}
	consumer, err := kafkago.New(proc,
		kafkago.WithGroupConfig(kafka.ConsumerGroupConfig{ID: "billing", Brokers: brokers, Topics: []string{"orders"}}),
		kafkago.WithMaxBatch(5),
	)
	if err != nil {
		fmt.Println(err)
		return
	}
	err = consumer.Run(runCtx) // until the checkpoint reaches 10; nil after a clean shutdown
	fmt.Println("stopped, error:", err)
	// Output:
	// offsets 0-4, attempt 1
	// checkpoint 5
	// offsets 5-9, attempt 1
	// offsets 5-9, attempt 2
	// checkpoint 10
	// stopped, error: <nil>
}
