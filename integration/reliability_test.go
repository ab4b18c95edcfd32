package integration_test

import (
	"os"
	"testing"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/redeliver-go/redeliver/adapters/franz"
	"github.com/redeliver-go/redeliver/integration/conformance"
	"github.com/redeliver-go/redeliver/integration/provider"
)

// TestMain lets the reliability suite run this binary again as a consumer
// process, to kill it with SIGKILL.
func TestMain(m *testing.M) {
	conformance.ChildMain(map[string]conformance.Adapter{
		"franz":       franzAdapter{},
		"franz-eager": franzEager{},
		"franz-848":   franzAdapter{kip848: true},
	})
	os.Exit(m.Run())
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
	return franz.New(cfg.Processor, franz.WithKgoOptions(opts...), franz.WithMaxBatch(cfg.MaxBatch))
}

func TestReliabilityFranz(t *testing.T) {
	if testing.Short() {
		t.Skip("the reliability suite is long")
	}
	for _, p := range []conformance.Provider{provider.Kfake(), provider.External()} {
		for name, a := range map[string]conformance.Adapter{
			"franz":       franzAdapter{},
			"franz-eager": franzEager{},
			"franz-848":   franzAdapter{kip848: true},
		} {
			t.Run(p.Name()+"/"+a.Name(), func(t *testing.T) {
				conformance.RunReliability(t, p, a, name)
			})
		}
	}
}
