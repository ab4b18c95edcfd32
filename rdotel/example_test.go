package rdotel_test

import (
	"context"
	"fmt"

	"go.opentelemetry.io/otel/trace"

	"github.com/redeliver-go/redeliver/rdotel"
	"github.com/redeliver-go/redeliver/stream"
)

// traceparent is the W3C trace context header a producer put on a record.
const traceparent = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"

// The middleware starts a span for each delivery and gives the handler its
// context: a delivery of one record continues the record's trace. Give the
// middleware and the hooks to the processor (a program's adapter runs it);
// here the chain is called on a batch directly. Without WithTracerProvider
// and WithMeterProvider, rdotel uses the global providers (otel.SetTracerProvider,
// otel.SetMeterProvider). rdotel/tests has runnable examples of the metrics
// and spans with the OpenTelemetry SDK.
func ExampleTelemetry_Middleware() {
	tel, err := rdotel.New(rdotel.WithConsumerGroup("orders-app"))
	if err != nil {
		fmt.Println(err)
		return
	}
	handler := stream.HandlerFunc(func(ctx context.Context, b *stream.Batch) error {
		fmt.Println("trace", trace.SpanContextFromContext(ctx).TraceID())
		return nil
	})
	h := stream.Chain(handler, tel.Middleware())
	// In a program: stream.NewProcessor(h, stream.WithHooks(tel.Hooks()))
	rec := stream.Record{Topic: "orders", Headers: []stream.Header{{Key: "traceparent", Value: []byte(traceparent)}}}
	_ = h.Handle(context.Background(), &stream.Batch{Topic: "orders", Records: []stream.Record{rec}})
	// Output:
	// trace 0af7651916cd43dd8448eb211c80319c
}

// A handler that works record by record continues each record's trace.
func ExampleRecordContext() {
	rec := &stream.Record{Headers: []stream.Header{{Key: "traceparent", Value: []byte(traceparent)}}}
	ctx := rdotel.RecordContext(context.Background(), rec)
	fmt.Println(trace.SpanContextFromContext(ctx).TraceID())
	// Output:
	// 0af7651916cd43dd8448eb211c80319c
}
