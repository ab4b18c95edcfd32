package tests

import (
	"strings"
	"testing"
	"time"

	"github.com/confluentinc/confluent-kafka-go/v2/kafka"

	"github.com/redeliver-go/redeliver/adapters/confluent"
	"github.com/redeliver-go/redeliver/adapters/internal/kafkatest"
	"github.com/redeliver-go/redeliver/stream"
	"github.com/redeliver-go/redeliver/stream/streamtest"
)

// holdRevoked starts a consumer (kafkatest.HoldBoth, with options opts
// and its log in logs) whose handler holds a batch of each of the two
// partitions of topic "t" until release is called; then a second
// consumer, whose deliveries rec records, joins, and the eager protocol
// revokes both partitions of the first.
func holdRevoked(t *testing.T, logs *kafkatest.LogBuffer, rec *streamtest.Recorder, opts ...any) (addrs []string, first *kafkatest.Running, release func()) {
	t.Helper()
	eager := func(c kafka.ConfigMap) { c["partition.assignment.strategy"] = "range" }
	addrs, first, release = kafkatest.HoldBoth(t, adapter, kafkatest.Config{Logger: logs.Logger(), Options: append([]any{eager}, opts...)})
	kafkatest.Start(t, adapter, kafkatest.Config{Addrs: addrs, Group: "g", Topic: "t",
		Processor: kafkatest.NewProcessor(t, stream.Chain(streamtest.Succeed, rec.Middleware())), Options: []any{eager}})
	return addrs, first, release
}

// A revocation waits for a handler as long as it runs (within the group's
// rebalance timeout), whatever the commit timeout: the second member
// delivers nothing of the partitions while the first member's handlers
// hold them, then everything. The revocation waited at most the commit
// timeout (10s by default; 500ms here), after which the partitions moved
// while their handlers ran.
func TestRevocationWaitsForHandlersPastTheCommitTimeout(t *testing.T) {
	var (
		logs kafkatest.LogBuffer
		rec  streamtest.Recorder
	)
	addrs, _, release := holdRevoked(t, &logs, &rec, confluent.WithCommitTimeout(500*time.Millisecond))
	logs.WaitFor(t, `msg="redeliver: a rebalance waits for partitions whose handlers have not returned`, kafkatest.Wait)
	time.Sleep(2 * time.Second)
	if d := rec.Deliveries(); len(d) > 0 {
		t.Fatalf("the second consumer delivered %d batches (the first of partition %d) while the first consumer's handlers still held theirs", len(d), d[0].Partition)
	}
	release()
	kafkatest.WaitCommitted(t, addrs, "g", "t", map[int32]int64{0: 10, 1: 10})
	if strings.Contains(logs.String(), "given up while its handler still runs") {
		t.Errorf("a partition was given up while its handler ran:\n%s", logs.String())
	}
}

// Past the group's rebalance timeout (max.poll.interval.ms), the broker
// has taken the member out of the group: the revocation stops waiting,
// says so for each partition, and the group goes on without it.
func TestRevocationGivesUpAtTheRebalanceTimeout(t *testing.T) {
	var (
		logs kafkatest.LogBuffer
		rec  streamtest.Recorder
	)
	short := func(c kafka.ConfigMap) { c["max.poll.interval.ms"] = 1500 }
	addrs, _, release := holdRevoked(t, &logs, &rec, short)
	logs.WaitFor(t, `msg="redeliver: a worker did not stop within the group's rebalance timeout (max.poll.interval.ms): its partition is given up while its handler still runs"`, kafkatest.Wait)
	// The handlers still hold the first member's batches; the second
	// member delivers what it is given meanwhile.
	deadline := time.Now().Add(kafkatest.Wait)
	for len(rec.Deliveries()) == 0 {
		if time.Now().After(deadline) {
			t.Fatalf("the second consumer delivered nothing in %v after the first gave its partitions up:\n%s", kafkatest.Wait, logs.String())
		}
		time.Sleep(20 * time.Millisecond)
	}
	release()
	kafkatest.WaitCommitted(t, addrs, "g", "t", map[int32]int64{0: 10, 1: 10})
}

