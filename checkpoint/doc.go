// Package checkpoint holds the retry discipline of redeliver, independent of
// any stream client: the [Policy] (a retry limit, a [Backoff], an error
// filter and optional time limits), the delay algorithms, the error
// markers a handler returns, and the [ExhaustedError] of a batch given up.
// Package stream applies it; the engine's own machinery (the retry state
// machine and the durable form of its state) is internal to redeliver.
//
//	policy := checkpoint.Policy{MaxRetries: 5, Backoff: checkpoint.Exponential(time.Second)}
//	policy.Schedule(5, nil) // [1s 2s 4s 8s 16s]
//	proc, err := stream.NewProcessor(handler, stream.WithPolicy(policy))
//
// Retries, not attempts: a policy with MaxRetries 10 delivers a batch at most
// 11 times; retry n (n >= 1) is the n-th redelivery.
//
// Delays. A [Backoff] is a pure function of the retry number. The
// constructors take one parameter of each type ([Fixed], [Exponential],
// [ExponentialJitter], ...); decorators compose them, so that a schedule
// reads at the call site:
//
//	checkpoint.FullJitter(checkpoint.Capped(20*time.Second, checkpoint.Exponential(time.Second)))
//
// and a shape with several parameters of one type is a struct with named
// fields ([JitteredExponential]).
//
// Presets. Each SDK that redeliver's users migrate from has a struct type
// named for it ([AzureIoTC], [AzureIoTJava], [BackoffAlgorithm],
// [AzureFunctionsExponentialBackoff], [WebJobsRandomizedExponentialBackoff])
// whose fields are the SDK's parameters; its Policy method checks them and
// returns the [Policy] that reproduces that SDK's released code. Where the
// SDK's defaults are not the zero value, New<Preset> returns them.
//
// Errors. [Permanent] marks an error that must not be retried, [RetryAfter]
// one that says when to retry; [DefaultRetryable], [RetryOnly],
// [RetryUnless] and [RetryUnlessType] are error filters for
// [Policy.Retryable].
//
// Nothing in this package sleeps, starts a goroutine, reads the clock or uses
// a global random source: a [Backoff] and a [DecideFunc] are pure functions
// of the retry number, the previous delay and the random source the caller
// passes in, so that a policy can be tested exactly ([Policy.Schedule]).
package checkpoint
