// Package saramahost runs the Kafka triggers of a functions host (package
// host) on IBM/sarama, through package adapters/sarama. Give its adapter
// to the host:
//
//	sa, err := saramahost.New(saramahost.WithConfig(func(c *sarama.Config) {
//		c.Version = sarama.V3_9_0_0
//		c.Net.TLS.Enable = true
//	}))
//	h, err := host.New(cfg, host.WithAdapter(sa), host.WithBrokers("127.0.0.1:9092"))
//
// Triggers name it "sarama" ("adapter": "sarama" in host.json's
// triggers; a trigger that names no adapter runs on "franz"). sarama has
// no share-group consumer: a share-group trigger on it is an error when
// the host starts. It is a module of its own, so that a host whose
// triggers all run on sarama builds no other Kafka client.
package saramahost

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"

	"github.com/IBM/sarama"

	"github.com/redeliver-go/redeliver/adapters/internal/kafkaadapter"
	rdsarama "github.com/redeliver-go/redeliver/adapters/sarama"
	"github.com/redeliver-go/redeliver/host"
	"github.com/redeliver-go/redeliver/stream"
)

// Option configures an [Adapter].
type Option interface{ apply(*Adapter) }

type optionFunc func(*Adapter)

func (f optionFunc) apply(a *Adapter) { f(a) }

// WithConfig adds a function that edits the sarama configuration of every
// function's consumer and of the host's dead-letter producer (its Version,
// TLS and SASL, timeouts, rebalance strategies, ...), after the adapter
// has set it up: sarama.NewConfig() with Consumer.Offsets.Initial
// sarama.OffsetOldest (a group without a commit starts at the partition's
// start, as the other adapters' do), and for the producer
// Producer.RequiredAcks sarama.WaitForAll and Producer.Return.Successes.
// The default edits nothing.
func WithConfig(fn func(*sarama.Config)) Option {
	return optionFunc(func(a *Adapter) { a.config = append(a.config, fn) })
}

// Adapter is the host's adapter for sarama: a [host.Adapter] named
// "sarama". Make it with [New]. It is safe for concurrent use.
type Adapter struct {
	config []func(*sarama.Config)
}

var _ host.Adapter = (*Adapter)(nil)

// New returns the adapter, for [host.WithAdapter]. It returns an error for a
// nil option or a nil function given to an option.
func New(opts ...Option) (*Adapter, error) {
	if err := kafkaadapter.CheckNilOptions("saramahost", opts); err != nil {
		return nil, err
	}
	a := &Adapter{}
	for _, o := range opts {
		o.apply(a)
	}
	if slices.ContainsFunc(a.config, func(fn func(*sarama.Config)) bool { return fn == nil }) {
		return nil, kafkaadapter.NilFunction("saramahost", "WithConfig")
	}
	return a, nil
}

// errNotNew is what the methods of an Adapter that New did not make return.
var errNotNew = kafkaadapter.NotNew("saramahost")

// Name returns "sarama".
func (a *Adapter) Name() string { return "sarama" }

func (a *Adapter) newConfig() *sarama.Config {
	c := sarama.NewConfig()
	c.Consumer.Offsets.Initial = sarama.OffsetOldest
	c.Producer.RequiredAcks = sarama.WaitForAll
	c.Producer.Return.Successes = true
	for _, fn := range a.config {
		fn(c)
	}
	return c
}

// Consumer builds a sarama adapter's Consumer in the trigger's consumer
// group. A share-group trigger is refused: sarama has no share-group
// consumer.
func (a *Adapter) Consumer(proc *stream.Processor, b host.Binding) (host.Consumer, error) {
	if a == nil {
		return nil, errNotNew
	}
	t := b.Trigger
	if t.Share {
		return nil, kafkaadapter.NoShareGroups("saramahost", "sarama")
	}
	opts := append([]rdsarama.Option{rdsarama.WithGroup(b.Brokers, t.Group, t.Topic), rdsarama.WithConfig(a.newConfig())},
		kafkaadapter.TriggerOptions(kafkaadapter.Trigger{Logger: b.Logger, OnReady: b.OnReady, Drain: b.Drain, MaxBatch: t.MaxBatch},
			rdsarama.WithLogger, rdsarama.WithOnAssigned, rdsarama.WithDrain, rdsarama.WithMaxBatch)...)
	c, err := rdsarama.New(proc, opts...)
	if err != nil {
		return nil, err
	}
	return c, nil
}

// Publisher returns the host's dead-letter publisher: a sarama adapter's
// Publisher on a sarama client of its own, on brokers and edited by
// [WithConfig]; close closes the producer and the client. sarama's client
// asks the brokers for their metadata when it is made, so that it is made
// at the first dead letter (and again at the next one, while the brokers
// do not answer), not when the host starts: a host starts while the
// brokers are away, as with the other adapters.
func (a *Adapter) Publisher(brokers []string) (stream.Publisher, func() error, error) {
	if a == nil {
		return nil, nil, errNotNew
	}
	lp := &lazyPublisher{brokers: append([]string(nil), brokers...), config: a.newConfig}
	return lp, lp.close, nil
}

// lazyPublisher makes its client and publisher at its first publish.
type lazyPublisher struct {
	brokers []string
	config  func() *sarama.Config

	mu     sync.Mutex
	client sarama.Client
	pub    *rdsarama.Publisher
	closed bool
}

// Publish makes the client and publisher if they are not made yet, and
// publishes recs through them.
func (lp *lazyPublisher) Publish(ctx context.Context, topic string, recs []stream.Record) error {
	pub, err := lp.publisher()
	if err != nil {
		return err
	}
	return pub.Publish(ctx, topic, recs)
}

func (lp *lazyPublisher) publisher() (*rdsarama.Publisher, error) {
	lp.mu.Lock()
	defer lp.mu.Unlock()
	switch {
	case lp.closed:
		return nil, errors.New("saramahost: the dead-letter publisher is closed")
	case lp.pub != nil:
		return lp.pub, nil
	}
	client, err := sarama.NewClient(lp.brokers, lp.config())
	if err != nil {
		return nil, fmt.Errorf("saramahost: the dead-letter producer's client: %w", err)
	}
	pub, err := rdsarama.NewPublisher(client)
	if err != nil {
		_ = client.Close()
		return nil, fmt.Errorf("saramahost: WithConfig: %w", err)
	}
	lp.client, lp.pub = client, pub
	return pub, nil
}

func (lp *lazyPublisher) close() error {
	lp.mu.Lock()
	defer lp.mu.Unlock()
	lp.closed = true
	if lp.pub == nil {
		return nil
	}
	return errors.Join(lp.pub.Close(), lp.client.Close())
}
