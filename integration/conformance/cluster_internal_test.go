package conformance

import (
	"testing"

	"github.com/redeliver-go/redeliver/stream"
)

// TestPoisonDeliveriesCountAFirstDeliveryOnce: a poison record whose
// first failure's state a move lost is delivered again as a first
// delivery by the next owner (docs/COUNTING.md); the cluster scenarios'
// count takes that first delivery once, as the contract's bound does, and
// reports the repeat. A retry delivered twice still counts twice.
func TestPoisonDeliveriesCountAFirstDeliveryOnce(t *testing.T) {
	r := &clusterRun{}
	fail := func(member string, claim uint64, offset int64, retry int) {
		r.hist.Hooks(member).Delivered(stream.DeliveredEvent{
			BatchInfo: stream.BatchInfo{Topic: "t", Partition: 0, ClaimID: claim, FirstOffset: offset, LastOffset: offset, Records: 1},
			Attempt:   stream.Attempt{Retries: retry, MaxRetries: clusterRetries}, Outcome: stream.Failed,
			Err: &stream.BatchError{Index: 0, Err: errPoison},
		})
	}
	// Record 42: its first failure lost by a move, then its whole budget.
	fail("a", 1, 42, 0)
	for retry := range clusterRetries + 1 {
		fail("b", 2, 42, retry)
	}
	// Record 192: its budget, once.
	for retry := range clusterRetries + 1 {
		fail("b", 2, 192, retry)
	}
	lo, hi, repeated := r.poisonDeliveries()
	if lo != clusterRetries+1 || hi != clusterRetries+1 || repeated != 1 {
		t.Errorf("poisonDeliveries = %d..%d, %d repeated; want %d..%d, 1 repeated", lo, hi, repeated, clusterRetries+1, clusterRetries+1)
	}
	// A retry delivered twice is over the bound, and is counted so.
	fail("b", 2, 192, 2)
	if _, hi, _ := r.poisonDeliveries(); hi != clusterRetries+2 {
		t.Errorf("with a retry delivered twice, the most = %d, want %d", hi, clusterRetries+2)
	}
}
