package integration_test

import (
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/redeliver-go/redeliver/adapters/franz"
	"github.com/redeliver-go/redeliver/integration/conformance"
	"github.com/redeliver-go/redeliver/integration/provider"
	"github.com/redeliver-go/redeliver/stream"
)

// franzAdapter builds franz-go consumers for the conformance suite, with
// franz-go's default cooperative-sticky balancer or with the KIP-848
// protocol.
type franzAdapter struct{ kip848 bool }

func (a franzAdapter) Name() string {
	if a.kip848 {
		return "franz (KIP-848)"
	}
	return "franz (cooperative-sticky)"
}

func (a franzAdapter) NeedsKIP848() bool { return a.kip848 }

func (a franzAdapter) NewConsumer(t *testing.T, cfg conformance.Config) (conformance.Consumer, error) {
	opts := []kgo.Opt{
		kgo.SeedBrokers(cfg.Brokers...),
		kgo.ConsumerGroup(cfg.Group),
		kgo.ConsumeTopics(cfg.Topic),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()),
		kgo.FetchMaxWait(100 * time.Millisecond), // short fetch waits when a partition is idle
	}
	if a.kip848 {
		opts = append(opts, kgo.Balancers(kgo.StickyBalancer()), kgo.ServerSideBalancer())
	}
	if cfg.Dial != nil {
		opts = append(opts, kgo.Dialer(cfg.Dial))
	}
	if cfg.SessionTimeout > 0 {
		opts = append(opts, kgo.SessionTimeout(cfg.SessionTimeout))
	}
	if cfg.HeartbeatInterval > 0 {
		opts = append(opts, kgo.HeartbeatInterval(cfg.HeartbeatInterval))
	}
	return franz.New(cfg.Processor, franz.WithKgoOptions(opts...), franz.WithMaxBatch(cfg.MaxBatch), franz.WithCommitWindow(window(cfg)))
}

// window is the commit window of cfg, as WithCommitWindow's arguments
// (the conformance env sets REDELIVER_COMMIT_WINDOW's in every scenario
// that sets none: the way to run the suites with every adapter's success
// commits coalesced).
func window(cfg conformance.Config) (time.Duration, int) {
	if cfg.CommitWindow <= 0 {
		return 0, 0
	}
	return cfg.CommitWindow, 50000
}

func TestFranz(t *testing.T) {
	for _, p := range []conformance.Provider{provider.Kfake(), provider.External(), provider.TestcontainersKafka(), provider.TestcontainersRedpanda()} {
		for _, a := range []franzAdapter{{}, {kip848: true}} {
			t.Run(p.Name()+"/"+a.Name(), func(t *testing.T) {
				conformance.Run(t, p, a)
			})
		}
	}
}

// TestKeyed runs the conformance suite in key ordering
// (conformance.Variant: records with keys, each case's history checked
// with History.CheckKeys; the cases about partition ordering skip) for the
// franz-go, kafka-go, sarama and confluent adapters, on kfake and on the
// external broker when one is given. REDELIVER_ORDERING=key runs TestFranz,
// TestKafkago, TestSarama and TestConfluent so.
//
// The kfake leaves run again with a commit window of 500ms
// (kfake/window/...): the windows that only finish records are then
// coalesced, and written in the background and when a partition is given
// up.
func TestKeyed(t *testing.T) {
	adapters := []conformance.Adapter{franzAdapter{}, kafkagoAdapter{}, saramaAdapter{}, confluentAdapter{}}
	for _, p := range []conformance.Provider{provider.Kfake(), provider.External()} {
		for _, a := range adapters {
			t.Run(p.Name()+"/"+a.Name(), func(t *testing.T) {
				conformance.RunVariant(t, p, a, conformance.Variant{Ordering: stream.ByKey})
			})
		}
	}
	p := provider.Kfake()
	for _, a := range adapters {
		t.Run(p.Name()+"/window/"+a.Name(), func(t *testing.T) {
			conformance.RunVariant(t, p, a, conformance.Variant{Ordering: stream.ByKey, CommitWindow: 500 * time.Millisecond})
		})
	}
}
