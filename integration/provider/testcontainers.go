package provider

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/testcontainers/testcontainers-go"
	"github.com/testcontainers/testcontainers-go/modules/kafka"
	"github.com/testcontainers/testcontainers-go/modules/redpanda"

	"github.com/redeliver-go/redeliver/integration/conformance"
)

// Images the testcontainers providers run, unless the environment names
// another (EnvKafkaImage, EnvRedpandaImage).
//
// testcontainers-go's Kafka module (v0.44.0) starts Confluent images only:
// its start script sources /etc/confluent/docker. Confluent Platform 8.x
// is Apache Kafka 4.x in KRaft mode, where the KIP-848 consumer group
// protocol is on by default. Redpanda does not serve the KIP-848 APIs
// (ConsumerGroupHeartbeat answers UNSUPPORTED_VERSION).
const (
	KafkaImage    = "confluentinc/confluent-local:8.3.2"
	RedpandaImage = "redpandadata/redpanda:v26.2.3"

	EnvKafkaImage    = "REDELIVER_TC_KAFKA_IMAGE"
	EnvRedpandaImage = "REDELIVER_TC_REDPANDA_IMAGE"
)

// tcSessionTimeout is the session timeout of the testcontainers brokers:
// the least classic groups may ask for is 1s on both, and Kafka's KIP-848
// groups get 3s (heartbeats every 1s), as integration/kafka.sh sets up the
// Maven-jar broker.
const tcSessionTimeout = 3 * time.Second

// tcStartTimeout bounds a container's start, an image pull included.
const tcStartTimeout = 5 * time.Minute

// TestcontainersKafka returns a provider that runs Apache Kafka (Confluent's
// confluent-local image, KafkaImage) through testcontainers-go's Kafka
// module, with KIP-848 groups.
//
// The container starts at the first test and serves every later test of
// the test binary (the suite names topics and groups uniquely);
// testcontainers' reaper (Ryuk) removes it when the binary exits. With the
// reaper disabled (TESTCONTAINERS_RYUK_DISABLED=true) each test starts its
// own container and removes it when it ends. Where no Docker engine runs,
// every test skips.
func TestcontainersKafka() conformance.Provider { return tcProvider{tcKafka} }

// TestcontainersRedpanda returns a provider that runs Redpanda
// (RedpandaImage) through testcontainers-go's Redpanda module, with
// classic groups only. It shares and skips as [TestcontainersKafka] does.
func TestcontainersRedpanda() conformance.Provider { return tcProvider{tcRedpanda} }

var (
	tcKafka = &tcBroker{
		name:     "testcontainers-kafka",
		image:    KafkaImage,
		imageEnv: EnvKafkaImage,
		run:      runKafka,
	}
	tcRedpanda = &tcBroker{
		name:     "testcontainers-redpanda",
		image:    RedpandaImage,
		imageEnv: EnvRedpandaImage,
		run:      runRedpanda,
	}
)

type tcProvider struct{ b *tcBroker }

func (p tcProvider) Name() string { return p.b.name }

func (p tcProvider) Start(t *testing.T) conformance.Broker {
	dockerOnce.Do(checkDocker)
	if dockerErr != nil {
		t.Skipf("%s: no Docker engine answers here (testcontainers: %v). This provider runs the suite "+
			"against a %s container: where Docker runs (or DOCKER_HOST names an engine), run in integration/ "+
			"go test -run 'Test.*/%s/' ./...", p.b.name, dockerErr, p.b.imageName(), p.b.name)
	}
	if ryukDisabled {
		return p.b.startOwn(t)
	}
	return p.b.shared(t)
}

// tcBroker is one kind of testcontainers broker, and the container that
// the tests of this binary share.
type tcBroker struct {
	name     string
	image    string
	imageEnv string
	run      func(ctx context.Context, image string) (testcontainers.Container, conformance.Broker, error)

	mu      sync.Mutex
	started bool
	b       conformance.Broker
	err     error
}

func (tb *tcBroker) imageName() string {
	if img := os.Getenv(tb.imageEnv); img != "" {
		return img
	}
	return tb.image
}

