package bench

import (
	"fmt"
	"os"
	"testing"

	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"

	"github.com/redeliver-go/redeliver/rdotel"
	"github.com/redeliver-go/redeliver/stream"
)

// telemetry is what a consumer adds to its Processor for telemetry.
type telemetry struct {
	hooks stream.Hooks
	mw    stream.Middleware // nil: no span per delivery
}

// BenchmarkTelemetry measures what rdotel costs a real consumer: the
// franz-go adapter's success path (every record succeeds, 8 partitions,
// the peers' records and batches) without telemetry ("off"), with
// rdotel's metrics ("metrics": the OpenTelemetry SDK, a manual reader that
// is never read) and with metrics and a span per delivery ("traces": every
// span sampled, ended into no exporter). Compare records/s across the
// leaves of one run: scripts/bench.sh runs them in alternating rounds,
// each in a process of its own, as the other peers.
func BenchmarkTelemetry(b *testing.B) {
	addrs := benchAddrs(b)
	for _, leaf := range []string{"off", "metrics", "traces"} {
		b.Run(leaf, func(b *testing.B) {
			const partitions = 8
			b.Run(fmt.Sprintf("partitions=%d", partitions), func(b *testing.B) {
				var tel []telemetry
				if leaf != "off" {
					opts := []rdotel.Option{rdotel.WithMeterProvider(sdkmetric.NewMeterProvider(sdkmetric.WithReader(sdkmetric.NewManualReader())))}
					if leaf == "traces" {
						opts = append(opts, rdotel.WithTracerProvider(sdktrace.NewTracerProvider(sdktrace.WithSampler(sdktrace.AlwaysSample()))))
					}
					t, err := rdotel.New(opts...)
					if err != nil {
						b.Fatal(err)
					}
					tel = append(tel, telemetry{hooks: t.Hooks()})
					if leaf == "traces" {
						tel[0].mw = t.Middleware()
					}
				}
				topic := fmt.Sprintf("telemetry-%d-%d", os.Getpid(), benchRun.Add(1))
				benchProduce(b, addrs, topic, partitions, b.N)
				l := newLeaf(b, partitions)
				l.noFail = true
				b.ReportAllocs()
				cpu0 := cpuTime()
				b.ResetTimer()
				end := franzWith(l, addrs, topic, tel...)
				b.StopTimer()
				cpu := cpuTime() - cpu0
				l.check()
				checkCommitted(l, addrs, topic)
				b.ReportMetric(float64(b.N)/l.elapsed(end).Seconds(), "records/s")
				b.ReportMetric(float64(cpu)/float64(b.N), "cpu-ns/record")
				benchDelete(b, addrs, topic)
			})
		})
	}
}