// A stop that comes while a revocation waits for a handler waits on
// within its drain time, reporting: the partitions are not given up
// meanwhile, and Run returns nil once the handlers have returned. The
// revocation gave them up at the commit timeout, stop or not.
func TestStopDuringAHeldRevocation(t *testing.T) {
	var (
		logs kafkatest.LogBuffer
		rec  streamtest.Recorder
	)
	addrs, first, release := holdRevoked(t, &logs, &rec, confluent.WithCommitTimeout(500*time.Millisecond), confluent.WithDrain(20*time.Second))
	logs.WaitFor(t, `msg="redeliver: a rebalance waits for partitions whose handlers have not returned`, kafkatest.Wait)
	stopped := make(chan error, 1)
	go func() { stopped <- first.Stop(t) }()
	time.Sleep(2 * time.Second)
	if d := rec.Deliveries(); len(d) > 0 {
		t.Fatalf("the second consumer delivered %d batches (the first of partition %d) while the stopping consumer's handlers still held theirs", len(d), d[0].Partition)
	}
	select {
	case err := <-stopped:
		t.Fatalf("Run returned %v while its handlers still ran", err)
	default:
	}
	release()
	select {
	case err := <-stopped:
		if err != nil {
			t.Errorf("Run returned %v, want nil", err)
		}
	case <-time.After(kafkatest.Wait):
		t.Fatal("Run did not return once the handlers had")
	}
	kafkatest.WaitCommitted(t, addrs, "g", "t", map[int32]int64{0: 10, 1: 10})
	if strings.Contains(logs.String(), "given up while its handler still runs") {
		t.Errorf("a partition was given up while its handler ran:\n%s", logs.String())
	}
}

// A stop during a held revocation gives the handlers what is left of its
// drain time, not a drain time more: Run returns its drain error once the
// drain time has passed since the stop, naming the partitions.
func TestStopDuringAHeldRevocationKeepsItsDrainTime(t *testing.T) {
	var (
		logs kafkatest.LogBuffer
		rec  streamtest.Recorder
	)
	_, first, _ := holdRevoked(t, &logs, &rec, confluent.WithDrain(2*time.Second))
	logs.WaitFor(t, `msg="redeliver: a rebalance waits for partitions whose handlers have not returned`, kafkatest.Wait)
	at := time.Now()
	err := first.Stop(t)
	took := time.Since(at)
	if err == nil || !strings.Contains(err.Error(), "drain time (2s) over") || !strings.Contains(err.Error(), "t/0") {
		t.Errorf("Run returned %v, want the drain time's error naming t/0", err)
	}
	if took < 2*time.Second || took > 3500*time.Millisecond {
		t.Errorf("Run returned %v after the stop, want the drain time (2s)", took)
	}
}

// A stop whose drain gives up on held handlers closes the consumer at
// once: the member leaves the group, and another member gets its
// partitions and delivers the held batches again (they were never
// committed), instead of waiting until the member has not polled for
// max.poll.interval.ms (30s here). The handlers that return afterwards
// find the consumer closed, and touch nothing of it.
func TestDrainGivenUpLeavesTheGroup(t *testing.T) {
	var logs kafkatest.LogBuffer
	long := func(c kafka.ConfigMap) { c["max.poll.interval.ms"] = 30000 }
	addrs, first, release := kafkatest.HoldBoth(t, adapter, kafkatest.Config{Logger: logs.Logger(), Drain: time.Second, Options: []any{long}})
	if err := first.Stop(t); err == nil || !strings.Contains(err.Error(), "t/0") {
		t.Fatalf("Run of the stopped member: %v, want the drain's error naming its partitions", err)
	}
	var rec streamtest.Recorder
	kafkatest.Start(t, adapter, kafkatest.Config{Addrs: addrs, Group: "g", Topic: "t",
		Processor: kafkatest.NewProcessor(t, stream.Chain(streamtest.Succeed, rec.Middleware())), Options: []any{long}})
	began := time.Now()
	for len(rec.Deliveries()) == 0 {
		if time.Since(began) > 15*time.Second {
			t.Fatalf("the second member delivered nothing in %v after the first one's drain gave up:\n%s", time.Since(began), logs.String())
		}
		time.Sleep(10 * time.Millisecond)
	}
	t.Logf("the second member delivered %v after it started", time.Since(began))
	release()
	kafkatest.WaitCommitted(t, addrs, "g", "t", map[int32]int64{0: 10, 1: 10})
	if d := rec.Deliveries(); d[0].FirstOffset != 0 {
		t.Errorf("the second member's first batch starts at %d, want the held batch at 0", d[0].FirstOffset)
	}
}
