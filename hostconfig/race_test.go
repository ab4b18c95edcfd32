//go:build race

package hostconfig_test

// raceSlowdown is how much slower the race detector makes the tests that
// bound a time.
const raceSlowdown = 5
