package provider

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"os"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/containerd/errdefs"
	"github.com/moby/moby/api/types/container"
	"github.com/testcontainers/testcontainers-go"
	"github.com/testcontainers/testcontainers-go/modules/redpanda"
	"github.com/testcontainers/testcontainers-go/wait"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/redeliver-go/redeliver/integration/conformance"
)

// Images the testcontainers providers run, unless the environment names
// another (EnvKafkaImage, EnvPostgresImage, EnvRedpandaImage).
//
// KafkaImage and PostgresImage are built on this machine by
// integration/images.sh (Debian packages and the Kafka jars
// integration/kafka.sh runs); scripts/test.sh exports the exact tags it
// built. No image is ever pulled: a provider whose image is not in the
// engine skips.
//
// Redpanda does not serve the KIP-848 APIs (ConsumerGroupHeartbeat answers
// UNSUPPORTED_VERSION); its image cannot be built here.
const (
	KafkaImage    = "redeliver/kafka:4.3.1"
	PostgresImage = "redeliver/postgres:15"
	RedpandaImage = "redpandadata/redpanda:v26.2.3"

	EnvKafkaImage    = "REDELIVER_TC_KAFKA_IMAGE"
	EnvPostgresImage = "REDELIVER_TC_POSTGRES_IMAGE"
	EnvRedpandaImage = "REDELIVER_TC_REDPANDA_IMAGE"

	// EnvSkip, when set, makes every testcontainers provider skip with
	// its value as the reason (scripts/test.sh sets it when it could not
	// start a Docker engine of its own).
	EnvSkip = "REDELIVER_TC_SKIP"
)

// tcSessionTimeout is the session timeout of the testcontainers Kafka
// brokers: classic groups may ask for 1s, and KIP-848 groups get 3s
// (heartbeats every 1s), as integration/kafka.sh sets up the broker, which
// is the image's command.
const tcSessionTimeout = 3 * time.Second

// tcStartTimeout bounds a container's start.
const tcStartTimeout = 3 * time.Minute

// Loopback ports the containers listen on: below Linux's ephemeral range
// (32768 and up), so that no client connection takes one between the
// check that it is free and the server's bind, and apart from
// integration/kafka.sh's (29092-29191).
const (
	kafkaPortLow, kafkaPortHigh = 29400, 29800
	pgPortLow, pgPortHigh       = 29800, 30000
)

// TestcontainersKafka returns a provider that runs Apache Kafka in a
// container of KafkaImage through testcontainers-go, with host networking
// on a free 127.0.0.1 port and KIP-848 groups.
//
// The container starts at the first test and serves every later test of
// the test binary (the suite names topics and groups uniquely); the
// binary's TestMain removes it with [Terminate]. Where no Docker engine
// answers, or the image is not in it, every test skips and says why.
func TestcontainersKafka() conformance.Provider { return tcProvider{tcKafka} }

// TestcontainersRedpanda returns a provider that runs Redpanda
// (RedpandaImage) through testcontainers-go's Redpanda module, with
// classic groups only. It needs the image in the engine (nothing is
// pulled) and a bridge network for the module's mapped ports; with
// integration/docker.sh's engine it skips.
func TestcontainersRedpanda() conformance.Provider { return tcProvider{tcRedpanda} }

var (
	tcKafka = &shared[conformance.Broker]{
		name:     "testcontainers-kafka",
		image:    KafkaImage,
		imageEnv: EnvKafkaImage,
		missing:  "build it with integration/images.sh build (scripts/test.sh does)",
		run:      runKafka,
	}
	tcRedpanda = &shared[conformance.Broker]{
		name:     "testcontainers-redpanda",
		image:    RedpandaImage,
		imageEnv: EnvRedpandaImage,
		missing: "Redpanda's image cannot be built on this machine (Redpanda ships no Debian package or " +
			"jars to build it from) and no image is pulled; on a machine with a registry, docker pull it " +
			"into an engine with a bridge network (testcontainers' Redpanda module maps ports)",
		run: runRedpanda,
	}
)

