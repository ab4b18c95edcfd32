package memhub_test

import (
	"context"
	"errors"
	"strings"
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

// Wiring mistakes and zero values get errors, never a panic.
func TestZeroValuesAndNilArguments(t *testing.T) {
	ctx := context.Background()
	if _, err := memhub.New("", 1); err == nil {
		t.Error("New with no name: no error")
	}
	if _, err := memhub.New("h", 0); err == nil {
		t.Error("New with no partitions: no error")
	}
	for _, h := range []*memhub.Hub{{}, nil} {
		if h.Name() != "" || len(h.PartitionIDs()) != 0 {
			t.Errorf("zero hub: name %q, partitions %v", h.Name(), h.PartitionIDs())
		}
		if err := h.Send("0", &azeventhubs.EventData{}); err == nil || !strings.Contains(err.Error(), "memhub.New") {
			t.Errorf("Send on a zero hub: %v", err)
		}
		key := "k"
		if err := h.SendEvents(ctx, &key, []*azeventhubs.EventData{{}}); err == nil || !strings.Contains(err.Error(), "memhub.New") {
			t.Errorf("SendEvents on a zero hub: %v", err)
		}
		if _, err := h.Events("0"); err == nil {
			t.Error("Events on a zero hub: no error")
		}
		if _, err := h.NewProcessor(memhub.NewStore(), "cg", "a", nil); err == nil || !strings.Contains(err.Error(), "memhub.New") {
			t.Errorf("NewProcessor on a zero hub: %v", err)
		}
	}
	h, _ := memhub.New("h", 1)
	var nilStore *memhub.Store
	for _, c := range []struct {
		store        azeventhubs.CheckpointStore
		group, owner string
	}{{nil, "cg", "a"}, {nilStore, "cg", "a"}, {memhub.NewStore(), "", "a"}, {memhub.NewStore(), "cg", ""}} {
		if _, err := h.NewProcessor(c.store, c.group, c.owner, nil); err == nil {
			t.Errorf("NewProcessor(%T, %q, %q): no error", c.store, c.group, c.owner)
		}
	}
	if _, err := h.NewProcessor(memhub.NewStore(), "cg", "a", &azeventhubs.ProcessorOptions{LoadBalancingStrategy: "fair"}); err == nil {
		t.Error("NewProcessor with a bad strategy: no error")
	}
	for _, p := range []*memhub.Processor{{}, nil} {
		if err := p.Run(ctx); err == nil || !strings.Contains(err.Error(), "Hub.NewProcessor") {
			t.Errorf("Run on a zero processor: %v", err)
		}
		if pc := p.NextPartitionClient(ctx); pc != nil {
			t.Errorf("NextPartitionClient on a zero processor: %v", pc)
		}
		p.SetLogger(nil)
	}
	p, _ := h.NewProcessor(memhub.NewStore(), "cg", "a", opts(azeventhubs.ProcessorStrategyGreedy))
	p.SetLogger(nil) // discards: Run must not panic on a log line
	for _, c := range []*memhub.PartitionClient{{}, nil} {
		if c.PartitionID() != "" {
			t.Errorf("zero client's partition: %q", c.PartitionID())
		}
		if _, err := c.ReceiveEvents(ctx, 1, nil); err == nil {
			t.Error("ReceiveEvents on a zero client: no error")
		}
		if err := c.UpdateCheckpoint(ctx, &azeventhubs.ReceivedEventData{}, nil); err == nil {
			t.Error("UpdateCheckpoint on a zero client: no error")
		}
		if err := c.Close(ctx); err != nil {
			t.Errorf("Close on a zero client: %v", err)
		}
	}
	// The zero Store is ready to use.
	var s memhub.Store
	if _, err := s.ClaimOwnership(ctx, []azeventhubs.Ownership{{FullyQualifiedNamespace: memhub.Namespace, EventHubName: "h",
		ConsumerGroup: "cg", PartitionID: "0", OwnerID: "a"}}, nil); err != nil {
		t.Errorf("ClaimOwnership on a zero store: %v", err)
	}
	seq, off := int64(1), "1"
	if err := s.SetCheckpoint(ctx, azeventhubs.Checkpoint{FullyQualifiedNamespace: memhub.Namespace, EventHubName: "h",
		ConsumerGroup: "cg", PartitionID: "0", SequenceNumber: &seq, Offset: &off}, nil); err != nil {
		t.Errorf("SetCheckpoint on a zero store: %v", err)
	}
	if cps, err := s.ListCheckpoints(ctx, memhub.Namespace, "h", "cg", nil); err != nil || len(cps) != 1 {
		t.Errorf("ListCheckpoints on a zero store: %v %v", cps, err)
	}
}

// A processor's client hands out an error for a nil event to checkpoint.
func TestUpdateCheckpointNilEvent(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h, _ := memhub.New("h", 1)
		p, _ := h.NewProcessor(memhub.NewStore(), "cg", "a", opts(azeventhubs.ProcessorStrategyGreedy))
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		go func() { _ = p.Run(ctx) }()
		pc := p.NextPartitionClient(ctx)
		if pc == nil {
			t.Fatal("no partition client")
		}
		if err := pc.UpdateCheckpoint(ctx, nil, nil); err == nil {
			t.Error("UpdateCheckpoint(nil): no error")
		}
	})
}

