package tests

import (
	"context"
	"errors"
	"github.com/redeliver-go/redeliver/rdotel"
	"testing"
	"testing/synctest"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/propagation"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/redeliver-go/redeliver/checkpoint"
	"github.com/redeliver-go/redeliver/stream"
	"github.com/redeliver-go/redeliver/stream/streamtest"
)

var errDown = errors.New("downstream down")

// collect reads every metric of r by name.
func collect(t *testing.T, r *sdkmetric.ManualReader) map[string]metricdata.Metrics {
	t.Helper()
	var rm metricdata.ResourceMetrics
	if err := r.Collect(context.Background(), &rm); err != nil {
		t.Fatal(err)
	}
	out := map[string]metricdata.Metrics{}
	for _, sm := range rm.ScopeMetrics {
		if sm.Scope.Name != "github.com/redeliver-go/redeliver/rdotel" {
			t.Errorf("scope %q, want %q", sm.Scope.Name, "github.com/redeliver-go/redeliver/rdotel")
		}
		for _, m := range sm.Metrics {
			out[m.Name] = m
		}
	}
	return out
}

// sum adds up the points of a counter whose attributes have every kv.
func sum(t *testing.T, m metricdata.Metrics, kv ...attribute.KeyValue) int64 {
	t.Helper()
	s, ok := m.Data.(metricdata.Sum[int64])
	if !ok {
		t.Fatalf("%s: %T, want an int64 sum", m.Name, m.Data)
	}
	var n int64
	for _, p := range s.DataPoints {
		if hasAll(p.Attributes, kv) {
			n += p.Value
		}
	}
	return n
}

// count adds up the counts of a histogram's points whose attributes have every kv.
func count(t *testing.T, m metricdata.Metrics, kv ...attribute.KeyValue) uint64 {
	t.Helper()
	h, ok := m.Data.(metricdata.Histogram[float64])
	if !ok {
		t.Fatalf("%s: %T, want a float64 histogram", m.Name, m.Data)
	}
	var n uint64
	for _, p := range h.DataPoints {
		if hasAll(p.Attributes, kv) {
			n += p.Count
		}
	}
	return n
}

// gauge returns a gauge's value for the point whose attributes have every kv.
func gauge[N int64 | float64](t *testing.T, m metricdata.Metrics, kv ...attribute.KeyValue) N {
	t.Helper()
	g, ok := m.Data.(metricdata.Gauge[N])
	if !ok {
		t.Fatalf("%s: %T, want a gauge", m.Name, m.Data)
	}
	for _, p := range g.DataPoints {
		if hasAll(p.Attributes, kv) {
			return p.Value
		}
	}
	t.Fatalf("%s: no point with %v in %+v", m.Name, kv, g.DataPoints)
	return 0
}

func hasAll(set attribute.Set, kvs []attribute.KeyValue) bool {
	for _, kv := range kvs {
		if v, ok := set.Value(kv.Key); !ok || v != kv.Value {
			return false
		}
	}
	return true
}

var (
	onP0 = attribute.String("messaging.destination.partition.id", "0")
	onP1 = attribute.String("messaging.destination.partition.id", "1")
)

