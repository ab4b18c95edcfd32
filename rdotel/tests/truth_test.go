package tests

import (
	"bytes"
	"context"
	"errors"
	"github.com/redeliver-go/redeliver/rdotel"
	"log/slog"
	"slices"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/redeliver-go/redeliver/checkpoint"
	"github.com/redeliver-go/redeliver/redrive"
	"github.com/redeliver-go/redeliver/redrive/redrivetest"
	"github.com/redeliver-go/redeliver/stream"
	"github.com/redeliver-go/redeliver/stream/streamtest"
)

// metered returns a Telemetry on a meter provider of its own and the
// reader of that provider.
func metered(t *testing.T, opts ...rdotel.Option) (*rdotel.Telemetry, *sdkmetric.ManualReader) {
	t.Helper()
	reader := sdkmetric.NewManualReader()
	tel, err := rdotel.New(append([]rdotel.Option{rdotel.WithMeterProvider(sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader)))}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	return tel, reader
}

// runProc runs proc on parts in the background until the end of the test.
func runProc(t *testing.T, proc *stream.Processor, parts ...*streamtest.Partition) {
	t.Helper()
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() { done <- streamtest.Run(ctx, proc, parts...) }()
	t.Cleanup(func() { cancel(); <-done })
}

// runOrders runs proc on a partition orders/0 of n records, in batches of
// up to n, until the end of the test, and waits until all are committed.
func runOrders(t *testing.T, proc *stream.Processor, n int) {
	t.Helper()
	p := streamtest.NewPartition("orders", 0, n)
	p.AppendN(time.Now(), n)
	runProc(t, proc, p)
	if err := p.WaitCommitted(t.Context(), int64(n)); err != nil {
		t.Fatal(err)
	}
}

// A handler that panics: its span ends (failed, error.type the
// processor's *stream.PanicError, as on the metrics), its redelivery links
// to it, and the processor's PanicError still holds the handler's stack.
func TestPanicEndsSpan(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		sr := tracetest.NewSpanRecorder()
		tel, _ := metered(t, rdotel.WithTracerProvider(sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(sr))))
		panicky := stream.HandlerFunc(func(_ context.Context, b *stream.Batch) error {
			if b.Attempt.Retries == 0 {
				panic("nil map in the handler")
			}
			return nil
		})
		var stack []byte
		proc, err := stream.NewProcessor(stream.Chain(panicky, tel.Middleware()), stream.WithHooks(tel.Hooks()),
			stream.WithHooks(stream.Hooks{Delivered: func(e stream.DeliveredEvent) {
				var pe *stream.PanicError
				if errors.As(e.Err, &pe) {
					stack = pe.Stack
				}
			}}),
			stream.WithPolicy(checkpoint.Policy{MaxRetries: 1, Backoff: checkpoint.Fixed(time.Second)}))
		if err != nil {
			t.Fatal(err)
		}
		runOrders(t, proc, 1)
		spans := sr.Ended()
		if len(spans) != 2 {
			t.Fatalf("%d spans ended, want 2: the delivery that panicked and its retry", len(spans))
		}
		first, again := spans[0], spans[1]
		attrs := attribute.NewSet(first.Attributes()...)
		if v, _ := attrs.Value("error.type"); first.Status().Code != codes.Error || v.AsString() != "*stream.PanicError" ||
			!strings.Contains(first.Status().Description, "nil map in the handler") {
			t.Errorf("span of the panic: status %v, error.type %q; want Error with the panic value, *stream.PanicError", first.Status(), v.AsString())
		}
		if v, _ := attrs.Value("redeliver.outcome"); v.AsString() != "failed" {
			t.Errorf("span of the panic: outcome %q, want failed", v.AsString())
		}
		if l := again.Links(); len(l) != 1 || l[0].SpanContext.SpanID() != first.SpanContext().SpanID() {
			t.Errorf("the retry's links %v, want the span of the delivery that panicked", l)
		}
		if !bytes.Contains(stack, []byte("TestPanicEndsSpan")) {
			t.Errorf("the processor's PanicError stack lacks the handler's frame:\n%s", stack)
		}
	})
}

