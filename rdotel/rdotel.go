package rdotel

import (
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/propagation"
	semconv "go.opentelemetry.io/otel/semconv/v1.43.0"
	"go.opentelemetry.io/otel/trace"

	"github.com/redeliver-go/redeliver/stream"
)

// instrumentation is the instrumentation scope's name.
const instrumentation = "github.com/redeliver-go/redeliver/rdotel"

// Option configures [New].
type Option interface{ apply(*config) }

type optionFunc func(*config)

func (f optionFunc) apply(c *config) { f(c) }

type config struct {
	meters     metric.MeterProvider
	tracers    trace.TracerProvider
	propagator propagation.TextMapPropagator
	system     string
	group      string
	maxLinks   int
	action     string // "" unless WithExhaustionAction names it
	actionSet  bool
	now        func() time.Time
}

// WithMeterProvider sets where metrics go. The default is the global
// provider, otel.GetMeterProvider().
func WithMeterProvider(mp metric.MeterProvider) Option {
	return optionFunc(func(c *config) { c.meters = mp })
}

// WithTracerProvider sets where spans go. The default is the global
// provider, otel.GetTracerProvider().
func WithTracerProvider(tp trace.TracerProvider) Option {
	return optionFunc(func(c *config) { c.tracers = tp })
}

// WithPropagator sets how trace context is read from record headers. The
// default is the global propagator, otel.GetTextMapPropagator(), or W3C
// Trace Context when the global one is unset.
func WithPropagator(p propagation.TextMapPropagator) Option {
	return optionFunc(func(c *config) { c.propagator = p })
}

// WithSystem sets messaging.system: "kafka" (the default) or "eventhubs".
func WithSystem(system string) Option {
	return optionFunc(func(c *config) { c.system = system })
}

// WithConsumerGroup sets messaging.consumer.group.name, the consumer group
// (or Event Hubs consumer group) of every processor the Telemetry serves.
// The default leaves the attribute out. Processors of different groups
// need a Telemetry each.
func WithConsumerGroup(group string) Option {
	return optionFunc(func(c *config) { c.group = group })
}

// WithMaxLinks sets how many record trace contexts a delivery's span links
// to at most. The default is 32.
func WithMaxLinks(n int) Option {
	return optionFunc(func(c *config) { c.maxLinks = n })
}

// WithExhaustionAction names the processor's exhaustion action in the
// redeliver.action attribute of redeliver.exhaustion.actions: "skip",
// "dead_letter", "park" or "stop", as the processor's action is (the
// hooks cannot tell one action from another). The default leaves the
// attribute out, rather than name an action the processor may not have.
func WithExhaustionAction(name string) Option {
	return optionFunc(func(c *config) { c.action, c.actionSet = name, true })
}

// Telemetry turns processors' events into metrics and spans. One Telemetry
// serves every processor of one consumer group ([WithConsumerGroup]): give
// each processor hooks and a middleware of its own, from its own calls of
// [Telemetry.Hooks] and [Telemetry.Middleware]. Make one Telemetry per
// group; those on one meter provider share its instruments.
//
// It is safe for concurrent use. A zero Telemetry reports nothing and says
// so in the log: make one with [New].
type Telemetry struct {
	cfg   config
	meter *meter
	t     trace.Tracer
}

// New returns a Telemetry. It returns an error when an instrument cannot be
// created.
func New(opts ...Option) (*Telemetry, error) {
	cfg := config{system: "kafka", maxLinks: 32, now: time.Now}
	for i, o := range opts {
		if o == nil {
			return nil, fmt.Errorf("rdotel: New: option %d of %d is nil", i+1, len(opts))
		}
		o.apply(&cfg)
	}
	if cfg.meters == nil {
		cfg.meters = otel.GetMeterProvider()
	}
	if cfg.tracers == nil {
		cfg.tracers = otel.GetTracerProvider()
	}
	if cfg.propagator == nil {
		cfg.propagator = otel.GetTextMapPropagator()
		if len(cfg.propagator.Fields()) == 0 {
			cfg.propagator = propagation.TraceContext{}
		}
	}
	if cfg.system == "" {
		return nil, errors.New("rdotel: WithSystem: empty system name")
	}
	if cfg.maxLinks < 0 {
		return nil, errors.New("rdotel: negative maximum of links")
	}
	if cfg.actionSet && cfg.action == "" {
		return nil, errors.New(`rdotel: WithExhaustionAction: empty name: want skip, dead_letter, park or stop`)
	}
	m, err := newMeter(&cfg)
	if err != nil {
		return nil, err
	}
	tel := &Telemetry{cfg: cfg, meter: m}
	tel.t = cfg.tracers.Tracer(instrumentation, trace.WithSchemaURL(semconv.SchemaURL))
	return tel, nil
}

// Hooks returns the hooks that record the metrics of one processor: give
// them to that processor only (stream.WithHooks adds them to any hooks of
// your own), and call Hooks again for each other processor. The hooks of
// one call keep the state of one processor's partitions; used by two
// processors, their partitions would mix (it is logged at Error level
// when it shows).
func (t *Telemetry) Hooks() stream.Hooks {
	if t == nil || t.meter == nil {
		notNew("Hooks")
		return stream.Hooks{}
	}
	return t.meter.newScope().hooks()
}

// Middleware returns the middleware that starts a span per delivery of one
// processor and gives its context to the handler; call it again for each
// other processor, as [Telemetry.Hooks].
func (t *Telemetry) Middleware() stream.Middleware {
	if t == nil || t.meter == nil {
		notNew("Middleware")
		return func(next stream.Handler) stream.Handler { return next }
	}
	return newTracer(&t.cfg, t.t).middleware
}

// notNew logs, once per method, that a Telemetry New did not make was
// used: it reports nothing.
func notNew(method string) {
	if _, done := notNewLogged.LoadOrStore(method, true); !done {
		slog.Default().Error("rdotel: Telemetry." + method + " called on a Telemetry that rdotel.New did not make: no telemetry is reported; create it with rdotel.New")
	}
}

var notNewLogged sync.Map
