package eventhubs_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore/to"
	"github.com/Azure/azure-sdk-for-go/sdk/messaging/azeventhubs/v2"
	"github.com/Azure/azure-sdk-for-go/sdk/messaging/azeventhubs/v2/checkpoints"
	"github.com/Azure/azure-sdk-for-go/sdk/storage/azblob/container"

	"github.com/redeliver-go/redeliver/adapters/eventhubs"
	"github.com/redeliver-go/redeliver/adapters/eventhubs/memhub"
	"github.com/redeliver-go/redeliver/checkpoint"
	"github.com/redeliver-go/redeliver/stream"
)

// These tests run the fence and the retry state against the SDK's own
// checkpoint store, checkpoints.BlobStore, on the Azure Storage account
// REDELIVER_AZURE_STORAGE names: Azurite, as integration/azurite.sh starts
// it and prints the variable. Without it they skip.

const envStorage = "REDELIVER_AZURE_STORAGE"

// blobStore returns the SDK's blob store in a new container, and the
// container, both removed when t ends.
func blobStore(t *testing.T) (*checkpoints.BlobStore, *container.Client) {
	t.Helper()
	conn := os.Getenv(envStorage)
	if conn == "" {
		t.Skipf("no Azure Storage: set %s (bash integration/azurite.sh start prints it)", envStorage)
	}
	var b [6]byte
	_, _ = rand.Read(b[:])
	cc, err := container.NewClientFromConnectionString(conn, "rd-"+hex.EncodeToString(b[:]), nil)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if _, err := cc.Create(ctx, nil); err != nil {
		t.Fatalf("create container: %v", err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		_, _ = cc.Delete(ctx, nil)
	})
	bs, err := checkpoints.NewBlobStore(cc, nil)
	if err != nil {
		t.Fatal(err)
	}
	return bs, cc
}

const ns, hubName, group = "ns.example", "orders", "cg"

func ownership(owner, id string, etag *azeventhubs.Ownership) azeventhubs.Ownership {
	o := azeventhubs.Ownership{FullyQualifiedNamespace: ns, EventHubName: hubName, ConsumerGroup: group, PartitionID: id, OwnerID: owner}
	if etag != nil {
		o.ETag = etag.ETag
	}
	return o
}

func cp(id string, seq int64) azeventhubs.Checkpoint {
	return azeventhubs.Checkpoint{FullyQualifiedNamespace: ns, EventHubName: hubName, ConsumerGroup: group, PartitionID: id,
		SequenceNumber: to.Ptr(seq), Offset: to.Ptr(fmt.Sprint(seq))}
}

