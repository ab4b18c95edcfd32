package conformance

import (
	"context"
	"testing"
	"time"

	"github.com/redeliver-go/redeliver/checkpoint"
	"github.com/redeliver-go/redeliver/stream"
)

// RunHeldRebalance checks that a rebalance waits for a handler that holds
// past the group's session timeout, ignoring its context: the member
// keeps its session while the rebalance waits, so no other member
// delivers the held partitions' records meanwhile, and once the handlers
// return the partitions move with nothing lost or delivered twice by two
// owners at once.
//
// Consumer a holds the first batch of each of the topic's two partitions
// for twice the broker's short session timeout; consumer b joins the
// group while they hold, which takes one of the partitions from a (with
// stop set, a is stopped first, and its stop waits for the handlers). The
// scenario asks for the Broker's SessionTimeout and skips without one.
func RunHeldRebalance(t *testing.T, p Provider, a Adapter) {
	t.Run("Rebalance", func(t *testing.T) { heldRebalance(t, p, a, false) })
	t.Run("Stop", func(t *testing.T) { heldRebalance(t, p, a, true) })
}

func heldRebalance(t *testing.T, p Provider, a Adapter, stop bool) {
	b := p.Start(t)
	if b.SessionTimeout <= 0 {
		t.Skipf("the %s provider gives no session timeout to use", p.Name())
	}
	if b.Backend != nil {
		t.Skipf("%s is not a Kafka group: its partitions move without waiting for handlers", a.Name())
	}
	if a.NeedsKIP848() && !b.KIP848 {
		t.Skipf("%s needs the KIP-848 protocol; the %s broker does not run it", a.Name(), p.Name())
	}
	e := newEnv(t, b, a)
	e.createTopic(2)
	e.produce(0, 0, 10)
	e.produce(1, 0, 10)
	end := map[int32]int64{0: 10, 1: 10}

	entered, release := make(chan int32, 2), make(chan struct{})
	held := stream.HandlerFunc(func(_ context.Context, bt *stream.Batch) error {
		if bt.FirstOffset() == 0 && bt.Attempt.Retries == 0 {
			entered <- bt.Partition
			<-release // ignores its context, as a handler stuck in a call would
		}
		return nil
	})
	policy := checkpoint.Policy{MaxRetries: 3, Backoff: checkpoint.Fixed(short)}
	ma := e.start("a", spec{handler: held, maxBatch: 5, policy: policy, session: true})
	for range 2 {
		select {
		case <-entered:
		case <-time.After(wait):
			t.Fatalf("consumer a did not deliver the first batch of both partitions within %v\n%s", wait, e.hist.dump())
		}
	}
	if stop {
		ma.cancel() // Run waits for the handlers, within its drain time
	}
	e.start("b", spec{handler: stream.HandlerFunc(succeed), maxBatch: 5, policy: policy, session: true})
	hold := 2 * b.SessionTimeout
	time.Sleep(hold)
	released := time.Now()
	close(release)
	e.waitCommitted(end)

	var during, after int
	for _, ev := range e.hist.all() {
		if !ev.delivery || ev.member != "b" {
			continue
		}
		if ev.at.Before(released) {
			during++
		} else {
			after++
		}
	}
	if during > 0 {
		t.Errorf("consumer b delivered %d batches while a's handlers held their partitions (%v, twice the %v session timeout; a stopping: %t): a gave them up\n%s",
			during, hold, b.SessionTimeout, stop, e.hist.dump())
	}
	if after == 0 {
		t.Logf("note: consumer b delivered nothing after the handlers returned (a's commits reached both ends first)\n%s", e.hist.dump())
	}
	e.hist.check(t, end)
	for _, m := range e.members {
		if err := m.stop(); err != nil {
			t.Error(err)
		}
	}
	if stop && ma.err != nil {
		t.Errorf("consumer a's Run, stopped while its handlers held and returned within its drain time: %v", ma.err)
	}
}
