// Package share consumes a Kafka share group (KIP-932, "queues for Kafka")
// through franz-go under redeliver's retry contract: the same
// [stream.Handler], [checkpoint.Policy] (from code or host.json), hooks and
// exhaustion actions as the checkpoint adapters. Every retry decision is
// the engine's: each record is a unit of the [stream.Processor], counted,
// held, given up and stopped by the same code as a partition's batch in
// checkpoint mode. This package does only what is Kafka's: polling, lock
// renewal, acknowledgements, and whether a retry can be held or its
// record must be released.
//
//	proc, err := stream.NewProcessor(stream.PerRecord(handle),
//		stream.WithPolicy(checkpoint.Policy{MaxRetries: 5, Backoff: checkpoint.Fixed(5 * time.Second)}))
//	consumer, err := share.New(proc, share.WithKgoOptions(
//		kgo.SeedBrokers("localhost:9092"),
//		kgo.ShareGroup("billing"),
//		kgo.ConsumeTopics("orders"),
//	))
//	err = consumer.Run(ctx) // nil once ctx is cancelled
//
// Its tests, and a runnable example on an embedded Kafka, are in the
// module adapters/franz/tests.
//
// In a share group the broker hands records to members one by one, with a
// lock on each (share.record.lock.duration.ms, 30s by default) and a
// delivery count it keeps across members; several members read one
// partition at once, and order per key is not kept. What it lacks is a
// backoff: a released record comes back at once. This package adds it.
//
// # What happens to a record
//
//   - The handler gets the records one poll acquired, as batches of one
//     partition. A handler made with [stream.PerRecord] is called record by
//     record, and each result is applied as soon as it is known.
//   - nil accepts the record (AckAccept).
//   - An error, a panic or a [stream.RetryResult] asks for a retry under the
//     policy (a RetryResult's own count and delay for that record). The
//     record is held by this consumer: its lock is renewed (AckRenew,
//     KIP-1222, Kafka 4.2+) until the retry is due, and then it is
//     delivered again, alone, from memory. The broker's delivery count does
//     not grow. Other records go on meanwhile.
//   - [stream.FailedAt](i, err) accepts the records before i, retries the
//     record at i (counting a failure for it alone, at index 0 too), and
//     delivers the ones after it again at once, counting nothing for them.
//   - A [checkpoint.Permanent] error, one the policy's filter rejects, or a
//     retry budget spent gives the record up: the Exhausted hook fires and
//     the exhaustion action runs (skip, [stream.DeadLetter], ...). Only once
//     the action succeeded is the record rejected (AckReject), which archives
//     it. While the action fails, it is tried again with the processor's
//     operation backoff and the record is held, never rejected nor accepted.
//     With no action, the record is rejected at once.
//   - Dead-letter records carry the headers of Kafka's own share-group
//     dead-letter queue (KIP-1191: __dlq.errors.topic, .partition, .offset,
//     .group, .delivery.count, .message with the reason) beside redeliver's.
//     Both delivery counts (__dlq.errors.delivery.count and
//     redeliver-deliveries) are the record's own deliveries as counted
//     below, not the broker's delivery count: the broker does not count
//     the retries this consumer holds in memory.
//
// # Counting
//
// A record's retries so far are the broker's delivery count minus one, plus
// the retries this consumer made of it from memory. The broker counts a
// delivery each time it hands the record out: after a release, a lost lock
// or a member's crash. So a record that moves to another member keeps its
// count, but the in-memory retries the previous member had made are not
// known to the next one: each earlier acquisition counts as one failed
// delivery. The count a record comes back with goes through the same
// bound check as a next owner's in checkpoint mode: a record whose count is
// past MaxRetries (or the time limits) is not handed to the handler again;
// it is given up at once, to the exhaustion action. Deliveries to handlers
// are thus at most retryCount + 1, plus the in-memory retries lost with
// each crash or shutdown. The time budget (MaxRetryTime) runs from the
// first failure this consumer saw.
//
// One release counts nothing: a record this consumer released because its
// retry was due too late to hold (see below) goes on, when it comes back to
// this consumer with the next delivery count, from the state it was
// released with (a RetryResult's own count included). If it comes back to
// another consumer, that one counts the release as a failure.
//
// A clean stop drains each lane's poll first, within the drain time
// ([WithDrain], [DefaultDrain]): the handler calls running finish and the
// records of the poll not handed to the handler yet are delivered, so a
// record that never failed is not released and does not come back to the
// next member with a delivery counted as failed. What is left is released,
// which counts one delivery for it: a record held for a retry (it failed,
// so the count is right, but the retries held in memory before are lost)
// and a record the drain time cut off (overcounted by one: under
// MaxRetries 0 the next member gives it up). A Warn line counts the
// latter. A crash leaves the records locked until their locks run out
// (share.record.lock.duration.ms); then the broker counts one delivery for
// each, as for a release, whether it failed or was never handed over.
//
// The broker's delivery count limit (share.delivery.count.limit, 2 to 10,
// 5 by default) archives a record without any exhaustion action. Retries
// held here do not count against it; releases do. Run reads the limit at
// start, with the lock duration, and logs a warning when the policy allows
// more deliveries than the limit.
//
// # Holding, renewal, and long delays
//
//   - A retry due within [WithMaxHold] (5 minutes by default) is held.
//   - Where the broker refuses renewals (a broker before 4.2, or the group's
//     share.renew.acknowledge.enable set to false), a retry is held only if
//     it is due before the record's lock runs out, less a margin.
//   - A retry due later than that is released to the broker (AckRelease):
//     the broker delivers it again at once, to any member, and counts a
//     delivery; the backoff is not kept. At the broker's last delivery the
//     record goes to the exhaustion action instead, since the broker would
//     archive it. For long delays, prefer the checkpoint mode or an
//     exhaustion action that parks the record for a later re-drive.
//
// # Lanes, and what a held record holds back
//
// franz-go accepts, at the next poll, every record of the previous poll
// that has no final acknowledgement (a renewal is not final). So a member
// holding a record does not poll until the record is resolved. The
// consumer runs several members, lanes ([WithLanes], 4 by default), each a
// franz-go client with its own poll loop: while one waits, the others
// poll. Lanes fetch only while they poll (kgo.MaxConcurrentFetches(0)), so
// a waiting lane holds no fetched records whose locks run out; they fetch
// up to 1000 records at a time (kgo.ShareMaxRecords) to make up for it.
//
// A record in backoff holds back the records of its partition behind it in
// two cases, and a user who picks share mode to keep a failing record from
// holding back the others should rule out both:
//
//   - Members fewer than partitions. The broker then assigns each
//     partition to one member, so the partition of a waiting lane waits
//     with it. With more members than partitions (counting the lanes of
//     every consumer in the group) every partition is shared by two
//     members or more, and the others read on.
//   - The share partition's window. A share partition hands out at most
//     share.partition.max.record.locks records (2000 by default) past its
//     oldest unresolved record, so a held record stops its partition once
//     that many after it are out, whatever the number of members. On
//     Kafka 4.3 it is a group setting, at most the broker's
//     group.share.max.partition.max.record.locks: 4000 by default, and
//     10000 at most (Kafka 4.3.1 refuses to start with more). The
//     broker-wide default is group.share.partition.max.record.locks.
//
// docs/BENCHMARKS.md, "Share groups", measures both with a poison record
// among 100,000 on 4 partitions: 3.04 s until every good record was
// handled in either mode while the poisoned partition waited, 0.09 s in
// share mode with 8 lanes and a wide window.
//
// A broker hands out whole record batches (kgo.ShareMaxRecords is a hint
// unless kgo.ShareMaxRecordsStrict is given): records produced in one big
// batch go to one member together, and the others get none of them.
//
// # Locks, shutdown
//
//   - A record whose lock ran out (a renewal refused or late) is not
//     acknowledged by this consumer: the broker may have given it to another
//     member. The context of a handler call holding it is cancelled, and its
//     other records are delivered again.
//   - A renewal refused because the acquisition is gone (franz-go drops
//     the acknowledgements of a record acquired in a share session that
//     has ended, or from a leader the partition has left; the broker
//     refuses a record this member does not hold) ends the lease at once,
//     with a Warn line: the handler call or exhaustion action running for
//     the record is cancelled and nothing is acknowledged.
//   - A change of the partition's leader can give a record to two members
//     at once, which no consumer can prevent: the broker writes a
//     record's delivery count to __share_group_state when it is
//     acknowledged, released or renewed, not when it is handed out, so a new leader hands an acquired record out again at
//     once, with the count it had before, while the member holding it
//     sees its lock still running. Until that member's next renewal (at
//     most half the lock duration later) or the end of what it is doing,
//     the record is handled by both, a record given up has its exhaustion
//     action done by both (a dead letter written twice), and the old
//     holder's final acknowledgement is refused (a Warn line). See
//     docs/COUNTING.md, "Share mode".
//   - On shutdown, a lane drains its poll (see Counting): it polls no
//     more, starts no retry, lets the handler calls running finish and
//     delivers the records not handed over yet, for at most the drain
//     time ([WithDrain]). Then handler contexts are cancelled (a
//     per-record handler is not called for the records of its call that
//     are left); records in flight or held are released to the broker
//     (delivered again, with their count), never accepted unhandled, and
//     reported to the Abandoned hook, with a log line that counts them.
//     An exhaustion action runs on while the drain lasts, which it does
//     not hold up: it is cancelled when the drain ends.
//     A record whose exhaustion action succeeded is rejected. A record
//     given up whose action has not succeeded is released too, with a Warn line: its next holder gives it up again.
//     At the broker's last delivery there is nothing better to do (a
//     release, a lock that runs out and a member that leaves all archive
//     it), and the line is an Error that names it: its dead letter is
//     never written.
//   - When the broker refuses final acknowledgements of a partition (a
//     REJECT after a dead letter was written, say), a Warn line names the
//     records they were for: the broker delivers them again.
//
// # StopPartition
//
// [stream.StopPartition] holds the record, not its partition: the record's
// lock is renewed, the Stopped hook fires, and [stream.Processor.Stopped]
// lists it (a StoppedPartition with Record set, at its offset) until
// [stream.Processor.ResumeRecord] delivers it again with a fresh count or
// [stream.Processor.SkipRecord] rejects it as after an action that
// succeeded (Resume and Skip of its partition do the same while it is the
// partition's only record held). The cost: franz-go accepts, at the next
// poll, every record of the previous poll not acknowledged, so the lane
// holding the record polls no more until it is resumed or skipped; as many
// stopped records as lanes stop the consumer. The Error line of the stop
// says so. A shutdown releases a stopped record (delivered again).
//
// # Outage budget
//
// [New] refuses a processor with an outage budget ([stream.WithOutageBudget],
// host.json outageBudget): the budget holds a failing partition back while
// the downstream is away, and a share consumer cannot hold a partition
// back (a held record blocks its lane only, and the broker hands the
// partition's other records to other members), so records would be given
// up all the same.
//
// # Fetch errors
//
// A fetch error that franz-go reports (it retries the others itself) is
// logged at Warn when it first comes for a partition, then at most every
// 30s with how often it came, as the checkpoint adapter does; a lane whose
// poll brought errors and no record waits a backoff (10ms, doubling up to
// 500ms) before it polls again. An error that lasts a minute on a
// partition with no record fetched from it, or UNKNOWN_TOPIC_ID (the topic
// was deleted, or deleted and created again), ends [Consumer.Run] with
// that error; [Consumer.Health] reports the partitions whose fetches fail.
//
// # Starting offset
//
// A share group starts at the latest offset (share.auto.offset.reset):
// records produced before the group first reads a partition are not
// delivered. [WithResetEarliest] sets the group's share.auto.offset.reset to
// earliest before the first poll.
package share
