package provider

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/messaging/azeventhubs/v2"
	"github.com/Azure/azure-sdk-for-go/sdk/messaging/azeventhubs/v2/checkpoints"
	"github.com/Azure/azure-sdk-for-go/sdk/storage/azblob/container"

	"github.com/redeliver-go/redeliver/adapters/eventhubs"
	"github.com/redeliver-go/redeliver/adapters/eventhubs/memhub"
	"github.com/redeliver-go/redeliver/integration/conformance"
	"github.com/redeliver-go/redeliver/stream"
)

// EnvAzureStorage names an Azure Storage connection string (Azurite's, as
// integration/azurite.sh prints it) for [EventHubsAzurite].
const EnvAzureStorage = "REDELIVER_AZURE_STORAGE"

// Timings of the in-memory Event Hubs processors: a load balancing round
// every ehInterval (x0.8-1.3, as the SDK jitters it), ownership expiring
// after ehExpiry without renewal (ehBlobExpiry on blob storage, whose
// modification times have whole seconds: an ownership renewed 100ms ago
// can look 1.1s old). The expiry is the "session timeout" the suite's
// long-backoff case outlasts.
const (
	ehInterval   = 100 * time.Millisecond
	ehExpiry     = time.Second
	ehBlobExpiry = 3 * time.Second
)

// EventHubs returns a provider of in-memory event hubs (package memhub)
// with checkpoints and ownership in memhub's in-memory store, which has the
// semantics of the SDK's blob store (ETag claims, unconditional checkpoint
// writes). Every test gets its own store.
func EventHubs() conformance.Provider { return ehProvider{} }

// EventHubsAzurite returns a provider of in-memory event hubs with
// checkpoints and ownership in the SDK's own blob store
// (checkpoints.NewBlobStore) on the Azure Storage account that
// REDELIVER_AZURE_STORAGE names (Azurite, from integration/azurite.sh),
// in a container of its own per test. It skips when the variable is unset.
func EventHubsAzurite() conformance.Provider { return ehProvider{azurite: true} }

type ehProvider struct{ azurite bool }

func (p ehProvider) Name() string {
	if p.azurite {
		return "memhub+azurite"
	}
	return "memhub"
}

func (p ehProvider) Start(t *testing.T) conformance.Broker {
	b := &EventHubsBackend{hubs: map[string]*memhub.Hub{}, interval: ehInterval, expiry: ehExpiry}
	if p.azurite {
		store, err := AzuriteStore(t)
		if err != nil {
			t.Fatal(err)
		}
		b.store = store
		b.expiry = ehBlobExpiry
	} else {
		b.mem = memhub.NewStore()
		b.store = b.mem
	}
	return conformance.Broker{SessionTimeout: b.expiry, Backend: b}
}

