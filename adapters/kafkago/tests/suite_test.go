package tests

import (
	"fmt"
	"testing"
	"time"

	"github.com/segmentio/kafka-go"

	"github.com/redeliver-go/redeliver/adapters/internal/kafkatest"
	"github.com/redeliver-go/redeliver/adapters/kafkago"
	"github.com/redeliver-go/redeliver/stream"
)

// adapter describes the kafka-go adapter to the tests every Kafka adapter
// runs. Options of a Config are kafkago.Option values, and functions of
// types func(*kafka.ConsumerGroupConfig) and func(*kafka.ReadBatchConfig)
// that change the group and fetch configurations.
var adapter = kafkatest.Adapter{
	Name:       "kafkago",
	Throughput: []any{kafkago.WithCommitWindow(500*time.Millisecond, 50000)},

	New: func(cfg kafkatest.Config) (kafkatest.Consumer, error) {
		gc := groupConfig(cfg.Addrs, cfg.Group, cfg.Topic)
		if cfg.Defaults {
			gc = kafka.ConsumerGroupConfig{ID: cfg.Group, Brokers: cfg.Addrs, Topics: []string{cfg.Topic}}
		}
		fc := kafka.ReadBatchConfig{MaxWait: cfg.FetchWait()}
		if cfg.ReadCommitted {
			fc.IsolationLevel = kafka.ReadCommitted
		}
		var kopts []kafkago.Option
		if cfg.MaxBatch > 0 {
			kopts = append(kopts, kafkago.WithMaxBatch(cfg.MaxBatch))
		}
		if cfg.MaxWait > 0 {
			kopts = append(kopts, kafkago.WithMaxWait(cfg.MaxWait))
		}
		if cfg.Logger != nil {
			kopts = append(kopts, kafkago.WithLogger(cfg.Logger))
		}
		if cfg.OnAssigned != nil {
			kopts = append(kopts, kafkago.WithOnAssigned(cfg.OnAssigned))
		}
		if cfg.Drain != 0 {
			kopts = append(kopts, kafkago.WithDrain(cfg.Drain))
		}
		if cfg.FailAfter != 0 {
			kopts = append(kopts, kafkago.WithFailAfter(cfg.FailAfter))
		}
		for _, o := range cfg.Options {
			switch o := o.(type) {
			case func(*kafka.ConsumerGroupConfig):
				o(&gc)
			case func(*kafka.ReadBatchConfig):
				o(&fc)
			case kafkago.Option:
				kopts = append(kopts, o)
			default:
				return nil, fmt.Errorf("kafkago tests: option %T", o)
			}
		}
		c, err := kafkago.New(cfg.Processor, append([]kafkago.Option{kafkago.WithGroupConfig(gc), kafkago.WithFetchConfig(fc)}, kopts...)...)
		if err != nil {
			return nil, err
		}
		return c, nil
	},
	BoundPublisher: func() (stream.Publisher, any) {
		pub := new(kafkago.Publisher)
		return pub, kafkago.WithPublisher(pub)
	},
	NewPublisher: func(t testing.TB, addrs []string) stream.Publisher {
		w := &kafka.Writer{Addr: kafka.TCP(addrs...), RequiredAcks: kafka.RequireAll, Balancer: &kafka.RoundRobin{}, MaxAttempts: 1}
		t.Cleanup(func() { w.Close() })
		pub, err := kafkago.NewPublisher(w)
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
	kafkatest.RunCoalesce(t, adapter, func(d time.Duration, n int) any { return kafkago.WithCommitWindow(d, n) })
}
