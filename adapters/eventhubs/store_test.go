package eventhubs_test

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore/to"
	"github.com/Azure/azure-sdk-for-go/sdk/messaging/azeventhubs/v2"

	"github.com/redeliver-go/redeliver/adapters/eventhubs"
	"github.com/redeliver-go/redeliver/adapters/eventhubs/memhub"
	"github.com/redeliver-go/redeliver/checkpoint"
	"github.com/redeliver-go/redeliver/internal/retrystate"
	"github.com/redeliver-go/redeliver/stream"
)

// The stale-owner play of azurite_test.go on memhub's store, which writes
// checkpoints unconditionally as the SDK's blob store does.
func TestStaleOwnerInMemory(t *testing.T) {
	t.Run("fenced", func(t *testing.T) {
		ms := memhub.NewStore()
		a, _ := eventhubs.NewCheckpointStore(ms, "A", nil)
		b, _ := eventhubs.NewCheckpointStore(ms, "B", nil)
		if err := staleOwnerMovesCheckpoint(t, ms, a, b); err != nil {
			t.Fatal(err)
		}
	})
	t.Run("store-alone", func(t *testing.T) {
		ms := memhub.NewStore()
		if err := staleOwnerMovesCheckpoint(t, ms, ms, ms); err == nil {
			t.Fatal("the store refused the stale owner's write")
		}
	})
}

func TestCheckpointStoreRefusesWithoutOwnership(t *testing.T) {
	ms := memhub.NewStore()
	a, _ := eventhubs.NewCheckpointStore(ms, "A", &eventhubs.StoreOptions{PartitionExpirationDuration: time.Minute})
	ctx := context.Background()
	if err := a.SetCheckpoint(ctx, cp("0", 1), nil); !errors.Is(err, eventhubs.ErrOwnershipLost) {
		t.Fatalf("write with no ownership record: %v, want ErrOwnershipLost", err)
	}
	if _, err := a.ClaimOwnership(ctx, []azeventhubs.Ownership{ownership("A", "0", nil)}, nil); err != nil {
		t.Fatal(err)
	}
	if err := a.SetCheckpoint(ctx, cp("0", 1), nil); err != nil {
		t.Fatalf("write by the owner: %v", err)
	}
	// Expired but claimed by nobody since: the fence's conditional renewal
	// takes it back, and the write goes through.
	ms.Expire(ns, hubName, group, "0", 2*time.Minute)
	if err := a.SetCheckpoint(ctx, cp("0", 1), nil); err != nil {
		t.Fatalf("write after the ownership expired, unclaimed: %v", err)
	}
	// Expired and claimed by another processor: refused.
	ms.Expire(ns, hubName, group, "0", 2*time.Minute)
	if got, err := ms.ClaimOwnership(ctx, []azeventhubs.Ownership{ownership("B", "0", listed(t, ms, "0"))}, nil); err != nil || len(got) != 1 {
		t.Fatalf("B's claim of the expired partition: %v %v", got, err)
	}
	if err := a.SetCheckpoint(ctx, cp("0", 2), nil); !errors.Is(err, eventhubs.ErrOwnershipLost) {
		t.Fatalf("write after another processor claimed the expired partition: %v, want ErrOwnershipLost", err)
	}
	if _, err := ms.ClaimOwnership(ctx, []azeventhubs.Ownership{ownership("A", "0", listed(t, ms, "0"))}, nil); err != nil {
		t.Fatal(err)
	}
	cur := listed(t, ms, "0")
	o := ownership("", "0", cur) // relinquished, as a stopping processor does
	if _, err := ms.ClaimOwnership(ctx, []azeventhubs.Ownership{o}, nil); err != nil {
		t.Fatal(err)
	}
	if err := a.SetCheckpoint(ctx, cp("0", 2), nil); !errors.Is(err, eventhubs.ErrOwnershipLost) {
		t.Fatalf("write after the ownership was relinquished: %v, want ErrOwnershipLost", err)
	}
	if at := checkpointAt(t, ms, "0"); at != 1 {
		t.Fatalf("checkpoint %d, want 1", at)
	}
}

