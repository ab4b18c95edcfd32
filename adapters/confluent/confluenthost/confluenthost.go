// Package confluenthost runs the Kafka triggers of a functions host
// (package host) on confluent-kafka-go (librdkafka, through cgo), through
// package adapters/confluent. Give its adapter to the host:
//
//	ca, err := confluenthost.New(confluenthost.WithConfig(func(c kafka.ConfigMap) {
//		c["security.protocol"] = "SASL_SSL"
//	}))
//	h, err := host.New(cfg, host.WithAdapter(ca), host.WithBrokers("127.0.0.1:9092"))
//
// Triggers name it "confluent" ("adapter": "confluent" in host.json's
// triggers; a trigger that names no adapter runs on "franz"). The adapter
// has no share-group consumer: a share-group trigger on it is an error
// when the host starts. It is a module of its own, so that no other
// host's build needs cgo.
package confluenthost

import (
	"fmt"
	"slices"
	"strings"

	"github.com/confluentinc/confluent-kafka-go/v2/kafka"

	"github.com/redeliver-go/redeliver/adapters/confluent"
	"github.com/redeliver-go/redeliver/adapters/internal/kafkaadapter"
	"github.com/redeliver-go/redeliver/host"
	"github.com/redeliver-go/redeliver/stream"
)

// Option configures an [Adapter].
type Option interface{ apply(*Adapter) }

type optionFunc func(*Adapter)

func (f optionFunc) apply(a *Adapter) { f(a) }

// WithConfig adds a function that edits librdkafka's configuration of
// every function's consumer (security, session timeout,
// partition.assignment.strategy, ...), after the adapter has set
// bootstrap.servers, group.id and auto.offset.reset (earliest: a group
// without a commit starts at the partition's start, as the other
// adapters' do). The default edits nothing.
func WithConfig(fn func(kafka.ConfigMap)) Option {
	return optionFunc(func(a *Adapter) { a.consumer = append(a.consumer, fn) })
}

// WithProducerConfig adds a function that edits librdkafka's
// configuration of the host's dead-letter producer, after the adapter has
// set bootstrap.servers and acks (all). The default edits nothing.
func WithProducerConfig(fn func(kafka.ConfigMap)) Option {
	return optionFunc(func(a *Adapter) { a.producer = append(a.producer, fn) })
}

// Adapter is the host's adapter for confluent-kafka-go: a [host.Adapter]
// named "confluent". Make it with [New]. It is safe for concurrent use.
type Adapter struct {
	consumer []func(kafka.ConfigMap)
	producer []func(kafka.ConfigMap)
}

var _ host.Adapter = (*Adapter)(nil)

// New returns the adapter, for [host.WithAdapter]. It returns an error for a
// nil option or a nil function given to an option.
func New(opts ...Option) (*Adapter, error) {
	if err := kafkaadapter.CheckNilOptions("confluenthost", opts); err != nil {
		return nil, err
	}
	a := &Adapter{}
	for _, o := range opts {
		o.apply(a)
	}
	isNil := func(fn func(kafka.ConfigMap)) bool { return fn == nil }
	switch {
	case slices.ContainsFunc(a.consumer, isNil):
		return nil, kafkaadapter.NilFunction("confluenthost", "WithConfig")
	case slices.ContainsFunc(a.producer, isNil):
		return nil, kafkaadapter.NilFunction("confluenthost", "WithProducerConfig")
	}
	return a, nil
}

// errNotNew is what the methods of an Adapter that New did not make return.
var errNotNew = kafkaadapter.NotNew("confluenthost")

// Name returns "confluent".
func (a *Adapter) Name() string { return "confluent" }

// Consumer builds a confluent adapter's Consumer in the trigger's consumer
// group. A share-group trigger is refused.
func (a *Adapter) Consumer(proc *stream.Processor, b host.Binding) (host.Consumer, error) {
	if a == nil {
		return nil, errNotNew
	}
	t := b.Trigger
	if t.Share {
		return nil, kafkaadapter.NoShareGroups("confluenthost", "the confluent adapter")
	}
	conf := kafka.ConfigMap{"bootstrap.servers": strings.Join(b.Brokers, ","), "group.id": t.Group, "auto.offset.reset": "earliest"}
	for _, fn := range a.consumer {
		fn(conf)
	}
	opts := append([]confluent.Option{confluent.WithGroup(conf, t.Topic)},
		kafkaadapter.TriggerOptions(kafkaadapter.Trigger{Logger: b.Logger, OnReady: b.OnReady, Drain: b.Drain, MaxBatch: t.MaxBatch},
			confluent.WithLogger, confluent.WithOnAssigned, confluent.WithDrain, confluent.WithMaxBatch)...)
	c, err := confluent.New(proc, opts...)
	if err != nil {
		return nil, err
	}
	return c, nil
}

// Publisher builds a confluent adapter's Publisher on a producer of its
// own, on brokers and edited by [WithProducerConfig]; close closes the
// producer. Every publish waits for its records' delivery reports, so
// close has none to wait for (librdkafka's Flush would also wait for its
// own requests to brokers that do not answer).
func (a *Adapter) Publisher(brokers []string) (stream.Publisher, func() error, error) {
	if a == nil {
		return nil, nil, errNotNew
	}
	conf := kafka.ConfigMap{"bootstrap.servers": strings.Join(brokers, ","), "acks": "all"}
	for _, fn := range a.producer {
		fn(conf)
	}
	p, err := kafka.NewProducer(&conf)
	if err != nil {
		return nil, nil, fmt.Errorf("confluenthost: the dead-letter producer: %w", err)
	}
	pub, err := confluent.NewPublisher(p)
	if err != nil {
		p.Close()
		return nil, nil, fmt.Errorf("confluenthost: %w", err)
	}
	return pub, func() error {
		p.Close()
		return nil
	}, nil
}
