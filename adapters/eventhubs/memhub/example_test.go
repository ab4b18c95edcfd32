package memhub_test

import (
	"fmt"

	"github.com/Azure/azure-sdk-for-go/sdk/messaging/azeventhubs/v2"

	"github.com/redeliver-go/redeliver/adapters/eventhubs/memhub"
)

// An in-memory event hub of two partitions: events sent to a partition
// get its next sequence numbers. A test gives the hub's Processor to
// eventhubs.NewWith (see its example) to run a consumer with no service.
func Example() {
	hub, err := memhub.New("orders", 2)
	if err != nil {
		fmt.Println(err)
		return
	}
	for _, body := range []string{"order 1", "order 2"} {
		if err := hub.Send("1", &azeventhubs.EventData{Body: []byte(body)}); err != nil {
			fmt.Println(err)
			return
		}
	}
	events, err := hub.Events("1")
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println(hub.Name(), hub.PartitionIDs())
	for _, ev := range events {
		fmt.Printf("partition 1, sequence number %d: %s\n", ev.SequenceNumber, ev.Body)
	}
	// Output:
	// orders [0 1]
	// partition 1, sequence number 0: order 1
	// partition 1, sequence number 1: order 2
}
