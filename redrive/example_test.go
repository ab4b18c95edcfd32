package redrive_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/redeliver-go/redeliver/checkpoint"
	"github.com/redeliver-go/redeliver/redrive"
	"github.com/redeliver-go/redeliver/redrive/redrivetest"
	"github.com/redeliver-go/redeliver/stream"
	"github.com/redeliver-go/redeliver/stream/streamtest"
)

// A record given up by its consumer is parked; once its expiry has passed,
// a sweep of the scheduler re-publishes it to a retry topic; its consumer
// handles it and completes the entry. The store and the publisher are in
// memory here (in a program: sqlitestore.Open or pgstore.Open, and
// franz.NewPublisher), and a manual clock stands for the five minutes.
func Example() {
	ctx := context.Background()
	store, pub := redrivetest.NewMemStore(), &redrivetest.Publisher{}
	clock := streamtest.NewClock(time.Date(2026, 3, 1, 9, 0, 0, 0, time.UTC))

	// The consumer of "orders" parks what it gives up: its processor has
	// stream.WithExhaustionAction(park).
	park, err := redrive.Park(store, 5*time.Minute, redrive.WithClock(clock))
	if err != nil {
		fmt.Println(err)
		return
	}
	order := stream.Record{Topic: "orders", Offset: 42, Key: []byte("order-7")}
	if err := park(ctx, &stream.Batch{Topic: "orders", Records: []stream.Record{order}}, nil); err != nil {
		fmt.Println(err)
		return
	}
	printEntry(store, "orders/0/42")

	// The scheduler; a program calls sch.Run(ctx), which sweeps every interval.
	sch, err := redrive.NewScheduler(store, pub, redrive.WithClock(clock), redrive.WithRetryTopic("orders-retry"))
	if err != nil {
		fmt.Println(err)
		return
	}
	clock.Advance(5 * time.Minute)
	sch.Sweep(ctx)
	r := pub.Topic("orders-retry")[0]
	key, _ := redrivetest.Header(r, redrive.HeaderKey)
	fmt.Printf("re-driven to %s: %s, %s=%s\n", r.Topic, r.Key, redrive.HeaderKey, key)
	printEntry(store, key)

	// The retry topic's consumer handled it.
	if _, err := redrive.Complete(ctx, store, key); err != nil {
		fmt.Println(err)
		return
	}
	printEntry(store, key)
	// Output:
	// orders/0/42: REDELIVER_PARKED, due at 09:05
	// re-driven to orders-retry: order-7, redeliver-redrive-key=orders/0/42
	// orders/0/42: REDELIVER_PARKED_RETRY, due at 09:10
	// orders/0/42: REDELIVER_PARKED_DONE
}

// Park as a processor's exhaustion action: a batch whose retries are spent
// becomes one entry per record, and the partition's checkpoint moves past
// it at once.
func ExamplePark() {
	store := redrivetest.NewMemStore()
	park, err := redrive.Park(store, 5*time.Minute)
	if err != nil {
		fmt.Println(err)
		return
	}
	failing := stream.HandlerFunc(func(context.Context, *stream.Batch) error {
		return errors.New("payment service: 503")
	})
	proc, err := stream.NewProcessor(failing,
		stream.WithPolicy(checkpoint.Policy{MaxRetries: 1, Backoff: checkpoint.Immediate()}),
		stream.WithExhaustionAction(park))
	if err != nil {
		fmt.Println(err)
		return
	}
	part := streamtest.NewPartition("orders", 0, 5)
	part.Append(time.Now(), "order-1", "order-2")
	runToEnd(proc, part)

	entries, _ := store.List(context.Background(), redrive.Filter{})
	for _, e := range entries {
		fmt.Printf("%s: %s %s (%s)\n", e.Key, e.State(), e.Message.Value, e.LastError)
	}
	next, _ := part.Committed()
	fmt.Println("checkpoint", next)
	// Output:
	// orders/0/0: REDELIVER_PARKED order-1 (given up after 2 deliveries (the retry limit, 1 retry, is reached): payment service: 503)
	// orders/0/1: REDELIVER_PARKED order-2 (given up after 2 deliveries (the retry limit, 1 retry, is reached): payment service: 503)
	// checkpoint 2
}

