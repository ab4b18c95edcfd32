// Package stream is the engine of redeliver: it runs a [Handler] over the
// partitions a consumer is assigned and applies a retry policy to each, one
// batch at a time.
//
//	handler := stream.HandlerFunc(func(ctx context.Context, b *stream.Batch) error {
//		return store(ctx, b.Records) // an error: the same batch comes back after the backoff
//	})
//	proc, err := stream.NewProcessor(handler,
//		stream.WithPolicy(checkpoint.Policy{MaxRetries: 5, Backoff: checkpoint.Fixed(5 * time.Second)}))
//	consumer, err := franz.New(proc, ...) // an adapter runs proc over the consumer's partitions
//	err = consumer.Run(ctx)
//
// # Delivery semantics
//
// A [Batch] is consecutive records of one partition; it is the unit of
// delivery and of checkpointing. For each batch the handler either
//
//   - returns nil: the checkpoint advances past the batch;
//   - returns an error: the policy decides. With retries left, the checkpoint
//     is withheld, the partition is paused, and the same batch is delivered
//     again after the backoff. Without (retryCount 0, retries
//     spent, time budget spent, or an error the filter rejects, such as one
//     marked with [checkpoint.Permanent]), the batch is given up: the
//     Exhausted hook fires, the exhaustion action runs, and the checkpoint
//     advances;
//   - returns a [*RetryResult] ([Retry]): the delivery succeeded but asks to
//     be repeated; the RetryResult's count and delay replace the policy for
//     this batch, and once they are spent the checkpoint advances;
//   - panics: treated as a retryable error; the process survives.
//
// When the claim's context ends (shutdown, revocation, loss) the batch in
// flight is abandoned and its checkpoint is not moved: the partition's next
// owner delivers it again. A partition never delivers batch N+1 while batch N
// is pending, and other partitions are never held up by it.
//
// # Retry bound
//
// A batch is delivered at most retryCount + 1 times, across moves and
// crashes too (unless [WithInMemoryState]): its retry state is committed
// with the checkpoint, and each retry is committed as started before it is
// delivered, so a retry that a revocation or a crash interrupts counts. A
// first delivery commits nothing before it runs: one that is interrupted,
// or whose failure was not committed before the move, is delivered again
// as a first delivery.
//
// The retry state belongs to a record: the batch's first. When a handler
// names the record that failed ([FailedAt], [PerRecord]) after records
// that succeeded, the checkpoint moves to that record and its own count
// begins, so a record is never given up for failures of the records
// before it; a record that fails alone is given up alone. The committed
// state names its record's offset and says what it covers (that record
// alone, the records of a batch that failed as a whole, or the records
// given up), and a next owner, whatever its fetch size and policy,
// retries or gives up exactly those records, and never delivers again a
// record given up before. docs/COUNTING.md says what is counted per batch
// and per record, what a move carries, and what the dead-letter headers
// describe.
//
// # Errors that must not be retried
//
// Three ways keep an error from being retried; use the first that fits:
//
//   - checkpoint.Permanent(err), returned by the handler, when the handler
//     knows, where the error happens, that retrying cannot help (a record
//     that will never parse). It travels through %w, errors.Join and
//     [FailedAt], and every policy honours it.
//   - a filter in the policy (checkpoint.Policy's Retryable, with
//     checkpoint.RetryUnless, RetryOnly or RetryUnlessType) when a kind of
//     error, wherever it comes from, is or is not worth retrying in this
//     deployment.
//   - checkpoint.Policy's Decide only when the delay, or whether to go
//     on, depends on the error and the retry's number together (a 429
//     waits longer than a timeout).
//
// Each gives the batch (with FailedAt, the record) up at once, with the
// reason "error not retryable", to the exhaustion action. A hint about
// when, not whether, is checkpoint.RetryAfter; a retry that is not a
// failure is [Retry]. docs/ERRORS.md has examples and tells apart the
// names that look alike.
//
// # Units of work
//
// The engine runs two kinds of unit, with one implementation of every
// retry decision (the handler call and its panic recovery, reading the
// handler's result, the retry state machine, the hooks, giving up, the
// exhaustion action and its retries, StopPartition and the operator's
// Resume and Skip):
//
//   - a partition's batch, settled by a checkpoint: its retry state is
//     committed with the checkpoint, as above;
//   - a leased record, settled on its own by the transport that leased it
//     (a Kafka share group: accept, release, reject). A unit flows so: the
//     lease arrives with the broker's delivery count, which is restored as
//     the record's count with the bound check a next owner applies; the
//     record is delivered (first deliveries of a partition together,
//     retries alone); a success accepts it; a failure is counted by the
//     record's own machine, and its retry is held (the lease renewed)
//     until due, or released to the broker when the transport cannot hold
//     it that long; a record given up goes to the exhaustion action and is
//     rejected once the action succeeded (package
//     github.com/redeliver-go/redeliver/adapters/franz/share);
//   - in [ByKey] or [ByNone] ordering ([WithOrdering]), each record of a
//     claimed partition, settled by the partition's checkpoint: a record
//     joins its key's queue once the partition's commit window has room
//     for it; the head of each queue is delivered, up to the concurrency
//     limits; a failure is counted by the record's own machine, its state
//     kept in the window (or its retry waits for room) and committed,
//     marked started and committed again before the retry (after a
//     backoff of at most 10ms the mark is sent ahead of the retry's due
//     time, or with the failure in one commit when the backoff is too
//     short for two, as for a partition's batch); a record
//     handled, or given up with its action done, is finished, and the
//     next record of its key goes. The commit is the lowest record not
//     finished, with the finished records above it and the retrying
//     records' states as metadata (see docs/KEYS.md).
//
// # Pieces
//
// A [Processor] holds the handler and the options; adapters (for franz-go,
// kafka-go, sarama, confluent-kafka-go, Event Hubs) turn their client's assignments into [Claim]s and
// call [Processor.Process] once per claimed partition. Package streamtest
// has in-memory Claims for tests.
//
// [Claim], [Positioner] and [Processor.Process] are that seam: what a
// checkpoint consumer for another client implements or calls, with the
// engine deciding every retry behind it. A program that runs one of the
// adapters never touches them; it needs the Processor, its options, the
// handler types and the hooks. The share consumer hands its records to
// the engine's lease driver through a seam internal to this module, which
// is not part of this package's API.
//
// Middleware wraps handlers; the first given to [Chain] is the outermost:
//
//	Chain(h, logging, metrics)
//
//	batch -> logging -> metrics -> h
//	result <- logging <- metrics <- h
package stream
