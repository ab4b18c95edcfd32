// Package checkpoint holds the retry discipline of redeliver, independent of
// any stream client: the [Policy] (a retry limit, a [Backoff], an error
// filter and optional time limits), the delay algorithms, the per-partition
// retry state [Machine] and the durable form of its [State].
//
// Retries, not attempts: a policy with MaxRetries 10 delivers a batch at most
// 11 times; retry n (n >= 1) is the n-th redelivery.
//
// Nothing in this package sleeps, starts a goroutine, reads the clock or uses
// a global random source. Decisions are pure functions of the state, the time
// and the random source the caller passes in, as in the Azure IoT C SDK's
// retry control: [Machine.Fail] answers RetryNow, RetryLater at a time, or
// StopRetrying with a [Reason].
package checkpoint