func listed(t *testing.T, s azeventhubs.CheckpointStore, id string) *azeventhubs.Ownership {
	t.Helper()
	os, err := s.ListOwnership(context.Background(), ns, hubName, group, nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, o := range os {
		if o.PartitionID == id {
			return &o
		}
	}
	return nil
}

func checkpointAt(t *testing.T, s azeventhubs.CheckpointStore, id string) int64 {
	t.Helper()
	cps, err := s.ListCheckpoints(context.Background(), ns, hubName, group, nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range cps {
		if c.PartitionID == id {
			return *c.SequenceNumber
		}
	}
	return -1
}

// staleOwnerMovesCheckpoint plays it out on the blob store: processor A
// owns partition 0 and checkpoints 10, B steals the partition (a
// conditional claim with the ETag it listed, as the SDK's load balancer
// does) and checkpoints 20, then A, which has not noticed, checkpoints 15
// through write. It returns an error when A's write moved B's checkpoint.
func staleOwnerMovesCheckpoint(t *testing.T, bs azeventhubs.CheckpointStore, write azeventhubs.CheckpointStore, b azeventhubs.CheckpointStore) error {
	ctx := context.Background()
	got, err := bs.ClaimOwnership(ctx, []azeventhubs.Ownership{ownership("A", "0", nil)}, nil)
	if err != nil || len(got) != 1 {
		t.Fatalf("A's claim: %v %v", got, err)
	}
	if err := write.SetCheckpoint(ctx, cp("0", 10), nil); err != nil {
		t.Fatalf("A's checkpoint while it owns the partition: %v", err)
	}
	cur := listed(t, bs, "0")
	got, err = b.ClaimOwnership(ctx, []azeventhubs.Ownership{ownership("B", "0", cur)}, nil)
	if err != nil || len(got) != 1 {
		t.Fatalf("B's steal: %v %v", got, err)
	}
	// A's own renewal with its stale ETag claims nothing: what the SDK's
	// processor would see at its next round.
	if again, err := bs.ClaimOwnership(ctx, []azeventhubs.Ownership{ownership("A", "0", cur)}, nil); err != nil || len(again) != 0 {
		t.Fatalf("A's renewal with a stale ETag: %v %v, want nothing claimed", again, err)
	}
	if err := b.SetCheckpoint(ctx, cp("0", 20), nil); err != nil {
		t.Fatalf("B's checkpoint: %v", err)
	}
	werr := write.SetCheckpoint(ctx, cp("0", 15), nil)
	if at := checkpointAt(t, bs, "0"); at != 20 {
		return fmt.Errorf("after the stale owner's write (error %v) the checkpoint is %d, want the new owner's 20", werr, at)
	}
	if !errors.Is(werr, eventhubs.ErrOwnershipLost) || !errors.Is(werr, stream.ErrRevoked) {
		return fmt.Errorf("the stale owner's write returned %v, want ErrOwnershipLost", werr)
	}
	return nil
}

// TestStaleOwnerCannotMoveCheckpoint: through the fence, a processor whose
// partition was stolen cannot move the new owner's checkpoint. The same
// check fails on the SDK's blob store alone, which writes checkpoints
// unconditionally (REDELIVER_EH_UNFENCED=1 runs the fenced case on the
// bare store, to see it fail).
func TestStaleOwnerCannotMoveCheckpoint(t *testing.T) {
	t.Run("fenced", func(t *testing.T) {
		bs, _ := blobStore(t)
		a, _ := eventhubs.NewCheckpointStore(bs, "A", nil)
		b, _ := eventhubs.NewCheckpointStore(bs, "B", nil)
		var write azeventhubs.CheckpointStore = a
		if os.Getenv("REDELIVER_EH_UNFENCED") == "1" {
			write = bs
		}
		if err := staleOwnerMovesCheckpoint(t, bs, write, b); err != nil {
			t.Fatal(err)
		}
	})
	t.Run("sdk-store-alone", func(t *testing.T) {
		bs, _ := blobStore(t)
		err := staleOwnerMovesCheckpoint(t, bs, bs, bs)
		if err == nil {
			t.Fatal("the SDK's blob store refused the stale owner's write: the fence would not be needed")
		}
		t.Logf("as expected without the fence: %v", err)
	})
}

// TestPlainWriteWipesExtraMetadata shows why the retry state is not kept
// as an extra metadata key of the checkpoint blob: the blob store's next
// plain checkpoint write replaces every key.
func TestPlainWriteWipesExtraMetadata(t *testing.T) {
	bs, cc := blobStore(t)
	ctx := context.Background()
	if err := bs.SetCheckpoint(ctx, cp("0", 9), nil); err != nil {
		t.Fatal(err)
	}
	blob := cc.NewBlobClient(ns + "/" + hubName + "/" + group + "/checkpoint/0")
	props, err := blob.GetProperties(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	md := props.Metadata
	md["redeliver"] = to.Ptr("rd1;r=3")
	if _, err := blob.SetMetadata(ctx, md, nil); err != nil {
		t.Fatal(err)
	}
	if err := bs.SetCheckpoint(ctx, cp("0", 9), nil); err != nil {
		t.Fatal(err)
	}
	props, err = blob.GetProperties(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := props.Metadata["redeliver"]; ok {
		t.Fatalf("the extra key survived a plain checkpoint write: %v; the state could live on the checkpoint blob", props.Metadata)
	}
}

// TestRetryStateSurvivesOnBlobStore: a batch withheld by one processor
// keeps its retry state through a processor restart, a plain checkpoint
// write at the same position (the SDK's UpdateCheckpoint of the event
// before it) and an ownership change: the next owner, another processor,
// continues the count.
func TestRetryStateSurvivesOnBlobStore(t *testing.T) {
	bs, _ := blobStore(t)
	h := newHub(t, 1, 30)
	policy := checkpoint.Policy{MaxRetries: 5, Backoff: checkpoint.Fixed(300 * time.Millisecond)}
	withheld := make(chan struct{}, 1)
	var mu sync.Mutex
	var retries []int
	handler := stream.HandlerFunc(func(_ context.Context, b *stream.Batch) error {
		if b.FirstOffset() != 10 {
			return nil
		}
		mu.Lock()
		retries = append(retries, b.Attempt.Retries)
		mu.Unlock()
		return errors.New("not yet")
	})
	hooks := stream.Hooks{Checkpointed: func(ev stream.CheckpointEvent) {
		if ev.Next == 10 && ev.Metadata != "" {
			select {
			case withheld <- struct{}{}:
			default:
			}
		}
	}}
	procA, _ := stream.NewProcessor(handler, stream.WithPolicy(policy), stream.WithHooks(hooks))
	a := start(t, h, bs, "processor-a", procA)
	select {
	case <-withheld:
	case <-time.After(20 * time.Second):
		t.Fatal("the retry state of batch 10 was not written")
	}
	a.stop(t)

	pos, err := eventhubs.Committed(context.Background(), bs, memhub.Namespace, "orders", "cg")
	if err != nil {
		t.Fatal(err)
	}
	if p := pos["0"]; p.Next != 10 || p.Metadata == "" {
		t.Fatalf("after the first processor stopped: position %+v, want 10 with retry state", p)
	}
	// A plain checkpoint write at the same position, as any SDK user's
	// UpdateCheckpoint of event 9 would do.
	plain := cp("0", 9)
	plain.FullyQualifiedNamespace, plain.EventHubName, plain.ConsumerGroup = memhub.Namespace, "orders", "cg"
	if err := bs.SetCheckpoint(context.Background(), plain, nil); err != nil {
		t.Fatal(err)
	}
	if again, _ := eventhubs.Committed(context.Background(), bs, memhub.Namespace, "orders", "cg"); again["0"] != pos["0"] {
		t.Fatalf("after a plain checkpoint write: %+v, want %+v", again["0"], pos["0"])
	}

	mu.Lock()
	before := len(retries)
	mu.Unlock()
	procB, _ := stream.NewProcessor(handler, stream.WithPolicy(policy))
	start(t, h, bs, "processor-b", procB)
	waitPositions(t, bs, map[string]int64{"0": 30})
	mu.Lock()
	defer mu.Unlock()
	if before < 1 || len(retries) <= before || retries[before] != retries[before-1]+1 {
		t.Fatalf("deliveries of batch 10 had retries %v; the second processor's first (index %d) should continue the first's count", retries, before)
	}
	if n := len(retries); n > policy.MaxRetries+1 {
		t.Fatalf("batch 10 delivered %d times (retries %v), want at most %d", n, retries, policy.MaxRetries+1)
	}
}

// TestConcurrentProcessorsOnBlobStore: 2 and 4 processors race for the
// same partitions on the blob store, round after round: each lists the
// ownership and claims every partition with the ETag it read, then each
// writes a checkpoint of every partition through its fence. Exactly one
// owner at a time (no ETag is claimed from twice), and every write by a
// processor that does not own the partition is refused.
func TestConcurrentProcessorsOnBlobStore(t *testing.T) {
	for _, n := range []int{2, 4} {
		t.Run(fmt.Sprintf("%d-processors", n), func(t *testing.T) {
			bs, _ := blobStore(t)
			ids := []string{"0", "1", "2", "3"}
			stores := make([]*eventhubs.CheckpointStore, n)
			for i := range stores {
				stores[i], _ = eventhubs.NewCheckpointStore(bs, fmt.Sprintf("p%d", i), nil)
			}
			ctx := context.Background()
			var (
				mu       sync.Mutex
				fromETag = map[string]string{} // an ETag claimed from -> by whom
				refused  int
			)
			const rounds = 5
			for round := range rounds {
				var wg sync.WaitGroup
				for i, s := range stores {
					wg.Go(func() {
						os, err := s.ListOwnership(ctx, ns, hubName, group, nil)
						if err != nil {
							t.Error(err)
							return
						}
						cur := map[string]*azeventhubs.Ownership{}
						for _, o := range os {
							cur[o.PartitionID] = &o
						}
						var req []azeventhubs.Ownership
						for _, id := range ids {
							req = append(req, ownership(s.OwnerID(), id, cur[id]))
						}
						got, err := s.ClaimOwnership(ctx, req, nil)
						if err != nil {
							t.Error(err)
							return
						}
						mu.Lock()
						defer mu.Unlock()
						for _, o := range got {
							from := "none"
							if c := cur[o.PartitionID]; c != nil {
								from = string(*c.ETag)
							}
							k := o.PartitionID + "@" + from
							if prev, dup := fromETag[k]; dup {
								t.Errorf("round %d: partition %s claimed from ETag %s by both %s and p%d: two owners", round, o.PartitionID, from, prev, i)
							}
							fromETag[k] = s.OwnerID()
						}
					})
				}
				wg.Wait()
				owners := map[string]string{}
				for _, id := range ids {
					owners[id] = listed(t, bs, id).OwnerID
				}
				accepted := map[string][]string{}
				for i, s := range stores {
					wg.Go(func() {
						for _, id := range ids {
							err := s.SetCheckpoint(ctx, cp(id, int64(round*100+i)), nil)
							mu.Lock()
							switch {
							case err == nil:
								accepted[id] = append(accepted[id], s.OwnerID())
							case errors.Is(err, eventhubs.ErrOwnershipLost):
								refused++
							default:
								t.Error(err)
							}
							mu.Unlock()
						}
					})
				}
				wg.Wait()
				for _, id := range ids {
					if len(accepted[id]) != 1 || accepted[id][0] != owners[id] {
						t.Errorf("round %d: partition %s owned by %s: writes accepted from %v, want from its owner only", round, id, owners[id], accepted[id])
					}
				}
			}
			if want := rounds * len(ids) * (n - 1); refused != want {
				t.Errorf("%d stale writes refused, want %d", refused, want)
			}
		})
	}
}

// TestShutdownHandsPartitionsBackOnBlobStore: on the SDK's blob store, a
// stopping consumer hands its partitions back, and another processor
// takes them within its first rounds instead of after the ownership
// expiry (a minute).
func TestShutdownHandsPartitionsBackOnBlobStore(t *testing.T) {
	bs, _ := blobStore(t)
	after, took := handBack(t, bs, 200*time.Millisecond)
	for id, o := range after {
		if o != "" {
			t.Errorf("partition %s owned by %q after its owner stopped, want handed back", id, o)
		}
	}
	t.Logf("the other processor (balanced, 200ms rounds) owned all 4 partitions %v after the first stopped", took.Round(time.Millisecond))
	if took > 10*time.Second {
		t.Errorf("the other processor took all partitions %v after the first stopped, want within its first rounds (the expiry is 1m)", took)
	}
}

// The contract scenarios of contract_test.go on the SDK's blob store,
// where the positional checkpoint, the retry state and its clearing are
// blobs and their metadata.

func TestFirstBatchFoundAgainOnBlobStore(t *testing.T) {
	t.Run("withheld", func(t *testing.T) {
		bs, _ := blobStore(t)
		d := withheldFirstBatch(t, bs, false, 500*time.Millisecond, failing, onWithheld)
		checkFirstBatchFoundAgain(t, d, 1)
	})
	t.Run("cut-off", func(t *testing.T) {
		bs, _ := blobStore(t)
		d := withheldFirstBatch(t, bs, false, 500*time.Millisecond, blocking, onFirstDelivery)
		checkFirstBatchFoundAgain(t, d, 0)
	})
}

func TestGapAfterCheckpointOnBlobStore(t *testing.T) {
	bs, _ := blobStore(t)
	gapAfterCheckpoint(t, bs)
}

func TestGapMidStreamOnBlobStore(t *testing.T) {
	t.Run("inside a batch", func(t *testing.T) {
		bs, _ := blobStore(t)
		gapMidStream(t, bs, 12, 15)
	})
}

func TestReplayAfterRewindOnBlobStore(t *testing.T) {
	bs, _ := blobStore(t)
	replayAfterRetries(t, bs)
}

// TestPositionalCheckpointOnBlobStore: a positional checkpoint is a
// checkpoint blob whose offset is "-1" (the SDK's own earliest position,
// for readers that do not know it), listed through the wrapper by its
// sequence number alone.
func TestPositionalCheckpointOnBlobStore(t *testing.T) {
	bs, _ := blobStore(t)
	positionalCheckpointListed(t, bs)
}
