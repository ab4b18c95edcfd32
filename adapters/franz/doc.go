// Package franz turns a twmb/franz-go ([kgo]) group consumer into
// [stream.Claim]s for a [stream.Processor]: each assigned partition gets a
// worker that runs [stream.Processor.Process] over it (in partition
// ordering, the default, an idle partition's worker gives up its goroutine
// until records come or the partition is released; see "What the adapter
// does"):
//
//	proc, err := stream.NewProcessor(handler,
//		stream.WithPolicy(checkpoint.Policy{MaxRetries: 5, Backoff: checkpoint.Fixed(5 * time.Second)}))
//	...
//	consumer, err := franz.New(proc, franz.WithKgoOptions(
//		kgo.SeedBrokers("localhost:9092"),
//		kgo.ConsumerGroup("shipping"),
//		kgo.ConsumeTopics("orders"),
//	))
//	...
//	err = consumer.Run(ctx) // nil once ctx is cancelled
//
// The adapter's tests, and runnable examples on an embedded Kafka, are in
// the module adapters/franz/tests, so that this module requires nothing a
// program using it does not build.
//
// # What the adapter does
//
//   - An idle partition holds no goroutine: in partition ordering (the
//     default), once a partition's worker has checkpointed everything
//     and nothing is buffered, no retry pending and the partition not
//     paused, the worker parks under its claim and its goroutine ends.
//     Records arriving (or transaction markers moving the partition's
//     position), or the partition's release (a revocation, a lost
//     session, Run's end, Close), start it again, under the same claim:
//     Claimed and Released are called once per claim, the ClaimID does
//     not change, and a retry state read at the assignment is kept for
//     the first batch. Under key ordering ([stream.ByKey],
//     [stream.ByNone]) a worker never parks: it keeps its goroutine.
//   - Workers that start or wake at once (an assignment of many
//     partitions, a poll with records for many idle ones) share a few
//     goroutines: up to 4 per GOMAXPROCS (at least 16) run at once, and
//     one whose worker parks or ends takes the next worker waiting. A
//     worker that waits out its batch's backoff or an outage lets a
//     waiting worker start meanwhile, so that a partition in backoff
//     holds no other back; so does one that waits for a commit's answer
//     (every commit without [WithCommitWindow]), up to 4 times as many
//     at once as run, so that many partitions' commits are in flight
//     together, in one request. The background commits of
//     [WithCommitWindow] run on the same goroutines, and wait the same
//     way. When none of them takes a waiting worker for 10 ms (their
//     handlers take their time; 100 ms when all of them wait for
//     commits' answers), every worker still waiting gets a goroutine of
//     its own (logged at debug level). So a partition waits at most about
//     10 ms behind busy ones, and a thousand partitions waking together
//     do not make a thousand goroutines, whose descriptors the Go runtime
//     keeps for the life of the process.
//   - Batches are formed per partition from the client's fetches: at most
//     [WithMaxBatch] records, waiting at most [WithMaxWait] for a batch to
//     fill.
//   - While a batch waits out a backoff, its partition is paused with
//     [kgo.Client.PauseFetchPartitions] and resumed after its checkpoint is
//     written. The client keeps polling and heartbeating, so a backoff
//     longer than the session timeout causes no rebalance. Records polled
//     before the pause stay in the partition's own buffer and come out after
//     the resume in order: franz-go only advances a partition's fetch
//     position for records it hands to a poll, and every polled record goes
//     to that buffer.
//   - Each partition's polled records wait in a bounded buffer
//     ([WithBufferBytes]). A full buffer holds the poll loop back, which
//     makes the client stop fetching without dropping anything, for at
//     most 100ms while other partitions could take records: then the full
//     partition is paused in the client, so that one slow handler never
//     holds back the partitions that are caught up.
//   - Checkpoints are committed per partition after the batch is handled,
//     with the metadata string the Processor gives (a later owner reads it
//     back through [stream.Claim.Committed]). A commit that carries a retry
//     state is written before the next delivery. With a commit window, the
//     success that clears one is sent at once and not waited for (a give-up's
//     or a halt's is), and other success commits are coalesced and written in
//     the background, one request in flight per partition, within the commit
//     window ([WithCommitWindow]: none by default, where every commit is
//     written before the next delivery; with one, at once too when the
//     partition is caught up), and always before the
//     partition is given up: a crash delivers again at most the window's
//     records, and loses none. Autocommit is always off. Commits of several
//     partitions that are due at the same time travel in one OffsetCommit
//     request.
//   - A fetch error that franz-go reports (it retries the others itself)
//     is logged at Warn when it first comes for a partition, then at most
//     every 30s with how often it came; a poll that brought errors and no
//     record waits a backoff (10ms, doubling up to 500ms) before the next.
//     An error that lasts a minute on a partition with no successful fetch
//     of it, or UNKNOWN_TOPIC_ID (the topic was deleted, or deleted and
//     created again: franz-go never consumes it again under its old ID),
//     ends [Consumer.Run] with that error.
//   - A rewind of a partition (its topic deleted and created again, its
//     log truncated, and franz-go going back to an earlier offset) is
//     logged at Warn and its records are delivered from there.
//   - Transaction markers never reach a handler, and the checkpoint moves
//     past them (and, under read_committed, past an aborted transaction's
//     records), as Kafka's own consumers commit their fetch position: a
//     log that ends with a marker is committed to its end once the records
//     before it are handled, not one short of it (a group lag that would
//     never drain). For this the client keeps control records
//     (kgo.KeepControlRecords, in [ClientOptions]); the claims drop them.
//   - Revocation and loss cancel the partition's claim and wait for its
//     worker before the rebalance goes on; a commit is refused with
//     [stream.ErrRevoked] once the revocation has begun, under the same lock
//     as the revocation. A handler that ignores its context's cancellation
//     holds up the rebalance, and is reported at Warn while it does, with
//     the partitions it holds (after 2s, then every 5s); past the group's
//     rebalance or session timeout (kgo.RebalanceTimeout,
//     kgo.SessionTimeout) the broker drops the member, and the partitions
//     move while the handler still runs.
//
// It works with franz-go's default cooperative-sticky balancer, with the eager
// balancers, and with the KIP-848 consumer protocol
// ([kgo.ServerSideBalancer]) where the broker supports it.
//
// # Building the client
//
// Give the adapter kgo options with [WithKgoOptions] and it builds the
// client and owns it; the options must name a consumer group
// (kgo.ConsumerGroup) and what to consume (kgo.ConsumeTopics), or [New]
// says which is missing. To use a client you build yourself, build it with
// [ClientOptions] added last and pass it with [WithClient].
//
// A dead-letter action ([stream.DeadLetter]) needs its publisher before the
// processor, which comes before the consumer: make it new(Publisher) and
// give it to [New] with [WithPublisher], which binds it to the consumer's
// client (see the WithPublisher example).
//
// # Health
//
// At start, [Consumer.Run] checks that the brokers answer and that the
// topics it consumes, and the dead-letter topics of the publishers given
// with [WithPublisher] or of the processor's [stream.DeadLetter] action (a
// [Publisher] of [NewPublisher] is asked through its own client), exist;
// it logs what it finds wrong within seconds
// (a wrong topic name no longer stalls in silence), and [Consumer.Health]
// reports it, with the partitions whose fetches fail, for a host's
// readiness. A problem that stops all consumption (brokers that do not
// answer, a consumed topic that does not exist or may not be read) is
// logged again every 30s while it lasts, with how long it has lasted, and
// ends Run with its error after a minute ([WithFailAfter] sets that time).
//
// # Stopping
//
// [Consumer.Run] returns nil when it stopped because its context ended or
// [Consumer.Close] was called, and the error that stopped it otherwise, so
// that
//
//	if err := consumer.Run(ctx); err != nil {
//		log.Fatal(err)
//	}
//
// exits 0 on Ctrl-C. A handler that ignores the end of its context holds
// the stop: Run logs at Warn which partitions it waits for and for how
// long, 2s after the stop and then every 5s, and after the drain time
// (25s, [WithDrain]) returns an error naming them, leaving them running.
// [Consumer.Close] may be called from anywhere, a
// handler, a hook or the WithOnAssigned function included: from there it
// stops Run without waiting for it, since Run waits for them.
package franz
