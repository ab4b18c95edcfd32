// Package kafkago turns a segmentio/kafka-go consumer group into
// [stream.Claim]s for a [stream.Processor]: for each generation of the group,
// each assigned partition gets a worker goroutine that runs
// [stream.Processor.Process] over it.
//
// # What the adapter does
//
//   - It uses kafka-go's [kafka.ConsumerGroup] API ([kafka.ConsumerGroup.Next],
//     [kafka.Generation]), not the [kafka.Reader]'s GroupID mode, which
//     reads every partition through one queue and cannot hold one back.
//     Each assigned partition is read by a [kafka.Reader] of its own
//     (Topic and Partition set, no GroupID), started at the partition's
//     committed offset.
//   - Batches are formed per partition from what its reader fetched: at
//     most [WithMaxBatch] records, waiting at most [WithMaxWait] for a batch
//     to fill.
//   - Checkpoints are committed per partition, synchronously, after the
//     batch is handled, with [kafka.Client.OffsetCommit] under the
//     generation's ID and member ID, with the metadata string the Processor
//     gives. When a generation begins, the committed offsets and their
//     metadata are read with [kafka.Client.OffsetFetch], so that a new owner
//     continues the retry count of a withheld batch
//     ([stream.Claim.Committed]).
//   - The end of a generation cancels every claim of the generation and
//     waits for its workers before kafka-go may join the next one; a commit
//     is refused with [stream.ErrRevoked] once the generation has ended,
//     under the same lock as the end, and a commit in flight is waited for.
//
// # kafka-go's limits, and what the adapter does about them
//
// No pause. kafka-go cannot pause a partition. The adapter pauses one by
// not reading its reader while the batch waits out a backoff: the reader's
// queue (QueueCapacity, 100 records by default) fills up, its fetch goroutine
// blocks, and nothing more is fetched for the partition; records read before
// the pause stay buffered, in order, and come out after the resume. Memory
// stays bounded: per partition at most max(4 x max batch, 2048) buffered
// records, plus the reader's queue, plus one fetch response (MaxBytes).
// Heartbeats run on kafka-go's own goroutine and are never held up by a
// backoff, so a backoff longer than the session timeout causes no rebalance.
//
// Commit interval. The Reader's CommitInterval (asynchronous commits on a
// timer) and [kafka.Generation.CommitOffsets] are not used: the latter has
// no metadata (it writes an empty string, which would erase the retry state)
// and the former may commit after a rebalance or lose commits on exit. A
// commit here is synchronous and per batch, as the raw loop in this
// package's benchmark does; its cost is one round trip to the group
// coordinator per batch and partition, so larger batches mean fewer
// commits. ReaderConfig.CommitInterval is ignored.
//
// Generation changes. kafka-go's group protocol is eager: every rebalance
// (a member joining or leaving, a partition added when
// WatchPartitionChanges is set, a failed heartbeat) ends the generation, and
// with it every claim of every member, even of partitions that stay put. A
// batch in flight is abandoned without a commit and delivered again by the
// partition's next owner, which with the default durable retry state
// continues the batch's retry count. kafka-go waits for every worker before
// it joins the next generation, so a handler that ignores its context's
// cancellation holds up the rebalance of the whole group (up to the group's
// RebalanceTimeout, then the member is dropped). A commit the coordinator
// refuses as stale (illegal generation, unknown member, rebalance in
// progress) ends the generation at once: the member joins again. Cooperative
// rebalancing, static membership and the KIP-848 protocol are not available
// in kafka-go.
//
// Start offsets. A partition without a committed offset starts at the
// group's StartOffset (kafka.FirstOffset unless set). A committed offset
// that is no longer in the log (retention) makes kafka-go's reader skip to
// the first offset still there, without an error.
//
// Shutdown. [Consumer.Run] returns once every worker has stopped and the
// member has left the group. The readers' connections are closed at once,
// so a reader waiting for a fetch answer (up to its MaxWait, 10s by default)
// does not hold the shutdown up. Leaving the group during a rebalance waits
// for kafka-go's JoinGroup to return (up to the group's RebalanceTimeout).
//
// Metadata size. kafka-go does not check the size of commit metadata; the
// broker does (offset.metadata.max.bytes, 4096 by default; 1024 on the
// Event Hubs Kafka endpoint). The retry state redeliver writes is a few
// dozen bytes.
package kafkago
