// Package kafkagohost runs the Kafka triggers of a functions host (package
// host) on segmentio/kafka-go, through package adapters/kafkago. Give its
// adapter to the host:
//
//	kafkago, err := kafkagohost.New(kafkagohost.WithGroupConfig(func(gc *kafka.ConsumerGroupConfig) {
//		gc.Dialer = &kafka.Dialer{TLS: tlsConfig} // the consumer's commits use it too
//	}))
//	h, err := host.New(cfg, host.WithAdapter(kafkago), host.WithBrokers("127.0.0.1:9092"))
//
// Triggers name it "kafkago" ("adapter": "kafkago" in host.json's
// triggers; a trigger that names no adapter runs on "franz"). kafka-go has
// no share-group consumer: a share-group trigger on it is an error when the
// host starts. It is a module of its own, so that a host whose triggers
// all run on kafka-go builds no franz-go.
package kafkagohost

import (
	"fmt"
	"slices"

	"github.com/segmentio/kafka-go"

	"github.com/redeliver-go/redeliver/adapters/internal/kafkaadapter"
	"github.com/redeliver-go/redeliver/adapters/kafkago"
	"github.com/redeliver-go/redeliver/host"
	"github.com/redeliver-go/redeliver/stream"
)

// Option configures an [Adapter].
type Option interface{ apply(*Adapter) }

type optionFunc func(*Adapter)

func (f optionFunc) apply(a *Adapter) { f(a) }

// WithGroupConfig adds a function that edits the consumer group
// configuration of every function's consumer (its dialer for TLS and SASL,
// timeouts, start offset, ...) after the adapter has set its ID, brokers
// and topic from the trigger. The consumer's offset commits go through a
// client that dials as the group's dialer does. The default edits nothing.
func WithGroupConfig(fn func(*kafka.ConsumerGroupConfig)) Option {
	return optionFunc(func(a *Adapter) { a.group = append(a.group, fn) })
}

// WithWriter adds a function that edits the writer of the host's
// dead-letter producer, when the adapter builds it (its transport for TLS
// and SASL, balancer, ...), after the adapter has set its brokers,
// RequiredAcks (kafka.RequireAll) and BatchTimeout
// ([kafkago.PublisherBatchTimeout], so that a dead letter does not wait
// for kafka-go's default of 1s to fill a batch). The
// writer must stay synchronous, with acknowledgements and no topic of its
// own ([kafkago.NewPublisher] says why). The default edits nothing.
func WithWriter(fn func(*kafka.Writer)) Option {
	return optionFunc(func(a *Adapter) { a.writer = append(a.writer, fn) })
}

// Adapter is the host's adapter for kafka-go: a [host.Adapter] named
// "kafkago". Make it with [New]. It is safe for concurrent use.
type Adapter struct {
	group  []func(*kafka.ConsumerGroupConfig)
	writer []func(*kafka.Writer)
}

var _ host.Adapter = (*Adapter)(nil)

// New returns the adapter, for [host.WithAdapter]. It returns an error for a
// nil option or a nil function given to an option.
func New(opts ...Option) (*Adapter, error) {
	if err := kafkaadapter.CheckNilOptions("kafkagohost", opts); err != nil {
		return nil, err
	}
	a := &Adapter{}
	for _, o := range opts {
		o.apply(a)
	}
	switch {
	case slices.ContainsFunc(a.group, func(fn func(*kafka.ConsumerGroupConfig)) bool { return fn == nil }):
		return nil, kafkaadapter.NilFunction("kafkagohost", "WithGroupConfig")
	case slices.ContainsFunc(a.writer, func(fn func(*kafka.Writer)) bool { return fn == nil }):
		return nil, kafkaadapter.NilFunction("kafkagohost", "WithWriter")
	}
	return a, nil
}

// errNotNew is what the methods of an Adapter that New did not make return.
var errNotNew = kafkaadapter.NotNew("kafkagohost")

// Name returns "kafkago".
func (a *Adapter) Name() string { return "kafkago" }

// Consumer builds a [kafkago.Consumer] in the trigger's consumer group. A
// share-group trigger is refused: kafka-go has no share-group consumer.
func (a *Adapter) Consumer(proc *stream.Processor, b host.Binding) (host.Consumer, error) {
	if a == nil {
		return nil, errNotNew
	}
	t := b.Trigger
	if t.Share {
		return nil, kafkaadapter.NoShareGroups("kafkagohost", "kafka-go")
	}
	gc := kafka.ConsumerGroupConfig{ID: t.Group, Brokers: b.Brokers, Topics: []string{t.Topic}}
	for _, fn := range a.group {
		fn(&gc)
	}
	opts := append([]kafkago.Option{kafkago.WithGroupConfig(gc)},
		kafkaadapter.TriggerOptions(kafkaadapter.Trigger{Logger: b.Logger, OnReady: b.OnReady, Drain: b.Drain, MaxBatch: t.MaxBatch},
			kafkago.WithLogger, kafkago.WithOnAssigned, kafkago.WithDrain, kafkago.WithMaxBatch)...)
	c, err := kafkago.New(proc, opts...)
	if err != nil {
		return nil, err
	}
	return c, nil
}

// Publisher builds a [kafkago.Publisher] on a [kafka.Writer] of its own,
// on brokers and edited by [WithWriter]; close closes the writer.
func (a *Adapter) Publisher(brokers []string) (stream.Publisher, func() error, error) {
	if a == nil {
		return nil, nil, errNotNew
	}
	w := &kafka.Writer{Addr: kafka.TCP(brokers...), RequiredAcks: kafka.RequireAll, BatchTimeout: kafkago.PublisherBatchTimeout}
	for _, fn := range a.writer {
		fn(w)
	}
	p, err := kafkago.NewPublisher(w)
	if err != nil {
		_ = w.Close()
		return nil, nil, fmt.Errorf("kafkagohost: WithWriter: %w", err)
	}
	return p, w.Close, nil
}
