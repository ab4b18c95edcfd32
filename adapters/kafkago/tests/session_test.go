package tests

import (
	"strings"
	"testing"
	"time"

	"github.com/segmentio/kafka-go"

	"github.com/redeliver-go/redeliver/adapters/internal/kafkatest"
	"github.com/redeliver-go/redeliver/stream"
	"github.com/redeliver-go/redeliver/stream/streamtest"
)

// The member's line once the broker has taken it out of the group while it
// waited for its handlers.
const takenOut = `level=WARN msg="redeliver: the broker took this member out of the group while it waited for its handlers`

// TestRevocationKeepsTheSessionPastItsTimeout holds the first member's
// handlers, ignoring their contexts, for three times the group's session
// timeout while a second member joins: kafka-go stops its heartbeats when
// the generation ends, and without the adapter's own the broker would take
// the first member out of the group after one session timeout and give the
// second member the partitions whose handlers still run.
func TestRevocationKeepsTheSessionPastItsTimeout(t *testing.T) {
	var logs kafkatest.LogBuffer
	timings := func(gc *kafka.ConsumerGroupConfig) { gc.RebalanceTimeout = 20 * time.Second }
	addrs, _, release := kafkatest.HoldBoth(t, adapter, kafkatest.Config{Logger: logs.Logger(), Options: []any{timings}})
	var rec streamtest.Recorder
	start(t, addrs, "g", "t", newProcessor(t, stream.Chain(streamtest.Succeed, rec.Middleware())), timings)
	hold := 3 * groupConfig(nil, "", "").SessionTimeout
	time.Sleep(hold)
	if ds := rec.Deliveries(); len(ds) > 0 {
		t.Fatalf("the second member delivered %d batches while the first one's handlers held (%v, 3 session timeouts); first: %+v\n%s",
			len(ds), hold, ds[0], logs.String())
	}
	release()
	waitCommitted(t, addrs, "g", "t", map[int32]int64{0: 10, 1: 10})
	if strings.Contains(logs.String(), takenOut) {
		t.Errorf("the member was taken out of the group:\n%s", logs.String())
	}
}

// TestRevocationPastTheRebalanceTimeoutIsReported holds the first member's
// handlers past the group's rebalance timeout (2s): the broker takes the
// member out of the group then, heartbeats or not, and the member says so;
// the second member delivers the partitions meanwhile.
func TestRevocationPastTheRebalanceTimeoutIsReported(t *testing.T) {
	var logs kafkatest.LogBuffer
	addrs, _, release := kafkatest.HoldBoth(t, adapter, kafkatest.Config{Logger: logs.Logger()})
	var rec streamtest.Recorder
	start(t, addrs, "g", "t", newProcessor(t, stream.Chain(streamtest.Succeed, rec.Middleware())))
	logs.WaitFor(t, takenOut, wait)
	deadline := time.Now().Add(wait)
	for len(rec.Deliveries()) == 0 && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	if len(rec.Deliveries()) == 0 {
		t.Errorf("the second member delivered nothing in %v after the first one was taken out of the group", wait)
	}
	release()
	waitCommitted(t, addrs, "g", "t", map[int32]int64{0: 10, 1: 10})
}

// TestDrainGivenUpLeavesTheMemberToTheBroker stops the first member while
// its handlers hold, with a drain time of 1s and a long rebalance timeout:
// once the drain gives up, the member's heartbeats stop, so that the broker
// takes it out of the group at its session timeout (1s) and the second
// member gets the partitions, rather than at the rebalance timeout (20s)
// or, with no rebalance under way, never while the handlers hold.
func TestDrainGivenUpLeavesTheMemberToTheBroker(t *testing.T) {
	timings := func(gc *kafka.ConsumerGroupConfig) { gc.RebalanceTimeout = 20 * time.Second }
	addrs, first, _ := kafkatest.HoldBoth(t, adapter, kafkatest.Config{Drain: time.Second, Options: []any{timings}})
	if err := first.Stop(t); err == nil || !strings.Contains(err.Error(), "t/0") {
		t.Fatalf("Run of the stopped member: %v, want the drain's error naming its partitions", err)
	}
	var rec streamtest.Recorder
	start(t, addrs, "g", "t", newProcessor(t, stream.Chain(streamtest.Succeed, rec.Middleware())), timings)
	began := time.Now()
	for len(rec.Deliveries()) == 0 {
		if time.Since(began) > 10*time.Second {
			t.Fatalf("the second member delivered nothing in %v after the first one's drain gave up", time.Since(began))
		}
		time.Sleep(10 * time.Millisecond)
	}
	t.Logf("the second member delivered %v after it started", time.Since(began))
}
