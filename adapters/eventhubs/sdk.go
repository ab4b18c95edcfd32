package eventhubs

import (
	"context"

	"github.com/Azure/azure-sdk-for-go/sdk/messaging/azeventhubs/v2"
)

// Processor is what the adapter uses of an Event Hubs processor: the
// SDK's [azeventhubs.Processor] (through [New]) or another implementation
// with the same behaviour, such as the in-memory hub of package memhub,
// which the adapter's tests run on.
//
// Run balances partition ownership through the processor's checkpoint
// store until ctx is done; NextPartitionClient returns a client for each
// partition the processor comes to own, and nil once the processor has
// stopped.
type Processor interface {
	Run(ctx context.Context) error
	NextPartitionClient(ctx context.Context) PartitionClient
}

// PartitionClient is what the adapter uses of an
// [azeventhubs.ProcessorPartitionClient]: one owned partition, read from
// a position fixed when the client was made (the checkpoint, exclusive).
//
// UpdateCheckpoint must write the checkpoint through the processor's
// checkpoint store, which must be the adapter's [CheckpointStore].
// ReceiveEvents returns an [*azeventhubs.Error] with code
// [azeventhubs.ErrorCodeOwnershipLost] once another reader took the
// partition.
type PartitionClient interface {
	PartitionID() string
	ReceiveEvents(ctx context.Context, count int, options *azeventhubs.ReceiveEventsOptions) ([]*azeventhubs.ReceivedEventData, error)
	UpdateCheckpoint(ctx context.Context, latest *azeventhubs.ReceivedEventData, options *azeventhubs.UpdateCheckpointOptions) error
	Close(ctx context.Context) error
}

// sdkProcessor adapts *azeventhubs.Processor to Processor.
type sdkProcessor struct{ p *azeventhubs.Processor }

func (s sdkProcessor) Run(ctx context.Context) error { return s.p.Run(ctx) }

func (s sdkProcessor) NextPartitionClient(ctx context.Context) PartitionClient {
	pc := s.p.NextPartitionClient(ctx)
	if pc == nil {
		return nil // not a typed nil in the interface
	}
	return pc
}
