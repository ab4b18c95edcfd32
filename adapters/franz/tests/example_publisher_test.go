package franz_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

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
	brokers, closeKafka, err := embeddedKafka([]string{"apple", "pear", "???", "plum"}, "orders", "orders-dlq")
	if err != nil {
		fmt.Println(err)
		return
	}
	defer closeKafka()

	// 1. host.json
	cfg, err := hostconfig.Parse("host.json", []byte(`{
	  "version": "2.0",
	  "checkpointRetryPolicy": {
	    "retryCount": 0,
	    "onExhausted": {"action": "deadLetter", "topic": "orders-dlq"}
	  }
	}`))
	if err != nil {
		fmt.Println(err)
		return
	}
	// 2. the processor's options, with a publisher not bound to a client yet
	pub := new(franz.Publisher)
	opts, err := cfg.Options(pub)
	if err != nil {
		fmt.Println(err)
		return
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
		fmt.Println(err)
		return
	}
	// 4. the consumer, which binds pub to its client
	consumer, err := franz.New(proc,
		franz.WithKgoOptions(kgo.SeedBrokers(brokers...), kgo.ConsumerGroup("shipping"), kgo.ConsumeTopics("orders")),
		franz.WithPublisher(pub),
		franz.WithMaxWait(time.Second), franz.WithMaxBatch(4),
	)
	if err != nil {
		fmt.Println(err)
		return
	}
	if err := consumer.Run(ctx); err != nil {
		fmt.Println(err)
	}
	// Output:
	// handled apple
	// handled pear
	// offset 2 dead-lettered, error: <nil>
	// handled plum
}
