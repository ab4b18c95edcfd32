// Package sarama turns an IBM/sarama consumer group into [stream.Claim]s
// for a [stream.Processor]: for each partition sarama assigns, the
// partition's worker runs [stream.Processor.Process] inside sarama's
// ConsumerGroupHandler.ConsumeClaim. Its name is sarama's: import it under
// another, such as rdsarama, next to sarama's own package.
//
//	cfg := sarama.NewConfig()
//	cfg.Version = sarama.V3_9_0_0
//	cfg.Consumer.Offsets.Initial = sarama.OffsetOldest
//	consumer, err := rdsarama.New(proc,
//		rdsarama.WithGroup([]string{"localhost:9092"}, "billing", "orders"),
//		rdsarama.WithConfig(cfg))
//	err = consumer.Run(ctx) // nil once ctx is cancelled
//
// Its tests, and a runnable example on an embedded Kafka, are in the
// module adapters/sarama/tests.
//
// # What the adapter does
//
//   - Run makes a sarama client and a consumer group on it
//     (sarama.NewConsumerGroupFromClient) and calls its Consume, session
//     after session. Setup reports the assignment ([WithOnAssigned]);
//     ConsumeClaim reads the partition's committed offset and metadata from
//     the group's coordinator (an OffsetFetch request), so that a new owner
//     continues the retry count of a withheld batch
//     ([stream.Claim.Committed]), and runs the worker; Cleanup logs the
//     session's end. sarama's consumer starts the partition at the offset
//     sarama read when the session began; a commit written between that
//     read and the claim's (a previous owner's last, written late) is
//     where the claim starts, and the records sarama hands out below it,
//     handled and committed already, are skipped (logged at Info). A
//     committed offset past the partition's end, which sarama replaces
//     with Consumer.Offsets.Initial, is not skipped to.
//   - A pump goroutine per claim moves what sarama delivers into a buffer;
//     batches are formed from it: at most [WithMaxBatch] records, waiting at
//     most [WithMaxWait] for a batch to fill.
//   - Transaction markers. sarama never hands out a transaction's marker
//     (nor, under read_committed, an aborted transaction's records) and
//     gives no position past them, so a log that ends with a marker would
//     be committed one short of its end (a group lag that never drains).
//     When the partition's high watermark is past the last record sarama
//     delivered and nothing more comes for 200ms, the pump fetches from
//     there itself (one request on the commits' client, with the
//     consumer's isolation level) and moves the checkpoint past the
//     markers and aborted records it finds before the next record; it
//     stops at the first record sarama would hand out, and under
//     read_committed reads nothing of an open transaction.
//   - Checkpoints are committed per partition after the batch is handled,
//     with an OffsetCommit request under the session's generation and
//     member ID (and group instance ID), with the metadata string the
//     Processor gives. A commit that carries a retry state is written
//     before the next delivery. With a commit window, the success that
//     clears one is sent at once and not waited for (a give-up's or a
//     halt's is), and other success commits are coalesced and written in the
//     background, one request in flight per partition, within the commit
//     window ([WithCommitWindow]: none by default, where every commit is
//     written before the next delivery; with one, at once too when the
//     partition is caught up), and always before the partition is given up
//     (before ConsumeClaim returns, so while the session still holds it): a
//     crash delivers again at most about two windows of records, and loses
//     none. sarama's automatic commits are turned off
//     (Consumer.Offsets.AutoCommit.Enable false, set on the consumer's copy
//     of the configuration). The commits, and the reads of the committed
//     offsets, go through a sarama client of their own, so through a
//     connection of their own: a broker answers a connection's requests in
//     order, and on the consumer's connection each commit waited behind a
//     fetch the broker held for up to Consumer.MaxWaitTime. The session's
//     MarkOffset and Commit are not used: Commit returns no error (a refused
//     commit would go unseen), and MarkOffset ignores an offset that is not
//     past the last one marked, so the retry state of a withheld batch,
//     written at the same offset with new metadata each time, would never be
//     written.
//   - Pause. Once a batch has waited out 100ms of a backoff, or once the
//     claim's buffer holds max(4 x max batch, 2048) records and its worker
//     has not taken it down to half within 100ms (meanwhile the pump reads
//     nothing from sarama's channel, which holds sarama back as a
//     ConsumeClaim loop does; a resume waits for sarama's next fetch of the
//     partition, which took about 100ms on kfake), the partition is paused
//     in sarama's consumer (ConsumerGroup.Pause) until the backoff is over
//     and the buffer down to half; it stops fetching it; heartbeats go on, so
//     a backoff longer than the session timeout causes no rebalance.
//     Records delivered before the pause stay buffered, in order. sarama
//     keeps a partition's pause across sessions, so a claim resumes its
//     partition when it starts and when it ends paused.
//   - Heartbeats. sarama sends the group's heartbeats on the connection of
//     its fetches, where each waits behind a fetch the broker holds up to
//     Consumer.MaxWaitTime when there is nothing new; with a session
//     timeout near that, the member falls out of the group again and
//     again. New refuses a Consumer.Group.Session.Timeout under 4 x
//     Consumer.MaxWaitTime (sarama's defaults, 10s and 500ms, are well
//     within).
//
// # Rebalances
//
// Every strategy sarama has works (Consumer.Group.Rebalance.GroupStrategies:
// range, round-robin, sticky, and cooperative-sticky, which makes sarama
// use the cooperative protocol). Under the eager protocol a rebalance ends
// the session and with it every claim; under the cooperative protocol only
// the claims of revoked partitions end (sarama closes their channel, which
// the pump sees at once). A batch in flight or waiting out a backoff is
// abandoned without a commit and delivered again by the partition's next
// owner, which, with the Processor's default durable retry state, waits out
// what is left of the backoff and continues the batch's retry count.
// sarama waits for ConsumeClaim before it joins again (up to the group's
// Rebalance.Timeout), so a handler that ignores its context's cancellation
// holds up the rebalance; it is reported at Warn while it does, with the
// partitions it holds (after 2s, then every 5s). A commit the coordinator refuses as stale
// (illegal generation, unknown member, rebalance in progress) is sent again
// once sarama has joined the next generation with the partition still
// assigned (cooperative), and is otherwise refused with [stream.ErrRevoked]
// when the session ends.
//
// # Shutdown
//
// Run returns once every worker has stopped; it returns nil when it stopped
// because its context ended or [Consumer.Close] was called. A commit in
// flight is waited for at most 250ms. Closing sarama's consumer group (its
// session released, the member gone from the group) is waited for 400ms,
// or Consumer.MaxWaitTime + 250ms when that is longer (sarama releases a
// session once the fetches in flight have come back, which an idle
// partition's does after MaxWaitTime): past that (a request the broker has
// not answered, which sarama would wait for up to its Net.ReadTimeout) the
// client is closed, and after 150ms more sarama's goroutines are left to
// end on their own. With sarama's default MaxWaitTime (500ms), Run returns
// within a second of its context's end whatever the broker is slow to
// answer, unless a handler ignores the end of its context: then Run logs
// at Warn which partitions it waits for and for how long, 2s after the
// stop and then every 5s, and after the drain time (25s, [WithDrain])
// closes the client and returns an error naming them, leaving them
// running.
//
// # Health
//
// At start, [Consumer.Run] checks, on a connection of its own, that the
// brokers answer and that the group's topics exist, and the topic of the
// processor's [stream.DeadLetter] action through a [Publisher] (asked
// through the publisher's client, or the group's brokers for one given
// with [WithPublisher]), and logs what it finds wrong within
// seconds; [Consumer.Health] reports it, with the partitions sarama reports
// failing, for a host's readiness. A problem that stops all consumption
// (brokers that do not answer, a consumed topic that does not exist or may
// not be read) is logged again every 30s while it lasts, with how long it
// has lasted, and ends Run with its error after a minute ([WithFailAfter]
// sets that time).
//
// # Dead letters
//
// The one way to dead-letter, as on the other Kafka adapters: make the
// publisher first, unbound, build the processor's [stream.DeadLetter]
// action on it, and give it to [New] with [WithPublisher], which binds it
// to the consumer:
//
//	pub := new(rdsarama.Publisher)
//	dl, err := stream.DeadLetter(pub, "orders.dlq")
//	proc, err := stream.NewProcessor(h, stream.WithExhaustionAction(dl))
//	consumer, err := rdsarama.New(proc, rdsarama.WithGroup(brokers, "billing", "orders"),
//		rdsarama.WithConfig(cfg), rdsarama.WithPublisher(pub))
//
// The consumer makes a SyncProducer on a client of its own from its
// configuration (acks from every in-sync replica, idempotent when the
// configuration allows it; see [WithPublisher]) when Run has reached the
// brokers, and closes it when Run returns. New refuses a processor that
// dead-letters through a Publisher bound to nothing. To produce through a
// client of your own (another cluster, other producer settings), make the
// publisher with [NewPublisher] instead, which makes a SyncProducer on
// that client. Either way, a record failed by the broker is reported as
// such in a [*stream.PublishError]. sarama's
// producer stops trying a topic it could not find the partitions of for
// 10s after 3 failures (its circuit breaker): a dead-letter topic created
// meanwhile is written to up to 10s later.
package sarama
