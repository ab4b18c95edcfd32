package pgstore_test

import (
	"context"
	"log"
	"os"
	"os/signal"
	"time"

	"github.com/redeliver-go/redeliver/redrive"
	"github.com/redeliver-go/redeliver/redrive/pgstore"
	"github.com/redeliver-go/redeliver/stream"
)

// Each instance of a service opens the same database: its consumers park
// what they give up, and its scheduler sweeps the entries, sharing them
// with the other instances' schedulers (a sweep claims due entries with
// SELECT ... FOR UPDATE SKIP LOCKED). Open migrates the schema. The
// connection string comes from the environment (host.json's redrive.store
// names the variable), never from a file. The example needs a PostgreSQL
// server, so it is compiled and not run; the package's tests run on one.
func Example() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	store, err := pgstore.Open(ctx, os.Getenv("REDRIVE_DATABASE_URL"))
	if err != nil {
		log.Fatal(err)
	}
	defer store.Close()

	park, err := redrive.Park(store, 5*time.Minute)
	if err != nil {
		log.Fatal(err)
	}
	proc, err := stream.NewProcessor(handler, stream.WithExhaustionAction(park))
	if err != nil {
		log.Fatal(err)
	}
	go consume(ctx, proc)

	sch, err := redrive.NewScheduler(store, publisher, redrive.WithRetryTopic("orders-retry"))
	if err != nil {
		log.Fatal(err)
	}
	if err := sch.Run(ctx); err != nil { // nil after Ctrl-C
		log.Fatal(err)
	}
}

// handler stands for the consumer's handler.
var handler = stream.HandlerFunc(func(context.Context, *stream.Batch) error { return nil })

// publisher stands for a Kafka publisher: franz.NewPublisher(client) or
// kafkago.NewPublisher(writer), from the adapters' modules.
var publisher stream.Publisher

// consume stands for an adapter that runs proc: franz.New(proc,
// ...).Run(ctx), say.
func consume(ctx context.Context, proc *stream.Processor) {}
