package integration_test

import (
	"fmt"
	"os"
	"testing"
	"time"

	"github.com/segmentio/kafka-go"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/redeliver-go/redeliver/adapters/franz"
	"github.com/redeliver-go/redeliver/adapters/kafkago"
	"github.com/redeliver-go/redeliver/integration/conformance"
	"github.com/redeliver-go/redeliver/integration/provider"
	"github.com/redeliver-go/redeliver/stream"
)

// TestMain lets the reliability suite run this binary again as a consumer
// process, to kill it with SIGKILL, and removes the containers the
// testcontainers providers started for this binary's tests.
func TestMain(m *testing.M) {
	conformance.ChildMain(reliabilityAdapters)
	code := m.Run()
	if err := provider.Terminate(); err != nil {
		fmt.Fprintln(os.Stderr, err)
		code = 1
	}
	os.Exit(code)
}

// reliabilityAdapters are the adapters and balancers of the reliability
// suite, by the names its child processes know them by.
var reliabilityAdapters = map[string]conformance.Adapter{
	"franz":                franzAdapter{},
	"franz-eager":          franzEager{},
	"franz-848":            franzAdapter{kip848: true},
	"kafkago":              kafkagoAdapter{},
	"kafkago-rr":           kafkagoRoundRobin{},
	"kafkago-rebalance-5s": kafkagoShortRebalance{},
	"sarama":               saramaAdapter{},
	"confluent":            confluentAdapter{},
}

// franzEager is the franz-go adapter with the eager range balancer, for
// membership changes under a balancer other than cooperative-sticky.
type franzEager struct{ franzAdapter }

func (franzEager) Name() string { return "franz (eager range)" }

func (a franzEager) NewConsumer(t *testing.T, cfg conformance.Config) (conformance.Consumer, error) {
	opts := []kgo.Opt{
		kgo.SeedBrokers(cfg.Brokers...), kgo.ConsumerGroup(cfg.Group), kgo.ConsumeTopics(cfg.Topic),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()), kgo.Balancers(kgo.RangeBalancer()),
	}
	if cfg.SessionTimeout > 0 {
		opts = append(opts, kgo.SessionTimeout(cfg.SessionTimeout), kgo.HeartbeatInterval(cfg.HeartbeatInterval))
	}
	return franz.New(cfg.Processor, franz.WithKgoOptions(opts...), franz.WithMaxBatch(cfg.MaxBatch), franz.WithCommitWindow(window(cfg)))
}

// kafkagoRoundRobin is the kafka-go adapter with the round-robin balancer
// only.
type kafkagoRoundRobin struct{ kafkagoAdapter }

func (kafkagoRoundRobin) Name() string { return "kafkago (round robin)" }

func (a kafkagoRoundRobin) NewConsumer(t *testing.T, cfg conformance.Config) (conformance.Consumer, error) {
	gc := kafka.ConsumerGroupConfig{
		ID: cfg.Group, Brokers: cfg.Brokers, Topics: []string{cfg.Topic}, StartOffset: kafka.FirstOffset,
		SessionTimeout: cfg.SessionTimeout, HeartbeatInterval: cfg.HeartbeatInterval,
		GroupBalancers: []kafka.GroupBalancer{kafka.RoundRobinGroupBalancer{}},
	}
	return kafkago.New(cfg.Processor, kafkago.WithGroupConfig(gc), kafkago.WithMaxBatch(cfg.MaxBatch), kafkago.WithCommitWindow(window(cfg)))
}

// kafkagoShortRebalance is the kafka-go adapter with a 5s rebalance
// timeout instead of kafka-go's 30s: after a broker restart the group
// rejoins within it.
type kafkagoShortRebalance struct{ kafkagoAdapter }

func (kafkagoShortRebalance) Name() string { return "kafkago (rebalance 5s)" }

