package host

import (
	"context"
	"log/slog"

	"github.com/segmentio/kafka-go"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/redeliver-go/redeliver/adapters/franz"
	"github.com/redeliver-go/redeliver/adapters/franz/share"
	"github.com/redeliver-go/redeliver/adapters/kafkago"
	"github.com/redeliver-go/redeliver/stream"
)

// franzConsumer builds f's consumer on the franz adapter. The end of each
// session's assignment (franz.WithOnAssigned), even with nothing assigned,
// is the readiness signal.
func (h *Host) franzConsumer(f *function, proc *stream.Processor, log *slog.Logger) (func(context.Context) error, error) {
	kopts := []kgo.Opt{
		kgo.SeedBrokers(h.c.brokers...),
		kgo.ConsumerGroup(f.trigger.Group),
		kgo.ConsumeTopics(f.trigger.Topic),
	}
	kopts = append(kopts, h.c.kgoOpts...)
	opts := []franz.Option{franz.WithKgoOptions(kopts...), franz.WithLogger(log),
		franz.WithOnAssigned(func(map[string][]int32) { f.assigned.Store(true) })}
	if f.trigger.MaxBatch > 0 {
		opts = append(opts, franz.WithMaxBatch(f.trigger.MaxBatch))
	}
	c, err := franz.New(proc, opts...)
	if err != nil {
		return nil, err
	}
	f.close = func() { _ = c.Close() }
	return c.Run, nil
}

// shareConsumer builds f's consumer on the franz adapter's share-group
// consumer. It is ready once it has reached the broker and its members
// start polling.
func (h *Host) shareConsumer(f *function, proc *stream.Processor, log *slog.Logger) (func(context.Context) error, error) {
	kopts := []kgo.Opt{
		kgo.SeedBrokers(h.c.brokers...),
		kgo.ShareGroup(f.trigger.Group),
		kgo.ConsumeTopics(f.trigger.Topic),
	}
	kopts = append(kopts, h.c.kgoOpts...)
	opts := []share.Option{share.WithKgoOptions(kopts...), share.WithLogger(log),
		share.WithOnReady(func() { f.assigned.Store(true) })}
	if f.trigger.MaxBatch > 0 {
		opts = append(opts, share.WithMaxBatch(f.trigger.MaxBatch))
	}
	c, err := share.New(proc, opts...)
	if err != nil {
		return nil, err
	}
	f.close = func() { _ = c.Close() }
	return c.Run, nil
}

// kafkaGoConsumer builds f's consumer on the kafkago adapter.
func (h *Host) kafkaGoConsumer(f *function, proc *stream.Processor, log *slog.Logger) (func(context.Context) error, error) {
	gc := kafka.ConsumerGroupConfig{ID: f.trigger.Group, Brokers: h.c.brokers, Topics: []string{f.trigger.Topic}}
	for _, fn := range h.c.kafkaGo {
		fn(&gc)
	}
	opts := []kafkago.Option{
		kafkago.WithGroupConfig(gc),
		kafkago.WithLogger(log),
		kafkago.WithOnAssigned(func(map[string][]int32) { f.assigned.Store(true) }),
	}
	if f.trigger.MaxBatch > 0 {
		opts = append(opts, kafkago.WithMaxBatch(f.trigger.MaxBatch))
	}
	c, err := kafkago.New(proc, opts...)
	if err != nil {
		return nil, err
	}
	f.close = func() { _ = c.Close() }
	return c.Run, nil
}
