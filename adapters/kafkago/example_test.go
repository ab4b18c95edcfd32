package kafkago_test

import (
	"context"
	"errors"
	"log"
	"os"
	"os/signal"
	"time"

	"github.com/segmentio/kafka-go"

	"github.com/redeliver-go/redeliver/adapters/kafkago"
	"github.com/redeliver-go/redeliver/checkpoint"
	"github.com/redeliver-go/redeliver/stream"
)

// A kafka-go consumer group whose failed batches are delivered again, 5
// seconds apart, up to 5 times, while the partition's checkpoint is
// withheld. The example needs a Kafka broker, so it is compiled and not run;
// the adapter's own tests (in the module adapters/kafkago/tests) run the
// same on an embedded Kafka.
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
	consumer, err := kafkago.New(proc, kafkago.WithGroupConfig(kafka.ConsumerGroupConfig{
		ID:      "billing",
		Brokers: []string{"localhost:9092"},
		Topics:  []string{"orders"},
	}))
	if err != nil {
		log.Fatal(err)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	if err := consumer.Run(ctx); err != nil { // nil after Ctrl-C
		log.Fatal(err)
	}
}
