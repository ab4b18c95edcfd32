package eventhubs_test

import (
	"context"
	"errors"
	"fmt"
	"log"
	"os"
	"os/signal"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/messaging/azeventhubs/v2"
	"github.com/Azure/azure-sdk-for-go/sdk/messaging/azeventhubs/v2/checkpoints"
	"github.com/Azure/azure-sdk-for-go/sdk/storage/azblob/container"

	"github.com/redeliver-go/redeliver/adapters/eventhubs"
	"github.com/redeliver-go/redeliver/adapters/eventhubs/memhub"
	"github.com/redeliver-go/redeliver/checkpoint"
	"github.com/redeliver-go/redeliver/stream"
)

// An Event Hubs consumer whose failed batches are delivered again, 5
// seconds apart, up to 5 times, while the partition's checkpoint is
// withheld: New builds the SDK's Processor over the consumer client and
// the checkpoint store (the SDK's blob store), which it fences. The example
// needs an Event Hubs namespace and a storage account, so it is compiled
// and not run; ExampleNewWith runs the same on an in-memory hub.
func Example() {
	handler := stream.HandlerFunc(func(ctx context.Context, b *stream.Batch) error {
		return nil // handle the events
	})
	proc, err := stream.NewProcessor(handler,
		stream.WithPolicy(checkpoint.Policy{MaxRetries: 5, Backoff: checkpoint.Fixed(5 * time.Second)}))
	if err != nil {
		log.Fatal(err)
	}
	client, err := azeventhubs.NewConsumerClientFromConnectionString(
		os.Getenv("EVENTHUBS_CONNECTION_STRING"), "orders", azeventhubs.DefaultConsumerGroup, nil)
	if err != nil {
		log.Fatal(err)
	}
	defer client.Close(context.Background())
	cc, err := container.NewClientFromConnectionString(os.Getenv("STORAGE_CONNECTION_STRING"), "checkpoints", nil)
	if err != nil {
		log.Fatal(err)
	}
	store, err := checkpoints.NewBlobStore(cc, nil)
	if err != nil {
		log.Fatal(err)
	}
	consumer, err := eventhubs.New(proc, client, store)
	if err != nil {
		log.Fatal(err)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	if err := consumer.Run(ctx); err != nil { // nil after Ctrl-C
		log.Fatal(err)
	}
}

// The adapter on an in-memory hub (package memhub), through NewWith, which
// takes any Processor and a fenced checkpoint store: the batch of events
// 0-2 fails once and is delivered again before the checkpoint moves past
// it.
func ExampleNewWith() {
	hub, err := memhub.New("orders", 1)
	if err != nil {
		fmt.Println(err)
		return
	}
	for i := range 3 {
		if err := hub.Send("0", &azeventhubs.EventData{Body: fmt.Appendf(nil, "order %d", i)}); err != nil {
			fmt.Println(err)
			return
		}
	}
	store, err := eventhubs.NewCheckpointStore(memhub.NewStore(), "processor-1", nil)
	if err != nil {
		fmt.Println(err)
		return
	}
	earliest := true
	p, err := hub.NewProcessor(store, "billing", "processor-1", &azeventhubs.ProcessorOptions{
		StartPositions: azeventhubs.StartPositions{Default: azeventhubs.StartPosition{Earliest: &earliest}}})
	if err != nil {
		fmt.Println(err)
		return
	}

	ctx, stop := context.WithCancel(context.Background())
	defer stop()
	handler := stream.HandlerFunc(func(_ context.Context, b *stream.Batch) error {
		fmt.Printf("events %d-%d, retry %d\n", b.FirstOffset(), b.LastOffset(), b.Attempt.Retries)
		if b.Attempt.Retries == 0 {
			return errors.New("downstream unavailable")
		}
		return nil
	})
	proc, err := stream.NewProcessor(handler,
		stream.WithPolicy(checkpoint.Policy{MaxRetries: 3, Backoff: checkpoint.Fixed(10 * time.Millisecond)}),
		stream.WithHooks(stream.Hooks{Checkpointed: func(e stream.CheckpointEvent) {
			if e.Next == 3 {
				fmt.Println("checkpoint: next event", e.Next)
				stop() // done with the example
			}
		}}))
	if err != nil {
		fmt.Println(err)
		return
	}
	c, err := eventhubs.NewWith(proc, p, store, eventhubs.WithReceiveWait(50*time.Millisecond))
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println("stopped, error:", c.Run(ctx)) // nil after a clean shutdown
	// Output:
	// events 0-2, retry 0
	// events 0-2, retry 1
	// checkpoint: next event 3
	// stopped, error: <nil>
}
