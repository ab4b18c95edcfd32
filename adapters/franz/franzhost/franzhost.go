// Package franzhost runs the Kafka triggers of a functions host (package
// host) on twmb/franz-go: consumer groups through package adapters/franz,
// share groups through adapters/franz/share. Give its adapter to the host:
//
//	franz, err := franzhost.New(franzhost.WithKgoOptions(kgo.DialTLS()))
//	h, err := host.New(cfg, host.WithAdapter(franz), host.WithBrokers("127.0.0.1:9092"))
//
// Triggers name it "franz", which is also the adapter of a trigger that
// names none. It is a module of its own, so that a host whose triggers
// all run on kafka-go builds no franz-go.
package franzhost

import (
	"errors"
	"fmt"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/redeliver-go/redeliver/adapters/franz"
	"github.com/redeliver-go/redeliver/adapters/franz/share"
	"github.com/redeliver-go/redeliver/host"
	"github.com/redeliver-go/redeliver/stream"
)

// Option configures an [Adapter].
type Option interface{ apply(*Adapter) }

type optionFunc func(*Adapter)

func (f optionFunc) apply(a *Adapter) { f(a) }

// WithKgoOptions adds franz-go client options (TLS, SASL, client ID, ...)
// to every client the adapter builds: each function's consumer, and the
// host's dead-letter producer when the adapter builds it. They come after
// the seed brokers, group and topic the host sets, and before
// [franz.ClientOptions], which the consumers need. The default is none.
func WithKgoOptions(opts ...kgo.Opt) Option {
	return optionFunc(func(a *Adapter) { a.kopts = append(a.kopts, opts...) })
}

// Adapter is the host's adapter for franz-go: a [host.Adapter] named
// "franz". Make it with [New]. It is safe for concurrent use.
type Adapter struct {
	kopts []kgo.Opt
}

var _ host.Adapter = (*Adapter)(nil)

// New returns the adapter, for [host.WithAdapter]. It returns an error for a
// nil option or a nil kgo option.
func New(opts ...Option) (*Adapter, error) {
	a := &Adapter{}
	for i, o := range opts {
		if o == nil {
			return nil, fmt.Errorf("franzhost: option %d of %d is nil", i+1, len(opts))
		}
		o.apply(a)
	}
	for i, o := range a.kopts {
		if o == nil {
			return nil, fmt.Errorf("franzhost: WithKgoOptions: kgo option %d of %d is nil", i+1, len(a.kopts))
		}
	}
	return a, nil
}

// errNotNew is what the methods of an Adapter that New did not make return.
var errNotNew = errors.New("franzhost: this Adapter was not made by franzhost.New: create it with franzhost.New(options...)")

// Name returns "franz".
func (a *Adapter) Name() string { return "franz" }

// Consumer builds the consumer of a function's trigger: a
// [franz.Consumer] in the trigger's consumer group, or a [share.Consumer]
// in its share group.
func (a *Adapter) Consumer(proc *stream.Processor, b host.Binding) (host.Consumer, error) {
	if a == nil {
		return nil, errNotNew
	}
	t := b.Trigger
	ready := b.OnReady
	if ready == nil {
		ready = func() {}
	}
	group := kgo.ConsumerGroup(t.Group)
	if t.Share {
		group = kgo.ShareGroup(t.Group)
	}
	kopts := append([]kgo.Opt{kgo.SeedBrokers(b.Brokers...), group, kgo.ConsumeTopics(t.Topic)}, a.kopts...)
	if t.Share {
		opts := []share.Option{share.WithKgoOptions(kopts...), share.WithLogger(b.Logger), share.WithOnReady(ready)}
		if t.MaxBatch > 0 {
			opts = append(opts, share.WithMaxBatch(t.MaxBatch))
		}
		if b.Drain > 0 {
			opts = append(opts, share.WithDrain(b.Drain)) // the host's drain time
		}
		c, err := share.New(proc, opts...)
		if err != nil {
			return nil, err
		}
		return c, nil
	}
	opts := []franz.Option{franz.WithKgoOptions(kopts...), franz.WithLogger(b.Logger),
		franz.WithOnAssigned(func(map[string][]int32) { ready() })}
	if t.MaxBatch > 0 {
		opts = append(opts, franz.WithMaxBatch(t.MaxBatch))
	}
	if b.Drain > 0 {
		opts = append(opts, franz.WithDrain(b.Drain)) // the host's drain time
	}
	c, err := franz.New(proc, opts...)
	if err != nil {
		return nil, err
	}
	return c, nil
}

// Publisher builds a [franz.Publisher] on a client of its own, on brokers
// and the options of [WithKgoOptions]; close closes the client.
func (a *Adapter) Publisher(brokers []string) (stream.Publisher, func() error, error) {
	if a == nil {
		return nil, nil, errNotNew
	}
	cl, err := kgo.NewClient(append([]kgo.Opt{kgo.SeedBrokers(brokers...)}, a.kopts...)...)
	if err != nil {
		return nil, nil, fmt.Errorf("franzhost: %w", err)
	}
	p, err := franz.NewPublisher(cl)
	if err != nil {
		cl.Close()
		return nil, nil, err
	}
	return p, func() error { cl.Close(); return nil }, nil
}