// A run with retries, a give-up and a rebalance mid-backoff: the metrics
// count what happened, with the semantic conventions' names and attributes.
func TestMetrics(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		reader := sdkmetric.NewManualReader()
		tel, err := rdotel.New(rdotel.WithMeterProvider(sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))), rdotel.WithExhaustionAction("skip"),
			rdotel.WithConsumerGroup("billing"))
		if err != nil {
			t.Fatal(err)
		}
		// Partition 0 fails twice then succeeds; partition 1 always fails
		// and is given up after its 2 retries.
		p0, p1 := streamtest.NewPartition("orders", 0, 5), streamtest.NewPartition("orders", 1, 5)
		p0.AppendN(time.Now(), 5)
		p1.AppendN(time.Now(), 5)
		h := stream.HandlerFunc(func(_ context.Context, b *stream.Batch) error {
			time.Sleep(10 * time.Millisecond)
			if b.Partition == 1 || b.Attempt.Retries < 2 {
				return errDown
			}
			return nil
		})
		proc, err := stream.NewProcessor(stream.Chain(h, tel.Middleware()), stream.WithHooks(tel.Hooks()),
			stream.WithPolicy(checkpoint.Policy{MaxRetries: 2, Backoff: checkpoint.Fixed(time.Second)}))
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithCancel(t.Context())
		defer cancel()
		done := make(chan error, 2)
		go func() { done <- streamtest.Run(ctx, proc, p0, p1) }()

		// Both partitions fail at +10ms (the handler's time) and wait out
		// their backoff: at +500ms the checkpoint has been held back 490ms.
		time.Sleep(500 * time.Millisecond)
		synctest.Wait()
		m := collect(t, reader)
		if got := gauge[int64](t, m["redeliver.partitions.backoff"], attribute.String("messaging.destination.name", "orders")); got != 2 {
			t.Errorf("partitions in backoff: %d, want 2", got)
		}
		if got := gauge[float64](t, m["redeliver.checkpoint.withheld.age"], onP0); got != 0.49 {
			t.Errorf("withheld age of partition 0: %vs, want 0.49s", got)
		}

		// A rebalance: partition 0 moves to a new owner mid-backoff. Its
		// withheld age goes on from the state the first owner committed.
		p0.Revoke()
		synctest.Wait()
		go func() { done <- streamtest.Run(ctx, proc, p0) }()
		synctest.Wait()
		m = collect(t, reader)
		if got := gauge[float64](t, m["redeliver.checkpoint.withheld.age"], onP0); got != 0.49 {
			t.Errorf("withheld age of partition 0 after the move: %vs, want 0.49s", got)
		}

		wctx, wcancel := context.WithTimeout(ctx, time.Hour)
		defer wcancel()
		for _, p := range []*streamtest.Partition{p0, p1} {
			if err := p.WaitCommitted(wctx, 5); err != nil {
				t.Fatal(err)
			}
		}
		synctest.Wait()
		m = collect(t, reader)
		for _, name := range []string{"messaging.client.consumed.messages", "messaging.process.duration", "redeliver.retries.scheduled",
			"redeliver.batches.given_up", "redeliver.exhaustion.actions", "redeliver.redelivery.lateness", "redeliver.partitions.backoff",
			"redeliver.partitions.stopped", "redeliver.checkpoint.withheld.age"} {
			if _, ok := m[name]; !ok {
				t.Errorf("no metric %s", name)
			}
		}
		common := []attribute.KeyValue{attribute.String("messaging.system", "kafka"), attribute.String("messaging.destination.name", "orders"),
			attribute.String("messaging.consumer.group.name", "billing")}
		if got := sum(t, m["messaging.client.consumed.messages"], common...); got != 10 {
			t.Errorf("consumed messages: %d, want 10 (first deliveries only)", got)
		}
		if got := count(t, m["messaging.process.duration"], append(common, onP0)...); got != 3 {
			t.Errorf("deliveries of partition 0: %d, want 3", got)
		}
		if got := count(t, m["messaging.process.duration"], onP1, attribute.Int("redeliver.attempt", 3),
			attribute.String("error.type", "*errors.errorString")); got != 1 {
			t.Errorf("third failed delivery of partition 1: %d points, want 1", got)
		}
		if got := sum(t, m["redeliver.retries.scheduled"], common...); got != 4 {
			t.Errorf("retries scheduled: %d, want 4", got)
		}
		if got := sum(t, m["redeliver.batches.given_up"], onP1, attribute.String("redeliver.reason", "retries_spent")); got != 1 {
			t.Errorf("batches given up on partition 1 for retries spent: %d, want 1", got)
		}
		if got := sum(t, m["redeliver.exhaustion.actions"], onP1, attribute.String("redeliver.action", "skip"),
			attribute.String("redeliver.action.outcome", "succeeded")); got != 1 {
			t.Errorf("exhaustion actions on partition 1 that succeeded: %d, want 1", got)
		}
		if got := count(t, m["redeliver.redelivery.lateness"]); got != 4 {
			t.Errorf("lateness measured for %d redeliveries, want 4", got)
		}
		if got := gauge[int64](t, m["redeliver.partitions.backoff"]); got != 0 {
			t.Errorf("partitions in backoff at the end: %d, want 0", got)
		}
		if got := gauge[float64](t, m["redeliver.checkpoint.withheld.age"], onP1); got != 0 {
			t.Errorf("withheld age of partition 1 after it was given up: %v, want 0", got)
		}
		cancel()
		<-done
		<-done
	})
}

// traced returns a record header carrying sc as a W3C traceparent.
func traced(sc trace.SpanContext) []stream.Header {
	h := propagation.HeaderCarrier{}
	propagation.TraceContext{}.Inject(trace.ContextWithSpanContext(context.Background(), sc), h)
	return []stream.Header{{Key: "traceparent", Value: []byte(h.Get("traceparent"))}}
}

func producerSpan(t *testing.T, tp trace.TracerProvider) trace.SpanContext {
	t.Helper()
	_, s := tp.Tracer("producer").Start(context.Background(), "send")
	s.End()
	return s.SpanContext()
}