// shared returns the shared broker, starting it at the first call. A start
// that failed fails every test that asks again.
func (tb *tcBroker) shared(t *testing.T) conformance.Broker {
	t.Helper()
	tb.mu.Lock()
	defer tb.mu.Unlock()
	if !tb.started {
		tb.started = true
		img := tb.imageName()
		ctx, cancel := context.WithTimeout(context.Background(), tcStartTimeout)
		ctr, b, err := tb.run(ctx, img)
		cancel()
		if err != nil {
			_ = testcontainers.TerminateContainer(ctr)
			tb.err = fmt.Errorf("start %s: %w", img, err)
		} else {
			tb.b = b
			t.Logf("%s: started %s at %v; the tests of this binary share it, and the reaper removes it when the binary exits",
				tb.name, img, b.Addrs)
		}
	}
	if tb.err != nil {
		t.Fatalf("%s: %v", tb.name, tb.err)
	}
	return tb.b
}

// startOwn starts a container for t alone and removes it when t ends.
func (tb *tcBroker) startOwn(t *testing.T) conformance.Broker {
	t.Helper()
	img := tb.imageName()
	ctx, cancel := context.WithTimeout(context.Background(), tcStartTimeout)
	defer cancel()
	ctr, b, err := tb.run(ctx, img)
	testcontainers.CleanupContainer(t, ctr)
	if err != nil {
		t.Fatalf("%s: start %s: %v", tb.name, img, err)
	}
	return b
}

func runKafka(ctx context.Context, image string) (testcontainers.Container, conformance.Broker, error) {
	ms := func(d time.Duration) string { return strconv.Itoa(int(d / time.Millisecond)) }
	c, err := kafka.Run(ctx, image,
		kafka.WithClusterID("redeliver-conformance"),
		testcontainers.WithEnv(map[string]string{
			// Classic groups: session timeouts down to 1s.
			"KAFKA_GROUP_MIN_SESSION_TIMEOUT_MS": "1000",
			// KIP-848 groups: the broker's session timeout and heartbeat
			// interval (defaults 45s and 5s, and their minimums too).
			"KAFKA_GROUP_CONSUMER_MIN_SESSION_TIMEOUT_MS":    "1000",
			"KAFKA_GROUP_CONSUMER_SESSION_TIMEOUT_MS":        ms(tcSessionTimeout),
			"KAFKA_GROUP_CONSUMER_MIN_HEARTBEAT_INTERVAL_MS": "500",
			"KAFKA_GROUP_CONSUMER_HEARTBEAT_INTERVAL_MS":     "1000",
		}),
	)
	if c == nil {
		return nil, conformance.Broker{}, err
	}
	if err != nil {
		return c, conformance.Broker{}, err
	}
	addrs, err := c.Brokers(ctx)
	if err != nil {
		return c, conformance.Broker{}, fmt.Errorf("brokers: %w", err)
	}
	return c, conformance.Broker{Addrs: addrs, SessionTimeout: tcSessionTimeout, KIP848: true}, nil
}

func runRedpanda(ctx context.Context, image string) (testcontainers.Container, conformance.Broker, error) {
	c, err := redpanda.Run(ctx, image,
		// Cluster properties, read at the cluster's first start.
		redpanda.WithBootstrapConfig("group_min_session_timeout_ms", 1000), // default 6000
		redpanda.WithBootstrapConfig("group_initial_rebalance_delay", 0),   // dev-container mode's value too
	)
	if c == nil {
		return nil, conformance.Broker{}, err
	}
	if err != nil {
		return c, conformance.Broker{}, err
	}
	addr, err := c.KafkaSeedBroker(ctx)
	if err != nil {
		return c, conformance.Broker{}, fmt.Errorf("seed broker: %w", err)
	}
	return c, conformance.Broker{Addrs: []string{addr}, SessionTimeout: tcSessionTimeout}, nil
}

var (
	dockerOnce   sync.Once
	dockerErr    error
	ryukDisabled bool
)

// checkDocker asks the Docker engine testcontainers would use whether it is
// healthy, as testcontainers.SkipIfProviderIsNotHealthy does, once per test
// binary.
func checkDocker() {
	defer func() {
		if r := recover(); r != nil {
			dockerErr = fmt.Errorf("testcontainers panicked: %v", r)
		}
	}()
	p, err := testcontainers.ProviderDocker.GetProvider()
	if err != nil {
		dockerErr = err
		return
	}
	defer p.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := p.Health(ctx); err != nil {
		dockerErr = err
		return
	}
	ryukDisabled = testcontainers.ReadConfig().Config.RyukDisabled
}
