package franz_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/redeliver-go/redeliver/adapters/franz"
	"github.com/redeliver-go/redeliver/hostconfig"
	"github.com/redeliver-go/redeliver/stream"
)

// The natural order of construction with a dead-letter topic: host.json,
// then the processor's options (which need a publisher), the processor,
// and the consumer, which binds the publisher to its own client
// (WithPublisher). One record of the batch is poison: it alone goes to the
// dead-letter topic.
func ExampleWithPublisher() {
	cluster, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(1, "orders", "orders-dlq"))
	if err != nil {
		panic(err)
	}
	defer cluster.Close()
	brokers := cluster.ListenAddrs()
	producer, err := kgo.NewClient(kgo.SeedBrokers(brokers...), kgo.DefaultProduceTopic("orders"))
	if err != nil {
		panic(err)
	}
	defer producer.Close()
	for _, v := range []string{"apple", "pear", "???", "plum"} {
		if err := producer.ProduceSync(context.Background(), kgo.StringRecord(v)).FirstErr(); err != nil {
			panic(err)
		}
	}

	// 1. host.json
	cfg, err := hostconfig.Parse("host.json", []byte(`{
	  "version": "2.0",
	  "checkpointRetryPolicy": {
	    "retryCount": 0,
	    "onExhausted": {"action": "deadLetter", "topic": "orders-dlq"}
	  }
	}`))
	if err != nil {
		panic(err)
	}
	// 2. the processor's options, with a publisher not bound to a client yet
	pub := new(franz.Publisher)
	opts, err := cfg.Options(pub)
	if err != nil {
		panic(err)
	}
	// 3. the processor
	ctx, stop := context.WithCancel(context.Background())
	defer stop()
	handler := stream.PerRecord(func(ctx context.Context, r *stream.Record) error {
		if strings.Contains(string(r.Value), "?") {
			return errors.New("not a fruit")
		}
		fmt.Println("handled", string(r.Value))
		return nil
	})
	proc, err := stream.NewProcessor(handler, append(opts, stream.WithHooks(stream.Hooks{
		ActionTried: func(e stream.ActionEvent) {
			fmt.Printf("offset %d dead-lettered, error: %v\n", e.FirstOffset, e.Err)
		},
		Checkpointed: func(e stream.CheckpointEvent) {
			if e.Next == 4 {
				stop()
			}
		},
	}))...)
	if err != nil {
		panic(err)
	}
	// 4. the consumer, which binds pub to its client
	consumer, err := franz.New(proc,
		franz.WithKgoOptions(kgo.SeedBrokers(brokers...), kgo.ConsumerGroup("shipping"), kgo.ConsumeTopics("orders")),
		franz.WithPublisher(pub),
		franz.WithMaxWait(time.Second), franz.WithMaxBatch(4),
	)
	if err != nil {
		panic(err)
	}
	if err := consumer.Run(ctx); err != nil {
		panic(err)
	}
	// Output:
	// handled apple
	// handled pear
	// offset 2 dead-lettered, error: <nil>
	// handled plum
}
