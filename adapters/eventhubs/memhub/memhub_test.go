package memhub_test

import (
	"context"
	"errors"
	"testing"
	"testing/synctest"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/messaging/azeventhubs/v2"

	"github.com/redeliver-go/redeliver/adapters/eventhubs/memhub"
)

func opts(strategy azeventhubs.ProcessorStrategy) *azeventhubs.ProcessorOptions {
	return &azeventhubs.ProcessorOptions{LoadBalancingStrategy: strategy, UpdateInterval: 10 * time.Millisecond, PartitionExpirationDuration: time.Second}
}

func owners(t *testing.T, s *memhub.Store) map[string]int {
	t.Helper()
	os, err := s.ListOwnership(context.Background(), memhub.Namespace, "h", "cg", nil)
	if err != nil {
		t.Fatal(err)
	}
	n := map[string]int{}
	for _, o := range os {
		n[o.OwnerID]++
	}
	return n
}

func waitOwners(t *testing.T, s *memhub.Store, want map[string]int) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		got := owners(t, s)
		ok := len(got) == len(want)
		for k, v := range want {
			ok = ok && got[k] == v
		}
		if ok {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("owners %v, want %v", got, want)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// Two processors split four partitions two and two, the second stealing
// from the first; a stopped processor relinquishes its partitions, and the
// other takes them at once.
func TestProcessorsBalance(t *testing.T) {
	for _, strategy := range []azeventhubs.ProcessorStrategy{azeventhubs.ProcessorStrategyBalanced, azeventhubs.ProcessorStrategyGreedy} {
		t.Run(string(strategy), func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				h, _ := memhub.New("h", 4)
				s := memhub.NewStore()
				a, _ := h.NewProcessor(s, "cg", "a", opts(strategy))
				b, _ := h.NewProcessor(s, "cg", "b", opts(strategy))
				ctxA, stopA := context.WithCancel(context.Background())
				doneA := make(chan error, 1)
				go func() { doneA <- a.Run(ctxA) }()
				waitOwners(t, s, map[string]int{"a": 4})
				ctxB, stopB := context.WithCancel(context.Background())
				defer stopB()
				go func() { _ = b.Run(ctxB) }()
				waitOwners(t, s, map[string]int{"a": 2, "b": 2})
				stopA()
				if err := <-doneA; err != nil {
					t.Fatal(err)
				}
				if pc := a.NextPartitionClient(context.Background()); pc != nil {
					// drain the clients a handed out before it stopped
					for pc != nil {
						pc = a.NextPartitionClient(context.Background())
					}
				}
				waitOwners(t, s, map[string]int{"b": 4})
			})
		})
	}
}

// A reader opened later for the same consumer group takes the partition:
// the earlier reader's ReceiveEvents fails with ownership lost, also while
// it waits for events.
func TestNewerReaderDetachesOlder(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h, _ := memhub.New("h", 1)
		s := memhub.NewStore()
		earliest := true
		o := opts(azeventhubs.ProcessorStrategyBalanced)
		o.StartPositions.Default.Earliest = &earliest
		a, _ := h.NewProcessor(s, "cg", "a", o)
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		go func() { _ = a.Run(ctx) }()
		pc := a.NextPartitionClient(ctx)
		if pc == nil {
			t.Fatal("no partition client")
		}
		_ = h.Send("0", &azeventhubs.EventData{Body: []byte("x")})
		evs, err := pc.ReceiveEvents(ctx, 1, nil)
		if err != nil || len(evs) != 1 || evs[0].SequenceNumber != 0 {
			t.Fatalf("first receive: %v %v", evs, err)
		}
		waiting := make(chan error, 1)
		go func() {
			_, err := pc.ReceiveEvents(ctx, 1, nil)
			waiting <- err
		}()
		s.Expire(memhub.Namespace, "h", "cg", "0", time.Minute)
		b, _ := h.NewProcessor(s, "cg", "b", o)
		go func() { _ = b.Run(ctx) }()
		pb := b.NextPartitionClient(ctx)
		if pb == nil {
			t.Fatal("b got no partition client")
		}
		var ehErr *azeventhubs.Error
		select {
		case err := <-waiting:
			if !errors.As(err, &ehErr) || ehErr.Code != azeventhubs.ErrorCodeOwnershipLost {
				t.Fatalf("the older reader's receive: %v, want ownership lost", err)
			}
		case <-time.After(5 * time.Second):
			t.Fatal("the older reader's receive did not end")
		}
		// b's reader starts after the checkpoint: none was written, so at the
		// earliest event.
		rctx, rcancel := context.WithTimeout(ctx, time.Second)
		defer rcancel()
		if evs, err := pb.ReceiveEvents(rctx, 1, nil); err != nil || len(evs) != 1 || evs[0].SequenceNumber != 0 {
			t.Fatalf("newer reader: %v %v", evs, err)
		}
	})
}
