package tests

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/confluentinc/confluent-kafka-go/v2/kafka"
	"github.com/twmb/franz-go/pkg/kfake"

	"github.com/redeliver-go/redeliver/adapters/confluent"
	"github.com/redeliver-go/redeliver/checkpoint"
	"github.com/redeliver-go/redeliver/stream"
)

// A consumer group of confluent-kafka-go with a retry policy: the batch at
// offset 5 fails once, its checkpoint is withheld, and it is delivered
// again after the backoff. The example runs on an embedded Kafka (kfake);
// give real brokers instead.
func Example() {
	cluster, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(1, "orders"))
	if err != nil {
		fmt.Println(err)
		return
	}
	defer cluster.Close()
	brokers := strings.Join(cluster.ListenAddrs(), ",")

	producer, err := kafka.NewProducer(&kafka.ConfigMap{"bootstrap.servers": brokers, "log_level": 3})
	if err != nil {
		fmt.Println(err)
		return
	}
	topic := "orders"
	for i := range 10 {
		msg := &kafka.Message{TopicPartition: kafka.TopicPartition{Topic: &topic, Partition: 0}, Value: fmt.Appendf(nil, "order-%d", i)}
		if err := producer.Produce(msg, nil); err != nil {
			fmt.Println(err)
			return
		}
	}
	producer.Flush(10_000)
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
	consumer, err := confluent.New(proc,
		confluent.WithGroup(kafka.ConfigMap{
			"bootstrap.servers": brokers,
			"group.id":          "billing",
			"auto.offset.reset": "earliest",
			"log_level":         3,
		}, "orders"),
		confluent.WithMaxBatch(5),
		confluent.WithMaxWait(200*time.Millisecond), // let a batch fill: the records come a few at a time
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
