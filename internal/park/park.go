// Package park is the seam between the engine's partition worker (package
// stream's Processor.Process) and a claim that lets the worker's goroutine
// end while its partition is idle, under the same claim: the worker keeps
// its claim ID, its place in an outage budget and what it knows of the
// partition's checkpoint, and lets go of the rest (its retry machine, its
// batch, its logger), which it makes again when it resumes. The Claimed
// and Released hooks are called once per claim, as for a worker that never
// parks.
//
// A claim parks its worker by implementing [Claim]; package stream checks
// for it, so nothing of this is in the user's view of package stream. The
// goroutines parked workers resume on are shared ([Runners]), and a claim
// whose workers share them implements [Blocker] too.
package park

import "errors"

// ErrParked is what Processor.Process, or a resume a [Claim] was given,
// returns when the worker parked: the claim holds the resume, and the
// goroutine that called it ends. The claim is not released: nothing of it
// ends, and no hook is called.
var ErrParked = errors.New("stream: worker parked")

// Resume runs a parked worker again; see [Claim.Park]. A type of this
// package, so that only claims of this module can be a [Claim].
type Resume func() error

// Claim is a stream.Claim that parks its worker while nothing is buffered.
type Claim interface {
	// Park offers the claim the worker's resume. The worker offers it
	// when it would wait in Fetch and holds nothing: no batch under way,
	// no retry pending, the claim not paused, nothing fetched and not
	// delivered.
	//
	// Park returns false when Fetch would not wait (records are there,
	// or the claim's position moved) or the claim has ended: the worker
	// goes on with Fetch. It returns true when it took resume: the worker
	// returns ErrParked at once, and the claim calls resume exactly once,
	// on a goroutine of its own that it runs as the worker's, once records
	// arrive or the claim ends (the claim's context is done: resume then
	// ends the worker, with the Released hook). The check and the taking
	// are one step under the claim's lock, and so must be whatever makes
	// Fetch not wait, so that no records and no end are missed. resume
	// returns what Process would return, or ErrParked when the worker
	// parked again.
	Park(resume Resume) bool
}

// Blocker is a claim whose worker runs on goroutines it shares with other
// partitions' workers (see Runners): the worker calls Block before it
// waits for time to pass while it holds a batch (a backoff, an outage),
// and Unblock after, so that another partition's worker runs meanwhile
// rather than wait behind it. The worker calls them on its own goroutine,
// once each, in that order.
type Blocker interface {
	Block()
	Unblock()
}