func (a kafkagoShortRebalance) NewConsumer(t *testing.T, cfg conformance.Config) (conformance.Consumer, error) {
	gc := kafka.ConsumerGroupConfig{
		ID: cfg.Group, Brokers: cfg.Brokers, Topics: []string{cfg.Topic}, StartOffset: kafka.FirstOffset,
		SessionTimeout: cfg.SessionTimeout, HeartbeatInterval: cfg.HeartbeatInterval,
		RebalanceTimeout: 5 * time.Second,
	}
	return kafkago.New(cfg.Processor, kafkago.WithGroupConfig(gc), kafkago.WithMaxBatch(cfg.MaxBatch), kafkago.WithCommitWindow(window(cfg)))
}

// TestReliability runs the reliability suite for every adapter and
// balancer on kfake, and on the external broker for one variant per client
// and group protocol (franz-go cooperative and KIP-848, kafka-go, sarama,
// confluent): the other balancers change nothing the broker sees that
// kfake does not show.
// The testcontainers Kafka broker runs the same Kafka release as the
// external one in a container: the container adds its own path to the
// broker, not another broker, so the suite there repeats what the external
// broker shows. REDELIVER_RELIABILITY_FULL=1 (the longer set, by hand)
// runs every variant on every provider; the conformance suites run on
// every provider always.
func TestReliability(t *testing.T) {
	if testing.Short() {
		t.Skip("the reliability suite is long")
	}
	every := []string{"franz", "franz-eager", "franz-848", "kafkago", "kafkago-rr", "kafkago-rebalance-5s", "sarama", "confluent"}
	for _, p := range []conformance.Provider{provider.Kfake(), provider.External(), provider.TestcontainersKafka()} {
		names := every
		full := os.Getenv("REDELIVER_RELIABILITY_FULL") == "1"
		switch {
		case full:
		case p.Name() == provider.TestcontainersKafka().Name():
			t.Run(p.Name(), func(t *testing.T) {
				t.Skip("the reliability suite on the container broker repeats the external broker's: REDELIVER_RELIABILITY_FULL=1 runs it")
			})
			continue
		case p.Name() == provider.External().Name():
			names = []string{"franz", "franz-848", "kafkago", "sarama", "confluent"}
		}
		for _, name := range names {
			a := reliabilityAdapters[name]
			t.Run(p.Name()+"/"+a.Name(), func(t *testing.T) {
				conformance.RunReliability(t, p, a, name)
			})
		}
	}
}

// TestReliabilityKeyed runs a short set of the reliability suite in key
// ordering (conformance.Variant: records with keys, every record retried
// on its own, each history checked with History.CheckKeys: per-key order,
// the per-record retry bound, no loss) for the franz-go, kafka-go, sarama
// and confluent adapters, on kfake and on the external broker when one is
// given:
// members joining and leaving while records are retried (rebalances), and
// a member killed with SIGKILL in the middle of a record's retry.
// REDELIVER_ORDERING=key runs the whole of TestReliability in key
// ordering.
func TestReliabilityKeyed(t *testing.T) {
	v := conformance.Variant{Ordering: stream.ByKey, Only: []string{"MembersJoinAndLeavePerRecord", "SIGKILLDuringDelivery"}}
	for _, p := range []conformance.Provider{provider.Kfake(), provider.External()} {
		for _, name := range []string{"franz", "kafkago", "sarama", "confluent"} {
			a := reliabilityAdapters[name]
			t.Run(p.Name()+"/"+a.Name(), func(t *testing.T) {
				conformance.RunReliabilityVariant(t, p, a, name, v)
			})
		}
	}
	// Again on kfake with a commit window of 500ms: key ordering's
	// windows coalesced through the rebalances and the kill.
	v.CommitWindow = 500 * time.Millisecond
	p := provider.Kfake()
	for _, name := range []string{"franz", "kafkago", "sarama", "confluent"} {
		a := reliabilityAdapters[name]
		t.Run(p.Name()+"/window/"+a.Name(), func(t *testing.T) {
			conformance.RunReliabilityVariant(t, p, a, name, v)
		})
	}
}
