package provider

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/messaging/azeventhubs/v2"
	"github.com/Azure/azure-sdk-for-go/sdk/messaging/azeventhubs/v2/checkpoints"
	"github.com/moby/moby/api/types/container"
	"github.com/testcontainers/testcontainers-go"
	"github.com/testcontainers/testcontainers-go/wait"

	"github.com/redeliver-go/redeliver/adapters/eventhubs"
	"github.com/redeliver-go/redeliver/integration/conformance"
	"github.com/redeliver-go/redeliver/stream"
)

// The images of the Event Hubs emulator provider. Microsoft publishes both
// in its own container registry: the Event Hubs emulator
// ("azure-messaging/eventhubs-emulator") and Azurite
// ("azure-storage/azurite"), which the emulator keeps its metadata in.
// Neither can be built here, so they are named by the environment only.
const (
	EnvEventHubsImage = "REDELIVER_TC_EVENTHUBS_IMAGE"
	EnvAzuriteImage   = "REDELIVER_TC_AZURITE_IMAGE"
)

// emulatorConn is the emulator's documented connection string (its fixed
// development key; nothing else accepts it).
const emulatorConn = "Endpoint=sb://localhost;SharedAccessKeyName=RootManageSharedAccessKey;SharedAccessKey=SAS_KEY_VALUE;UseDevelopmentEmulator=true;"

// EventHubsEmulator returns a provider that runs the suites against
// Microsoft's Event Hubs emulator (the real AMQP service, in a container,
// with an Azurite container for its metadata) through the SDK: the
// adapter's eventhubs.New over azeventhubs.NewProcessor, with checkpoints
// in the SDK's blob store on the storage account REDELIVER_AZURE_STORAGE
// names (integration/azurite.sh). It has never run where it was written:
// no Docker image of the emulator can be had there.
//
// How to run it where Docker and the images are available:
//
//	export REDELIVER_TC_EVENTHUBS_IMAGE=<registry>/azure-messaging/eventhubs-emulator:latest
//	export REDELIVER_TC_AZURITE_IMAGE=<registry>/azure-storage/azurite:latest
//	eval "export $(bash integration/azurite.sh start)"   # checkpoint storage
//	cd integration && go test -run 'TestEventHubs.*/emulator/' ./...
//
// The emulator's hubs and consumer groups are fixed by a configuration
// file at its start, so each test starts its own emulator (host
// networking: port 5672, and Azurite's 10000-10002, must be free), with
// the test's hub and a one-partition dead-letter hub "<hub>.dlq"; every
// test's consumer group is the emulator's "$Default".
func EventHubsEmulator() conformance.Provider { return emulatorProvider{} }

type emulatorProvider struct{}

func (emulatorProvider) Name() string { return "emulator" }

func (emulatorProvider) Start(t *testing.T) conformance.Broker {
	ehImage, azImage := os.Getenv(EnvEventHubsImage), os.Getenv(EnvAzuriteImage)
	if ehImage == "" || azImage == "" {
		t.Skipf("Event Hubs emulator: set %s and %s to Microsoft's eventhubs-emulator and azurite images, and %s "+
			"(bash integration/azurite.sh start), where Docker runs; see provider.EventHubsEmulator", EnvEventHubsImage, EnvAzuriteImage, EnvAzureStorage)
	}
	dockerOnce.Do(checkDocker)
	if dockerErr != nil {
		t.Skipf("Event Hubs emulator: no Docker engine answers here (testcontainers: %v)", dockerErr)
	}
	store, err := AzuriteStore(t)
	if err != nil {
		t.Fatal(err)
	}
	return conformance.Broker{SessionTimeout: ehBlobExpiry, Backend: &EmulatorBackend{t: t, ehImage: ehImage, azImage: azImage, store: store}}
}

// EmulatorBackend is the suites' [conformance.Backend] on the Event Hubs
// emulator. Its hubs exist once CreateTopic has started the emulator.
type EmulatorBackend struct {
	t                *testing.T
	ehImage, azImage string
	store            *checkpoints.BlobStore

	mu      sync.Mutex
	started bool
	topic   string
}

const emulatorGroup = azeventhubs.DefaultConsumerGroup

// CreateTopic starts the emulator with topic (and topic.dlq) the first
// time; a later call for topic.dlq finds it there.
func (b *EmulatorBackend) CreateTopic(ctx context.Context, topic string, partitions int32) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.started {
		if topic == b.topic+".dlq" {
			return nil
		}
		return fmt.Errorf("emulator: hub %s: one hub per emulator (it has %s)", topic, b.topic)
	}
	b.started, b.topic = true, topic
	return b.start(ctx, topic, partitions)
}