type tcProvider struct{ s *shared[conformance.Broker] }

func (p tcProvider) Name() string { return p.s.name }

func (p tcProvider) Start(t *testing.T) conformance.Broker { return p.s.get(t) }

// shared is one kind of container, and the one the tests of this binary
// share.
type shared[V any] struct {
	name     string
	image    string
	imageEnv string
	missing  string // what to do when the image is not in the engine
	run      func(ctx context.Context, image string) (testcontainers.Container, V, error)

	mu      sync.Mutex
	started bool
	v       V
	err     error
	skip    string
}

func (s *shared[V]) imageName() string {
	if img := os.Getenv(s.imageEnv); img != "" {
		return img
	}
	return s.image
}

// get returns the shared container's value, starting the container at the
// first call. A start that failed fails every test that asks again.
func (s *shared[V]) get(t testing.TB) V {
	t.Helper()
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.started {
		s.started = true
		s.start(t)
	}
	if s.skip != "" {
		t.Skip(s.skip)
	}
	if s.err != nil {
		t.Fatalf("%s: %v", s.name, s.err)
	}
	return s.v
}

func (s *shared[V]) start(t testing.TB) {
	img := s.imageName()
	if reason := engineUnavailable(); reason != "" {
		s.skip = fmt.Sprintf("%s: %s. This provider runs %s in a container: see integration/README.md", s.name, reason, img)
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), tcStartTimeout)
	defer cancel()
	if err := localImage(ctx, img); err != nil {
		why := "is not in the Docker engine"
		if !errdefs.IsNotFound(err) {
			why = fmt.Sprintf("could not be inspected (%v)", err)
		}
		s.skip = fmt.Sprintf("%s: image %s %s: %s", s.name, img, why, s.missing)
		return
	}
	begin := time.Now()
	// A port picked free can be taken before the server binds it: a
	// container that exits at once is tried again on other ports.
	for attempt := 1; ; attempt++ {
		ctr, v, err := s.run(ctx, img)
		if ctr != nil {
			track(ctr)
		}
		if err == nil {
			s.v = v
			t.Logf("%s: started %s in %s; the tests of this binary share it (%v)", s.name, img,
				time.Since(begin).Round(100*time.Millisecond), v)
			return
		}
		exited := ctr != nil && !running(ctr)
		if ctr != nil {
			err = fmt.Errorf("%w%s", err, logTail(ctr))
			untrack(ctr)
		}
		if !exited || attempt == 3 || ctx.Err() != nil {
			s.err = fmt.Errorf("start %s: %w", img, err)
			return
		}
		t.Logf("%s: the container exited during its start (attempt %d): %v; trying other ports", s.name, attempt, err)
	}
}

// hostProvider is a Docker provider whose default network is the host's:
// containers join no other network, and testcontainers creates no bridge
// network for them (with no "bridge" network, testcontainers-go otherwise
// creates "reaper_default", a bridge with a private-range address, and
// attaches every container to it).
func hostProvider() (*testcontainers.DockerProvider, error) {
	return testcontainers.NewDockerProvider(testcontainers.WithDefaultBridgeNetwork("host"))
}

// hostRequest returns a request for a container of image on the host's
// network, with an init process (so that the stop signal reaches the
// server), stopped with stopSignal.
func hostRequest(image, stopSignal string, env map[string]string, ws wait.Strategy) testcontainers.ContainerRequest {
	return testcontainers.ContainerRequest{
		Image:      image,
		Env:        env,
		WaitingFor: ws,
		Labels:     map[string]string{"org.redeliver.provider": image},
		ConfigModifier: func(c *container.Config) {
			c.StopSignal = stopSignal
		},
		HostConfigModifier: func(hc *container.HostConfig) {
			hc.NetworkMode = "host"
			yes := true
			hc.Init = &yes
		},
	}
}

