package eventhubs_test

import (
	"context"
	"fmt"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/messaging/azeventhubs/v2"

	"github.com/redeliver-go/redeliver/adapters/eventhubs"
	"github.com/redeliver-go/redeliver/adapters/eventhubs/memhub"
	"github.com/redeliver-go/redeliver/checkpoint"
	"github.com/redeliver-go/redeliver/stream"
)

// The adapter on the in-memory hub: with the SDK, build the consumer with
// eventhubs.New(proc, consumerClient, blobStore) instead of NewWith.
func Example() {
	hub, _ := memhub.New("orders", 1)
	for i := range 3 {
		_ = hub.Send("0", &azeventhubs.EventData{Body: fmt.Appendf(nil, "order %d", i)})
	}
	failed := false
	handler := stream.HandlerFunc(func(_ context.Context, b *stream.Batch) error {
		fmt.Printf("events %d-%d, retry %d\n", b.FirstOffset(), b.LastOffset(), b.Attempt.Retry)
		if !failed {
			failed = true
			return fmt.Errorf("downstream unavailable")
		}
		return nil
	})
	done := make(chan struct{})
	proc, _ := stream.NewProcessor(handler,
		stream.WithPolicy(checkpoint.Policy{MaxRetries: 3, Backoff: checkpoint.Fixed(10 * time.Millisecond)}),
		stream.WithHooks(stream.Hooks{Checkpointed: func(e stream.CheckpointEvent) {
			if e.Next == 3 {
				close(done)
			}
		}}))

	store, _ := eventhubs.NewCheckpointStore(memhub.NewStore(), "processor-1", nil)
	earliest := true
	p, _ := hub.NewProcessor(store, "billing", "processor-1", &azeventhubs.ProcessorOptions{
		StartPositions: azeventhubs.StartPositions{Default: azeventhubs.StartPosition{Earliest: &earliest}}})
	c, _ := eventhubs.NewWith(proc, p, store, eventhubs.WithReceiveWait(50*time.Millisecond))

	ctx, cancel := context.WithCancel(context.Background())
	stopped := make(chan struct{})
	go func() { _ = c.Run(ctx); close(stopped) }()
	<-done
	cancel()
	<-stopped
	pos, _ := eventhubs.Committed(context.Background(), store, memhub.Namespace, "orders", "billing")
	fmt.Println("next event:", pos["0"].Next)
	// Output:
	// events 0-2, retry 0
	// events 0-2, retry 1
	// next event: 3
}
