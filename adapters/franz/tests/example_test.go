package franz_test

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/redeliver-go/redeliver/adapters/franz"
	"github.com/redeliver-go/redeliver/checkpoint"
	"github.com/redeliver-go/redeliver/stream"
)

// This example consumes a topic of an in-process Kafka (kfake) with a handler
// that fails a batch once: the batch is withheld, its partition paused, and
// delivered again after the backoff; then its checkpoint moves past it. In a
// program, give your brokers to kgo.SeedBrokers instead.
func Example() {
	brokers, closeKafka, err := embeddedKafka([]string{"apple", "pear", "plum"}, "orders")
	if err != nil {
		fmt.Println(err)
		return
	}
	defer closeKafka()

	ctx, stop := context.WithCancel(context.Background())
	defer stop()
	handler := stream.HandlerFunc(func(ctx context.Context, b *stream.Batch) error {
		fmt.Printf("offsets %d-%d, delivery %d:", b.FirstOffset(), b.LastOffset(), b.Attempt.Number())
		for _, r := range b.Records {
			fmt.Printf(" %s", r.Value)
		}
		fmt.Println()
		if b.Attempt.Retries == 0 {
			return errors.New("warehouse unavailable")
		}
		return nil
	})
	proc, err := stream.NewProcessor(handler,
		stream.WithPolicy(checkpoint.Policy{MaxRetries: 3, Backoff: checkpoint.Fixed(50 * time.Millisecond)}),
		stream.WithHooks(stream.Hooks{Checkpointed: func(e stream.CheckpointEvent) {
			// While the batch waits, its retry state is committed
			// with the checkpoint left at its first record, and again,
			// marked started, just before the retry is delivered.
			fmt.Printf("checkpoint: next offset %d, retry state: %t\n", e.Next, e.Metadata != "")
			if e.Next == 3 {
				stop() // done with the example
			}
		}}))
	if err != nil {
		fmt.Println(err)
		return
	}

	consumer, err := franz.New(proc,
		franz.WithKgoOptions(
			kgo.SeedBrokers(brokers...),
			kgo.ConsumerGroup("shipping"),
			kgo.ConsumeTopics("orders"),
		),
		franz.WithMaxBatch(3),
		franz.WithMaxWait(time.Second),
	)
	if err != nil {
		fmt.Println(err)
		return
	}
	defer consumer.Close()
	err = consumer.Run(ctx) // nil after a clean shutdown
	fmt.Println("stopped, error:", err)
	// Output:
	// offsets 0-2, delivery 1: apple pear plum
	// checkpoint: next offset 0, retry state: true
	// checkpoint: next offset 0, retry state: true
	// offsets 0-2, delivery 2: apple pear plum
	// checkpoint: next offset 3, retry state: false
	// stopped, error: <nil>
}

// embeddedKafka starts an in-process Kafka (kfake) with topics of one
// partition and produces values to the first, in order.
func embeddedKafka(values []string, topics ...string) (brokers []string, close func(), err error) {
	cluster, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(1, topics...))
	if err != nil {
		return nil, nil, err
	}
	brokers = cluster.ListenAddrs()
	cl, err := kgo.NewClient(kgo.SeedBrokers(brokers...), kgo.DefaultProduceTopic(topics[0]))
	if err != nil {
		cluster.Close()
		return nil, nil, err
	}
	defer cl.Close()
	recs := make([]*kgo.Record, len(values))
	for i, v := range values {
		recs[i] = kgo.StringRecord(v)
	}
	if err := cl.ProduceSync(context.Background(), recs...).FirstErr(); err != nil {
		cluster.Close()
		return nil, nil, err
	}
	return brokers, cluster.Close, nil
}
