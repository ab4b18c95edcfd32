package kafkaadapter

import (
	"context"
	"testing"
	"testing/synctest"
)

// A claim that ends while Run goes on was revoked: the channel closes. A
// claim ended by a shutdown (Run's context first) leaves it open, and so
// does a watch stopped before the claim ends.
func TestRevocation(t *testing.T) {
	closed := func(ch <-chan struct{}) bool {
		select {
		case <-ch:
			return true
		default:
			return false
		}
	}
	synctest.Test(t, func(t *testing.T) {
		run, stopRun := context.WithCancel(context.Background())
		defer stopRun()
		claim, end := context.WithCancel(run)
		revoked, stop := Revocation(claim, run)
		defer stop()
		synctest.Wait()
		if closed(revoked) {
			t.Fatal("closed while the claim goes on")
		}
		end()
		synctest.Wait()
		if !closed(revoked) {
			t.Error("open after the claim ended while Run goes on: a revocation")
		}
	})
	synctest.Test(t, func(t *testing.T) {
		run, stopRun := context.WithCancel(context.Background())
		claim, end := context.WithCancel(run)
		defer end()
		revoked, stop := Revocation(claim, run)
		defer stop()
		stopRun() // a shutdown: the claim ends with Run
		synctest.Wait()
		if closed(revoked) {
			t.Error("closed by a shutdown, which waits for a commit in flight up to its own bound")
		}
	})
	synctest.Test(t, func(t *testing.T) {
		run, stopRun := context.WithCancel(context.Background())
		defer stopRun()
		claim, end := context.WithCancel(run)
		revoked, stop := Revocation(claim, run)
		stop()
		end()
		synctest.Wait()
		if closed(revoked) {
			t.Error("closed after its watch was stopped")
		}
	})
}
