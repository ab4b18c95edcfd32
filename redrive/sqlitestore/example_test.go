package sqlitestore_test

import (
	"context"
	"errors"
	"fmt"
	"log"
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

// The re-drive on an SQLite file: a record whose retries are spent is
// parked, the scheduler re-publishes it to a retry topic once its expiry
// has passed, the retry topic's consumer fails it once more (it goes back
// to its entry, not to a new one) and then handles it, which completes the
// entry. A manual clock stands for five-minute waits, and an in-memory
// publisher for Kafka (in a program: franz.NewPublisher(client)).
func Example() {
	ctx := context.Background()
	dir, err := os.MkdirTemp("", "redrive-example-")
	if err != nil {
		log.Fatal(err)
	}
	defer os.RemoveAll(dir)
	store, err := sqlitestore.Open(ctx, filepath.Join(dir, "redrive.db"))
	if err != nil {
		log.Fatal(err)
	}
	defer store.Close()
	clock := streamtest.NewClock(time.Date(2026, 3, 1, 9, 0, 0, 0, time.UTC))

	// The consumer of "orders" parks what it gives up:
	// stream.WithExhaustionAction(park) on its processor.
	park, err := redrive.Park(store, 5*time.Minute, redrive.WithClock(clock))
	if err != nil {
		log.Fatal(err)
	}
	order := stream.Record{Topic: "orders", Partition: 0, Offset: 42, Key: []byte("order-7"), Value: []byte(`{"total":12}`)}
	spent := &checkpoint.ExhaustedError{Reason: checkpoint.RetriesSpent, Retries: 3, Last: errors.New("payment service: 503")}
	if err := park(ctx, &stream.Batch{Topic: "orders", Records: []stream.Record{order}}, spent); err != nil {
		log.Fatal(err)
	}
	e, _ := store.Get(ctx, "orders/0/42")
	fmt.Printf("parked %s: %s, due at %s\n", e.Key, e.State(), e.DueAt.Format("15:04"))

	// The scheduler: every sweep re-publishes what is due.
	pub := &redrivetest.Publisher{}
	sch, err := redrive.NewScheduler(store, pub, redrive.WithClock(clock), redrive.WithRetryTopic("orders-retry"), redrive.WithMaxRedrives(3))
	if err != nil {
		log.Fatal(err)
	}
	// The retry topic's consumer: it fails the first re-drive and handles
	// the second; CompleteOnSuccess completes the entry of what it handled.
	calls := 0
	handler := stream.Chain(stream.HandlerFunc(func(context.Context, *stream.Batch) error {
		calls++
		if calls == 1 {
			return errors.New("payment service: 503")
		}
		return nil
	}), redrive.CompleteOnSuccess(store, redrive.WithClock(clock)))

	for range 2 {
		clock.Advance(5 * time.Minute)
		ev := sch.Sweep(ctx)
		recs := pub.Topic("orders-retry")
		r := recs[len(recs)-1]
		number, _ := redrivetest.Header(r, redrive.HeaderNumber)
		fmt.Printf("%s sweep: %d re-driven to %s, key %s, re-drive number %s\n", clock.Now().Format("15:04"), ev.Redriven, r.Topic, r.Key, number)
		b := &stream.Batch{Topic: "orders-retry", Records: []stream.Record{r}}
		if err := handler.Handle(ctx, b); err != nil {
			// Its retries spent, the retry topic's consumer parks it too:
			// the record goes back to its entry.
			if err := park(ctx, b, &checkpoint.ExhaustedError{Reason: checkpoint.RetriesSpent, Last: err}); err != nil {
				log.Fatal(err)
			}
		}
		e, _ := store.Get(ctx, "orders/0/42")
		fmt.Printf("  %s: %s (re-drives %d, failed again %d)\n", e.Key, e.State(), e.Redrives, e.Reparks)
	}
	all, _ := store.List(ctx, redrive.Filter{})
	fmt.Println("entries in the store:", len(all))
	// Output:
	// parked orders/0/42: REDELIVER_PARKED, due at 09:05
	// 09:05 sweep: 1 re-driven to orders-retry, key order-7, re-drive number 1
	//   orders/0/42: REDELIVER_PARKED_RETRY (re-drives 1, failed again 1)
	// 09:10 sweep: 1 re-driven to orders-retry, key order-7, re-drive number 2
	//   orders/0/42: REDELIVER_PARKED_DONE (re-drives 2, failed again 1)
	// entries in the store: 1
}
