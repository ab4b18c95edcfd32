package integration_test

import (
	"testing"
	"time"

	"github.com/segmentio/kafka-go"

	"github.com/redeliver-go/redeliver/adapters/kafkago"
	"github.com/redeliver-go/redeliver/integration/conformance"
	"github.com/redeliver-go/redeliver/integration/provider"
)

// kafkagoAdapter builds segmentio/kafka-go consumers for the conformance
// suite: kafka-go's ConsumerGroup with its default (eager) Range and
// RoundRobin balancers and a reader per assigned partition, with kafka-go's
// defaults for everything the suite does not set.
type kafkagoAdapter struct{}

func (kafkagoAdapter) Name() string { return "kafkago" }

// NeedsKIP848 is false: kafka-go speaks the classic group protocol only.
func (kafkagoAdapter) NeedsKIP848() bool { return false }

func (kafkagoAdapter) NewConsumer(t *testing.T, cfg conformance.Config) (conformance.Consumer, error) {
	gc := kafka.ConsumerGroupConfig{
		ID:                cfg.Group,
		Brokers:           cfg.Brokers,
		Topics:            []string{cfg.Topic},
		StartOffset:       kafka.FirstOffset,
		SessionTimeout:    cfg.SessionTimeout,
		HeartbeatInterval: cfg.HeartbeatInterval,
	}
	if cfg.Dial != nil {
		gc.Dialer = &kafka.Dialer{Timeout: 10 * time.Second, DualStack: true, DialFunc: cfg.Dial}
	}
	return kafkago.New(cfg.Processor, kafkago.WithGroupConfig(gc), kafkago.WithMaxBatch(cfg.MaxBatch), kafkago.WithCommitWindow(window(cfg)))
}

func TestKafkago(t *testing.T) {
	for _, p := range []conformance.Provider{provider.Kfake(), provider.External(), provider.TestcontainersKafka(), provider.TestcontainersRedpanda()} {
		t.Run(p.Name()+"/kafkago", func(t *testing.T) {
			conformance.Run(t, p, kafkagoAdapter{})
		})
	}
}
