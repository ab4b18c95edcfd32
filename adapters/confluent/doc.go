// Package confluent turns a confluentinc/confluent-kafka-go v2 consumer
// group (librdkafka) into [stream.Claim]s for a [stream.Processor]: each
// assigned partition gets a worker goroutine that runs
// [stream.Processor.Process] over it. It needs cgo (librdkafka comes
// prebuilt inside confluent-kafka-go's module for common platforms); the
// adapter is a module of its own, so that no other module of redeliver
// needs cgo.
//
//	consumer, err := confluent.New(proc, confluent.WithGroup(kafka.ConfigMap{
//		"bootstrap.servers": "localhost:9092",
//		"group.id":          "billing",
//		"auto.offset.reset": "earliest",
//	}, "orders"))
//	err = consumer.Run(ctx) // nil once ctx is cancelled
//
// Its tests, and a runnable example on an embedded Kafka, are in the
// module adapters/confluent/tests.
//
// # What the adapter does
//
//   - Run makes a [kafka.Consumer] on a copy of the configuration with
//     enable.auto.commit and enable.auto.offset.store set to false,
//     subscribes with a rebalance callback, and polls. Polled messages go
//     into their partition's buffer; batches are formed from it: at most
//     [WithMaxBatch] records, waiting at most [WithMaxWait] for a batch to
//     fill. One goroutine polls at a time: the poll goroutine, or, while
//     the consumer owns one partition, that partition's worker whenever
//     its buffer is empty, so that its records go from Poll to the handler
//     on one goroutine, as in a Poll loop that handles what it polls; the
//     poll goroutine polls again once the worker has not for 10ms (its
//     handler runs, or it waits out a backoff).
//   - Transaction markers never reach a handler (librdkafka never hands
//     them out), and the checkpoint moves past them, and under
//     read_committed past an aborted transaction's messages: after each
//     poll the adapter reads [kafka.Consumer.Position] of the partitions
//     whose messages are all handed over, which librdkafka moves past what
//     it skipped. A log that ends with a marker is committed to its end
//     once the messages before it are handled, not one short of it (a
//     group lag that would never drain).
//   - The rebalance callback runs in Poll, on the goroutine that polls.
//     On an assignment it reads the new partitions' committed offsets
//     and metadata ([kafka.Consumer.Committed]), so that a new owner continues the retry
//     count of a withheld batch ([stream.Claim.Committed]); a read the
//     broker answers with an error for a partition is made again (up to 5
//     times, then Run ends with the error), never taken for no commit. It
//     starts their workers, and assigns them at the offsets it read, so
//     that librdkafka fetches from where each claim starts (Assign under
//     the eager protocol, IncrementalAssign under the cooperative one,
//     which partition.assignment.strategy cooperative-sticky selects; a
//     partition with no commit starts at auto.offset.reset). On a
//     revocation it ends the claims of the revoked partitions (all of them
//     under the eager protocol), waits for their workers, and only then
//     gives the partitions up, so that a worker's last commit is made
//     while the partition is still owned and no other member delivers a
//     partition's records while its handler still runs (a worker whose
//     own Poll runs the callback is between batches: its coalesced
//     commit is written there, before the partition is given up). A
//     handler that ignores the end of its context holds the revocation,
//     and with it the group's rebalance, for as long as it runs: at Warn,
//     after 2s and then every 5s, the consumer names the partitions whose
//     handlers have not returned. The wait ends at the group's rebalance
//     timeout (max.poll.interval.ms, 5 minutes by default), past which
//     the broker has taken the member out of the group: the partitions are
//     then given up while their handlers run, with a Warn line for each.
//     A stop that comes meanwhile waits for them within its drain time
//     ([WithDrain]), as it waits for any worker.
//   - Checkpoints are committed per partition after the batch is handled,
//     with [kafka.Consumer.CommitOffsets] and the metadata string the
//     Processor gives in TopicPartition.Metadata. A commit that carries a
//     retry state is written before the next delivery. With a commit
//     window, the success that clears one is sent at once and not waited
//     for (a give-up's or a halt's is). Others are coalesced and written in
//     the background, one request in flight per partition, within the
//     commit window ([WithCommitWindow]: none by default, where every
//     commit is written before the next delivery; with one, at once too
//     when the partition is caught up: nothing buffered, and everything up
//     to the high watermark of librdkafka's last fetch polled), and always
//     before the partition is given up (the worker writes it before the
//     revocation unassigns the partition, and before Close): a crash
//     delivers again at most about two windows of records, and loses none.
//   - Pause. Once a batch has waited out 100ms of a backoff, or once the
//     claim's buffer holds max(4 x max batch, 2048) records and its worker
//     has not taken it down to half within 100ms (the poll goroutine waits
//     that long, as a Poll loop that handles what it polls holds
//     librdkafka back), the partition is paused in
//     librdkafka ([kafka.Consumer.Pause]); heartbeats go on, so a backoff
//     longer than the session timeout causes no rebalance. librdkafka drops
//     what it had fetched for the partition but not yet handed to Poll, and
//     fetches it again after the resume, which costs a fetch's round trip:
//     so the short backoffs most retries wait do not pause it, and what
//     comes meanwhile is buffered, within the buffer's bound. Records
//     already polled stay buffered, in order.
//
// # Shutdown
//
// Run returns once every worker has stopped; it returns nil when it stopped
// because its context ended or [Consumer.Close] was called. A commit in
// flight is waited for at most 250ms; the consumer's Close (which leaves
// the group, once the fetches in flight have come back) at most 400ms, or
// fetch.wait.max.ms + 250ms when that is longer, after which it is left to
// finish on its own goroutine. A handler that ignores the end of its
// context holds Run: Run logs at Warn which partitions it waits for and
// for how long, 2s after the stop and then every 5s, and after the drain
// time (25s, [WithDrain]) returns an error naming them, leaving them
// running; the consumer is closed then, so that the member leaves the
// group without them, and what they commit afterwards is refused.
//
// # Health
//
// At start, [Consumer.Run] checks, through an admin client of its own on
// the consumer's configuration, that the brokers answer and that the
// group's topics exist, and the topic of the processor's
// [stream.DeadLetter] action through a [Publisher] (asked through its
// producer, or through the admin client for one given with
// [WithPublisher]), and logs what it finds wrong within seconds;
// [Consumer.Health] reports it, for a host's readiness. A problem that
// stops all consumption (brokers that do not answer, a consumed topic that
// does not exist or may not be read) is logged again every 30s while it
// lasts, with how long it has lasted, and ends Run with its error after a
// minute ([WithFailAfter] sets that time).
//
// # Dead letters
//
// The one way to dead-letter, as on the other Kafka adapters: make the
// publisher first, unbound, build the processor's [stream.DeadLetter]
// action on it, and give it to [New] with [WithPublisher], which binds it
// to the consumer:
//
//	pub := new(confluent.Publisher)
//	dl, err := stream.DeadLetter(pub, "orders.dlq")
//	proc, err := stream.NewProcessor(h, stream.WithExhaustionAction(dl))
//	consumer, err := confluent.New(proc, confluent.WithGroup(conf, "orders"), confluent.WithPublisher(pub))
//
// The consumer makes a [kafka.Producer] from its configuration's
// bootstrap.servers and security settings (acks=all,
// enable.idempotence=true; see [WithPublisher]) when Run starts, and
// flushes and closes it when Run returns. New refuses a processor that
// dead-letters through a Publisher bound to nothing. To produce through a
// producer of your own (another cluster, other producer settings), make
// the publisher with [NewPublisher] instead. Either way, each publish
// waits for its records' delivery reports, and a record the broker failed
// is reported as such in a [*stream.PublishError]. librdkafka reports a record to a topic
// that does not exist as failed after topic.metadata.propagation.max.ms
// (30s by default). librdkafka writes its log to stderr unless its
// configuration says otherwise (log_level, or a logs channel).
//
// # Module graph
//
// confluent-kafka-go's go.mod requires the Azure SDK (for its schema
// registry's packages), testcontainers and OpenTelemetry (for its own
// tests): a program that uses this adapter has about 240 modules in its
// module graph, though its build compiles only confluent-kafka-go's kafka
// package and librdkafka.
package confluent
