package eventhubs_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/messaging/azeventhubs/v2"

	"github.com/redeliver-go/redeliver/adapters/eventhubs"
	"github.com/redeliver-go/redeliver/adapters/eventhubs/memhub"
	"github.com/redeliver-go/redeliver/checkpoint"
	"github.com/redeliver-go/redeliver/stream"
	"github.com/redeliver-go/redeliver/stream/streamtest"
)

// fastOpts are processor options for tests: rounds every 20ms, ownership
// expiring after 2s, and every partition from its first event.
func fastOpts() *azeventhubs.ProcessorOptions {
	earliest := true
	return &azeventhubs.ProcessorOptions{UpdateInterval: 20 * time.Millisecond, PartitionExpirationDuration: 2 * time.Second,
		StartPositions: azeventhubs.StartPositions{Default: azeventhubs.StartPosition{Earliest: &earliest}}}
}

func newHub(t *testing.T, partitions, n int) *memhub.Hub {
	t.Helper()
	h, err := memhub.New("orders", partitions)
	if err != nil {
		t.Fatal(err)
	}
	for _, id := range h.PartitionIDs() {
		for i := range n {
			if err := h.Send(id, &azeventhubs.EventData{Body: fmt.Appendf(nil, "%s:%d", id, i)}); err != nil {
				t.Fatal(err)
			}
		}
	}
	return h
}

// member is a running consumer over the in-memory hub.
type member struct {
	cancel context.CancelFunc
	done   chan struct{}
	err    error
	store  *eventhubs.CheckpointStore
}

func (m *member) stop(t *testing.T) {
	t.Helper()
	m.cancel()
	select {
	case <-m.done:
	case <-time.After(10 * time.Second):
		t.Fatal("consumer did not stop within 10s")
	}
}

func start(t *testing.T, h *memhub.Hub, store azeventhubs.CheckpointStore, owner string, proc *stream.Processor) *member {
	t.Helper()
	return startWith(t, h, store, owner, proc, fastOpts())
}