// AzuriteStore returns the SDK's blob checkpoint store in a new container
// of the storage account REDELIVER_AZURE_STORAGE names, deleted when t
// ends. It skips t when the variable is unset.
func AzuriteStore(t testing.TB) (*checkpoints.BlobStore, error) {
	conn := os.Getenv(EnvAzureStorage)
	if conn == "" {
		t.Skipf("no Azure Storage: set %s (bash integration/azurite.sh start prints it)", EnvAzureStorage)
	}
	var b [6]byte
	_, _ = rand.Read(b[:])
	cc, err := container.NewClientFromConnectionString(conn, "rd-"+hex.EncodeToString(b[:]), nil)
	if err != nil {
		return nil, fmt.Errorf("azure storage: %w", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if _, err := cc.Create(ctx, nil); err != nil {
		return nil, fmt.Errorf("azure storage: create container: %w", err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		_, _ = cc.Delete(ctx, nil)
	})
	return checkpoints.NewBlobStore(cc, nil)
}

// EventHubsBackend is the suites' [conformance.Backend] for Event Hubs:
// in-memory hubs (one per topic) and a checkpoint store. It is safe for
// concurrent use.
type EventHubsBackend struct {
	store    azeventhubs.CheckpointStore
	mem      *memhub.Store // nil when the store is not memhub's
	interval time.Duration
	expiry   time.Duration

	mu   sync.Mutex
	hubs map[string]*memhub.Hub
	fail func() bool
}

// Hub returns the hub of topic.
func (b *EventHubsBackend) Hub(topic string) (*memhub.Hub, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	h, ok := b.hubs[topic]
	if !ok {
		return nil, fmt.Errorf("memhub: no event hub %q", topic)
	}
	return h, nil
}

// Store returns the checkpoint store, shared by every processor (each
// wraps it in its own fence).
func (b *EventHubsBackend) Store() azeventhubs.CheckpointStore { return faultyStore{b} }

// ProcessorOptions returns the processor options of the suites: short
// rounds and expiration, every partition from its first event.
func (b *EventHubsBackend) ProcessorOptions(strategy azeventhubs.ProcessorStrategy) *azeventhubs.ProcessorOptions {
	earliest := true
	return &azeventhubs.ProcessorOptions{LoadBalancingStrategy: strategy, UpdateInterval: b.interval,
		PartitionExpirationDuration: b.expiry,
		StartPositions:              azeventhubs.StartPositions{Default: azeventhubs.StartPosition{Earliest: &earliest}}}
}

// CreateTopic creates an in-memory event hub.
func (b *EventHubsBackend) CreateTopic(_ context.Context, topic string, partitions int32) error {
	h, err := memhub.New(topic, int(partitions))
	if err != nil {
		return err
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if _, ok := b.hubs[topic]; ok {
		return fmt.Errorf("memhub: event hub %q exists", topic)
	}
	b.hubs[topic] = h
	return nil
}

// Produce sends values as event bodies to a partition.
func (b *EventHubsBackend) Produce(_ context.Context, topic string, partition int32, values [][]byte) error {
	h, err := b.Hub(topic)
	if err != nil {
		return err
	}
	evs := make([]*azeventhubs.EventData, len(values))
	for i, v := range values {
		evs[i] = &azeventhubs.EventData{Body: v}
	}
	return h.Send(strconv.Itoa(int(partition)), evs...)
}

// Committed reads the group's positions through
// [eventhubs.Committed]: checkpoints and the retry state beside them.
func (b *EventHubsBackend) Committed(ctx context.Context, group, topic string) (map[int32]conformance.Position, error) {
	ps, err := eventhubs.Committed(ctx, b.store, memhub.Namespace, topic, group)
	if err != nil {
		return nil, err
	}
	out := make(map[int32]conformance.Position, len(ps))
	for id, p := range ps {
		n, err := strconv.Atoi(id)
		if err != nil {
			return nil, fmt.Errorf("partition ID %q: %w", id, err)
		}
		out[int32(n)] = conformance.Position{Next: p.Next, Metadata: p.Metadata}
	}
	return out, nil
}

// Publisher returns the adapter's Publisher over the hub of topic.
func (b *EventHubsBackend) Publisher(topic string) (stream.Publisher, error) {
	h, err := b.Hub(topic)
	if err != nil {
		return nil, err
	}
	return eventhubs.NewSenderPublisher(topic, h)
}

// Read returns every event of the hub of topic as records.
func (b *EventHubsBackend) Read(_ context.Context, topic string) ([]stream.Record, error) {
	h, err := b.Hub(topic)
	if err != nil {
		return nil, err
	}
	var out []stream.Record
	for i, id := range h.PartitionIDs() {
		evs, err := h.Events(id)
		if err != nil {
			return nil, err
		}
		for _, ev := range evs {
			out = append(out, eventhubs.Record(topic, int32(i), ev))
		}
	}
	return out, nil
}

// FailCommits makes checkpoint writes (the adapter's checkpoints and retry
// state) fail when fail returns true.
func (b *EventHubsBackend) FailCommits(fail func() bool) {
	b.mu.Lock()
	b.fail = fail
	b.mu.Unlock()
}

var errInjectedCommit = errors.New("injected checkpoint write failure")

// faultyStore is the backend's store with FailCommits applied.
type faultyStore struct{ b *EventHubsBackend }

func (s faultyStore) ClaimOwnership(ctx context.Context, os []azeventhubs.Ownership, o *azeventhubs.ClaimOwnershipOptions) ([]azeventhubs.Ownership, error) {
	return s.b.store.ClaimOwnership(ctx, os, o)
}

func (s faultyStore) ListCheckpoints(ctx context.Context, ns, hub, group string, o *azeventhubs.ListCheckpointsOptions) ([]azeventhubs.Checkpoint, error) {
	return s.b.store.ListCheckpoints(ctx, ns, hub, group, o)
}

func (s faultyStore) ListOwnership(ctx context.Context, ns, hub, group string, o *azeventhubs.ListOwnershipOptions) ([]azeventhubs.Ownership, error) {
	return s.b.store.ListOwnership(ctx, ns, hub, group, o)
}

func (s faultyStore) SetCheckpoint(ctx context.Context, cp azeventhubs.Checkpoint, o *azeventhubs.SetCheckpointOptions) error {
	s.b.mu.Lock()
	fail := s.b.fail
	s.b.mu.Unlock()
	if fail != nil && fail() {
		return errInjectedCommit
	}
	return s.b.store.SetCheckpoint(ctx, cp, o)
}
