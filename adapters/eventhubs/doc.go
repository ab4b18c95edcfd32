// Package eventhubs runs a [stream.Processor] on Azure Event Hubs, over the
// azeventhubs v2 SDK's Processor: one [stream.Claim] per
// ProcessorPartitionClient the processor hands out, each run by the engine
// in a goroutine of its own. The engine holds every retry semantic; this
// package turns Event Hubs' model into Claims and makes its checkpoint
// store safe for them.
//
//	store, err := checkpoints.NewBlobStore(containerClient, nil) // the SDK's blob checkpoint store
//	consumer, err := eventhubs.New(proc, consumerClient, store)   // fences store
//	err = consumer.Run(ctx)                                       // nil once ctx is cancelled
//
// For tests and examples, package memhub is an in-memory hub that
// [NewWith] runs on.
//
// # What the adapter does
//
//   - A batch is one ReceiveEvents result: at most [WithMaxBatch] events,
//     waiting at most [WithReceiveWait] for them. Event Hubs has no seek: a
//     partition client reads on from where it was opened, so a batch to
//     deliver again is held in memory by the engine, never read again.
//   - Pausing a partition during a backoff is not calling ReceiveEvents on
//     it. The SDK's prefetch (ProcessorOptions.Prefetch, 300 events by
//     default) keeps up to that many events in the client meanwhile, and
//     asks for no more until they are received. Other partitions go on.
//   - The checkpoint is UpdateCheckpoint with the last event the engine
//     resolved (the batch's last, or the one before a failed record on a
//     partial success), written only after the batch is resolved, never on
//     cancellation or shutdown.
//   - A partition with no checkpoint: before it delivers the first batch,
//     the claim writes a positional checkpoint (see [PositionOffset]) just
//     before that batch's first event. A batch withheld for a retry, cut
//     off by a shutdown or a crash, or withheld in memory
//     ([stream.WithInMemoryState]) is so found again by any next owner,
//     whatever its start position: with the SDK's default (the latest
//     event) a next owner would otherwise open after it and never see it.
//     It costs one checkpoint write, and the fence's ownership renewal
//     before it, per partition, once per consumer group.
//   - A claim's first batch: before it is delivered, the claim renews the
//     partition's ownership through the fence (the positional checkpoint
//     above does so too). Another processor may take the partition after
//     this processor claimed it, and this processor learns that only at
//     its next round. The renewal then fails: the claim ends with
//     [ErrOwnershipLost] and delivers nothing, so the two processors do
//     not both deliver the partition meanwhile. It costs one storage
//     write per claim.
//   - Events that expired from the hub before they were handled (a first
//     batch that starts past the checkpoint; a batch that starts past the
//     previous one, or holds a gap, when the consumer lags by more than
//     the retention) are logged at Error level with the range lost. A
//     batch withheld at the first event after such a gap gets a positional
//     checkpoint just before that event, as a first batch does. Events at
//     or before the checkpoint that the partition client delivers (the SDK
//     opens a partition at its earliest event, inclusive, when a
//     geo-replicated namespace refuses the checkpoint's offset) are
//     skipped, not delivered again with a fresh count.
//   - Lease loss: ReceiveEvents failing with
//     [azeventhubs.ErrorCodeOwnershipLost], or the processor's own
//     ownership reads showing the partition with another owner, cancels the
//     claim at once; events received meanwhile, or received before but not
//     yet given to the handler, are not delivered, and no checkpoint is
//     written by it afterwards (see [CheckpointStore]).
//   - Retry state: the state of a withheld batch (retries so far, first
//     failure, when the next retry is due) is stored beside the checkpoint
//     by the [CheckpointStore] wrapper, so that the next owner (another
//     processor, or this one after a restart) continues the count, as on
//     Kafka, where it rides in the offset commit's metadata. Once the
//     checkpoint moves past the batch, the state is cleared: a range
//     replayed after an operator rewinds the checkpoint is delivered anew.
//   - Shutdown: [Consumer.Run] stops its workers (waiting for a handler
//     that ignores the end of its context at most the drain time,
//     [WithDrain], 25s by default, and reporting at Warn the partitions
//     it waits for: after 2s, then every 5s), then the processor, then
//     hands the partitions it still owns back through the store, so that
//     other processors take them at their next balancing round (the SDK
//     processor's own hand-back names ownership ETags that the fence has
//     renewed since, and the store refuses it). A consumer that crashes
//     hands nothing back: its partitions wait for their ownership to
//     expire.
//   - Dead-letter: [Publisher] sends given-up batches to an event hub
//     through an [azeventhubs.ProducerClient]; a Kafka topic works too,
//     through the Kafka adapters' publishers. A dead letter that the added
//     headers make too large for the hub is sent with them cut down.
//
// # What to configure for these guarantees
//
//   - Start position: any. The SDK's default (the latest event) keeps
//     every guarantee: the positional checkpoint above makes a partition's
//     start a checkpoint as soon as its first batch arrives. The start
//     position decides only where a consumer group's very first reader of
//     a partition begins.
//   - Checkpoint store: the SDK's blob store (checkpoints.NewBlobStore,
//     its container created beforehand) or any [azeventhubs.CheckpointStore],
//     always behind this package's [CheckpointStore]: [New] wraps it; with
//     [NewWith], wrap it with [NewCheckpointStore] and give the processor
//     that wrapper. Do not share the consumer group with readers that are
//     not redeliver's: their checkpoint writes are not fenced, and they
//     read a positional checkpoint as the earliest event (they see events
//     again, they miss none).
//   - Ownership expiry: PartitionExpirationDuration (60s by default) above
//     UpdateInterval (10s) x 1.3 plus a second ([New] refuses less), and
//     the same value in [StoreOptions] ([New] passes it). It is how long
//     the partitions of a consumer that crashed wait before another takes
//     them; a consumer that stops cleanly hands them back at once.
//   - Retention: longer than a batch can stay withheld (the policy's
//     retries and backoff, or its time budget, plus any time with no
//     consumer running). Events that expire before they are handled are
//     lost to every reader: the adapter logs them at Error level.
//   - Dead-letter hub: a size limit at least the source hub's.
//
// # What Event Hubs allows, and does not
//
//   - No seek and no per-event acknowledgement: a checkpoint is a sequence
//     number (and offset) per partition and consumer group, "everything up
//     to here is done"; a partition client starts after the checkpoint
//     (exclusive) or at the processor's StartPositions when there is none
//     (the SDK's default is the latest event, not the earliest).
//   - Sequence numbers are per partition, consecutive, and are the
//     records' offsets here.
//   - Ownership is balanced by the processors themselves through the
//     checkpoint store: each lists ownership and claims partitions by ETag
//     every UpdateInterval (10s by default, jittered x0.8-1.3); an
//     ownership not renewed within PartitionExpirationDuration (60s) is free;
//     balanced load balancing claims one partition per round, greedy all it
//     may, and a processor above its share is stolen from. So a partition
//     moves without waiting for its previous owner to stop: the old owner
//     learns it from ReceiveEvents (the new owner's link detaches its own)
//     or at its next round. The checkpoint store's checkpoint writes are not
//     conditional; the fence of [CheckpointStore] is what keeps a stale
//     owner from moving the new owner's checkpoint. The lost partition's
//     claim ends (its handler's context with it); a handler that ignores
//     that runs on beside the new owner, which may deliver the same events
//     meanwhile: the consumer reports it at Warn, naming the partition,
//     after 2s and then every 5s, until it returns.
//   - Storage keeps modification times in whole seconds:
//     PartitionExpirationDuration must exceed UpdateInterval by more than a
//     second.
//
// # What this was tested against
//
// No Event Hubs service and no emulator of it ran where this package was
// built. The adapter talks to the SDK through two narrow interfaces
// ([Processor], [PartitionClient]); its tests and the repository's
// conformance and reliability suites run it on package memhub's in-memory
// hub, whose processor is a port of the SDK's load balancing, with
// checkpoints in memory and in the SDK's own blob checkpoint store on
// Azurite, Microsoft's storage emulator. The SDK's AMQP side (links,
// prefetch, the service's errors) has not run.
package eventhubs