// startWith starts a consumer whose processor has the options po.
func startWith(t *testing.T, h *memhub.Hub, store azeventhubs.CheckpointStore, owner string, proc *stream.Processor, po *azeventhubs.ProcessorOptions) *member {
	t.Helper()
	cs, err := eventhubs.NewCheckpointStore(store, owner, &eventhubs.StoreOptions{PartitionExpirationDuration: po.PartitionExpirationDuration})
	if err != nil {
		t.Fatal(err)
	}
	p, err := h.NewProcessor(cs, "cg", owner, po)
	if err != nil {
		t.Fatal(err)
	}
	c, err := eventhubs.NewWith(proc, p, cs, eventhubs.WithMaxBatch(10), eventhubs.WithReceiveWait(20*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	m := &member{cancel: cancel, done: make(chan struct{}), store: cs}
	go func() {
		defer close(m.done)
		m.err = c.Run(ctx)
	}()
	t.Cleanup(func() { m.stop(t) })
	return m
}

func waitPositions(t *testing.T, store azeventhubs.CheckpointStore, want map[string]int64) map[string]eventhubs.Position {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for {
		got, err := eventhubs.Committed(context.Background(), store, memhub.Namespace, "orders", "cg")
		if err != nil {
			t.Fatal(err)
		}
		ok := true
		for id, n := range want {
			if got[id].Next != n || got[id].Metadata != "" {
				ok = false
			}
		}
		if ok {
			return got
		}
		if time.Now().After(deadline) {
			t.Fatalf("positions %+v, want %v", got, want)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func TestConsumerRetriesAndCheckpoints(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := newHub(t, 2, 30)
		store := memhub.NewStore()
		var hist streamtest.History
		var mu sync.Mutex
		tries := map[int64]int{}
		handler := stream.HandlerFunc(func(_ context.Context, b *stream.Batch) error {
			if b.Partition != 0 || b.FirstOffset() != 10 {
				return nil
			}
			mu.Lock()
			defer mu.Unlock()
			tries[b.FirstOffset()]++
			if tries[b.FirstOffset()] <= 2 {
				return errors.New("not yet")
			}
			return nil
		})
		proc, err := stream.NewProcessor(handler, stream.WithHooks(hist.Hooks("a")),
			stream.WithPolicy(checkpoint.Policy{MaxRetries: 5, Backoff: checkpoint.Fixed(10 * time.Millisecond)}))
		if err != nil {
			t.Fatal(err)
		}
		m := start(t, h, store, "a", proc)
		waitPositions(t, store, map[string]int64{"0": 30, "1": 30})
		m.stop(t)
		r := hist.Check(map[streamtest.TopicPartition]int64{{Topic: "orders", Partition: 0}: 30, {Topic: "orders", Partition: 1}: 30})
		for _, v := range r.Violations {
			t.Error(v)
		}
		mu.Lock()
		defer mu.Unlock()
		if tries[10] != 3 {
			t.Errorf("batch 10 of partition 0 delivered %d times, want 3", tries[10])
		}
	})
}

// ownersOf returns the owner of each partition of the test hub's group in
// store ("" for relinquished).
func ownersOf(t *testing.T, store azeventhubs.CheckpointStore) map[string]string {
	t.Helper()
	os, err := store.ListOwnership(context.Background(), memhub.Namespace, "orders", "cg", nil)
	if err != nil {
		t.Fatal(err)
	}
	m := map[string]string{}
	for _, o := range os {
		m[o.PartitionID] = o.OwnerID
	}
	return m
}

// handBack plays a shutdown on store: processor a, whose only balancing
// round is at its start (so its fence renews every ownership after it),
// consumes 4 partitions and stops; it returns a's ownerships right after
// its Run returned and how long b, started then, takes to own all 4. The
// ownership expiry is a minute.
func handBack(t *testing.T, store azeventhubs.CheckpointStore, bInterval time.Duration) (map[string]string, time.Duration) {
	t.Helper()
	h := newHub(t, 4, 20)
	aOpts := fastOpts()
	aOpts.LoadBalancingStrategy = azeventhubs.ProcessorStrategyGreedy
	aOpts.UpdateInterval = time.Hour
	aOpts.PartitionExpirationDuration = time.Minute
	a := startWith(t, h, store, "a", newProc(t), aOpts)
	waitPositions(t, store, map[string]int64{"0": 20, "1": 20, "2": 20, "3": 20})
	a.stop(t)
	if a.err != nil {
		t.Fatalf("a's Run: %v", a.err)
	}
	after := ownersOf(t, store)
	bOpts := fastOpts()
	bOpts.UpdateInterval = bInterval
	bOpts.PartitionExpirationDuration = time.Minute
	stopped := time.Now()
	startWith(t, h, store, "b", newProc(t), bOpts)
	for {
		n := 0
		for _, o := range ownersOf(t, store) {
			if o == "b" {
				n++
			}
		}
		if n == 4 {
			return after, time.Since(stopped)
		}
		if time.Since(stopped) > 3*time.Minute {
			t.Fatalf("b owns %d of 4 partitions 3 minutes after a stopped", n)
		}
		time.Sleep(bInterval / 4)
	}
}

// A stopping consumer hands its partitions back (the processor's own
// hand-back names ETags that the fence has renewed since, and is
// refused): another processor takes them at its next rounds, not after
// the ownership expiry.
func TestShutdownHandsPartitionsBack(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		after, took := handBack(t, memhub.NewStore(), 20*time.Millisecond)
		for id, o := range after {
			if o != "" {
				t.Errorf("partition %s owned by %q after its owner stopped, want handed back", id, o)
			}
		}
		// Balanced: one partition a round, 4 rounds of at most 26ms.
		if took > time.Second {
			t.Errorf("the other processor took all partitions %v after the first stopped, want within its first rounds (the expiry is 1m)", took)
		}
	})
}

// The exhaustion action learns the consumer group ("cg"), which DeadLetter
// writes as the __dlq.errors.group header, as the Kafka adapters' do.
func TestExhaustionActionKnowsTheConsumerGroup(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := newHub(t, 1, 3)
		groups := make(chan string, 10)
		proc, err := stream.NewProcessor(stream.HandlerFunc(func(context.Context, *stream.Batch) error {
			return checkpoint.Permanent(errors.New("schema mismatch"))
		}), stream.WithExhaustionAction(func(ctx context.Context, _ *stream.Batch, _ *checkpoint.ExhaustedError) error {
			src, _ := stream.SourceFrom(ctx)
			groups <- src.Group
			return nil
		}))
		if err != nil {
			t.Fatal(err)
		}
		m := start(t, h, memhub.NewStore(), "a", proc)
		select {
		case g := <-groups:
			if g != "cg" {
				t.Errorf("the action's source names group %q, want cg", g)
			}
		case <-time.After(time.Minute):
			t.Fatal("no batch given up")
		}
		m.stop(t)
	})
}
