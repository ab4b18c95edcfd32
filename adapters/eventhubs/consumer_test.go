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
	cs, err := eventhubs.NewCheckpointStore(store, owner, &eventhubs.StoreOptions{PartitionExpirationDuration: fastOpts().PartitionExpirationDuration})
	if err != nil {
		t.Fatal(err)
	}
	p, err := h.NewProcessor(cs, "cg", owner, fastOpts())
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
