package tests

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"go.opentelemetry.io/otel/attribute"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/redeliver-go/redeliver/checkpoint"
	"github.com/redeliver-go/redeliver/rdotel"
	"github.com/redeliver-go/redeliver/redrive"
	"github.com/redeliver-go/redeliver/redrive/redrivetest"
	"github.com/redeliver-go/redeliver/stream"
	"github.com/redeliver-go/redeliver/stream/streamtest"
)

// run runs proc on p until its n records are checkpointed.
func run(proc *stream.Processor, p *streamtest.Partition, n int64) {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- streamtest.Run(ctx, proc, p) }()
	if err := p.WaitCommitted(ctx, n); err != nil {
		fmt.Println(err)
	}
	cancel()
	<-done
}

// failOnce fails each batch's first delivery.
var failOnce = stream.HandlerFunc(func(_ context.Context, b *stream.Batch) error {
	if b.Attempt.Retries == 0 {
		return errors.New("downstream timed out")
	}
	return nil
})

// Metrics of a processor whose batch is retried once: its 3 records are
// consumed once, one retry is scheduled, the handler is called twice.
func Example_metrics() {
	reader := sdkmetric.NewManualReader() // an exporter, in a real program
	tel, err := rdotel.New(rdotel.WithMeterProvider(sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))),
		rdotel.WithConsumerGroup("orders-app"))
	if err != nil {
		fmt.Println(err)
		return
	}
	proc, err := stream.NewProcessor(failOnce, stream.WithHooks(tel.Hooks()),
		stream.WithPolicy(checkpoint.Policy{MaxRetries: 3, Backoff: checkpoint.Fixed(0)}))
	if err != nil {
		fmt.Println(err)
		return
	}
	orders := streamtest.NewPartition("orders", 0, 5)
	orders.AppendN(time.Now(), 3)
	run(proc, orders, 3)

	var rm metricdata.ResourceMetrics
	if err := reader.Collect(context.Background(), &rm); err != nil {
		fmt.Println(err)
		return
	}
	for _, m := range rm.ScopeMetrics[0].Metrics {
		switch d := m.Data.(type) {
		case metricdata.Sum[int64]:
			fmt.Printf("%s: %d\n", m.Name, d.DataPoints[0].Value)
		case metricdata.Histogram[float64]:
			var n uint64
			for _, p := range d.DataPoints {
				n += p.Count
			}
			fmt.Printf("%s: %d recorded\n", m.Name, n)
		}
	}
	// Unordered output:
	// messaging.client.consumed.messages: 3
	// messaging.process.duration: 2 recorded
	// redeliver.retries.scheduled: 1
	// redeliver.redelivery.lateness: 1 recorded
}

// A span per delivery: a redelivery is a new span, linked to the first.
func Example_spans() {
	spans := tracetest.NewSpanRecorder() // an exporter, in a real program
	tel, err := rdotel.New(rdotel.WithTracerProvider(sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(spans))))
	if err != nil {
		fmt.Println(err)
		return
	}
	proc, err := stream.NewProcessor(stream.Chain(failOnce, tel.Middleware()),
		stream.WithPolicy(checkpoint.Policy{MaxRetries: 3, Backoff: checkpoint.Fixed(0)}))
	if err != nil {
		fmt.Println(err)
		return
	}
	orders := streamtest.NewPartition("orders", 0, 5)
	orders.AppendN(time.Now(), 3)
	run(proc, orders, 3)

	ended := spans.Ended()
	for _, s := range ended {
		attrs := attribute.NewSet(s.Attributes()...)
		attempt, _ := attrs.Value("redeliver.attempt")
		linked := len(s.Links()) == 1 && s.Links()[0].SpanContext.SpanID() == ended[0].SpanContext().SpanID()
		fmt.Printf("%s, attempt %d: %s (linked to the first: %v)\n", s.Name(), attempt.AsInt64(), s.Status().Code, linked)
	}
	// Output:
	// process orders, attempt 1: Error (linked to the first: false)
	// process orders, attempt 2: Unset (linked to the first: true)
}

// Metrics of the re-drive: a parked record is re-driven, fails again and
// goes back to its entry (a re-park), and is timed out after the maximum
// re-drives.
func Example_redrive() {
	reader := sdkmetric.NewManualReader() // an exporter, in a real program
	tel, err := rdotel.New(rdotel.WithMeterProvider(sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))),
		rdotel.WithConsumerGroup("orders-app"))
	if err != nil {
		fmt.Println(err)
		return
	}
	ctx := context.Background()
	store, pub := redrivetest.NewMemStore(), &redrivetest.Publisher{}
	clock := streamtest.NewClock(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	opts := []redrive.Option{redrive.WithHooks(tel.RedriveHooks()), redrive.WithClock(clock), redrive.WithLogger(slog.New(slog.DiscardHandler))}
	park, err := redrive.Park(store, time.Minute, opts...)
	if err != nil {
		fmt.Println(err)
		return
	}
	sch, err := redrive.NewScheduler(store, pub, append(opts, redrive.WithMaxRedrives(1))...)
	if err != nil {
		fmt.Println(err)
		return
	}
	// A processor gives the poison record up and parks it; a minute later
	// the scheduler re-drives it to orders, where it fails again and goes
	// back to its entry; a minute later it is timed out.
	poison := stream.Record{Topic: "orders", Offset: 7, Value: []byte("poison")}
	if err := park(ctx, &stream.Batch{Topic: "orders", Records: []stream.Record{poison}}, nil); err != nil {
		fmt.Println(err)
		return
	}
	clock.Advance(time.Minute)
	sch.Sweep(ctx)
	if err := park(ctx, &stream.Batch{Topic: "orders", Records: pub.Records()}, nil); err != nil {
		fmt.Println(err)
		return
	}
	clock.Advance(time.Minute)
	sch.Sweep(ctx)

	var rm metricdata.ResourceMetrics
	if err := reader.Collect(ctx, &rm); err != nil {
		fmt.Println(err)
		return
	}
	for _, m := range rm.ScopeMetrics[0].Metrics {
		p := m.Data.(metricdata.Sum[int64]).DataPoints[0]
		topic, _ := p.Attributes.Value("messaging.destination.name")
		fmt.Printf("%s{topic=%s}: %d\n", m.Name, topic.Emit(), p.Value)
	}
	// Unordered output:
	// redeliver.redrive.redrives{topic=orders}: 1
	// redeliver.redrive.reparks{topic=orders}: 1
	// redeliver.redrive.timeouts{topic=orders}: 1
}
