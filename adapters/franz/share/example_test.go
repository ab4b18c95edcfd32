package share_test

import (
	"context"
	"errors"
	"log"
	"os"
	"os/signal"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/redeliver-go/redeliver/adapters/franz/share"
	"github.com/redeliver-go/redeliver/checkpoint"
	"github.com/redeliver-go/redeliver/stream"
)

// A share-group consumer whose failed records are delivered again, alone,
// 5 seconds apart, up to 5 times, while the other records go on. The
// processor holds the handler and the policy, as for a group consumer;
// share.New takes franz-go's options for a share group. The example needs
// a Kafka broker with share groups (4.2+), so it is compiled and not run;
// the module adapters/franz/tests runs it on an embedded Kafka, with its
// output.
func Example() {
	handler := stream.PerRecord(func(ctx context.Context, r *stream.Record) error {
		if len(r.Value) == 0 {
			return errors.New("empty order") // this record alone is delivered again
		}
		return nil
	})
	proc, err := stream.NewProcessor(handler,
		stream.WithPolicy(checkpoint.Policy{MaxRetries: 5, Backoff: checkpoint.Fixed(5 * time.Second)}))
	if err != nil {
		log.Fatal(err)
	}
	consumer, err := share.New(proc, share.WithKgoOptions(
		kgo.SeedBrokers("localhost:9092"),
		kgo.ShareGroup("billing"),
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