// Expired events are gone: a reader positioned before them starts at the
// earliest retained; sequence numbers go on. A geo-replicated hub opens a
// partition whose checkpoint has an integer offset at its earliest event,
// inclusive, and one whose checkpoint has only a sequence number after it.
func TestExpireAndGeoReplication(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		h, _ := memhub.New("h", 2)
		for range 10 {
			_ = h.Send("0", &azeventhubs.EventData{})
			_ = h.Send("1", &azeventhubs.EventData{})
		}
		if err := h.Expire("0", 4); err != nil {
			t.Fatal(err)
		}
		if evs, _ := h.Events("0"); len(evs) != 6 || evs[0].SequenceNumber != 4 {
			t.Fatalf("after expiring before 4: %d events from %d", len(evs), evs[0].SequenceNumber)
		}
		_ = h.Send("0", &azeventhubs.EventData{})
		if evs, _ := h.Events("0"); evs[len(evs)-1].SequenceNumber != 10 {
			t.Fatalf("the next event after the expiry has sequence number %d, want 10", evs[len(evs)-1].SequenceNumber)
		}
		h.SetGeoReplication(true)
		s := memhub.NewStore()
		seq, off := int64(6), "6"
		for _, c := range []azeventhubs.Checkpoint{
			{PartitionID: "0", SequenceNumber: &seq, Offset: &off}, // an integer offset: refused, from the earliest
			{PartitionID: "1", SequenceNumber: &seq},               // a sequence number: after it
		} {
			c.FullyQualifiedNamespace, c.EventHubName, c.ConsumerGroup = memhub.Namespace, "h", "cg"
			if c.Offset == nil {
				// memhub's store wants both: write it, then list it through a
				// store that drops the offset, as the adapter's wrapper does.
				o := "x"
				c.Offset = &o
			}
			if err := s.SetCheckpoint(ctx, c, nil); err != nil {
				t.Fatal(err)
			}
		}
		p, _ := h.NewProcessor(seqOnly{s, "1"}, "cg", "a", opts(azeventhubs.ProcessorStrategyGreedy))
		go func() { _ = p.Run(ctx) }()
		first := map[string]int64{}
		for range 2 {
			pc := p.NextPartitionClient(ctx)
			rctx, rcancel := context.WithTimeout(ctx, time.Second)
			evs, err := pc.ReceiveEvents(rctx, 1, nil)
			rcancel()
			if err != nil {
				t.Fatal(err)
			}
			first[pc.PartitionID()] = evs[0].SequenceNumber
		}
		if first["0"] != 4 || first["1"] != 7 {
			t.Errorf("first events %v, want 4 (the earliest retained, inclusive) and 7 (after the sequence number)", first)
		}
	})
}

// seqOnly lists the checkpoint of one partition with no offset.
type seqOnly struct {
	*memhub.Store
	id string
}

func (s seqOnly) ListCheckpoints(ctx context.Context, ns, hub, group string, o *azeventhubs.ListCheckpointsOptions) ([]azeventhubs.Checkpoint, error) {
	cps, err := s.Store.ListCheckpoints(ctx, ns, hub, group, o)
	for i := range cps {
		if cps[i].PartitionID == s.id {
			cps[i].Offset = nil
		}
	}
	return cps, err
}
