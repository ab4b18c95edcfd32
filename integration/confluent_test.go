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
// librdkafka's defaults for everything the suite does not set. librdkafka
// dials its brokers itself, with no dial function to give: for the
// network-fault scenarios it bootstraps from a [conformance.Front] whose
// listeners carry its connections through the scenario's dial function and
// which rewrites the broker addresses in the answers to its own.
type confluentAdapter struct{}

func (confluentAdapter) Name() string { return "confluent" }

// NeedsKIP848 is false: the adapter uses the classic group protocol.
func (confluentAdapter) NeedsKIP848() bool { return false }

func (confluentAdapter) NewConsumer(t *testing.T, cfg conformance.Config) (conformance.Consumer, error) {
	brokers := cfg.Brokers
	if cfg.Dial != nil {
		var err error
		if brokers, err = conformance.NewFront(t, cfg.Dial).Bootstrap(brokers); err != nil {
			return nil, err
		}
	}
	conf := kafka.ConfigMap{
		"bootstrap.servers": strings.Join(brokers, ","),
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
