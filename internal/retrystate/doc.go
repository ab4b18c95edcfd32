// Package retrystate is the engine's retry machinery, kept out of the
// user's view: the per-unit retry state [Machine], which applies a
// checkpoint.Policy to one batch or record at a time; the [State] it
// keeps and the durable form of it that a commit's metadata carries
// ([EncodeState], [DecodeState]); the rule that a committed state applies
// to the record it names ([ReadCommitted], [State.AppliesTo]), which every
// reader of committed metadata uses (the engine, the host's status page,
// the command line, the history checker); and the key-ordered mode's
// [Window] of a partition's records.
//
// Package stream drives it; the adapters, the host, rdotel and the
// command line read committed states through it. It is internal so that
// package checkpoint shows users the policy they write and the errors
// they read, and nothing else.
//
// Nothing in this package sleeps, starts a goroutine, reads the clock or
// uses a global random source. Decisions are pure functions of the state,
// the time and the random source the caller passes in, as in the Azure IoT
// C SDK's retry control: [Machine.Fail] answers RetryNow, RetryLater at a
// time, or StopRetrying with a checkpoint.Reason.
package retrystate