func runHost(ctx context.Context, req testcontainers.ContainerRequest) (testcontainers.Container, error) {
	p, err := hostProvider()
	if err != nil {
		return nil, err
	}
	defer p.Close()
	return p.RunContainer(ctx, req)
}

func runKafka(ctx context.Context, image string) (testcontainers.Container, conformance.Broker, error) {
	ports, err := freePorts(kafkaPortLow, kafkaPortHigh, 2)
	if err != nil {
		return nil, conformance.Broker{}, err
	}
	addr := net.JoinHostPort("127.0.0.1", strconv.Itoa(ports[0]))
	// SIGKILL: the broker's data is thrown away with the container.
	req := hostRequest(image, "SIGKILL", map[string]string{
		"REDELIVER_KAFKA_PORT":            strconv.Itoa(ports[0]),
		"REDELIVER_KAFKA_CONTROLLER_PORT": strconv.Itoa(ports[1]),
	}, untilAnswers{what: "Kafka at " + addr, check: func(ctx context.Context, _ wait.StrategyTarget) error { return kafkaAnswers(ctx, addr) }})
	c, err := runHost(ctx, req)
	if err != nil {
		return c, conformance.Broker{}, err
	}
	return c, conformance.Broker{Addrs: []string{addr}, SessionTimeout: tcSessionTimeout, KIP848: true}, nil
}

// kafkaAnswers asks the broker for its metadata and for a group's
// coordinator (which creates __consumer_offsets, as integration/kafka.sh's
// readiness check does, so that the first test's group does not wait).
func kafkaAnswers(ctx context.Context, addr string) error {
	cl, err := kgo.NewClient(kgo.SeedBrokers(addr), kgo.RequestRetries(0))
	if err != nil {
		return err
	}
	defer cl.Close()
	adm := kadm.NewClient(cl)
	m, err := adm.BrokerMetadata(ctx)
	if err != nil {
		return err
	}
	if len(m.Brokers) == 0 || m.Controller < 0 {
		return fmt.Errorf("metadata without brokers or controller")
	}
	co := adm.FindGroupCoordinators(ctx, "redeliver-provider-ready")
	if err := co.Error(); err != nil {
		return err
	}
	return nil
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

// untilAnswers is a wait strategy that polls check until it succeeds,
// failing at once if the container stops.
type untilAnswers struct {
	what  string
	check func(ctx context.Context, target wait.StrategyTarget) error
}

func (u untilAnswers) String() string { return u.what + " answers" }

func (u untilAnswers) WaitUntilReady(ctx context.Context, target wait.StrategyTarget) error {
	ctx, cancel := context.WithTimeout(ctx, tcStartTimeout)
	defer cancel()
	var last error
	for {
		st, err := target.State(ctx)
		if err != nil {
			return fmt.Errorf("%s: container state: %w", u.what, err)
		}
		if !st.Running {
			return fmt.Errorf("%s: the container stopped (%s, exit code %d)", u.what, st.Status, st.ExitCode)
		}
		cctx, ccancel := context.WithTimeout(ctx, 3*time.Second)
		last = u.check(cctx, target)
		ccancel()
		if last == nil {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("%s does not answer: %w (last: %v)", u.what, ctx.Err(), last)
		case <-time.After(250 * time.Millisecond):
		}
	}
}

// freePorts returns n consecutive ports in [low, high) that are free on
// 127.0.0.1, starting the search at a random place so that test binaries
// running at once do not all try the same ones.
func freePorts(low, high, n int) ([]int, error) {
	span := high - low - n + 1
	start := rand.IntN(span)
	for i := range span {
		first := low + (start+i)%span
		ok := true
		for p := first; p < first+n && ok; p++ {
			l, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(p)))
			if err != nil {
				ok = false
				continue
			}
			l.Close()
		}
		if ok {
			ports := make([]int, n)
			for j := range ports {
				ports[j] = first + j
			}
			return ports, nil
		}
	}
	return nil, fmt.Errorf("no %d free consecutive ports on 127.0.0.1 in %d-%d", n, low, high-1)
}