func TestCommittedReadsStateBesideCheckpoint(t *testing.T) {
	moved := retrystate.EncodeState(retrystate.State{Offset: 10, Retries: 2, FirstFailure: time.UnixMilli(1), Started: true, Records: 5, LastError: "timeout; 503"})
	if s, err := retrystate.DecodeState(moved); err != nil || s.Records != 5 || s.LastError != "timeout; 503" {
		t.Fatalf("state %q: %+v, %v", moved, s, err)
	}
	ms := memhub.NewStore()
	ctx := context.Background()
	state := func(id string, seq int64, md string) azeventhubs.Checkpoint {
		c := cp(id, seq)
		c.ConsumerGroup += eventhubs.StateGroupSuffix
		c.Offset = to.Ptr("redeliver:" + md)
		return c
	}
	for _, c := range []azeventhubs.Checkpoint{
		cp("0", 9), state("0", 10, "rd1;r=2"), // withheld batch at 10
		cp("1", 19), state("1", 10, "rd1;r=1"), // stale state: the checkpoint moved past it
		state("2", 0, "rd1;r=4"),       // a withheld first batch, no checkpoint yet
		cp("3", 4),                     // no state
		cp("4", 9), state("4", 10, ""), // a cleared state
		// What a move carries (issue 46): the records a state covers,
		// a failure at its record alone, its last error.
		cp("5", 9), state("5", 10, moved),
	} {
		if err := ms.SetCheckpoint(ctx, c, nil); err != nil {
			t.Fatal(err)
		}
	}
	got, err := eventhubs.Committed(ctx, ms, ns, hubName, group)
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]eventhubs.Position{
		"0": {10, "rd1;r=2"}, "1": {20, ""}, "2": {0, "rd1;r=4"}, "3": {5, ""}, "4": {10, ""}, "5": {10, moved},
	}
	for id, w := range want {
		if got[id] != w {
			t.Errorf("partition %s: %+v, want %+v", id, got[id], w)
		}
	}
	// A plain checkpoint write at the same position leaves the state.
	if err := ms.SetCheckpoint(ctx, cp("0", 9), nil); err != nil {
		t.Fatal(err)
	}
	if got, _ := eventhubs.Committed(ctx, ms, ns, hubName, group); got["0"] != want["0"] {
		t.Errorf("after a plain checkpoint write: %+v, want %+v", got["0"], want["0"])
	}
}

// A partition stolen while its batch waits out a backoff: the claim is
// cancelled when the processor's next round sees the new owner (no
// ReceiveEvents runs during a backoff), and writes nothing after.
func TestLeaseLossDuringBackoffCancelsClaim(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := newHub(t, 1, 30)
		ms := memhub.NewStore()
		var (
			mu        sync.Mutex
			abandoned []error
			commits   []stream.CheckpointEvent
		)
		waiting := make(chan struct{}, 1)
		hooks := stream.Hooks{
			Checkpointed: func(e stream.CheckpointEvent) {
				mu.Lock()
				commits = append(commits, e)
				mu.Unlock()
				if e.Metadata != "" {
					select {
					case waiting <- struct{}{}:
					default:
					}
				}
			},
			Abandoned: func(e stream.AbandonedEvent) {
				mu.Lock()
				abandoned = append(abandoned, e.Cause)
				mu.Unlock()
			},
		}
		handler := stream.HandlerFunc(func(_ context.Context, b *stream.Batch) error {
			if b.FirstOffset() == 10 {
				return errors.New("fails")
			}
			return nil
		})
		proc, _ := stream.NewProcessor(handler, stream.WithHooks(hooks),
			stream.WithPolicy(checkpoint.Policy{MaxRetries: 3, Backoff: checkpoint.Fixed(time.Hour)}))
		a := start(t, h, ms, "a", proc)
		select {
		case <-waiting:
		case <-time.After(10 * time.Second):
			t.Fatal("the batch was not withheld")
		}
		mu.Lock()
		before := len(commits)
		mu.Unlock()
		writes := ms.CheckpointWrites()
		// Another processor steals the partition with the ETag it read.
		os, err := ms.ListOwnership(context.Background(), memhub.Namespace, "orders", "cg", nil)
		if err != nil || len(os) != 1 {
			t.Fatalf("ownership: %v %v", os, err)
		}
		o := os[0]
		if got, err := ms.ClaimOwnership(context.Background(), []azeventhubs.Ownership{{FullyQualifiedNamespace: o.FullyQualifiedNamespace,
			EventHubName: o.EventHubName, ConsumerGroup: o.ConsumerGroup, PartitionID: "0", OwnerID: "thief", ETag: o.ETag}}, nil); err != nil || len(got) != 1 {
			t.Fatalf("steal: %v %v", got, err)
		}
		deadline := time.Now().Add(5 * time.Second)
		for {
			mu.Lock()
			n := len(abandoned)
			mu.Unlock()
			if n > 0 {
				break
			}
			if time.Now().After(deadline) {
				t.Fatal("the claim was not cancelled within 5s of the steal (the processor's rounds are 20ms)")
			}
			time.Sleep(5 * time.Millisecond)
		}
		a.stop(t)
		mu.Lock()
		defer mu.Unlock()
		if !errors.Is(abandoned[0], eventhubs.ErrOwnershipLost) {
			t.Errorf("abandoned with %v, want ErrOwnershipLost", abandoned[0])
		}
		if len(commits) != before || ms.CheckpointWrites() != writes {
			t.Errorf("checkpoints written after the steal: %v", commits[before:])
		}
	})
}