// messaging.process.duration has the bucket boundaries the semantic
// conventions advise, and messaging.operation.name on every point, as
// messaging.client.consumed.messages has (poll for Kafka, receive for the
// other systems).
func TestDurationBucketsAndOperationName(t *testing.T) {
	for system, op := range map[string]string{"kafka": "poll", "eventhubs": "receive"} {
		t.Run(system, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				tel, reader := metered(t, rdotel.WithSystem(system))
				fails := true
				h := stream.HandlerFunc(func(context.Context, *stream.Batch) error {
					time.Sleep(30 * time.Millisecond)
					if fails {
						fails = false
						return errDown
					}
					return nil
				})
				proc, err := stream.NewProcessor(h, stream.WithHooks(tel.Hooks()),
					stream.WithPolicy(checkpoint.Policy{MaxRetries: 1, Backoff: checkpoint.Fixed(time.Second)}))
				if err != nil {
					t.Fatal(err)
				}
				runOrders(t, proc, 5)
				m := collect(t, reader)
				hist := m["messaging.process.duration"].Data.(metricdata.Histogram[float64])
				want := []float64{0.005, 0.01, 0.025, 0.05, 0.075, 0.1, 0.25, 0.5, 0.75, 1, 2.5, 5, 7.5, 10}
				if len(hist.DataPoints) != 2 {
					t.Fatalf("duration points %+v, want 2 (the failure and the retry)", hist.DataPoints)
				}
				for _, dp := range hist.DataPoints {
					if !slices.Equal(dp.Bounds, want) {
						t.Errorf("duration bounds %v, want the conventions' %v", dp.Bounds, want)
					}
					if v, _ := dp.Attributes.Value("messaging.operation.name"); v.AsString() != "process" {
						t.Errorf("duration point %v: messaging.operation.name %q, want process", dp.Attributes.ToSlice(), v.AsString())
					}
					// 30ms lands in the (0.025, 0.05] bucket.
					if dp.BucketCounts[3] != 1 {
						t.Errorf("a 30ms call in buckets %v, want it in the fourth, (0.025, 0.05]", dp.BucketCounts)
					}
				}
				consumed := m["messaging.client.consumed.messages"].Data.(metricdata.Sum[int64])
				for _, dp := range consumed.DataPoints {
					if v, _ := dp.Attributes.Value("messaging.operation.name"); v.AsString() != op {
						t.Errorf("consumed point %v: messaging.operation.name %q, want %s", dp.Attributes.ToSlice(), v.AsString(), op)
					}
				}
			})
		})
	}
}

// messaging.client.consumed.messages counts each record once per consumer:
// the records after a poison record, delivered again as the next batch,
// and a batch resumed after a stop, are not counted again.
func TestConsumedCountsEachRecordOnce(t *testing.T) {
	t.Run("poison record", func(t *testing.T) { synctest.Test(t, consumedAfterPoison) })
	t.Run("stop and resume", func(t *testing.T) { synctest.Test(t, consumedAfterResume) })
}

// redeliver.exhaustion.actions names the processor's action only as the
// program names it (WithExhaustionAction): a processor that dead-letters,
// with a Telemetry told nothing, has no redeliver.action rather than
// "skip".
func TestExhaustionActionNamedOnlyWhenGiven(t *testing.T) {
	for _, tc := range []struct {
		name string
		opts []rdotel.Option
		want string // the redeliver.action of the point, "" for none
	}{
		{"not given", nil, ""},
		{"given", []rdotel.Option{rdotel.WithExhaustionAction("dead_letter")}, "dead_letter"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				tel, reader := metered(t, tc.opts...)
				dl, err := stream.DeadLetter(&redrivetest.Publisher{}, "orders.dlq")
				if err != nil {
					t.Fatal(err)
				}
				fail := stream.HandlerFunc(func(context.Context, *stream.Batch) error { return errDown })
				proc, err := stream.NewProcessor(fail, stream.WithHooks(tel.Hooks()), stream.WithExhaustionAction(dl))
				if err != nil {
					t.Fatal(err)
				}
				runOrders(t, proc, 1)
				synctest.Wait()
				s := collect(t, reader)["redeliver.exhaustion.actions"].Data.(metricdata.Sum[int64])
				if len(s.DataPoints) != 1 || s.DataPoints[0].Value != 1 {
					t.Fatalf("exhaustion actions: %+v, want one point of 1", s.DataPoints)
				}
				got, _ := s.DataPoints[0].Attributes.Value("redeliver.action")
				if got.AsString() != tc.want {
					t.Errorf("redeliver.action = %q, want %q", got.AsString(), tc.want)
				}
			})
		})
	}
}