func (b *EmulatorBackend) start(ctx context.Context, topic string, partitions int32) error {
	entity := func(name string, n int32) map[string]any {
		return map[string]any{"Name": name, "PartitionCount": strconv.Itoa(int(n)),
			"ConsumerGroups": []map[string]any{}}
	}
	cfg := map[string]any{"UserConfig": map[string]any{
		"NamespaceConfig": []map[string]any{{"Type": "EventHub", "Name": "emulatorNs1",
			"Entities": []map[string]any{entity(topic, partitions), entity(topic+".dlq", 1)}}},
		"LoggingConfig": map[string]any{"Type": "Console"},
	}}
	raw, err := json.Marshal(cfg)
	if err != nil {
		return err
	}
	dir := b.t.TempDir()
	path := filepath.Join(dir, "Config.json")
	if err := os.WriteFile(path, raw, 0o644); err != nil {
		return err
	}
	host := func(hc *container.HostConfig) { hc.NetworkMode = "host" }
	az, err := testcontainers.Run(ctx, b.azImage,
		testcontainers.WithHostConfigModifier(host),
		testcontainers.WithWaitStrategy(wait.ForListeningPort("10000/tcp").WithStartupTimeout(2*time.Minute)))
	testcontainers.CleanupContainer(b.t, az)
	if err != nil {
		return fmt.Errorf("emulator: start azurite: %w", err)
	}
	eh, err := testcontainers.Run(ctx, b.ehImage,
		testcontainers.WithHostConfigModifier(host),
		testcontainers.WithEnv(map[string]string{"BLOB_SERVER": "localhost", "METADATA_SERVER": "localhost", "ACCEPT_EULA": "Y"}),
		testcontainers.WithFiles(testcontainers.ContainerFile{HostFilePath: path, ContainerFilePath: "/Eventhubs_Emulator/ConfigFiles/Config.json", FileMode: 0o644}),
		testcontainers.WithWaitStrategy(wait.ForLog("Emulator Service is Successfully Up").WithStartupTimeout(3*time.Minute)))
	testcontainers.CleanupContainer(b.t, eh)
	if err != nil {
		return fmt.Errorf("emulator: start event hubs emulator: %w", err)
	}
	return nil
}

// Produce sends values to a partition through a ProducerClient.
func (b *EmulatorBackend) Produce(ctx context.Context, topic string, partition int32, values [][]byte) error {
	pc, err := azeventhubs.NewProducerClientFromConnectionString(emulatorConn, topic, nil)
	if err != nil {
		return err
	}
	defer pc.Close(context.Background())
	id := strconv.Itoa(int(partition))
	batch, err := pc.NewEventDataBatch(ctx, &azeventhubs.EventDataBatchOptions{PartitionID: &id})
	if err != nil {
		return err
	}
	for _, v := range values {
		if err := batch.AddEventData(&azeventhubs.EventData{Body: v}, nil); err != nil {
			return err
		}
	}
	return pc.SendEventDataBatch(ctx, batch, nil)
}

// Committed reads the positions of $Default through [eventhubs.Committed].
func (b *EmulatorBackend) Committed(ctx context.Context, _, topic string) (map[int32]conformance.Position, error) {
	ps, err := eventhubs.Committed(ctx, b.store, "localhost", topic, emulatorGroup)
	if err != nil {
		return nil, err
	}
	out := map[int32]conformance.Position{}
	for id, p := range ps {
		n, err := strconv.Atoi(id)
		if err != nil {
			return nil, err
		}
		out[int32(n)] = conformance.Position{Next: p.Next, Metadata: p.Metadata}
	}
	return out, nil
}

// Publisher returns the adapter's Publisher over a ProducerClient.
func (b *EmulatorBackend) Publisher(topic string) (stream.Publisher, error) {
	pc, err := azeventhubs.NewProducerClientFromConnectionString(emulatorConn, topic, nil)
	if err != nil {
		return nil, err
	}
	b.t.Cleanup(func() { _ = pc.Close(context.Background()) })
	return eventhubs.NewPublisher(pc)
}

// Read reads every partition of topic from its start until a read waits
// 2s for nothing.
func (b *EmulatorBackend) Read(ctx context.Context, topic string) ([]stream.Record, error) {
	cc, err := azeventhubs.NewConsumerClientFromConnectionString(emulatorConn, topic, emulatorGroup, nil)
	if err != nil {
		return nil, err
	}
	defer cc.Close(context.Background())
	props, err := cc.GetEventHubProperties(ctx, nil)
	if err != nil {
		return nil, err
	}
	var out []stream.Record
	earliest := true
	for _, id := range props.PartitionIDs {
		p, err := cc.NewPartitionClient(id, &azeventhubs.PartitionClientOptions{StartPosition: azeventhubs.StartPosition{Earliest: &earliest}})
		if err != nil {
			return nil, err
		}
		n, _ := strconv.Atoi(id)
		for {
			rctx, cancel := context.WithTimeout(ctx, 2*time.Second)
			evs, err := p.ReceiveEvents(rctx, 100, nil)
			cancel()
			for _, ev := range evs {
				out = append(out, eventhubs.Record(topic, int32(n), ev))
			}
			if len(evs) == 0 || (err != nil && !errors.Is(err, context.DeadlineExceeded)) {
				break
			}
		}
		_ = p.Close(ctx)
	}
	return out, nil
}

// NewConsumer returns the adapter over the SDK's Processor on the
// emulator, with the suites' short processor timings.
func (b *EmulatorBackend) NewConsumer(proc *stream.Processor, topic string, maxBatch int, strategy azeventhubs.ProcessorStrategy) (conformance.Consumer, error) {
	cc, err := azeventhubs.NewConsumerClientFromConnectionString(emulatorConn, topic, emulatorGroup, nil)
	if err != nil {
		return nil, err
	}
	b.t.Cleanup(func() { _ = cc.Close(context.Background()) })
	earliest := true
	return eventhubs.New(proc, cc, b.store, eventhubs.WithMaxBatch(maxBatch), eventhubs.WithReceiveWait(100*time.Millisecond),
		eventhubs.WithProcessorOptions(azeventhubs.ProcessorOptions{LoadBalancingStrategy: strategy, UpdateInterval: ehInterval,
			PartitionExpirationDuration: ehBlobExpiry,
			StartPositions:              azeventhubs.StartPositions{Default: azeventhubs.StartPosition{Earliest: &earliest}}}))
}
