//go:build race

package retrystate

// raceEnabled reports a build with the race detector, which slows the
// codec's long property tests about ten times and has nothing to find in
// them (they run on one goroutine): they run fewer cases then.
const raceEnabled = true