func consumedAfterPoison(t *testing.T) {
	tel, reader := metered(t)
	// orders/0: record 0 is poison, given up alone after its retry; the
	// four after it come again as a batch of their own.
	poison := stream.PerRecord(func(_ context.Context, r *stream.Record) error {
		if r.Offset == 0 {
			return errDown
		}
		return nil
	})
	proc, err := stream.NewProcessor(poison, stream.WithHooks(tel.Hooks()),
		stream.WithPolicy(checkpoint.Policy{MaxRetries: 1, Backoff: checkpoint.Fixed(time.Second)}))
	if err != nil {
		t.Fatal(err)
	}
	runOrders(t, proc, 5)
	synctest.Wait()
	if got := sum(t, collect(t, reader)["messaging.client.consumed.messages"], onP0); got != 5 {
		t.Errorf("consumed after a poison record: %d, want 5", got)
	}
}

func consumedAfterResume(t *testing.T) {
	tel, reader := metered(t)
	proc, p := stopped(t, tel)
	if err := proc.Resume(t.Context(), "orders", 0); err != nil {
		t.Fatal(err)
	}
	if err := p.WaitCommitted(t.Context(), 1); err != nil {
		t.Fatal(err)
	}
	synctest.Wait()
	if got := sum(t, collect(t, reader)["messaging.client.consumed.messages"], onP0); got != 1 {
		t.Errorf("consumed after a stop and a resume: %d, want 1", got)
	}
}

// stopped runs a processor whose one record fails three times (the first
// delivery and its one retry, then the first delivery after a Resume) and
// whose action stops the partition; it returns once the partition is
// stopped.
func stopped(t *testing.T, tel *rdotel.Telemetry) (*stream.Processor, *streamtest.Partition) {
	t.Helper()
	deliveries := 0
	h := stream.HandlerFunc(func(context.Context, *stream.Batch) error {
		if deliveries++; deliveries <= 3 {
			return errDown
		}
		return nil
	})
	proc, err := stream.NewProcessor(h, stream.WithHooks(tel.Hooks()), stream.WithExhaustionAction(stream.StopPartition),
		stream.WithPolicy(checkpoint.Policy{MaxRetries: 1, Backoff: checkpoint.Fixed(time.Minute)}))
	if err != nil {
		t.Fatal(err)
	}
	p := streamtest.NewPartition("orders", 0, 1)
	p.AppendN(time.Now(), 1)
	runProc(t, proc, p)
	time.Sleep(2 * time.Minute)
	synctest.Wait()
	if len(proc.Stopped()) != 1 {
		t.Fatalf("stopped partitions %v, want orders/0", proc.Stopped())
	}
	return proc, p
}

// After Resume, a partition waiting out its backoff is in the backoff
// gauge only: the stopped gauge clears.
func TestStoppedGaugeClearsOnResume(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		tel, reader := metered(t)
		proc, p := stopped(t, tel)
		orders := attribute.String("messaging.destination.name", "orders")
		m := collect(t, reader)
		if s, b := gauge[int64](t, m["redeliver.partitions.stopped"], orders), gauge[int64](t, m["redeliver.partitions.backoff"], orders); s != 1 || b != 0 {
			t.Errorf("stopped: gauges stopped %d, backoff %d; want 1, 0", s, b)
		}
		if err := proc.Resume(t.Context(), "orders", 0); err != nil {
			t.Fatal(err)
		}
		time.Sleep(time.Second) // the first delivery after Resume fails: a minute's backoff
		synctest.Wait()
		m = collect(t, reader)
		if s, b := gauge[int64](t, m["redeliver.partitions.stopped"], orders), gauge[int64](t, m["redeliver.partitions.backoff"], orders); s != 0 || b != 1 {
			t.Errorf("resumed, in backoff: gauges stopped %d, backoff %d; want 0, 1", s, b)
		}
		if err := p.WaitCommitted(t.Context(), 1); err != nil {
			t.Fatal(err)
		}
	})
}

