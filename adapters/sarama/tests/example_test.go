package tests

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/IBM/sarama"
	"github.com/twmb/franz-go/pkg/kfake"

	rdsarama "github.com/redeliver-go/redeliver/adapters/sarama"
	"github.com/redeliver-go/redeliver/checkpoint"
	"github.com/redeliver-go/redeliver/stream"
)

// A consumer group of sarama with a retry policy: the batch at offset 5
// fails once, its checkpoint is withheld, and it is delivered again after
// the backoff. The example runs on an embedded Kafka (kfake); give real
// brokers instead.
func Example() {
	cluster, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(1, "orders"))
	if err != nil {
		fmt.Println(err)
		return
	}
	defer cluster.Close()
	brokers := cluster.ListenAddrs()

	cfg := sarama.NewConfig()
	cfg.Version = sarama.V3_9_0_0
	cfg.Consumer.Offsets.Initial = sarama.OffsetOldest
	cfg.Producer.Return.Successes = true
	producer, err := sarama.NewSyncProducer(brokers, cfg)
	if err != nil {
		fmt.Println(err)
		return
	}
	msgs := make([]*sarama.ProducerMessage, 10)
	for i := range msgs {
		msgs[i] = &sarama.ProducerMessage{Topic: "orders", Value: sarama.StringEncoder(fmt.Sprintf("order-%d", i))}
	}
	if err := producer.SendMessages(msgs); err != nil {
		fmt.Println(err)
		return
	}
	producer.Close()

	handler := stream.HandlerFunc(func(ctx context.Context, b *stream.Batch) error {
		fmt.Printf("offsets %d-%d, attempt %d\n", b.FirstOffset(), b.LastOffset(), b.Attempt.Number())
		if b.FirstOffset() == 5 && b.Attempt.Retries == 0 {
			return errors.New("downstream unavailable")
		}
		return nil
	})
	ctx, stop := context.WithTimeout(context.Background(), 20*time.Second)
	defer stop()
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
	consumer, err := rdsarama.New(proc,
		rdsarama.WithGroup(brokers, "billing", "orders"),
		rdsarama.WithConfig(cfg),
		rdsarama.WithMaxBatch(5),
		// sarama hands over a fetch's records one at a time: wait for a
		// batch to fill, so that the batches are the same on every run.
		rdsarama.WithMaxWait(100*time.Millisecond),
	)
	if err != nil {
		fmt.Println(err)
		return
	}
	err = consumer.Run(ctx) // until the checkpoint reaches 10; nil after a clean shutdown
	fmt.Println("stopped, error:", err)
	// Output:
	// offsets 0-4, attempt 1
	// checkpoint 5
	// offsets 5-9, attempt 1
	// offsets 5-9, attempt 2
	// checkpoint 10
	// stopped, error: <nil>
}
