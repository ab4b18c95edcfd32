package rdotel

import (
	"errors"
	"time"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/propagation"
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
	action     string
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

// WithConsumerGroup sets messaging.consumer.group.name. The default leaves
// the attribute out.
func WithConsumerGroup(group string) Option {
	return optionFunc(func(c *config) { c.group = group })
}

// WithMaxLinks sets how many record trace contexts a delivery's span links
// to at most. The default is 32.
func WithMaxLinks(n int) Option {
	return optionFunc(func(c *config) { c.maxLinks = n })
}

// WithExhaustionAction names the processor's exhaustion action in the
// redeliver.action attribute of redeliver.exhaustion.actions: "skip" (the
// default), "dead_letter", "park" or "stop".
func WithExhaustionAction(name string) Option {
	return optionFunc(func(c *config) { c.action = name })
}

// withClock sets the clock of the gauges that measure ages (tests only).
func withClock(now func() time.Time) Option {
	return optionFunc(func(c *config) { c.now = now })
}

// Telemetry turns a processor's events into metrics and spans. It is safe
// for concurrent use: one Telemetry can serve every processor of a program.
type Telemetry struct {
	cfg    config
	meter  *meter
	tracer *tracer
}

// New returns a Telemetry. It returns an error when an instrument cannot be
// created.
func New(opts ...Option) (*Telemetry, error) {
	cfg := config{system: "kafka", maxLinks: 32, action: "skip", now: time.Now}
	for _, o := range opts {
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
	if cfg.system == "" || cfg.now == nil {
		return nil, errors.New("rdotel: empty system or nil clock")
	}
	if cfg.maxLinks < 0 {
		return nil, errors.New("rdotel: negative maximum of links")
	}
	m, err := newMeter(&cfg)
	if err != nil {
		return nil, err
	}
	return &Telemetry{cfg: cfg, meter: m, tracer: newTracer(&cfg)}, nil
}

// Hooks returns the processor hooks that record the metrics. Merge them
// with hooks of your own if you have some.
func (t *Telemetry) Hooks() stream.Hooks { return t.meter.hooks() }

// Middleware returns the middleware that starts a span per delivery and
// gives its context to the handler.
func (t *Telemetry) Middleware() stream.Middleware { return t.tracer.middleware }