// One Telemetry serves two processors on the same topic and partition,
// each with its own Hooks: one processor's checkpoint does not clear the
// other's stopped partition, and a claim of one (their claim IDs are
// equal) does not end the other's.
func TestOneTelemetryTwoProcessors(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		tel, reader := metered(t, rdotel.WithConsumerGroup("billing"))
		procA, _ := stopped(t, tel)
		ok := stream.HandlerFunc(func(context.Context, *stream.Batch) error { return nil })
		procB, err := stream.NewProcessor(ok, stream.WithHooks(tel.Hooks()))
		if err != nil {
			t.Fatal(err)
		}
		pB := streamtest.NewPartition("orders", 0, 1)
		pB.AppendN(time.Now(), 3)
		runProc(t, procB, pB)
		if err := pB.WaitCommitted(t.Context(), 3); err != nil {
			t.Fatal(err)
		}
		synctest.Wait()
		m := collect(t, reader)
		if got := gauge[int64](t, m["redeliver.partitions.stopped"]); got != 1 {
			t.Errorf("stopped gauge %d after the other processor's checkpoints, want 1", got)
		}
		if got := gauge[float64](t, m["redeliver.checkpoint.withheld.age"], onP0); got != 120 {
			t.Errorf("withheld age %vs, want 120s: the stopped partition's, the older", got)
		}
		if got := sum(t, m["messaging.client.consumed.messages"], onP0); got != 4 {
			t.Errorf("consumed %d, want 4: 1 by the stopped processor, 3 by the other", got)
		}
		if len(procA.Stopped()) != 1 {
			t.Error("the first processor's partition is no longer stopped")
		}
	})
}

// Hooks from one call given to two processors: it is logged, at Error
// level, through slog.Default.
func TestSharedHooksLogged(t *testing.T) {
	var logs bytes.Buffer
	prev := slog.Default()
	slog.SetDefault(slog.New(slog.NewTextHandler(&logs, nil)))
	defer slog.SetDefault(prev)
	synctest.Test(t, func(t *testing.T) {
		tel, _ := metered(t)
		hooks := tel.Hooks()
		ok := stream.HandlerFunc(func(context.Context, *stream.Batch) error { return nil })
		for i := range 2 {
			proc, err := stream.NewProcessor(ok, stream.WithHooks(hooks))
			if err != nil {
				t.Fatal(err)
			}
			runProc(t, proc, streamtest.NewPartition("orders", int32(i), 1))
		}
		synctest.Wait()
	})
	if !strings.Contains(logs.String(), "level=ERROR") || !strings.Contains(logs.String(), "call Hooks once for each processor") {
		t.Errorf("log:\n%s\nwant the shared hooks reported", logs.String())
	}
}

// No nil option, nil argument or zero value makes rdotel panic: New says
// which option is wrong; a Telemetry New did not make reports nothing and
// says so in the log, once per method.
func TestNilAndZeroValues(t *testing.T) {
	if tel, err := rdotel.New(rdotel.WithSystem("kafka"), nil); err == nil || err.Error() != "rdotel: New: option 2 of 2 is nil" || tel != nil {
		t.Errorf("New with a nil option = %v, %v", tel, err)
	}
	for _, tc := range []struct {
		name string
		opt  rdotel.Option
		want string
	}{
		{"empty system", rdotel.WithSystem(""), "rdotel: WithSystem: empty system name"},
		{"negative links", rdotel.WithMaxLinks(-1), "rdotel: negative maximum of links"},
		{"empty action", rdotel.WithExhaustionAction(""), "rdotel: WithExhaustionAction: empty name: want skip, dead_letter, park or stop"},
	} {
		if _, err := rdotel.New(tc.opt); err == nil || err.Error() != tc.want {
			t.Errorf("%s: New = %v, want %q", tc.name, err, tc.want)
		}
	}
	// Nil providers and propagator mean the global ones.
	if _, err := rdotel.New(rdotel.WithMeterProvider(nil), rdotel.WithTracerProvider(nil), rdotel.WithPropagator(nil), rdotel.WithConsumerGroup("")); err != nil {
		t.Errorf("New with nil providers = %v", err)
	}

	var logs bytes.Buffer
	prev := slog.Default()
	slog.SetDefault(slog.New(slog.NewTextHandler(&logs, nil)))
	defer slog.SetDefault(prev)
	for name, tel := range map[string]*rdotel.Telemetry{"zero": {}, "nil": nil} {
		hooks, mw := tel.Hooks(), tel.Middleware()
		proc, err := stream.NewProcessor(stream.Chain(stream.HandlerFunc(func(context.Context, *stream.Batch) error { return nil }), mw),
			stream.WithHooks(hooks))
		if err != nil {
			t.Fatal(err)
		}
		p := streamtest.NewPartition("orders", 0, 1)
		p.AppendN(time.Now(), 2)
		ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
		done := make(chan error, 1)
		go func() { done <- streamtest.Run(ctx, proc, p) }()
		if err := p.WaitCommitted(ctx, 2); err != nil {
			t.Errorf("%s Telemetry: the processor did not run: %v", name, err)
		}
		cancel()
		<-done

		// Its re-drive hooks, given to Park and a scheduler, report
		// nothing and break nothing.
		store := redrivetest.NewMemStore()
		park, err := redrive.Park(store, time.Microsecond, redrive.WithHooks(tel.RedriveHooks()))
		if err != nil {
			t.Fatal(err)
		}
		if err := park(t.Context(), &stream.Batch{Topic: "orders", Records: []stream.Record{{Topic: "orders", Offset: 7}}}, nil); err != nil {
			t.Errorf("%s Telemetry: Park: %v", name, err)
		}
		pub := &redrivetest.Publisher{}
		later := streamtest.NewClock(time.Now().Add(time.Hour)) // the entry is due
		sch, err := redrive.NewScheduler(store, pub, redrive.WithHooks(tel.RedriveHooks()), redrive.WithClock(later),
			redrive.WithLogger(slog.New(slog.DiscardHandler)))
		if err != nil {
			t.Fatal(err)
		}
		if ev := sch.Sweep(t.Context()); ev.Redriven != 1 || len(pub.Records()) != 1 {
			t.Errorf("%s Telemetry: sweep %+v, published %d, want the entry re-driven", name, ev, len(pub.Records()))
		}
	}
	for _, m := range []string{"Hooks", "Middleware", "RedriveHooks"} {
		want := "rdotel: Telemetry." + m + " called on a Telemetry that rdotel.New did not make"
		if n := strings.Count(logs.String(), want); n != 1 {
			t.Errorf("log says %q %d times, want once:\n%s", want, n, logs.String())
		}
	}
	var nilCtx context.Context // the mistake under test
	if ctx := rdotel.RecordContext(nilCtx, nil); ctx == nil {
		t.Error("RecordContext(nil, nil) = nil")
	}
	if ctx := rdotel.RecordContext(t.Context(), nil); ctx != t.Context() {
		t.Error("RecordContext(ctx, nil) is not ctx")
	}
}

