package kafkatest

import (
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/redeliver-go/redeliver/stream"
	"github.com/redeliver-go/redeliver/stream/streamtest"
)

// RevokeBound is how soon after a second consumer joins the group a
// worker whose commit the coordinator does not answer must have stopped,
// its partition given up: well within the 10s the adapters wait for a
// worker at a revocation, and above the time the rebalance itself takes
// with the tests' fast group timings (a session of 1s where the adapter
// sets one).
const RevokeBound = 3 * time.Second

// revocationEndsCommitWait checks that a revocation does not wait for a
// commit the coordinator does not answer (issue 51). The broker holds
// every OffsetCommit; consumer a of topic "t" (1 partition, 10 records)
// handles its batch and waits in the commit; consumer b then joins the
// group and the partition moves (to b, or back to a in the next
// generation). a's worker must stop (its Released
// event, after its Delivered or Abandoned events for the batch) within
// RevokeBound of b's start: a worker that waited for the commit's answer
// held its partition until the hold ended or the adapter gave up on it
// (the commit timeout, 10s), while the next owner delivered the same
// records.
//
// Where the held commit holds the member's heartbeats too (one connection
// to the coordinator, answered in order), the coordinator expires a's
// session and gives the partition to b before a learns that it lost it:
// b may then deliver a little before a's worker stops, which no client
// can prevent. The test logs that overlap and does not fail on it.
func revocationEndsCommitWait(t *testing.T, a Adapter) {
	kc, addrs := NewCluster(t, "t", 1)
	Produce(t, addrs, "t", 0, 0, 10)
	held, _ := Hold(t, kc, kmsg.OffsetCommit)
	var (
		mu       sync.Mutex
		events   []string // a's Delivered, Abandoned and Released, in order
		released time.Time
		bFirst   time.Time // b's first delivery of partition 0
	)
	// a's events of its first claim: a may claim the partition again later.
	var (
		claim   uint64
		claimed bool
	)
	note := func(id uint64, what string) {
		mu.Lock()
		defer mu.Unlock()
		if !claimed {
			claim, claimed = id, true
		}
		if id != claim {
			return
		}
		events = append(events, what)
		if what == "released" && released.IsZero() {
			released = time.Now()
		}
	}
	hooksA := stream.Hooks{
		Claimed:   func(ev stream.ClaimEvent) { note(ev.ClaimID, "claimed") },
		Delivered: func(ev stream.DeliveredEvent) { note(ev.ClaimID, "delivered") },
		Abandoned: func(ev stream.AbandonedEvent) { note(ev.ClaimID, "abandoned") },
		Released:  func(ev stream.ReleaseEvent) { note(ev.ClaimID, "released") },
	}
	hooksB := stream.Hooks{Delivered: func(ev stream.DeliveredEvent) {
		mu.Lock()
		if bFirst.IsZero() && ev.Partition == 0 {
			bFirst = time.Now()
		}
		mu.Unlock()
	}}
	Start(t, a, Config{Addrs: addrs, Group: "g", Topic: "t", Processor: NewProcessor(t, streamtest.Succeed, stream.WithHooks(hooksA))})
	select {
	case <-held:
	case <-time.After(Wait):
		t.Fatalf("the first consumer made no commit in %v", Wait)
	}
	time.Sleep(50 * time.Millisecond) // into the wait
	joined := time.Now()
	Start(t, a, Config{Addrs: addrs, Group: "g", Topic: "t", Processor: NewProcessor(t, streamtest.Succeed, stream.WithHooks(hooksB))})
	deadline := time.Now().Add(Wait)
	for {
		mu.Lock()
		r, evs := released, append([]string(nil), events...)
		mu.Unlock()
		if !r.IsZero() {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the first consumer's worker had not stopped %v after the second joined; its events: %v", Wait, evs)
		}
		time.Sleep(20 * time.Millisecond)
	}
	time.Sleep(200 * time.Millisecond) // for the log: the second's delivery, if it has the partition
	mu.Lock()
	defer mu.Unlock()
	t.Logf("the first consumer's worker stopped %v after the second joined; the first's events: %v",
		released.Sub(joined).Round(time.Millisecond), events)
	if took := released.Sub(joined); took > RevokeBound {
		t.Errorf("the first consumer's worker stopped %v after the second joined, want at most %v: its revocation waited for a commit the coordinator did not answer",
			took.Round(time.Millisecond), RevokeBound)
	}
	if !bFirst.IsZero() && bFirst.Before(released) {
		t.Logf("the second consumer delivered the partition %v before the first's worker stopped (the first learned of the move late)",
			released.Sub(bFirst).Round(time.Millisecond))
	}
	if len(events) < 3 || events[len(events)-1] != "released" || events[1] == "released" {
		t.Errorf("the first consumer's events of its claim %v, want Claimed, its batch's Delivered or Abandoned, then Released", events)
	}
}