func running(c testcontainers.Container) bool {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	st, err := c.State(ctx)
	return err == nil && st.Running
}

// logTail returns the last lines of the container's log, for an error.
func logTail(c testcontainers.Container) string {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	r, err := c.Logs(ctx)
	if err != nil {
		return ""
	}
	defer r.Close()
	b, _ := io.ReadAll(r)
	lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	if len(lines) > 15 {
		lines = lines[len(lines)-15:]
	}
	return "\ncontainer log (last lines):\n" + strings.Join(lines, "\n")
}

// ---------------------------------------------------------------- engine

var (
	engineOnce sync.Once
	engineErr  string
)

// engineUnavailable says why no container can run here ("" if they can):
// EnvSkip, no Docker engine answering, or a reaper that would have to be
// pulled. It asks the engine once per test binary.
func engineUnavailable() string {
	engineOnce.Do(func() { engineErr = checkEngine() })
	return engineErr
}

func checkEngine() (reason string) {
	if s := os.Getenv(EnvSkip); s != "" {
		return s
	}
	defer func() {
		if r := recover(); r != nil {
			reason = fmt.Sprintf("testcontainers panicked: %v", r)
		}
	}()
	p, err := hostProvider()
	if err != nil {
		return fmt.Sprintf("no Docker engine answers (testcontainers: %v); integration/docker.sh starts one (scripts/test.sh does), or set DOCKER_HOST", err)
	}
	defer p.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := p.Health(ctx); err != nil {
		return fmt.Sprintf("no Docker engine answers (testcontainers: %v); integration/docker.sh starts one (scripts/test.sh does), or set DOCKER_HOST", err)
	}
	if !testcontainers.ReadConfig().Config.RyukDisabled {
		if err := localImage(ctx, testcontainers.ReaperDefaultImage); err != nil {
			return fmt.Sprintf("testcontainers' reaper (Ryuk) is on but its image %s is not in the engine and is never pulled: "+
				"set TESTCONTAINERS_RYUK_DISABLED=true (the providers remove their containers themselves)", testcontainers.ReaperDefaultImage)
		}
	}
	return ""
}

// localImage reports whether the engine has the image, without pulling it.
func localImage(ctx context.Context, image string) error {
	p, err := hostProvider()
	if err != nil {
		return err
	}
	defer p.Close()
	_, err = p.Client().ImageInspect(ctx, image)
	return err
}

// ---------------------------------------------------------------- cleanup

var (
	liveMu sync.Mutex
	live   []testcontainers.Container
)

func track(c testcontainers.Container) {
	liveMu.Lock()
	defer liveMu.Unlock()
	live = append(live, c)
}

func untrack(c testcontainers.Container) {
	liveMu.Lock()
	defer liveMu.Unlock()
	for i, l := range live {
		if l == c {
			live = append(live[:i], live[i+1:]...)
			break
		}
	}
	_ = terminate(c)
}

func terminate(c testcontainers.Container) error {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	return c.Terminate(ctx, testcontainers.StopTimeout(5*time.Second))
}

// Terminate stops and removes every container the providers of this test
// binary started. Call it from TestMain after m.Run: the containers are
// shared by the binary's tests, and testcontainers' reaper, which would
// remove them otherwise, is off (its image cannot be pulled here).
// integration/docker.sh stop removes whatever a killed binary left.
func Terminate() error {
	liveMu.Lock()
	defer liveMu.Unlock()
	var errs []error
	for _, c := range live {
		if err := terminate(c); err != nil {
			errs = append(errs, fmt.Errorf("terminate %s: %w", c.GetContainerID(), err))
		}
	}
	live = nil
	return errors.Join(errs...)
}

// dockerOnce, dockerErr and checkDocker are the engine check as an error,
// for providers that skip on it: checkDocker sets dockerErr when
// [engineUnavailable] gives a reason.
var (
	dockerOnce sync.Once
	dockerErr  error
)

func checkDocker() {
	if reason := engineUnavailable(); reason != "" {
		dockerErr = errors.New(reason)
	}
}
