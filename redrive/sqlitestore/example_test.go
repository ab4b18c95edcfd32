package sqlitestore_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/redeliver-go/redeliver/checkpoint"
	"github.com/redeliver-go/redeliver/redrive"
	"github.com/redeliver-go/redeliver/redrive/redrivetest"
	"github.com/redeliver-go/redeliver/redrive/sqlitestore"
	"github.com/redeliver-go/redeliver/stream"
	"github.com/redeliver-go/redeliver/stream/streamtest"
)

// The re-drive on an SQLite file: Open creates the file and its schema,
// and the store serves the Park action and the scheduler. A parked record
// outlives the process: after a restart (here, the file opened again) the
// scheduler re-drives it once its expiry has passed. A manual clock stands
// for the five minutes, and an in-memory publisher for Kafka (in a
// program: franz.NewPublisher(client)).
func Example() {
	ctx := context.Background()
	dir, err := os.MkdirTemp("", "redrive-example-")
	if err != nil {
		fmt.Println(err)
		return
	}
	defer os.RemoveAll(dir)
	path := filepath.Join(dir, "redrive.db")
	clock := streamtest.NewClock(time.Date(2026, 3, 1, 9, 0, 0, 0, time.UTC))

	store, err := sqlitestore.Open(ctx, path)
	if err != nil {
		fmt.Println(err)
		return
	}
	park, err := redrive.Park(store, 5*time.Minute, redrive.WithClock(clock)) // stream.WithExhaustionAction(park)
	if err != nil {
		fmt.Println(err)
		return
	}
	order := stream.Record{Topic: "orders", Offset: 42, Key: []byte("order-7")}
	spent := &checkpoint.ExhaustedError{Reason: checkpoint.RetriesSpent, Retries: 3, Last: errors.New("payment service: 503")}
	if err := park(ctx, &stream.Batch{Topic: "orders", Records: []stream.Record{order}}, spent); err != nil {
		fmt.Println(err)
		return
	}
	store.Close()

	// The process restarts.
	store, err = sqlitestore.Open(ctx, path)
	if err != nil {
		fmt.Println(err)
		return
	}
	defer store.Close()
	pub := &redrivetest.Publisher{}
	sch, err := redrive.NewScheduler(store, pub, redrive.WithClock(clock), redrive.WithRetryTopic("orders-retry"))
	if err != nil {
		fmt.Println(err)
		return
	}
	clock.Advance(5 * time.Minute)
	ev := sch.Sweep(ctx) // a program calls sch.Run(ctx)
	e, err := store.Get(ctx, "orders/0/42")
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Printf("%d re-driven to orders-retry: %s\n", ev.Redriven, pub.Topic("orders-retry")[0].Key)
	fmt.Printf("%s: %s, last error %q\n", e.Key, e.State(), e.LastError)
	// Output:
	// 1 re-driven to orders-retry: order-7
	// orders/0/42: REDELIVER_PARKED_RETRY, last error "given up after 4 deliveries (the retry limit, 3 retries, is reached): payment service: 503"
}