// A partition another processor opens is lost by the first at its next
// ReceiveEvents (the new reader's link detaches the old one).
func TestOwnershipLostOnReceiveEndsClaim(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := newHub(t, 1, 0)
		ms := memhub.NewStore()
		released := make(chan error, 4)
		claimed := make(chan struct{}, 4)
		proc, _ := stream.NewProcessor(stream.HandlerFunc(succeed), stream.WithHooks(stream.Hooks{
			Claimed:  func(stream.ClaimEvent) { claimed <- struct{}{} },
			Released: func(e stream.ReleaseEvent) { released <- e.Cause },
		}))
		start(t, h, ms, "a", proc)
		select {
		case <-claimed:
		case <-time.After(10 * time.Second):
			t.Fatal("no claim")
		}
		// Another processor of the same consumer group takes the partition,
		// whose ownership looks expired to it, and opens it: its reader
		// detaches the first one's, which is waiting in ReceiveEvents.
		ms.Expire(memhub.Namespace, "orders", "cg", "0", time.Minute)
		other, _ := h.NewProcessor(ms, "cg", "other", fastOpts())
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		go func() { _ = other.Run(ctx) }()
		if pc := other.NextPartitionClient(ctxTimeout(t, 10*time.Second)); pc == nil {
			t.Fatal("the other processor got no partition")
		}
		select {
		case err := <-released:
			if !eventhubs.IsOwnershipLost(err) {
				t.Fatalf("released with %v, want ownership lost", err)
			}
		case <-time.After(10 * time.Second):
			t.Fatal("the first claim did not end")
		}
	})
}

func succeed(context.Context, *stream.Batch) error { return nil }

func ctxTimeout(t *testing.T, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

// positionalCheckpointListed writes positional checkpoints at 9 (partition
// 0) and -1 (partition 1, no event before the first) and a plain one, and
// lists them raw and through the wrapper.
func positionalCheckpointListed(t *testing.T, store azeventhubs.CheckpointStore) {
	t.Helper()
	ctx := context.Background()
	for _, c := range []azeventhubs.Checkpoint{cp("0", 9), cp("1", -1), cp("2", 4)} {
		if c.PartitionID != "2" {
			c.Offset = to.Ptr(eventhubs.PositionOffset)
		}
		if err := store.SetCheckpoint(ctx, c, nil); err != nil {
			t.Fatal(err)
		}
	}
	show := func(cps []azeventhubs.Checkpoint) map[string]string {
		m := map[string]string{}
		for _, c := range cps {
			off := "nil"
			if c.Offset != nil {
				off = *c.Offset
			}
			m[c.PartitionID] = fmt.Sprintf("%d@%s", *c.SequenceNumber, off)
		}
		return m
	}
	raw, err := store.ListCheckpoints(ctx, ns, hubName, group, nil)
	if err != nil {
		t.Fatal(err)
	}
	if got, want := show(raw), map[string]string{"0": "9@-1", "1": "-1@-1", "2": "4@4"}; !maps.Equal(got, want) {
		t.Errorf("raw checkpoints %v, want %v", got, want)
	}
	w, _ := eventhubs.NewCheckpointStore(store, "a", nil)
	listed, err := w.ListCheckpoints(ctx, ns, hubName, group, nil)
	if err != nil {
		t.Fatal(err)
	}
	if got, want := show(listed), map[string]string{"0": "9@nil", "1": "-1@-1", "2": "4@4"}; !maps.Equal(got, want) {
		t.Errorf("checkpoints through the wrapper %v, want %v", got, want)
	}
	pos, err := eventhubs.Committed(ctx, store, ns, hubName, group)
	if err != nil {
		t.Fatal(err)
	}
	if pos["0"].Next != 10 || pos["1"].Next != 0 || pos["2"].Next != 5 {
		t.Errorf("positions %+v, want 10, 0 and 5", pos)
	}
}

func TestPositionalCheckpointListed(t *testing.T) {
	positionalCheckpointListed(t, memhub.NewStore())
}
