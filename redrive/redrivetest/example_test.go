package redrivetest_test

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/redeliver-go/redeliver/redrive"
	"github.com/redeliver-go/redeliver/redrive/redrivetest"
	"github.com/redeliver-go/redeliver/stream"
	"github.com/redeliver-go/redeliver/stream/streamtest"
)

// A test of code that parks records, with no database: the MemStore keeps
// the store's whole contract in memory.
func ExampleMemStore() {
	ctx := context.Background()
	store := redrivetest.NewMemStore()
	park, err := redrive.Park(store, time.Minute)
	if err != nil {
		fmt.Println(err)
		return
	}
	poison := stream.Record{Topic: "orders", Partition: 1, Offset: 7}
	_ = park(ctx, &stream.Batch{Topic: "orders", Partition: 1, Records: []stream.Record{poison}}, nil)
	_ = park(ctx, &stream.Batch{Topic: "orders", Partition: 1, Records: []stream.Record{poison}}, nil) // again, after a crash
	entries, err := store.List(ctx, redrive.Filter{})
	if err != nil {
		fmt.Println(err)
		return
	}
	for _, e := range entries {
		fmt.Println(e.Key, e.State())
	}
	// Output:
	// orders/1/7 REDELIVER_PARKED
}

// A test of a scheduler's decisions without a broker: the Publisher
// records what the scheduler publishes, and Fail makes a topic refuse it,
// as a broker that is away would. The entry waits, and is re-driven once
// the topic takes records again.
func ExamplePublisher() {
	ctx := context.Background()
	store, pub := redrivetest.NewMemStore(), &redrivetest.Publisher{}
	clock := streamtest.NewClock(time.Date(2026, 3, 1, 9, 0, 0, 0, time.UTC))
	_, _, err := redrive.Await(ctx, store, redrive.Awaiting{Key: "dev-01", State: "NONCE_PUBLISHED", Expiry: time.Minute, At: clock.Now()})
	if err != nil {
		fmt.Println(err)
		return
	}
	sch, err := redrive.NewScheduler(store, pub, redrive.WithClock(clock), redrive.WithRetryTopic("resilience"),
		redrive.WithInterval(time.Minute))
	if err != nil {
		fmt.Println(err)
		return
	}
	pub.Fail("resilience", errors.New("broker away"))
	for range 2 {
		clock.Advance(time.Minute)
		ev := sch.Sweep(ctx)
		e, _ := store.Get(ctx, "dev-01")
		fmt.Printf("%s sweep: %d re-driven, %d failed; %s, %d records on resilience\n",
			clock.Now().Format("15:04"), ev.Redriven, ev.Failed, e.State(), len(pub.Topic("resilience")))
		pub.Fail("resilience", nil) // the broker is back
	}
	// Output:
	// 09:01 sweep: 0 re-driven, 1 failed; NONCE_PUBLISHED, 0 records on resilience
	// 09:02 sweep: 1 re-driven, 0 failed; NONCE_PUBLISHED_RETRY, 1 records on resilience
}