// In key ordering, ParkByKey keeps a key's order through the re-drive:
// customer-7's first record is given up and parked, its later record is
// parked behind it instead of being handled, and the other key flows.
func ExampleParkByKey() {
	store := redrivetest.NewMemStore()
	park, err := redrive.ParkByKey(store, 5*time.Minute)
	if err != nil {
		fmt.Println(err)
		return
	}
	var handled []string
	var mu sync.Mutex
	handler := stream.HandlerFunc(func(_ context.Context, b *stream.Batch) error {
		r := b.Records[0]
		mu.Lock()
		handled = append(handled, fmt.Sprintf("%d:%s", r.Offset, r.Key))
		mu.Unlock()
		if string(r.Key) == "customer-7" {
			return errors.New("payment service: 503")
		}
		return nil
	})
	proc, err := stream.NewProcessor(handler, stream.WithOrdering(stream.ByKey), park)
	if err != nil {
		fmt.Println(err)
		return
	}
	part := streamtest.NewPartition("orders", 0, 5)
	part.AppendKeyed(time.Now(), "customer-7", "customer-9", "customer-7")
	runToEnd(proc, part)

	slices.Sort(handled)
	fmt.Println("handled:", handled)
	entries, _ := store.List(context.Background(), redrive.Filter{})
	for _, e := range entries {
		fmt.Printf("%s: %s, order key %s\n", e.Key, e.State(), e.OrderKey)
	}
	// Output:
	// handled: [0:customer-7 1:customer-9]
	// orders/0/0: REDELIVER_PARKED, order key orders/0/customer-7
	// orders/0/2: REDELIVER_PARKED, order key orders/0/customer-7
}

// An application parks a record in a state of its own while it waits for
// an outside answer (here a device's answer to a nonce), and completes it
// when the answer comes. Without an answer before the expiry, the
// scheduler would re-drive it.
func ExampleAwait() {
	ctx := context.Background()
	store := redrivetest.NewMemStore()
	request := stream.Record{Topic: "provision-requests", Key: []byte("dev-01")}
	e, _, err := redrive.Await(ctx, store, redrive.Awaiting{Key: "dev-01", State: "NONCE_PUBLISHED", Expiry: time.Minute, Record: request})
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println(e.Key, e.State())

	// The device answered.
	e, err = redrive.Complete(ctx, store, "dev-01")
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println(e.Key, e.State())
	// Output:
	// dev-01 NONCE_PUBLISHED
	// dev-01 NONCE_PUBLISHED_DONE
}

// CompleteOnSuccess on the retry topic's consumer completes the entry of
// each re-driven record the handler succeeds on; one it fails on stays
// retrying, to be re-driven again.
func ExampleCompleteOnSuccess() {
	ctx := context.Background()
	store := redrivetest.NewMemStore()
	first, second := redriven(store, "orders/0/1"), redriven(store, "orders/0/2")

	handler := stream.Chain(stream.HandlerFunc(func(_ context.Context, b *stream.Batch) error {
		if string(b.Records[0].Key) == "orders/0/2" {
			return errors.New("still failing")
		}
		return nil
	}), redrive.CompleteOnSuccess(store))
	_ = handler.Handle(ctx, &stream.Batch{Topic: "orders-retry", Records: []stream.Record{first}})
	_ = handler.Handle(ctx, &stream.Batch{Topic: "orders-retry", Records: []stream.Record{second}})
	printEntry(store, "orders/0/1")
	printEntry(store, "orders/0/2")
	// Output:
	// orders/0/1: REDELIVER_PARKED_DONE
	// orders/0/2: REDELIVER_PARKED_RETRY, due at 09:10
}

