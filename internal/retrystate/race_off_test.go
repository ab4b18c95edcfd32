//go:build !race

package retrystate

const raceEnabled = false
