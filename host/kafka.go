package host

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"time"

	"github.com/redeliver-go/redeliver/stream"
)

// Adapter runs the host's [Kafka] triggers on one Kafka client, and builds
// the producer the host publishes through when it is given none. Give
// [New] the adapters the triggers name, with [WithAdapter]. Each comes
// from a module of its own beside redeliver's adapter for that client, so
// that a host builds only the clients it uses (module paths under
// github.com/redeliver-go/redeliver):
//
//	name     module                        constructor        client
//	franz    adapters/franz/franzhost      franzhost.New()    twmb/franz-go: consumer and share groups
//	kafkago  adapters/kafkago/kafkagohost  kafkagohost.New()  segmentio/kafka-go: consumer groups
//
// [New] calls Name; [Host.Run] calls Consumer and Publisher before it
// starts anything. An Adapter must be safe for concurrent use.
type Adapter interface {
	// Name is what a trigger names to run on this adapter ([Kafka]'s
	// Adapter field, host.json's "adapter").
	Name() string
	// Consumer builds the consumer of one function's trigger, which
	// consumes through proc. It refuses what its client cannot do (a share
	// group on a client without share groups) with an error that says so.
	Consumer(proc *stream.Processor, b Binding) (Consumer, error)
	// Publisher builds a producer on brokers, for the dead-letter action
	// and the re-drive when the host is given no [WithPublisher]. Run
	// calls close once it has stopped every function.
	Publisher(brokers []string) (pub stream.Publisher, close func() error, err error)
}

// Consumer is one function's consumer, built by an [Adapter]. When it
// also has a method Health() error, as the Kafka adapters' consumers do,
// the host asks it while Run runs: the host is not ready ([Host.Ready],
// /readyz) while it returns an error, and says it.
type Consumer interface {
	// Run consumes until ctx is done, then returns nil; it returns an
	// error only for a failure.
	Run(ctx context.Context) error
	// Close releases the consumer. The host calls it when it built the
	// consumer but does not run it (another function's binding failed).
	Close() error
}

// Binding is what an [Adapter] builds one function's consumer from.
type Binding struct {
	// Function is the function's name.
	Function string
	// Trigger is the function's trigger, checked by the host: its Adapter
	// is the adapter's name, its Topic and Group are set, its MaxBatch is
	// 0 (the adapter's default) or more.
	Trigger Kafka
	// Brokers are the seed brokers of [WithBrokers].
	Brokers []string
	// Logger is the function's logger, with its "function" attribute.
	Logger *slog.Logger
	// Drain is the host's drain time ([WithDrain]): how long the
	// consumer's Run is to wait, once stopping, for its workers (the Kafka
	// adapters' WithDrain), reporting those it waits for.
	Drain time.Duration
	// OnReady is to be called when the consumer is ready: at the end of
	// each assignment of its consumer group (with nothing assigned, too),
	// or once a share-group consumer has reached the broker. /readyz and
	// the status page count the function ready from then on. It may be
	// called more than once and from any goroutine.
	OnReady func()
}

// WithAdapter gives the host an adapter that its Kafka triggers can name
// (see [Adapter] for the modules that provide them). Give it once per
// adapter: a host whose functions use one client builds that client only.
// The first adapter given also builds the dead-letter producer when the
// host needs one and has no [WithPublisher]. A trigger that names an
// adapter the host was not given is an error when Run starts.
func WithAdapter(a Adapter) Option {
	if a == nil {
		return optionError(errors.New("WithAdapter: nil adapter"))
	}
	name := a.Name()
	if strings.TrimSpace(name) == "" {
		return optionError(fmt.Errorf("WithAdapter: adapter %T has an empty name", a))
	}
	return hostOption(func(c *config) {
		if slices.ContainsFunc(c.adapters, func(b Adapter) bool { return b.Name() == name }) {
			c.errs = append(c.errs, fmt.Errorf("WithAdapter: adapter %q given twice", name))
			return
		}
		c.adapters = append(c.adapters, a)
	})
}

// defaultAdapter is the adapter of a trigger that names none.
const defaultAdapter = "franz"

