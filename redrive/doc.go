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
// docs/REDRIVE.md in the repository is a walkthrough, with the cases in
// which a record can be published twice.
//
// Stores live in modules of their own, so that a program builds only the
// driver it uses: redrive/pgstore (PostgreSQL, several schedulers on one
// database) and redrive/sqlitestore (an embedded SQLite file, no server, one
// process). Both pass the conformance suite in redrive/redrivetest.
package redrive
