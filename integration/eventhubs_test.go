package integration_test

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"testing"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/messaging/azeventhubs/v2"

	"github.com/redeliver-go/redeliver/adapters/eventhubs"
	"github.com/redeliver-go/redeliver/integration/conformance"
	"github.com/redeliver-go/redeliver/integration/provider"
)

// eventhubsAdapter builds Event Hubs consumers for the suites: the
// adapter over memhub's processor (the SDK Processor's load balancing,
// balanced or greedy) on the provider's in-memory hubs, each processor with
// its own fenced CheckpointStore over the provider's store.
type eventhubsAdapter struct{ strategy azeventhubs.ProcessorStrategy }

func (a eventhubsAdapter) Name() string { return "eventhubs (" + string(a.strategy) + ")" }

func (eventhubsAdapter) NeedsKIP848() bool { return false }

// LeaseOwnership: a processor steals a partition from another at once, so
// a claim that verified its lease just before the steal may be reported
// after the thief's (see streamtest.History.LeaseOwnership).
func (eventhubsAdapter) LeaseOwnership() bool { return true }

func (a eventhubsAdapter) NewConsumer(t *testing.T, cfg conformance.Config) (conformance.Consumer, error) {
	if em, ok := cfg.Backend.(*provider.EmulatorBackend); ok {
		return em.NewConsumer(cfg.Processor, cfg.Topic, cfg.MaxBatch, a.strategy)
	}
	b, ok := cfg.Backend.(*provider.EventHubsBackend)
	if !ok {
		return nil, errors.New("the Event Hubs adapter runs on the Event Hubs providers only")
	}
	h, err := b.Hub(cfg.Topic)
	if err != nil {
		return nil, err
	}
	var id [4]byte
	_, _ = rand.Read(id[:])
	owner := "processor-" + hex.EncodeToString(id[:])
	opts := b.ProcessorOptions(a.strategy)
	cs, err := eventhubs.NewCheckpointStore(b.Store(), owner, &eventhubs.StoreOptions{PartitionExpirationDuration: opts.PartitionExpirationDuration})
	if err != nil {
		return nil, err
	}
	p, err := h.NewProcessor(cs, cfg.Group, owner, opts)
	if err != nil {
		return nil, err
	}
	return eventhubs.NewWith(cfg.Processor, p, cs, eventhubs.WithMaxBatch(cfg.MaxBatch), eventhubs.WithReceiveWait(50*time.Millisecond))
}

var eventhubsAdapters = []eventhubsAdapter{{azeventhubs.ProcessorStrategyBalanced}, {azeventhubs.ProcessorStrategyGreedy}}

func TestEventHubs(t *testing.T) {
	for _, p := range []conformance.Provider{provider.EventHubs(), provider.EventHubsAzurite(), provider.EventHubsEmulator()} {
		for _, a := range eventhubsAdapters {
			t.Run(p.Name()+"/"+a.Name(), func(t *testing.T) {
				conformance.Run(t, p, a)
			})
		}
	}
}

func TestEventHubsReliability(t *testing.T) {
	if testing.Short() {
		t.Skip("the reliability suite is long")
	}
	// On Azurite every checkpoint is two HTTP calls (the fence's ownership
	// read, the write): the greedy strategy runs on the in-memory store
	// only, to keep the suite's time down.
	for _, p := range []conformance.Provider{provider.EventHubs(), provider.EventHubsAzurite(), provider.EventHubsEmulator()} {
		for _, a := range eventhubsAdapters {
			if p.Name() != provider.EventHubs().Name() && a.strategy == azeventhubs.ProcessorStrategyGreedy {
				continue
			}
			t.Run(p.Name()+"/"+a.Name(), func(t *testing.T) {
				conformance.RunReliability(t, p, a, "eventhubs") // the SIGKILL scenarios skip: see Backend
			})
		}
	}
}
