package tests

import (
	"context"
	"github.com/redeliver-go/redeliver/rdotel"
	"testing"

	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"

	"github.com/redeliver-go/redeliver/checkpoint"
	"github.com/redeliver-go/redeliver/stream"
	"github.com/redeliver-go/redeliver/stream/streamtest"
)

// BenchmarkSuccessPath runs the engine's success path (batches of 100
// records from an in-memory generator, every batch succeeding) without
// telemetry, with hooks that do nothing, with the metrics hooks (OpenTelemetry SDK, manual reader), and
// with metrics and a span per delivery (SDK tracer, every span sampled and
// ended into a processor that drops it). Compare records/s across the
// sub-benchmarks of one run; scripts/bench.sh runs them in alternating
// rounds.
func BenchmarkSuccessPath(b *testing.B) {
	const size = 100
	var sink int
	h := stream.HandlerFunc(func(_ context.Context, bt *stream.Batch) error {
		for i := range bt.Records {
			sink += len(bt.Records[i].Value)
		}
		return nil
	})
	policy := stream.WithPolicy(checkpoint.Policy{MaxRetries: 10, Backoff: checkpoint.Exponential(1)})
	run := func(b *testing.B, handler stream.Handler, opts ...stream.Option) {
		proc, err := stream.NewProcessor(handler, append([]stream.Option{policy}, opts...)...)
		if err != nil {
			b.Fatal(err)
		}
		ctx, cancel := context.WithCancel(b.Context())
		defer cancel()
		c := streamtest.NewGenerator(b.N, size, 100)
		go func() { <-c.Done(); cancel() }()
		b.ReportAllocs()
		b.ResetTimer()
		_ = proc.Process(ctx, c)
		b.StopTimer()
		if last, _ := c.Committed(); last != int64(b.N*size) {
			b.Fatalf("committed %d, want %d", last, b.N*size)
		}
		b.ReportMetric(float64(b.N*size)/b.Elapsed().Seconds(), "records/s")
	}
	b.Run("off", func(b *testing.B) { run(b, h) })
	// The floor of any telemetry through the hooks: a Delivered hook (the
	// processor reads the clock before and after the handler for it) and
	// a Checkpointed hook that do nothing.
	b.Run("empty-hooks", func(b *testing.B) {
		run(b, h, stream.WithHooks(stream.Hooks{Delivered: func(stream.DeliveredEvent) {}, Checkpointed: func(stream.CheckpointEvent) {}}))
	})
	b.Run("metrics", func(b *testing.B) {
		tel, err := rdotel.New(rdotel.WithMeterProvider(sdkmetric.NewMeterProvider(sdkmetric.WithReader(sdkmetric.NewManualReader()))))
		if err != nil {
			b.Fatal(err)
		}
		run(b, h, stream.WithHooks(tel.Hooks()))
	})
	b.Run("traces", func(b *testing.B) {
		tel, err := rdotel.New(rdotel.WithMeterProvider(sdkmetric.NewMeterProvider(sdkmetric.WithReader(sdkmetric.NewManualReader()))),
			rdotel.WithTracerProvider(sdktrace.NewTracerProvider(sdktrace.WithSampler(sdktrace.AlwaysSample()))))
		if err != nil {
			b.Fatal(err)
		}
		run(b, stream.Chain(h, tel.Middleware()), stream.WithHooks(tel.Hooks()))
	})
	_ = sink
}