// adapterModules says, for the adapters redeliver provides, where a user
// finds them.
var adapterModules = map[string]string{
	"franz":     "give host.WithAdapter(a) with a from franzhost.New() (module github.com/redeliver-go/redeliver/adapters/franz/franzhost, on twmb/franz-go)",
	"kafkago":   "give host.WithAdapter(a) with a from kafkagohost.New() (module github.com/redeliver-go/redeliver/adapters/kafkago/kafkagohost, on segmentio/kafka-go)",
	"sarama":    "give host.WithAdapter(a) with a from saramahost.New() (module github.com/redeliver-go/redeliver/adapters/sarama/saramahost, on IBM/sarama)",
	"confluent": "give host.WithAdapter(a) with a from confluenthost.New() (module github.com/redeliver-go/redeliver/adapters/confluent/confluenthost, on confluent-kafka-go)",
}

// bindAdapter finds the adapter of f's Kafka trigger, the default when it
// names none, or returns an error that says how to give it to the host.
func (h *Host) bindAdapter(f *function) error {
	if f.source != nil && f.origin == "code" {
		return nil
	}
	named := f.trigger.Adapter != ""
	if !named {
		f.trigger.Adapter = defaultAdapter
	}
	name := f.trigger.Adapter
	for _, a := range h.c.adapters {
		if a.Name() == name {
			f.adapter = a
			return nil
		}
	}
	var have []string
	for _, a := range h.c.adapters {
		have = append(have, a.Name())
	}
	msg := fmt.Sprintf("adapter %q was not given to the host", name)
	if !named {
		msg = fmt.Sprintf("adapter %q (the default: the trigger names no adapter) was not given to the host", name)
	}
	if len(have) == 0 {
		msg += " (it has none)"
	} else {
		msg += fmt.Sprintf(" (it has %s)", strings.Join(have, ", "))
	}
	how, ok := adapterModules[name]
	if !ok {
		how = "give host.WithAdapter an adapter of that name; redeliver's are franz, kafkago, sarama and confluent"
	}
	if !named && len(have) > 0 {
		if f.origin == "code" {
			how += fmt.Sprintf(`; or name the host's adapter in the trigger: host.Kafka{Adapter: %q, ...}`, have[0])
		} else {
			how += fmt.Sprintf(`; or name the host's adapter in the trigger: "adapter": %q`, have[0])
		}
	}
	return fmt.Errorf("host: function %s (trigger from %s): %s: %s", f.name, f.origin, msg, how)
}

// consumer builds f's consumer on its adapter.
func (h *Host) consumer(f *function, proc *stream.Processor, log *slog.Logger) (func(context.Context) error, error) {
	c, err := f.adapter.Consumer(proc, Binding{
		Function: f.name,
		Trigger:  f.trigger,
		Brokers:  slices.Clone(h.c.brokers),
		Logger:   log,
		Drain:    h.c.drain,
		OnReady:  func() { f.assigned.Store(true) },
	})
	switch {
	case err != nil:
		return nil, fmt.Errorf("trigger from %s: %w", f.origin, err)
	case c == nil:
		return nil, fmt.Errorf("trigger from %s: adapter %s built no consumer", f.origin, f.trigger.Adapter)
	}
	if hc, ok := c.(interface{ Health() error }); ok {
		f.health = hc.Health
	}
	f.close = func() {
		if err := c.Close(); err != nil {
			log.Warn("redeliver: closing a consumer the host did not run", "error", err)
		}
	}
	return c.Run, nil
}

// publisher builds the default producer on the first adapter.
func (h *Host) publisher() (stream.Publisher, func(), error) {
	if len(h.c.adapters) == 0 || len(h.c.brokers) == 0 {
		return nil, nil, errors.New("host: a function's policy dead-letters or the re-drive publishes, and there is no producer: " +
			"give host.WithPublisher, or host.WithAdapter with host.WithBrokers (the first adapter builds the producer)")
	}
	a := h.c.adapters[0]
	p, closeP, err := a.Publisher(slices.Clone(h.c.brokers))
	switch {
	case err != nil:
		return nil, nil, fmt.Errorf("host: dead-letter producer of adapter %s: %w", a.Name(), err)
	case p == nil:
		return nil, nil, fmt.Errorf("host: adapter %s built no dead-letter producer", a.Name())
	}
	return p, func() {
		if closeP == nil {
			return
		}
		if err := closeP(); err != nil {
			h.log.Warn("redeliver: closing the dead-letter producer", "adapter", a.Name(), "error", err)
		}
	}, nil
}
