package kafkatest

import (
	"fmt"
	"strings"
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
// every OffsetCommit; consumer a of topic "t" (2 partitions, 10 records
// each) handles its batches and waits in the commits; consumer b then
// joins the group, and a partition moves (a cooperative rebalance moves
// one, an eager one takes both from a for the next generation). The
// first of a's workers to stop must do so (its Released event, after its
// Delivered or Abandoned events for the batch) within RevokeBound of b's
// start (skipped where [Adapter.CommitHoldsRebalance] says why the
// client cannot): a worker that
// waited for the commit's answer held its partition until the hold ended
// or the adapter gave up on it (the commit timeout, 10s), while the next
// owner delivered the same records.
//
// Where the held commit holds the member's heartbeats too (one connection
// to the coordinator, answered in order), the coordinator expires a's
// session and gives the partitions to b before a learns that it lost
// them: b may then deliver a little before a's worker stops, which no
// client can prevent. The test logs that overlap and does not fail on it.
func revocationEndsCommitWait(t *testing.T, a Adapter) {
	if a.CommitHoldsRebalance != "" {
		t.Skip(a.CommitHoldsRebalance)
	}
	kc, addrs := NewCluster(t, "t", 2)
	for p := range int32(2) {
		Produce(t, addrs, "t", p, 0, 10)
	}
	held, _ := Hold(t, kc, kmsg.OffsetCommit)
	type claimed struct {
		partition int32
		events    []string // Claimed, Delivered, Abandoned and Released, in order
	}
	var (
		mu       sync.Mutex
		claims   = map[uint64]*claimed{} // a's claims made before b joined
		joined   time.Time               // when b started; zero before
		released time.Time               // when the first of those claims was released
		first    *claimed                // and which
		bFirst   = map[int32]time.Time{} // b's first delivery of each partition
	)
	note := func(id uint64, p int32, what string) {
		mu.Lock()
		defer mu.Unlock()
		c := claims[id]
		if c == nil {
			if !joined.IsZero() {
				return // a claim of the next generation
			}
			c = &claimed{partition: p}
			claims[id] = c
		}
		c.events = append(c.events, what)
		if what == "released" && released.IsZero() {
			released, first = time.Now(), c
		}
	}
	hooksA := stream.Hooks{
		Claimed:   func(ev stream.ClaimEvent) { note(ev.ClaimID, ev.Partition, "claimed") },
		Delivered: func(ev stream.DeliveredEvent) { note(ev.ClaimID, ev.Partition, "delivered") },
		Abandoned: func(ev stream.AbandonedEvent) { note(ev.ClaimID, ev.Partition, "abandoned") },
		Released:  func(ev stream.ReleaseEvent) { note(ev.ClaimID, ev.Partition, "released") },
	}
	hooksB := stream.Hooks{Delivered: func(ev stream.DeliveredEvent) {
		mu.Lock()
		if _, ok := bFirst[ev.Partition]; !ok {
			bFirst[ev.Partition] = time.Now()
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
	mu.Lock()
	joined = time.Now()
	mu.Unlock()
	Start(t, a, Config{Addrs: addrs, Group: "g", Topic: "t", Processor: NewProcessor(t, streamtest.Succeed, stream.WithHooks(hooksB))})
	bound := RevokeBound
	deadline := time.Now().Add(bound + Wait)
	for {
		mu.Lock()
		r := released
		mu.Unlock()
		if !r.IsZero() {
			break
		}
		if time.Now().After(deadline) {
			mu.Lock()
			defer mu.Unlock()
			t.Fatalf("none of the first consumer's workers had stopped %v after the second joined; its claims: %v", bound+Wait, describe(claims))
		}
		time.Sleep(20 * time.Millisecond)
	}
	time.Sleep(200 * time.Millisecond) // for the log: the second's delivery of the partition
	mu.Lock()
	defer mu.Unlock()
	took := released.Sub(joined)
	t.Logf("the first consumer's worker of partition %d stopped %v after the second joined; the first's claims: %v",
		first.partition, took.Round(time.Millisecond), describe(claims))
	if took > bound {
		t.Errorf("the first consumer's first worker to stop (partition %d) stopped %v after the second joined, want at most %v: its revocation waited for a commit the coordinator did not answer",
			first.partition, took.Round(time.Millisecond), bound)
	}
	if b, ok := bFirst[first.partition]; ok && b.Before(released) {
		t.Logf("the second consumer delivered partition %d %v before the first's worker stopped (the first learned of the move late)",
			first.partition, released.Sub(b).Round(time.Millisecond))
	}
	if ev := first.events; len(ev) < 3 || ev[0] != "claimed" || ev[1] == "released" || ev[len(ev)-1] != "released" {
		t.Errorf("the events of the first consumer's claim of partition %d: %v, want Claimed, its batch's Delivered or Abandoned, then Released", first.partition, ev)
	}
}

func describe[C any](claims map[uint64]*C) string {
	var b strings.Builder
	for id, c := range claims {
		fmt.Fprintf(&b, "%d: %+v; ", id, *c)
	}
	return b.String()
}