// An entry that no consumer completes is timed out after the maximum
// number of re-drives (or the retry timeout), and reported to the reply
// topic with an error code.
func ExampleWithMaxRedrives() {
	ctx := context.Background()
	store, pub := redrivetest.NewMemStore(), &redrivetest.Publisher{}
	clock := streamtest.NewClock(time.Date(2026, 3, 1, 9, 0, 0, 0, time.UTC))
	request := stream.Record{Topic: "provision-requests", Key: []byte("dev-03")}
	if _, _, err := redrive.Await(ctx, store, redrive.Awaiting{Key: "dev-03", State: "NONCE_PUBLISHED", Expiry: time.Minute, Record: request, At: clock.Now()}); err != nil {
		fmt.Println(err)
		return
	}
	sch, err := redrive.NewScheduler(store, pub, redrive.WithClock(clock), redrive.WithMaxRedrives(1),
		redrive.WithReplyTopic("c2d-inbound"), redrive.WithErrorCode("E_DEVICE_TIMEOUT"))
	if err != nil {
		fmt.Println(err)
		return
	}
	for range 2 { // a minute apart: the re-drive, then the time-out
		clock.Advance(time.Minute)
		sch.Sweep(ctx)
		printEntry(store, "dev-03")
	}
	reply := pub.Topic("c2d-inbound")[0]
	code, _ := redrivetest.Header(reply, redrive.HeaderErrorCode)
	fmt.Printf("reply to %s: %s %s\n", reply.Topic, reply.Key, code)
	// Output:
	// dev-03: NONCE_PUBLISHED_RETRY, due at 09:02
	// dev-03: NONCE_PUBLISHED_TIMEOUT
	// reply to c2d-inbound: dev-03 E_DEVICE_TIMEOUT
}

// printEntry prints an entry's state and, while it is pending, when the
// scheduler next looks at it.
func printEntry(store redrive.Store, key string) {
	e, err := store.Get(context.Background(), key)
	if err != nil {
		fmt.Println(err)
		return
	}
	if e.DueAt.IsZero() {
		fmt.Printf("%s: %s\n", e.Key, e.State())
		return
	}
	fmt.Printf("%s: %s, due at %s\n", e.Key, e.State(), e.DueAt.Format("15:04"))
}

// redriven parks a record under key, re-drives it once and returns the
// re-published record, as the retry topic's consumer receives it.
func redriven(store redrive.Store, key string) stream.Record {
	ctx := context.Background()
	clock := streamtest.NewClock(time.Date(2026, 3, 1, 9, 0, 0, 0, time.UTC))
	rec := stream.Record{Topic: "orders", Key: []byte(key)}
	if _, _, err := redrive.Await(ctx, store, redrive.Awaiting{Key: key, State: redrive.ParkedState, Expiry: 5 * time.Minute, Record: rec, At: clock.Now()}); err != nil {
		fmt.Println(err)
		return stream.Record{}
	}
	pub := &redrivetest.Publisher{}
	sch, err := redrive.NewScheduler(store, pub, redrive.WithClock(clock), redrive.WithRetryTopic("orders-retry"))
	if err != nil {
		fmt.Println(err)
		return stream.Record{}
	}
	clock.Advance(5 * time.Minute)
	if ev := sch.Sweep(ctx); ev.Redriven != 1 {
		fmt.Printf("sweep: %+v\n", ev)
		return stream.Record{}
	}
	return pub.Topic("orders-retry")[0]
}

// runToEnd runs proc over part until its checkpoint is past the last
// record.
func runToEnd(proc *stream.Processor, part *streamtest.Partition) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	go func() {
		_ = part.WaitCommitted(ctx, part.End())
		cancel()
	}()
	_ = streamtest.Run(ctx, proc, part)
}
