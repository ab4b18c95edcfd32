package rdotel_test

import (
	"context"
	"fmt"

	"go.opentelemetry.io/otel/trace"

	"github.com/redeliver-go/redeliver/rdotel"
	"github.com/redeliver-go/redeliver/stream"
)

// A handler that works record by record continues each record's trace.
func ExampleRecordContext() {
	traceparent := "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"
	rec := &stream.Record{Headers: []stream.Header{{Key: "traceparent", Value: []byte(traceparent)}}}
	ctx := rdotel.RecordContext(context.Background(), rec)
	fmt.Println(trace.SpanContextFromContext(ctx).TraceID())
	// Output:
	// 0af7651916cd43dd8448eb211c80319c
}
