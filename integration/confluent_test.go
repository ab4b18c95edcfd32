package integration_test

import (
	"strings"
	"testing"

	"github.com/confluentinc/confluent-kafka-go/v2/kafka"

	"github.com/redeliver-go/redeliver/adapters/confluent"
	"github.com/redeliver-go/redeliver/integration/conformance"
	"github.com/redeliver-go/redeliver/integration/provider"
)

// confluentAdapter builds confluent-kafka-go (librdkafka) consumers for the
// conformance suite: librdkafka's default (eager) range and round-robin
// assignors, reading a partition without a commit from its start, with
// librdkafka's defaults for everything the suite does not set. The
// network-fault scenarios do not run it: librdkafka dials its brokers
// itself, with no dial function to give.
type confluentAdapter struct{}

func (confluentAdapter) Name() string { return "confluent" }

// NeedsKIP848 is false: the adapter uses the classic group protocol.
func (confluentAdapter) NeedsKIP848() bool { return false }

func (confluentAdapter) NewConsumer(t *testing.T, cfg conformance.Config) (conformance.Consumer, error) {
	conf := kafka.ConfigMap{
		"bootstrap.servers": strings.Join(cfg.Brokers, ","),
		"group.id":          cfg.Group,
		"auto.offset.reset": "earliest",
		"log_level":         3,
	}
	if cfg.SessionTimeout > 0 {
		conf["session.timeout.ms"] = int(cfg.SessionTimeout.Milliseconds())
	}
	if cfg.HeartbeatInterval > 0 {
		conf["heartbeat.interval.ms"] = int(cfg.HeartbeatInterval.Milliseconds())
	}
	if cfg.Dial != nil {
		t.Skip("librdkafka dials its brokers itself: no dial function can be given")
	}
	return confluent.New(cfg.Processor, confluent.WithGroup(conf, cfg.Topic), confluent.WithMaxBatch(cfg.MaxBatch),
		confluent.WithCommitWindow(window(cfg)))
}

// TestConfluent runs the conformance suite on kfake and, when one is given,
// the external broker; not in containers, to keep the suite's cost down.
func TestConfluent(t *testing.T) {
	for _, p := range []conformance.Provider{provider.Kfake(), provider.External()} {
		t.Run(p.Name()+"/confluent", func(t *testing.T) {
			conformance.Run(t, p, confluentAdapter{})
		})
	}
}
