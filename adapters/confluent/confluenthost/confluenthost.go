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
	"errors"
	"fmt"
	"strings"

	"github.com/confluentinc/confluent-kafka-go/v2/kafka"

	"github.com/redeliver-go/redeliver/adapters/confluent"
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
	a := &Adapter{}
	for i, o := range opts {
		if o == nil {
			return nil, fmt.Errorf("confluenthost: option %d of %d is nil", i+1, len(opts))
		}
		o.apply(a)
	}
	for _, fn := range a.consumer {
		if fn == nil {
			return nil, errors.New("confluenthost: WithConfig: nil function")
		}
	}
	for _, fn := range a.producer {
		if fn == nil {
			return nil, errors.New("confluenthost: WithProducerConfig: nil function")
		}
	}
	return a, nil
}

// errNotNew is what the methods of an Adapter that New did not make return.
var errNotNew = errors.New("confluenthost: this Adapter was not made by confluenthost.New: create it with confluenthost.New(options...)")

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
		return nil, errors.New(`confluenthost: the confluent adapter has no share-group consumer: a share group needs the franz adapter ("adapter": "franz", module github.com/redeliver-go/redeliver/adapters/franz/franzhost)`)
	}
	conf := kafka.ConfigMap{"bootstrap.servers": strings.Join(b.Brokers, ","), "group.id": t.Group, "auto.offset.reset": "earliest"}
	for _, fn := range a.consumer {
		fn(conf)
	}
	ready := b.OnReady
	if ready == nil {
		ready = func() {}
	}
	opts := []confluent.Option{
		confluent.WithGroup(conf, t.Topic),
		confluent.WithOnAssigned(func(map[string][]int32) { ready() }),
	}
	if b.Logger != nil {
		opts = append(opts, confluent.WithLogger(b.Logger))
	}
	if b.Drain > 0 {
		opts = append(opts, confluent.WithDrain(b.Drain)) // the host's drain time
	}
	if t.MaxBatch > 0 {
		opts = append(opts, confluent.WithMaxBatch(t.MaxBatch))
	}
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
