package tests

import (
	"fmt"
	"testing"
	"time"

	"github.com/IBM/sarama"

	"github.com/redeliver-go/redeliver/adapters/internal/kafkatest"
	rdsarama "github.com/redeliver-go/redeliver/adapters/sarama"
	"github.com/redeliver-go/redeliver/stream"
)

// saramaConfig is the sarama configuration of these tests: a Kafka version
// kfake speaks, reading from a partition's start when the group has no
// commit, and fast heartbeats and a short session, so that rebalances take
// little time.
func saramaConfig() *sarama.Config {
	c := sarama.NewConfig()
	c.Version = sarama.V3_9_0_0
	c.Consumer.Offsets.Initial = sarama.OffsetOldest
	c.Consumer.Group.Heartbeat.Interval = 100 * time.Millisecond
	c.Consumer.Group.Session.Timeout = time.Second
	c.Consumer.Group.Rebalance.Timeout = 2 * time.Second
	c.Consumer.Group.Rebalance.Retry.Backoff = 100 * time.Millisecond
	c.Metadata.Retry.Backoff = 50 * time.Millisecond
	c.Metadata.AllowAutoTopicCreation = false
	return c
}

// adapter describes the sarama adapter to the tests every Kafka adapter
// runs. Options of a Config are rdsarama.Option values, and functions of
// type func(*sarama.Config) that change sarama's configuration.
var adapter = kafkatest.Adapter{
	Name:       "sarama",
	Throughput: []any{rdsarama.WithCommitWindow(500*time.Millisecond, 50000)},
	Cooperative: []any{func(c *sarama.Config) {
		c.Consumer.Group.Rebalance.GroupStrategies = []sarama.BalanceStrategy{sarama.NewBalanceStrategyCooperativeSticky()}
	}},

	New: func(cfg kafkatest.Config) (kafkatest.Consumer, error) {
		sc := saramaConfig()
		if cfg.Defaults {
			sc = sarama.NewConfig()
			sc.Version = sarama.V3_9_0_0
			sc.Consumer.Offsets.Initial = sarama.OffsetOldest
		}
		sc.Consumer.MaxWaitTime = cfg.FetchWait()
		if cfg.ReadCommitted {
			sc.Consumer.IsolationLevel = sarama.ReadCommitted
		}
		var opts []rdsarama.Option
		if cfg.MaxBatch > 0 {
			opts = append(opts, rdsarama.WithMaxBatch(cfg.MaxBatch))
		}
		if cfg.MaxWait > 0 {
			opts = append(opts, rdsarama.WithMaxWait(cfg.MaxWait))
		}
		if cfg.Logger != nil {
			opts = append(opts, rdsarama.WithLogger(cfg.Logger))
		}
		if cfg.OnAssigned != nil {
			opts = append(opts, rdsarama.WithOnAssigned(cfg.OnAssigned))
		}
		if cfg.Drain != 0 {
			opts = append(opts, rdsarama.WithDrain(cfg.Drain))
		}
		if cfg.FailAfter != 0 {
			opts = append(opts, rdsarama.WithFailAfter(cfg.FailAfter))
		}
		for _, o := range cfg.Options {
			switch o := o.(type) {
			case func(*sarama.Config):
				o(sc)
			case rdsarama.Option:
				opts = append(opts, o)
			default:
				return nil, fmt.Errorf("sarama tests: option %T", o)
			}
		}
		c, err := rdsarama.New(cfg.Processor, append([]rdsarama.Option{rdsarama.WithGroup(cfg.Addrs, cfg.Group, cfg.Topic), rdsarama.WithConfig(sc)}, opts...)...)
		if err != nil {
			return nil, err
		}
		return c, nil
	},
	BoundPublisher: func() (stream.Publisher, any) {
		pub := new(rdsarama.Publisher)
		return pub, rdsarama.WithPublisher(pub)
	},
	NewPublisher: func(t testing.TB, addrs []string) stream.Publisher {
		sc := saramaConfig()
		sc.Producer.RequiredAcks = sarama.WaitForAll
		sc.Producer.Return.Successes = true
		sc.Producer.Retry.Max = 0
		sc.Producer.Partitioner = sarama.NewRoundRobinPartitioner
		sc.Metadata.Retry.Max = 0
		client, err := sarama.NewClient(addrs, sc)
		if err != nil {
			t.Fatal(err)
		}
		pub, err := rdsarama.NewPublisher(client)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() {
			pub.Close()
			client.Close()
		})
		return pub
	},
}

// TestAdapter runs the tests every Kafka adapter passes.
func TestAdapter(t *testing.T) { kafkatest.Run(t, adapter) }

// TestCoalesce runs the shared checks of coalesced success commits.
func TestCoalesce(t *testing.T) {
	kafkatest.RunCoalesce(t, adapter, func(d time.Duration, n int) any { return rdsarama.WithCommitWindow(d, n) })
}
