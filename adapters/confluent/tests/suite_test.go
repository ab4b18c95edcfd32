package tests

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/confluentinc/confluent-kafka-go/v2/kafka"

	"github.com/redeliver-go/redeliver/adapters/confluent"
	"github.com/redeliver-go/redeliver/adapters/internal/kafkatest"
	"github.com/redeliver-go/redeliver/stream"
)

// consumerConfig is librdkafka's configuration of these tests: reading
// from a partition's start when the group has no commit, fast heartbeats
// and a short session, so that rebalances take little time, and only
// librdkafka's errors on stderr.
func consumerConfig(addrs []string, group string) kafka.ConfigMap {
	return kafka.ConfigMap{
		"bootstrap.servers":                  strings.Join(addrs, ","),
		"group.id":                           group,
		"auto.offset.reset":                  "earliest",
		"session.timeout.ms":                 1000,
		"heartbeat.interval.ms":              100,
		"topic.metadata.refresh.interval.ms": 500,
		"log_level":                          3,
	}
}

// adapter describes the confluent adapter to the tests every Kafka adapter
// runs. Options of a Config are confluent.Option values, and functions of
// type func(kafka.ConfigMap) that change librdkafka's configuration.
var adapter = kafkatest.Adapter{
	Name:        "confluent",
	Throughput:  []any{confluent.WithCommitWindow(500*time.Millisecond, 50000)},
	Cooperative: []any{func(c kafka.ConfigMap) { c["partition.assignment.strategy"] = "cooperative-sticky" }},

	New: func(cfg kafkatest.Config) (kafkatest.Consumer, error) {
		conf := consumerConfig(cfg.Addrs, cfg.Group)
		if cfg.Defaults {
			conf = kafka.ConfigMap{"bootstrap.servers": strings.Join(cfg.Addrs, ","), "group.id": cfg.Group, "auto.offset.reset": "earliest", "log_level": 3}
		}
		conf["fetch.wait.max.ms"] = int(cfg.FetchWait().Milliseconds())
		if cfg.ReadCommitted {
			conf["isolation.level"] = "read_committed"
		} else {
			conf["isolation.level"] = "read_uncommitted"
		}
		var opts []confluent.Option
		if cfg.MaxBatch > 0 {
			opts = append(opts, confluent.WithMaxBatch(cfg.MaxBatch))
		}
		if cfg.MaxWait > 0 {
			opts = append(opts, confluent.WithMaxWait(cfg.MaxWait))
		}
		if cfg.Logger != nil {
			opts = append(opts, confluent.WithLogger(cfg.Logger))
		}
		if cfg.OnAssigned != nil {
			opts = append(opts, confluent.WithOnAssigned(cfg.OnAssigned))
		}
		if cfg.Drain != 0 {
			opts = append(opts, confluent.WithDrain(cfg.Drain))
		}
		if cfg.FailAfter != 0 {
			opts = append(opts, confluent.WithFailAfter(cfg.FailAfter))
		}
		for _, o := range cfg.Options {
			switch o := o.(type) {
			case func(kafka.ConfigMap):
				o(conf)
			case confluent.Option:
				opts = append(opts, o)
			default:
				return nil, fmt.Errorf("confluent tests: option %T", o)
			}
		}
		c, err := confluent.New(cfg.Processor, append([]confluent.Option{confluent.WithGroup(conf, cfg.Topic)}, opts...)...)
		if err != nil {
			return nil, err
		}
		return c, nil
	},
	BoundPublisher: func() (stream.Publisher, any) {
		pub := new(confluent.Publisher)
		return pub, confluent.WithPublisher(pub)
	},
	NewPublisher: func(t testing.TB, addrs []string) stream.Publisher {
		p, err := kafka.NewProducer(&kafka.ConfigMap{
			"bootstrap.servers":                 strings.Join(addrs, ","),
			"acks":                              "all",
			"linger.ms":                         1,
			"sticky.partitioning.linger.ms":     0,
			"message.send.max.retries":          0,
			"message.timeout.ms":                3000,
			"topic.metadata.propagation.max.ms": 500,
			"log_level":                         3,
		})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(p.Close)
		pub, err := confluent.NewPublisher(p)
		if err != nil {
			t.Fatal(err)
		}
		return pub
	},
}

// TestAdapter runs the tests every Kafka adapter passes.
func TestAdapter(t *testing.T) { kafkatest.Run(t, adapter) }

// TestCoalesce runs the shared checks of coalesced success commits.
func TestCoalesce(t *testing.T) {
	kafkatest.RunCoalesce(t, adapter, func(d time.Duration, n int) any { return confluent.WithCommitWindow(d, n) })
}
