package integration_test

import (
	"context"
	"net"
	"testing"

	"github.com/IBM/sarama"

	rdsarama "github.com/redeliver-go/redeliver/adapters/sarama"
	"github.com/redeliver-go/redeliver/integration/conformance"
	"github.com/redeliver-go/redeliver/integration/provider"
)

// saramaAdapter builds IBM/sarama consumers for the conformance suite:
// sarama's consumer group with its default (eager) range strategy, Kafka
// version 3.9.0, reading a partition without a commit from its start,
// with sarama's defaults for everything the suite does not set (and a fetch
// wait of at most a quarter of a short session timeout).
type saramaAdapter struct{}

func (saramaAdapter) Name() string { return "sarama" }

// NeedsKIP848 is false: sarama speaks the classic group protocol only.
func (saramaAdapter) NeedsKIP848() bool { return false }

func (saramaAdapter) NewConsumer(t *testing.T, cfg conformance.Config) (conformance.Consumer, error) {
	sc := sarama.NewConfig()
	sc.Version = sarama.V3_9_0_0
	sc.Consumer.Offsets.Initial = sarama.OffsetOldest
	if cfg.SessionTimeout > 0 {
		sc.Consumer.Group.Session.Timeout = cfg.SessionTimeout
		// Its heartbeats share the fetches' connection: the adapter
		// wants the session at least 4 fetch waits long.
		sc.Consumer.MaxWaitTime = min(sc.Consumer.MaxWaitTime, cfg.SessionTimeout/4)
	}
	if cfg.HeartbeatInterval > 0 {
		sc.Consumer.Group.Heartbeat.Interval = cfg.HeartbeatInterval
	}
	if cfg.Dial != nil {
		sc.Net.Proxy.Enable = true
		sc.Net.Proxy.Dialer = dialFunc(cfg.Dial)
	}
	return rdsarama.New(cfg.Processor, rdsarama.WithGroup(cfg.Brokers, cfg.Group, cfg.Topic), rdsarama.WithConfig(sc), rdsarama.WithMaxBatch(cfg.MaxBatch),
		rdsarama.WithCommitWindow(window(cfg)))
}

// dialFunc makes a conformance dial function sarama's proxy dialer.
type dialFunc func(ctx context.Context, network, address string) (net.Conn, error)

func (f dialFunc) Dial(network, address string) (net.Conn, error) {
	return f(context.Background(), network, address)
}

// TestSarama runs the conformance suite on kfake and, when one is given,
// the external broker; not in containers, to keep the suite's cost down.
func TestSarama(t *testing.T) {
	for _, p := range []conformance.Provider{provider.Kfake(), provider.External()} {
		t.Run(p.Name()+"/sarama", func(t *testing.T) {
			conformance.Run(t, p, saramaAdapter{})
		})
	}
}
