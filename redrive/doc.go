// Package redrive re-drives parked records on a schedule: the time-based
// retry processor design (records stuck in a state past an expiry are
// re-published to a retry topic and marked, those stuck past a timeout are
// reported), joined to the in-stream retries.
//
//	park, err := redrive.Park(store, 5*time.Minute) // store: sqlitestore.Open or pgstore.Open
//	proc, err := stream.NewProcessor(handler, stream.WithExhaustionAction(park))
//	sch, err := redrive.NewScheduler(store, pub, redrive.WithRetryTopic("orders-retry"))
//	err = sch.Run(ctx) // every interval, re-publishes what is due
//
// A record gets into the store in one of two ways:
//
//   - the [Park] exhaustion action: a batch whose retries are spent is
//     parked, record by record, and the partition's checkpoint moves on at
//     once instead of blocking the partition or dropping the batch;
//   - [Await]: an application that waits for an outside answer (such as a
//     NONCE_PUBLISHED state, waiting for a device) parks the record in a state of
//     its own with an expiry, and calls [Complete] when the answer comes.
//
// A [Scheduler] sweeps the store every interval. An entry goes through these
// states (named as that design names them: the application's state, its _RETRY and its
// _TIMEOUT forms; redeliver adds _DONE, and names its own parked entries
// REDELIVER_PARKED):
//
//	              Park / Await
//	                   |
//	                   v
//	           +---------------+   Complete
//	           |    parked     |------------------------+
//	           |  <state>      |                        |
//	           +---------------+                        v
//	                   | expiry passed:          +-------------+
//	                   | re-publish              |    done     |
//	                   v                         | <state>_DONE|
//	           +---------------+   Complete      +-------------+
//	     +---->|   retrying    |------------------------^
//	     |     | <state>_RETRY |
//	     |     +---------------+
//	     |       |           | retry timeout since creation passed,
//	     +-------+           | or maximum re-drives made: report
//	expiry passed again:     v
//	re-publish        +-----------------+
//	                  |    timed out    |
//	                  | <state>_TIMEOUT |
//	                  +-----------------+
//
// The expiry counts from the time an entry entered its state, the retry
// timeout from its creation, as that design measures them. A re-driven record
// carries its original key, value and headers plus [HeaderKey],
// [HeaderNumber], [HeaderState] and the original topic, partition and
// offset; the [CompleteOnSuccess] middleware on the retry topic's consumer
// completes the entry once the record was handled. One that fails again
// and is given up through [Park] goes back to its entry ([Store.Repark]),
// never to a new one: an entry's life is bounded by the maximum number of
// re-drives and the retry timeout, however the consumers are wired.
//
// # A parked key keeps its order
//
// With [Park] in key ordering (stream.WithOrdering(stream.ByKey)), a
// record whose retries are spent is parked alone and its key moves on:
// the key's later records are handled before the parked one is re-driven.
// [ParkByKey] keeps the key's order instead. It is one option, which the
// processor takes in place of stream.WithExhaustionAction(park), and
// stream.NewProcessor refuses it in another ordering or beside a
// WithExhaustionAction:
//
//	park, err := redrive.ParkByKey(store, 5*time.Minute)
//	proc, err := stream.NewProcessor(handler, stream.WithOrdering(stream.ByKey), park)
//
// These are its rules:
//
//   - The order key. A parked record's entry gets [Entry.OrderKey]:
//     [OrderKey] of its topic, partition and ordering key (its Kafka key,
//     or what stream.WithKeyFunc gave), "orders/3/customer-42". Entries
//     with no order key ("", those of Park and Await, and every entry
//     written before the stores' migration 004) order nothing, as before.
//   - The lock. A key is locked while it has an entry parked or retrying.
//     The lock is the store's rows, so every instance of the group sees it
//     as soon as it is written, and a partition's next owner reads it from
//     the store: there is no window in which a rebalance loses it.
//   - Parked behind. While its key is locked, a record is not handled: it
//     is parked as an entry of its own, with the same order key, due at
//     once, and counts as handled (the handler is not called). A record
//     that a scheduler re-published (it carries [HeaderKey]) is the head of
//     its key's entries: it is handled as any record, and one that fails
//     again goes back to its entry.
//   - The re-drive. [Store.Claim] never claims an entry while an entry of
//     its order key with a lower ID is pending: a scheduler re-drives a
//     key's entries one at a time, in the order they were parked (offset
//     order), each once the one before is done or timed out, not merely
//     re-published. The key is released when its last entry is done or
//     timed out.
//   - What the consumer reads. A processor keeps, per partition it
//     handles, the set of locked keys: read from the store
//     ([KeyLocker.LockedKeys]) when a claim of the partition starts and
//     every 30 seconds after, and kept up to date by the parks it makes
//     itself. A record whose key is not in the set goes to the handler with
//     no store call; one whose key is in it is checked in the store
//     ([KeyLocker.KeyLocked]) before it is parked behind, so a released
//     key goes on at once. Only another instance locking a key of a
//     partition this one owns (an owner that lost the partition and does
//     not know it yet) can be missed, for up to 30 seconds; a stale lock
//     in the set costs a store call, never a record out of order.
//
// The stores that ship are [KeyLocker]s; ParkByKey refuses a store that is
// not. docs/KEYS.md gives what it costs per record.
//
// docs/REDRIVE.md in the repository is a walkthrough, with the cases in
// which a record can be published twice.
//
// Stores live in modules of their own, so that a program builds only the
// driver it uses: redrive/pgstore (PostgreSQL, several schedulers on one
// database) and redrive/sqlitestore (an embedded SQLite file, no server, one
// process). Both pass the conformance suite in redrive/redrivetest.
package redrive