// The handler's context continues a single record's trace; a batch's span
// links to its records' traces; a redelivery is a new span linked to the
// first; attempt and outcome are on every span.
func TestTraces(t *testing.T) {
	sr := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(sr))
	tel, err := rdotel.New(rdotel.WithTracerProvider(tp), rdotel.WithPropagator(propagation.TraceContext{}))
	if err != nil {
		t.Fatal(err)
	}
	var seen []trace.SpanContext
	fail := true
	h := tel.Middleware()(stream.HandlerFunc(func(ctx context.Context, b *stream.Batch) error {
		seen = append(seen, trace.SpanContextFromContext(ctx))
		if fail {
			return errDown
		}
		return nil
	}))
	ctx := context.Background()

	// One record with a traceparent, failing once, then redelivered.
	up := producerSpan(t, tp)
	one := &stream.Batch{Topic: "orders", Partition: 3, Records: []stream.Record{{Offset: 7, Headers: traced(up)}}}
	if err := h.Handle(ctx, one); !errors.Is(err, errDown) {
		t.Fatal(err)
	}
	fail = false
	one.Attempt.Retries = 1
	if err := h.Handle(ctx, one); err != nil {
		t.Fatal(err)
	}
	// A batch of three, two of them traced.
	a, b := producerSpan(t, tp), producerSpan(t, tp)
	batch := &stream.Batch{Topic: "orders", Partition: 3, Records: []stream.Record{
		{Offset: 8, Headers: traced(a)}, {Offset: 9}, {Offset: 10, Headers: traced(b)}}}
	if err := h.Handle(ctx, batch); err != nil {
		t.Fatal(err)
	}

	var spans []sdktrace.ReadOnlySpan
	for _, s := range sr.Ended() {
		if s.Name() == "process orders" {
			spans = append(spans, s)
		}
	}
	if len(spans) != 3 {
		t.Fatalf("%d process spans, want 3", len(spans))
	}
	first, again, many := spans[0], spans[1], spans[2]
	for i, s := range spans {
		if s.SpanKind() != trace.SpanKindConsumer {
			t.Errorf("span %d kind %v, want consumer", i, s.SpanKind())
		}
		if !seen[i].Equal(s.SpanContext()) {
			t.Errorf("handler %d saw span context %v, want its delivery's span %v", i, seen[i], s.SpanContext())
		}
	}
	if first.Parent().TraceID() != up.TraceID() || first.Parent().SpanID() != up.SpanID() {
		t.Errorf("single record's delivery has parent %v, want the record's %v", first.Parent(), up)
	}
	if first.Status().Code != codes.Error {
		t.Errorf("failed delivery's status %v, want Error", first.Status())
	}
	attrs := attribute.NewSet(first.Attributes()...)
	for kv, want := range map[attribute.Key]attribute.Value{
		"messaging.system": attribute.StringValue("kafka"), "messaging.operation.type": attribute.StringValue("process"),
		"messaging.destination.name": attribute.StringValue("orders"), "messaging.destination.partition.id": attribute.StringValue("3"),
		"redeliver.attempt": attribute.IntValue(1), "redeliver.outcome": attribute.StringValue("failed"),
		"error.type": attribute.StringValue("*errors.errorString"),
	} {
		if got, _ := attrs.Value(kv); got != want {
			t.Errorf("first span's %s = %v, want %v", kv, got.Emit(), want.Emit())
		}
	}
	if again.SpanContext().SpanID() == first.SpanContext().SpanID() {
		t.Error("the redelivery reused the first delivery's span")
	}
	againAttrs := attribute.NewSet(again.Attributes()...)
	if v, _ := againAttrs.Value("redeliver.attempt"); v.AsInt64() != 2 {
		t.Errorf("redelivery's attempt %v, want 2", v.Emit())
	}
	linked := false
	for _, l := range again.Links() {
		linked = linked || l.SpanContext.SpanID() == first.SpanContext().SpanID()
	}
	if !linked {
		t.Errorf("the redelivery's links %v do not name the first delivery %v", again.Links(), first.SpanContext())
	}
	if len(many.Links()) != 2 || many.Links()[0].SpanContext.SpanID() != a.SpanID() || many.Links()[1].SpanContext.SpanID() != b.SpanID() {
		t.Errorf("batch span links %v, want the two traced records' spans", many.Links())
	}
	if many.Parent().IsValid() {
		t.Errorf("batch span has parent %v, want a new trace linked to its records", many.Parent())
	}
}
