package tests

import (
	"context"
	"github.com/redeliver-go/redeliver/rdotel"
	"testing"
	"testing/synctest"
	"time"

	"go.opentelemetry.io/otel/attribute"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"

	"github.com/redeliver-go/redeliver/checkpoint"
	"github.com/redeliver-go/redeliver/stream"
	"github.com/redeliver-go/redeliver/stream/streamtest"
)

// An outage across 3 partitions for 20s: the outage metrics show it in
// force while it lasts (one outage, the processor in it, probes), and its
// duration once a probe succeeds.
func TestOutageMetrics(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		reader := sdkmetric.NewManualReader()
		tel, err := rdotel.New(rdotel.WithMeterProvider(sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))),
			rdotel.WithConsumerGroup("billing"))
		if err != nil {
			t.Fatal(err)
		}
		budget, err := stream.NewBudget(stream.BudgetConfig{MaxTokens: 4, ProbeBackoff: checkpoint.Capped(8*time.Second, checkpoint.Exponential(time.Second))})
		if err != nil {
			t.Fatal(err)
		}
		var parts []*streamtest.Partition
		for i := range 3 {
			p := streamtest.NewPartition("orders", int32(i), 5)
			p.AppendN(time.Now(), 5)
			parts = append(parts, p)
		}
		recovery := time.Now().Add(20 * time.Second)
		h := stream.HandlerFunc(func(context.Context, *stream.Batch) error {
			if time.Now().Before(recovery) {
				return errDown
			}
			return nil
		})
		proc, err := stream.NewProcessor(h, stream.WithHooks(tel.Hooks()), stream.WithOutageBudget(budget),
			stream.WithPolicy(checkpoint.Policy{MaxRetries: 2, Backoff: checkpoint.Fixed(time.Second)}))
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithCancel(t.Context())
		defer cancel()
		done := make(chan error, 1)
		go func() { done <- streamtest.Run(ctx, proc, parts...) }()

		procAttrs := []attribute.KeyValue{attribute.String("messaging.system", "kafka"), attribute.String("messaging.consumer.group.name", "billing")}
		// Probes at 1s, 3s (2s later), 7s, 15s, 23s: four by 10s.
		time.Sleep(10 * time.Second)
		synctest.Wait()
		m := collect(t, reader)
		if got := sum(t, m["redeliver.outages"], procAttrs...); got != 1 {
			t.Errorf("outages during the outage: %d, want 1", got)
		}
		if got := sum(t, m["redeliver.outage.active"], procAttrs...); got != 1 {
			t.Errorf("processors in an outage during it: %d, want 1", got)
		}
		if got := sum(t, m["redeliver.outage.probes"], procAttrs...); got != 3 {
			t.Errorf("probes by 10s: %d, want 3 (at 1s, 3s, 7s)", got)
		}
		if _, ok := m["redeliver.outage.duration"]; ok {
			t.Error("an outage duration before the outage ended")
		}

		wctx, wcancel := context.WithTimeout(ctx, time.Hour)
		defer wcancel()
		for _, p := range parts {
			if err := p.WaitCommitted(wctx, 5); err != nil {
				t.Fatal(err)
			}
		}
		synctest.Wait()
		m = collect(t, reader)
		if got := sum(t, m["redeliver.outage.active"], procAttrs...); got != 0 {
			t.Errorf("processors in an outage after it: %d, want 0", got)
		}
		if got := sum(t, m["redeliver.outage.probes"], procAttrs...); got != 5 {
			t.Errorf("probes: %d, want 5 (the fifth, at 23s, succeeds)", got)
		}
		hist, ok := m["redeliver.outage.duration"].Data.(metricdata.Histogram[float64])
		if !ok || len(hist.DataPoints) != 1 || hist.DataPoints[0].Count != 1 || hist.DataPoints[0].Sum != 23 {
			t.Errorf("outage duration %+v, want one outage of 23s", m["redeliver.outage.duration"].Data)
		}
		if g, ok := m["redeliver.batches.given_up"]; ok && sum(t, g) != 0 {
			t.Errorf("batches given up: %d, want 0", sum(t, g))
		}
		cancel()
		if err := <-done; err != nil {
			t.Fatal(err)
		}
	})
}
