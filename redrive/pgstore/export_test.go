package pgstore

import "time"

// SetClaimReadTimeout sets the bound of a claim's read for a test, and
// returns what puts it back.
func SetClaimReadTimeout(d time.Duration) (restore func()) {
	old := claimReadTimeout
	claimReadTimeout = d
	return func() { claimReadTimeout = old }
}
