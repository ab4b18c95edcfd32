// Package kafkago turns a segmentio/kafka-go consumer group into
// [stream.Claim]s for a [stream.Processor]: for each generation of the group,
// each assigned partition gets a worker goroutine that runs
// [stream.Processor.Process] over it.
//
//	consumer, err := kafkago.New(proc, kafkago.WithGroupConfig(kafka.ConsumerGroupConfig{
//		ID:      "billing",
//		Brokers: []string{"localhost:9092"},
//		Topics:  []string{"orders"},
//	}))
//	err = consumer.Run(ctx) // nil once ctx is cancelled
//
// Its tests, and a runnable example on an embedded Kafka, are in the
// module adapters/kafkago/tests.
//
// # What the adapter does
//
//   - It uses kafka-go's [kafka.ConsumerGroup] API ([kafka.ConsumerGroup.Next]
//     and [kafka.Generation]), not the [kafka.Reader]'s GroupID mode, which
//     reads every assigned partition through one queue and can hold none of
//     them back. Each assigned partition is read from its leader through a
//     connection of its own, a fetch answer at a time, starting at the
//     partition's committed offset. The fetch requests and answers are
//     kafka-go's own (its protocol package), read record batch by record
//     batch, so that what kafka.Conn and kafka.Reader drop is kept (see
//     Transactions and Leader epochs below). The connection is made as the
//     group's Dialer would make it (its DialFunc or network settings, TLS,
//     SASL, client ID).
//   - Batches are formed per partition from what was fetched: at most
//     [WithMaxBatch] records, waiting at most [WithMaxWait] for a batch to
//     fill. With the default maximum wait of 0 a batch is whatever has been
//     fetched, so with a backlog batches are full.
//   - Checkpoints are committed per partition after the batch is handled,
//     with [kafka.Client.OffsetCommit] under the generation's ID and member
//     ID, with the metadata string the Processor gives. A commit that
//     carries a retry state is written before the next delivery; with a
//     commit window, the success that clears one is sent at once and not
//     waited for (a give-up's or a halt's is), and other success commits are
//     coalesced and written in the background within the commit window
//     ([WithCommitWindow]), and before the generation is given up. When a generation begins, the committed offsets and their
//     metadata are read with [kafka.Client.OffsetFetch], so that a new owner
//     continues the retry count of a withheld batch
//     ([stream.Claim.Committed]).
//   - The end of a generation cancels every claim of the generation and
//     waits for its workers before kafka-go may join the next one. A commit
//     is refused with [stream.ErrRevoked] once the generation has ended,
//     under the same lock as the end; a commit in flight at the end is
//     waited for.
//
// # kafka-go's limits, and what the adapter does about them
//
// No pause. kafka-go cannot pause a partition, and a kafka.Reader keeps
// fetching into its queue whether or not it is read. The adapter pauses a
// partition by not fetching it: while its batch waits out a backoff, or
// once its buffer has held max(4 x max batch, 2048) records or more, until
// the worker has taken it down to half, no fetch request is sent for it
// (one in flight completes). Records fetched before
// the pause stay buffered, in order, and come out after the resume. Memory
// stays bounded: per partition, the buffer's bound plus one fetch answer (at
// most the fetch's MaxBytes of record batches, which may be compressed).
// Heartbeats run on kafka-go's own goroutine and are never held up by a
// backoff, so a backoff longer than the session timeout causes no
// rebalance.
//
// Commit interval. kafka.Reader's CommitInterval (asynchronous commits on a
// timer) and [kafka.Generation.CommitOffsets] are not used: CommitOffsets
// has no metadata (it writes an empty string, which would erase the retry
// state of a withheld batch), and interval commits may be sent after a
// rebalance or lost on exit. The adapter's own coalescing keeps the
// metadata, writes a retry state before the retry, and writes the last
// success commit before the generation ends ([WithCommitWindow]);
// WithCommitWindow(0, 0) commits every batch synchronously, one round trip
// to the group coordinator per batch and partition.
//
// Generation changes. kafka-go's group protocol is eager: every rebalance
// (a member joining or leaving, a partition added when
// WatchPartitionChanges is set, a failed heartbeat) ends the generation and
// with it every claim of every member, including those of partitions that
// stay where they are. A batch in flight or waiting out a backoff is
// abandoned without a commit and delivered again by the partition's next
// owner (perhaps this consumer again), which, with the Processor's default
// durable retry state, waits out what is left of the backoff and continues
// the batch's retry count. kafka-go waits for every worker before it joins
// the next generation, so a handler that ignores its context's cancellation
// holds up the rebalance of the whole group, and is reported at Warn while
// it does, with the partitions it holds (after 2s, then every 5s). kafka-go
// stops heartbeating once its generation has ended; the adapter sends the
// member's heartbeats itself while it waits, every HeartbeatInterval, so
// that the member stays in the group, as the other clients' members do,
// for up to the group's RebalanceTimeout (30s by default). Past it the
// broker takes the member out of the group, a Warn line says so, and the
// partitions move while the handler still runs. A commit that the
// coordinator refuses as stale (illegal generation, unknown member,
// rebalance in progress) ends the generation at once and the member joins
// again. Cooperative rebalancing, static membership and the KIP-848
// protocol are not available in kafka-go.
//
// Transactions. kafka.Conn and kafka.Reader hand a transaction's marker
// (a control record) to the program as a record, and under
// kafka.ReadCommitted also the records of aborted transactions: they ignore
// the batches' control flag and the fetch answer's list of aborted
// transactions. The adapter reads both: a handler never sees a control
// record, and with IsolationLevel kafka.ReadCommitted in [WithFetchConfig]
// it never sees a record of an aborted transaction, as Kafka's own
// consumer. With kafka.ReadUncommitted (the default) it sees the records of
// open and aborted transactions, as any read_uncommitted consumer does.
// The checkpoint moves past the markers and aborted records it skips, as
// Kafka's own consumers commit their fetch position: a log that ends with
// a marker is committed to its end once the records before it are handled,
// not one short of it (a group lag that would never drain).
//
// Leader epochs. Every commit carries the leader epoch of the record
// before the committed offset when that record ended the batch handled,
// and -1 (unknown) otherwise, as Kafka's Java consumer and franz-go commit.
// kafka.Client.OffsetCommit commits epoch 0 every time: after the
// partition's leader epoch has moved on (a broker restart, a leader
// change), a later consumer of the group that checks epochs (franz-go, the
// Java consumer) would take such a commit for one from before a truncation
// and read committed records again.
//
// Start offsets. A partition without a committed offset starts at the
// group's StartOffset (kafka.FirstOffset unless set). A committed offset
// outside the partition is reset as Kafka's auto.offset.reset resets it,
// per StartOffset: to the partition's first offset for kafka.FirstOffset,
// to its end for kafka.LastOffset. That is a committed offset past the end
// (the topic was deleted and created again, or an unclean leader election
// truncated the log) or before the start (retention deleted the records).
// The reset is logged at Error with the offsets it skips or reads again.
//
// Fetch errors. After any error of a fetch (a moved leader, an unknown
// partition, a broken connection, any error the broker gives for the
// partition), the connection is dropped and made again to the partition's
// leader after kafka.Reader's backoff (100ms x failures², at most 1s); the
// backoff starts over only once a fetch has succeeded, so a leader that
// answers every fetch with an error is asked about once a second, not in a
// loop. A failure is logged when it first comes, then at most every 30s
// with how often it came meanwhile. One that can last for as long as
// nobody acts (the topic does not exist, the consumer may not read it)
// ends [Consumer.Run] with that error once it has lasted a minute with no
// successful fetch of the partition. The leader is looked up with one
// metadata request per broker that never asks the broker to create the
// topic.
//
// Health. At start, [Consumer.Run] checks that the brokers answer and that
// the group's topics exist, and the topic of the processor's
// [stream.DeadLetter] action through a [Publisher] (asked through the
// publisher's writer), and logs what it finds wrong within seconds;
// [Consumer.Health] reports it, with the partitions whose fetches fail,
// for a host's readiness. A problem that stops all consumption (brokers
// that do not answer, a consumed topic that does not exist or may not be
// read: no partition to fetch, so the rule for fetch errors above never
// applies) is logged again every 30s while it lasts, with how long it has
// lasted, and ends Run with its error after a minute ([WithFailAfter] sets
// that time).
//
// Shutdown. [Consumer.Run] returns once every worker has stopped and the
// member has left the group; it returns nil when it stopped because its
// context ended or [Consumer.Close] was called. Fetch connections are
// closed at once, so a fetch waiting for data (up to its MaxWait, 10s by
// default) does not hold the shutdown up; neither does a commit in flight,
// which is cut short after 250ms.
// Leaving the group waits at most 400ms for kafka-go's consumer group to
// close: past that (a JoinGroup, SyncGroup or metadata request the broker
// has not answered, which kafka-go would wait for up to the group's
// RebalanceTimeout) the group's connections are closed, and the broker
// removes the member at its session timeout. Run returns within a second
// of its context's end whatever the broker is slow to answer, unless a
// handler ignores the end of its context: then Run logs at Warn which
// partitions it waits for and for how long, 2s after the stop and then
// every 5s, and after the drain time (25s, [WithDrain]) closes the group's
// connections and returns an error naming them, leaving them running.
// [Consumer.Close] may be called from anywhere, a handler, a hook or the
// WithOnAssigned function included: from there it stops Run without waiting
// for it, since Run waits for them.
//
// Broker restarts. After the group coordinator restarts, a kafka-go
// member takes about its RebalanceTimeout (30s by default) to join the
// group again and resume: about 30s in the reliability suite's broker
// restart, 7s with RebalanceTimeout set to 5s (docs/RELIABILITY.md). Set
// it well above the time a handler and a commit take, and no higher.
//
// Metadata size. kafka-go does not check the size of commit metadata; the
// broker does (offset.metadata.max.bytes, 4096 by default; 1024 on the
// Event Hubs Kafka endpoint). The retry state redeliver writes is a few
// dozen bytes.
//
// # Configuration
//
// [WithGroupConfig] gives the group (ID, brokers, topics, and kafka-go's
// group settings, its Dialer included, which is also used for the fetch
// connections and for the commits); [WithFetchConfig] the fetch requests.
// [NewPublisher] turns a [kafka.Writer] into the [stream.Publisher] of a
// [stream.DeadLetter] exhaustion action.
package kafkago
