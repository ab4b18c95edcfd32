package franz_test

import (
	"context"
	"errors"
	"log"
	"os"
	"os/signal"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/redeliver-go/redeliver/adapters/franz"
	"github.com/redeliver-go/redeliver/checkpoint"
	"github.com/redeliver-go/redeliver/hostconfig"
	"github.com/redeliver-go/redeliver/stream"
)

// A franz-go group consumer whose failed batches are delivered again, 5
// seconds apart, up to 5 times, while the partition's checkpoint is
// withheld. The example needs a Kafka broker, so it is compiled and not
// run; the adapter's tests (in the module adapters/franz/tests) run it on
// an embedded Kafka, with its output.
func Example() {
	handler := stream.HandlerFunc(func(ctx context.Context, b *stream.Batch) error {
		for _, r := range b.Records {
			if len(r.Value) == 0 {
				return errors.New("empty order") // the whole batch is delivered again
			}
		}
		return nil
	})
	proc, err := stream.NewProcessor(handler,
		stream.WithPolicy(checkpoint.Policy{MaxRetries: 5, Backoff: checkpoint.Fixed(5 * time.Second)}))
	if err != nil {
		log.Fatal(err)
	}
	consumer, err := franz.New(proc, franz.WithKgoOptions(
		kgo.SeedBrokers("localhost:9092"),
		kgo.ConsumerGroup("shipping"),
		kgo.ConsumeTopics("orders"),
	))
	if err != nil {
		log.Fatal(err)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	if err := consumer.Run(ctx); err != nil { // nil after Ctrl-C
		log.Fatal(err)
	}
}

// The natural order of construction with a dead-letter topic: host.json,
// then the processor's options (which need a publisher), the processor,
// and the consumer, which binds the publisher to its own client
// (WithPublisher). The example needs a Kafka broker, so it is compiled and
// not run; the adapter's tests run it on an embedded Kafka.
func ExampleWithPublisher() {
	cfg, err := hostconfig.Parse("host.json", []byte(`{
	  "version": "2.0",
	  "checkpointRetryPolicy": {
	    "retryCount": 3,
	    "sleepDuration": "00:00:05",
	    "onExhausted": {"action": "deadLetter", "topic": "orders-dlq"}
	  }
	}`))
	if err != nil {
		log.Fatal(err)
	}
	pub := new(franz.Publisher) // bound to the consumer's client below
	opts, err := cfg.Options(pub)
	if err != nil {
		log.Fatal(err)
	}
	proc, err := stream.NewProcessor(stream.PerRecord(func(ctx context.Context, r *stream.Record) error {
		return nil // handle the order
	}), opts...)
	if err != nil {
		log.Fatal(err)
	}
	consumer, err := franz.New(proc,
		franz.WithKgoOptions(kgo.SeedBrokers("localhost:9092"), kgo.ConsumerGroup("shipping"), kgo.ConsumeTopics("orders")),
		franz.WithPublisher(pub),
	)
	if err != nil {
		log.Fatal(err)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	if err := consumer.Run(ctx); err != nil {
		log.Fatal(err)
	}
}