// A record that redrive.ParkByKey parks behind its locked key, in key
// ordering, was not handled: it is not timed as a processing (nor counted
// as a success there) but counted in redeliver.exhaustion.actions with
// the outcome parked_behind. Records 1 and 3 of key a go behind record 0,
// given up and parked; record 2 of key b is handled.
func TestParkedBehindNotCountedAsSuccess(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		tel, reader := metered(t, rdotel.WithExhaustionAction("park"))
		park, err := redrive.ParkByKey(redrivetest.NewMemStore(), time.Minute, redrive.WithLogger(slog.New(slog.DiscardHandler)))
		if err != nil {
			t.Fatal(err)
		}
		h := stream.PerRecord(func(_ context.Context, r *stream.Record) error {
			if string(r.Key) == "a" {
				return errDown
			}
			return nil
		})
		proc, err := stream.NewProcessor(h, stream.WithOrdering(stream.ByKey), stream.WithConcurrency(1, 0), park,
			stream.WithHooks(tel.Hooks()), stream.WithPolicy(checkpoint.Policy{MaxRetries: 0}),
			stream.WithLogger(slog.New(slog.DiscardHandler)))
		if err != nil {
			t.Fatal(err)
		}
		p := streamtest.NewPartition("orders", 0, 5)
		end := p.AppendKeyed(time.Now(), "a", "a", "b", "a")
		runProc(t, proc, p)
		if err := p.WaitCommitted(t.Context(), end); err != nil {
			t.Fatal(err)
		}
		synctest.Wait()
		m := collect(t, reader)
		var calls, failed uint64
		for _, dp := range m["messaging.process.duration"].Data.(metricdata.Histogram[float64]).DataPoints {
			calls += dp.Count
			if _, ok := dp.Attributes.Value("error.type"); ok {
				failed += dp.Count
			}
		}
		if calls != 2 || failed != 1 {
			t.Errorf("process durations: %d, %d of them failed; want 2 handler calls (records 0 and 2), 1 failed", calls, failed)
		}
		behind := attribute.String("redeliver.action.outcome", "parked_behind")
		if got := sum(t, m["redeliver.exhaustion.actions"], onP0, behind); got != 2 {
			t.Errorf("exhaustion actions parked_behind: %d, want 2 (records 1 and 3)", got)
		}
		ok := attribute.String("redeliver.action.outcome", "succeeded")
		if got := sum(t, m["redeliver.exhaustion.actions"], onP0, ok); got != 1 {
			t.Errorf("exhaustion actions succeeded: %d, want 1 (record 0's park)", got)
		}
	})
}
