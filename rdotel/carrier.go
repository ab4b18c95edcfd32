package rdotel

import (
	"context"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/propagation"

	"github.com/redeliver-go/redeliver/stream"
)

// carrier reads a record's headers as a propagation carrier. It only reads:
// a consumer never writes trace context into the records it was given.
type carrier []stream.Header

var _ propagation.TextMapCarrier = carrier(nil)

// Get returns the value of the last header named key (a later header wins,
// as Kafka clients do for repeated keys).
func (c carrier) Get(key string) string {
	for i := len(c) - 1; i >= 0; i-- {
		if c[i].Key == key {
			return string(c[i].Value)
		}
	}
	return ""
}

// Set does nothing: the records of a delivery are not written to.
func (c carrier) Set(string, string) {}

// Keys returns the header names.
func (c carrier) Keys() []string {
	keys := make([]string, len(c))
	for i, h := range c {
		keys[i] = h.Key
	}
	return keys
}

// RecordContext returns ctx with the trace context found in r's headers by
// the global propagator (W3C traceparent by default). Handlers that process
// a batch record by record use it to continue each record's trace.
//
// A nil ctx is taken as context.Background(); a nil r returns ctx as it
// is.
func RecordContext(ctx context.Context, r *stream.Record) context.Context {
	if ctx == nil {
		ctx = context.Background()
	}
	if r == nil {
		return ctx
	}
	p := otel.GetTextMapPropagator()
	if len(p.Fields()) == 0 {
		p = propagation.TraceContext{}
	}
	return p.Extract(ctx, carrier(r.Headers))
}
