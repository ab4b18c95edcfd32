package kafkatest

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redeliver-go/redeliver/internal/lifecycle"
	"github.com/redeliver-go/redeliver/stream"
	"github.com/redeliver-go/redeliver/stream/streamtest"
)

// A member stops while its handlers still hold their batches (they ignore
// their context), and a second member joins, so that a rebalance moves
// partitions from the stopping member meanwhile. The second member
// delivers nothing of them before the stopping member's handlers have
// returned (and their last commits are written), and once they have, the
// group goes on at once. Run with the tests' short group timings and with
// the clients' defaults (a session of 10 to 45 seconds).
//
// What this caught in the franz-go adapter: a revocation that found the
// stopping member's claims already taken out of its table returned at
// once, and the next owner delivered records whose handler still ran;
// and with the default timings, the stopping member rejoined, was counted
// in the join the broker held, and closed without leaving, which held the
// whole group until its session timed out.
func stopDuringRebalance(t *testing.T, a Adapter) {
	t.Run("short-timings", func(t *testing.T) { stopDuringRebalanceWith(t, a, false) })
	t.Run("default-timings", func(t *testing.T) { stopDuringRebalanceWith(t, a, true) })
}

func stopDuringRebalanceWith(t *testing.T, a Adapter, defaults bool) {
	var logs LogBuffer
	addrs, first, release := HoldBoth(t, a, Config{Defaults: defaults, Logger: logs.Logger()})
	stopped := make(chan error, 1)
	go func() { stopped <- first.Stop(t) }()

	var rec streamtest.Recorder
	Start(t, a, Config{Addrs: addrs, Group: "g", Topic: "t", Processor: NewProcessor(t, stream.Chain(streamtest.Succeed, rec.Middleware())), Defaults: defaults})
	// A rebalance on kfake takes well under this, which is under the
	// session and rebalance timeouts of the tests' short timings (1s and
	// 2s): a member that has not rejoined by then (and kafka-go's does not
	// heartbeat once its generation has ended) is taken out of the group,
	// and its partitions move, whatever its handlers do.
	hold := 500 * time.Millisecond
	if defaults {
		hold = 2 * time.Second
	}
	time.Sleep(hold)
	if d := rec.Deliveries(); len(d) > 0 {
		t.Fatalf("the second consumer delivered %d batches (the first of partition %d) while the stopping consumer's handlers still held theirs", len(d), d[0].Partition)
	}
	release()
	at := time.Now()
	select {
	case err := <-stopped:
		if err != nil {
			t.Errorf("the first consumer's Run returned %v", err)
		}
	case <-time.After(Wait):
		t.Fatal("the first consumer did not stop once its handlers returned")
	}
	stoppedIn := time.Since(at)
	WaitCommitted(t, addrs, "g", "t", map[int32]int64{0: 10, 1: 10})
	took := time.Since(at)
	for p := range int32(2) {
		if ds := rec.Of("t", p); len(ds) == 0 || ds[len(ds)-1].LastOffset != 9 {
			t.Errorf("the second consumer did not deliver partition %d's last records (its batches: %v)", p, ds)
		}
	}
	t.Logf("stopped %v after the release; every record committed %v after it", stoppedIn, took)
	if took > 8*time.Second {
		t.Errorf("the second consumer committed every record %v after the first's handlers returned, want well under a session timeout\nthe first consumer's log:\n%s", took, logs.String())
	}
}

// A rebalance held up by a handler that ignores its context is reported
// while it lasts: a Warn line naming the partitions whose handlers have
// not returned, and an Info line when the wait is over; the group then
// goes on. Before, the member said nothing until the handlers returned,
// while the whole group's rebalance waited for it.
func revocationReportsHeldHandlers(t *testing.T, a Adapter) {
	t.Run("default", func(t *testing.T) { revocationReportsHeldHandlersWith(t, a, nil) })
	if a.Cooperative != nil {
		t.Run("cooperative", func(t *testing.T) { revocationReportsHeldHandlersWith(t, a, a.Cooperative) })
	}
}

func revocationReportsHeldHandlersWith(t *testing.T, a Adapter, opts []any) {
	t.Cleanup(lifecycle.SetRevokeReport(200*time.Millisecond, 400*time.Millisecond))

	var logs LogBuffer
	addrs, _, release := HoldBoth(t, a, Config{Logger: logs.Logger(), Options: opts})
	Start(t, a, Config{Addrs: addrs, Group: "g", Topic: "t", Processor: NewProcessor(t, streamtest.Succeed), Options: opts})
	const report = `level=WARN msg="redeliver: a rebalance waits for partitions whose handlers have not returned`
	logs.WaitFor(t, report, Wait)
	for _, line := range strings.Split(logs.String(), "\n") {
		if !strings.Contains(line, report) {
			continue
		}
		_, parts, ok := strings.Cut(line, "partitions=")
		parts, _, _ = strings.Cut(parts, " ")
		names := strings.Split(parts, ",")
		for _, p := range names {
			if !ok || (p != "t/0" && p != "t/1") {
				t.Errorf("the report names %q, want t/0 or t/1: %s", parts, line)
				break
			}
		}
		if opts != nil && len(names) != 1 {
			// A cooperative rebalance gives the second member one of the
			// two partitions and leaves the other with the first.
			t.Errorf("the report names %q, want the one partition revoked: %s", parts, line)
		}
	}
	release()
	logs.WaitFor(t, `msg="redeliver: the rebalance's wait is over"`, Wait)
	WaitCommitted(t, addrs, "g", "t", map[int32]int64{0: 10, 1: 10})
}

// HoldBoth starts a consumer of cfg (Addrs, Group, Topic, Processor and
// MaxBatch its own) on a new cluster with a topic "t" of two partitions of
// 10 records each, in batches of 5, whose handler holds each batch,
// ignoring its context, until release is called (at the latest at the end
// of the test, before the consumer's stop). It returns once the handler
// holds a batch of each partition.
func HoldBoth(t *testing.T, a Adapter, cfg Config) (addrs []string, first *Running, release func()) {
	t.Helper()
	_, addrs = NewCluster(t, "t", 2)
	for p := range int32(2) {
		Produce(t, addrs, "t", p, 0, 10)
	}
	entered := make(chan int32, 16)
	held := make(chan struct{})
	holding := stream.HandlerFunc(func(_ context.Context, b *stream.Batch) error {
		entered <- b.Partition
		<-held // ignores its context
		return nil
	})
	cfg.Addrs, cfg.Group, cfg.Topic, cfg.Processor, cfg.MaxBatch = addrs, "g", "t", NewProcessor(t, holding), 5
	first = Start(t, a, cfg)
	var once sync.Once
	release = func() { once.Do(func() { close(held) }) }
	t.Cleanup(release) // before the consumer's stop, which waits for its handlers
	seen := map[int32]bool{}
	for len(seen) < 2 {
		select {
		case p := <-entered:
			seen[p] = true
		case <-time.After(Wait):
			t.Fatalf("the first consumer entered the handler for %v only", seen)
		}
	}
	return addrs, first, release
}
