package tests

import (
	"context"
	"errors"
	"fmt"
	"github.com/redeliver-go/redeliver/rdotel"
	"maps"
	"slices"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	semconv "go.opentelemetry.io/otel/semconv/v1.43.0"

	"github.com/redeliver-go/redeliver/checkpoint"
	"github.com/redeliver-go/redeliver/stream"
	"github.com/redeliver-go/redeliver/stream/streamtest"
)

// The metric table, as the package doc and the README give it: the
// attribute sets partition, topic and processor, then each metric's own
// attributes; an attribute in parentheses is there only when it applies.
// TestDocsNameOneSetOfMetrics checks the docs against it, and
// TestConformance and TestRedriveConformance the SDK's export.
var metricTable = []tableRow{
	{"messaging.client.consumed.messages", "counter", "{message}", "partition, messaging.operation.name"},
	{"messaging.process.duration", "histogram", "s", "partition, messaging.operation.name, redeliver.attempt, (error.type)"},
	{"redeliver.retries.scheduled", "counter", "{retry}", "partition, (error.type)"},
	{"redeliver.batches.given_up", "counter", "{batch}", "partition, redeliver.reason"},
	{"redeliver.exhaustion.actions", "counter", "{action}", "partition, (redeliver.action), redeliver.action.outcome"},
	{"redeliver.redelivery.lateness", "histogram", "s", "partition"},
	{"redeliver.partitions.backoff", "gauge", "{partition}", "topic"},
	{"redeliver.partitions.stopped", "gauge", "{partition}", "topic"},
	{"redeliver.checkpoint.withheld.age", "gauge", "s", "partition"},
	{"redeliver.outages", "counter", "{outage}", "processor"},
	{"redeliver.outage.active", "updowncounter", "{processor}", "processor"},
	{"redeliver.outage.probes", "counter", "{probe}", "processor"},
	{"redeliver.outage.duration", "histogram", "s", "processor"},
	{"redeliver.redrive.redrives", "counter", "{redrive}", "processor, (messaging.destination.name)"},
	{"redeliver.redrive.reparks", "counter", "{repark}", "processor, (messaging.destination.name)"},
	{"redeliver.redrive.timeouts", "counter", "{timeout}", "processor, (messaging.destination.name)"},
	{"redeliver.redrive.failures", "counter", "{failure}", "processor, (messaging.destination.name), error.type"},
	{"redeliver.redrive.sweeps.failed", "counter", "{sweep}", "processor, error.type"},
}

// redriveMetric reports whether a metric of the table is the re-drive's:
// TestRedriveConformance covers those, TestConformance the others.
func redriveMetric(name string) bool { return strings.HasPrefix(name, "redeliver.redrive.") }

type tableRow struct{ name, instrument, unit, attrs string }

// attributeSets are the sets the table names. messaging.consumer.group.name
// is in each when the Telemetry has a group, as every one of these tests'
// has.
var attributeSets = map[string][]string{
	"partition": {"messaging.system", "messaging.destination.name", "messaging.destination.partition.id", "messaging.consumer.group.name"},
	"topic":     {"messaging.system", "messaging.destination.name", "messaging.consumer.group.name"},
	"processor": {"messaging.system", "messaging.consumer.group.name"},
}

// keys returns the attribute keys a row requires and those it allows.
func (r tableRow) keys() (required, allowed map[string]bool) {
	required, allowed = map[string]bool{}, map[string]bool{}
	for _, a := range strings.Split(r.attrs, ", ") {
		optional := strings.HasPrefix(a, "(")
		a = strings.Trim(a, "()")
		names := attributeSets[a]
		if names == nil {
			names = []string{a}
		}
		for _, n := range names {
			allowed[n] = true
			if !optional {
				required[n] = true
			}
		}
	}
	return required, allowed
}

// instrument names the kind of instrument m's data comes from.
func instrument(m metricdata.Metrics) string {
	switch d := m.Data.(type) {
	case metricdata.Sum[int64]:
		if d.IsMonotonic {
			return "counter"
		}
		return "updowncounter"
	case metricdata.Histogram[float64]:
		return "histogram"
	case metricdata.Gauge[int64], metricdata.Gauge[float64]:
		return "gauge"
	}
	return fmt.Sprintf("%T", m.Data)
}

// recorder keeps the history of the processors, by consumer group, as
// their hooks report it.
type recorder struct {
	mu  sync.Mutex
	evs []event
}

type event struct {
	group string
	e     any // a stream event struct
	at    time.Time
}

func (r *recorder) add(group string, e any) {
	r.mu.Lock()
	r.evs = append(r.evs, event{group, e, time.Now()})
	r.mu.Unlock()
}

func (r *recorder) hooks(group string) stream.Hooks {
	return stream.Hooks{
		Delivered:      func(e stream.DeliveredEvent) { r.add(group, e) },
		RetryScheduled: func(e stream.RetryEvent) { r.add(group, e) },
		Exhausted:      func(e stream.ExhaustedEvent) { r.add(group, e) },
		ActionTried:    func(e stream.ActionEvent) { r.add(group, e) },
		Stopped:        func(e stream.StoppedEvent) { r.add(group, e) },
		OutageBegan:    func(e stream.OutageEvent) { r.add(group, outageBegan(e)) },
		OutageEnded:    func(e stream.OutageEvent) { r.add(group, outageEnded(e)) },
		Probing:        func(e stream.ProbeEvent) { r.add(group, e) },
	}
}

type (
	outageBegan stream.OutageEvent
	outageEnded stream.OutageEvent
)

// point is a data point's key: its attributes as key=value pairs, sorted.
func point(set attribute.Set) string {
	var kv []string
	for _, a := range set.ToSlice() {
		kv = append(kv, string(a.Key)+"="+a.Value.Emit())
	}
	return strings.Join(kv, ",")
}

// expected builds the point key of a metric from the attribute pairs given.
func expected(kv ...string) string {
	slices.SortFunc(kv, func(a, b string) int {
		ka, _, _ := strings.Cut(a, "=")
		kb, _, _ := strings.Cut(b, "=")
		return strings.Compare(ka, kb)
	})
	return strings.Join(kv, ",")
}

func partAttrs(group, topic string, partition int32) []string {
	return []string{"messaging.system=kafka", "messaging.destination.name=" + topic,
		fmt.Sprintf("messaging.destination.partition.id=%d", partition), "messaging.consumer.group.name=" + group}
}

// errType is the error.type of a delivery's error: its own type, or that
// of the error a *stream.BatchError carries.
func errType(err error) string {
	var be *stream.BatchError
	if errors.As(err, &be) {
		err = be.Err
	}
	return semconv.ErrorType(err).Value.AsString()
}

// TestConformance runs a scripted history through the engine: a success,
// a retry, a partial success, a poison record dead-lettered, a stop and a
// resume (on the same topic and partition as the first processor, in
// another group), and an outage. It checks every metric the SDK exports
// against the metric table (name, instrument, unit, attributes: required
// ones present, no others, so no offset, key or error text) and against
// the history the processors' hooks recorded (every value), and every
// span: ended, its status, outcome and error type those of its delivery,
// and a redelivery's link to the batch's first delivery.
func TestConformance(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		reader := sdkmetric.NewManualReader()
		mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
		sr := tracetest.NewSpanRecorder()
		tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(sr))
		hist := &recorder{}
		work := func(b *stream.Batch) { time.Sleep(10 * time.Millisecond) }
		var procs []*stream.Processor
		// processor returns a processor of group, with its own Telemetry.
		processor := func(group, action string, h stream.Handler, opts ...stream.Option) *stream.Processor {
			tel, err := rdotel.New(rdotel.WithMeterProvider(mp), rdotel.WithTracerProvider(tp), rdotel.WithConsumerGroup(group), rdotel.WithExhaustionAction(action))
			if err != nil {
				t.Fatal(err)
			}
			proc, err := stream.NewProcessor(stream.Chain(h, tel.Middleware()),
				append(opts, stream.WithHooks(tel.Hooks()), stream.WithHooks(hist.hooks(group)))...)
			if err != nil {
				t.Fatal(err)
			}
			procs = append(procs, proc)
			return proc
		}
		start := time.Now()

		// billing: orders/0 succeeds; orders/1 fails once; orders/2
		// succeeds partly (records 0 and 1) then in full; orders/3's
		// record 0 is poison, dead-lettered after 2 retries, and the
		// records after it succeed.
		var dead []stream.Record
		dl, err := stream.DeadLetter(publisher(func(_ string, recs []stream.Record) { dead = append(dead, recs...) }), "orders.dlq")
		if err != nil {
			t.Fatal(err)
		}
		billing := processor("billing", "dead_letter", stream.HandlerFunc(func(_ context.Context, b *stream.Batch) error {
			work(b)
			switch {
			case b.Partition == 1 && b.Attempt.Retries == 0:
				return errDown
			case b.Partition == 2 && b.Attempt.Retries == 0:
				return stream.FailedAt(2, errDown)
			case b.Partition == 3 && b.FirstOffset() == 0:
				return stream.FailedAt(0, errDown)
			}
			return nil
		}), stream.WithExhaustionAction(dl), stream.WithPolicy(checkpoint.Policy{MaxRetries: 2, Backoff: checkpoint.Fixed(time.Second)}))
		var orders []*streamtest.Partition
		for i, n := range []int{3, 2, 4, 3} {
			p := streamtest.NewPartition("orders", int32(i), 5)
			p.AppendN(start, n)
			orders = append(orders, p)
		}
		// shipping: orders/0 (the same partition, another group) fails
		// until fixed, is stopped, and resumed.
		var fixed bool
		shipping := processor("shipping", "stop", stream.HandlerFunc(func(_ context.Context, b *stream.Batch) error {
			work(b)
			if !fixed {
				return errDown
			}
			return nil
		}), stream.WithExhaustionAction(stream.StopPartition), stream.WithPolicy(checkpoint.Policy{MaxRetries: 1, Backoff: checkpoint.Fixed(time.Second)}))
		shipped := streamtest.NewPartition("orders", 0, 5)
		shipped.AppendN(start, 1)
		// audit: payments/0 and /1 fail until 12s: an outage, probed
		// until it ends.
		budget, err := stream.NewBudget(stream.BudgetConfig{MaxTokens: 2, ProbeBackoff: checkpoint.Capped(5*time.Second, checkpoint.Exponential(5*time.Second))})
		if err != nil {
			t.Fatal(err)
		}
		recovery := start.Add(12 * time.Second)
		audit := processor("audit", "skip", stream.HandlerFunc(func(_ context.Context, b *stream.Batch) error {
			work(b)
			if time.Now().Before(recovery) {
				return errDown
			}
			return nil
		}), stream.WithOutageBudget(budget), stream.WithPolicy(checkpoint.Policy{MaxRetries: 3, Backoff: checkpoint.Fixed(time.Second)}))
		var payments []*streamtest.Partition
		for i := range 2 {
			p := streamtest.NewPartition("payments", int32(i), 5)
			p.AppendN(start, 1)
			payments = append(payments, p)
		}
		runProc(t, billing, orders...)
		runProc(t, shipping, shipped)
		runProc(t, audit, payments...)

		orderTopic := attribute.String("messaging.destination.name", "orders")
		group := func(g string) attribute.KeyValue { return attribute.String("messaging.consumer.group.name", g) }

		// At 0.5s: orders/1, orders/2, orders/3 and shipping's orders/0
		// wait out their backoff; the outage holds payments.
		time.Sleep(500 * time.Millisecond)
		synctest.Wait()
		m := collect(t, reader)
		if got := gauge[int64](t, m["redeliver.partitions.backoff"], orderTopic, group("billing")); got != 3 {
			t.Errorf("at 0.5s: billing's partitions in backoff %d, want 3", got)
		}
		if got := gauge[float64](t, m["redeliver.checkpoint.withheld.age"], onP1, group("billing")); got != 0.49 {
			t.Errorf("at 0.5s: orders/1's withheld age %vs, want 0.49s (failed at 0.01s)", got)
		}
		if got := sum(t, m["redeliver.outage.active"], group("audit")); got != 1 {
			t.Errorf("at 0.5s: audit processors in an outage %d, want 1", got)
		}
		// At 5s: shipping's orders/0 is stopped (in the stopped gauge
		// only), billing is done.
		time.Sleep(4500 * time.Millisecond)
		synctest.Wait()
		m = collect(t, reader)
		for _, g := range []struct {
			group            string
			backoff, stopped int64
		}{{"billing", 0, 0}, {"shipping", 0, 1}} {
			b := gauge[int64](t, m["redeliver.partitions.backoff"], orderTopic, group(g.group))
			s := gauge[int64](t, m["redeliver.partitions.stopped"], orderTopic, group(g.group))
			if b != g.backoff || s != g.stopped {
				t.Errorf("at 5s: %s's gauges backoff %d, stopped %d; want %d, %d", g.group, b, s, g.backoff, g.stopped)
			}
		}
		if got := gauge[float64](t, m["redeliver.checkpoint.withheld.age"], onP0, group("shipping")); got != 4.99 {
			t.Errorf("at 5s: shipping's orders/0 withheld age %vs, want 4.99s", got)
		}
		if got := gauge[float64](t, m["redeliver.checkpoint.withheld.age"], onP0, group("billing")); got != 0 {
			t.Errorf("at 5s: billing's orders/0 withheld age %vs, want 0", got)
		}
		// The outage holds both payments partitions since their failures
		// at 0.01s, the one whose failure it counted (its retry fell due
		// at 1.01s: no longer a backoff) and the one it did not.
		if got := gauge[int64](t, m["redeliver.partitions.backoff"], group("audit")); got != 0 {
			t.Errorf("at 5s: audit's partitions in backoff %d, want 0", got)
		}
		for _, p := range []attribute.KeyValue{onP0, onP1} {
			if got := gauge[float64](t, m["redeliver.checkpoint.withheld.age"], p, group("audit")); got != 4.99 {
				t.Errorf("at 5s: payments/%s withheld age %vs, want 4.99s", p.Value.Emit(), got)
			}
		}
		fixed = true
		if err := shipping.Resume(t.Context(), "orders", 0); err != nil {
			t.Fatal(err)
		}
		for _, p := range append(append(orders, shipped), payments...) {
			if err := p.WaitCommitted(t.Context(), p.End()); err != nil {
				t.Fatal(err)
			}
		}
		synctest.Wait()
		if len(dead) != 1 || header(dead[0], stream.HeaderPartition) != "3" || header(dead[0], stream.HeaderOffset) != "0" {
			t.Errorf("dead letters %v, want orders/3's record 0", dead)
		}

		checkMetrics(t, collect(t, reader), hist)
		checkSpans(t, sr, hist)
	})
}

func header(r stream.Record, key string) string {
	for _, h := range r.Headers {
		if h.Key == key {
			return string(h.Value)
		}
	}
	return ""
}

type publisher func(topic string, recs []stream.Record)

func (p publisher) Publish(_ context.Context, topic string, recs []stream.Record) error {
	p(topic, recs)
	return nil
}

// checkMetrics checks every metric against the table and the history.
func checkMetrics(t *testing.T, m map[string]metricdata.Metrics, hist *recorder) {
	t.Helper()
	checkTable(t, m, func(name string) bool { return !redriveMetric(name) }, errDown.Error())
	checkHistory(t, m, hist)
}

// checkTable checks the metrics the SDK exported against the table: every
// row covers selects is exported, and every metric exported is in the
// table with its instrument, unit and attributes (the required ones
// present, no others), none of them carrying one of the texts secret (an
// error's text, a key).
func checkTable(t *testing.T, m map[string]metricdata.Metrics, covers func(name string) bool, secret ...string) {
	t.Helper()
	rows := map[string]tableRow{}
	for _, r := range metricTable {
		rows[r.name] = r
		if _, ok := m[r.name]; !ok && covers(r.name) {
			t.Errorf("%s: not exported by the history, which exercises every metric", r.name)
		}
	}
	// Name, instrument, unit, attributes of every point.
	for name, met := range m {
		row, ok := rows[name]
		if !ok {
			t.Errorf("%s: exported, not in the metric table", name)
			continue
		}
		if got := instrument(met); got != row.instrument || met.Unit != row.unit {
			t.Errorf("%s: %s in %q, want %s in %q", name, got, met.Unit, row.instrument, row.unit)
		}
		required, allowed := row.keys()
		for _, set := range attributeSetsOf(met) {
			for k := range required {
				if !set.HasValue(attribute.Key(k)) {
					t.Errorf("%s: point %s lacks %s", name, point(set), k)
				}
			}
			for _, kv := range set.ToSlice() {
				if !allowed[string(kv.Key)] {
					t.Errorf("%s: point %s has %s, which the table does not allow", name, point(set), kv.Key)
				}
				for _, x := range secret {
					if strings.Contains(kv.Value.Emit(), x) {
						t.Errorf("%s: point %s carries %q, an error's text or a key", name, point(set), x)
					}
				}
			}
		}
	}
}

// checkHistory checks the values of the processors' metrics against the
// history their hooks recorded.
func checkHistory(t *testing.T, m map[string]metricdata.Metrics, hist *recorder) {
	t.Helper()
	// Values, from the history.
	want := map[string]map[string]float64{} // metric -> point -> value (a histogram's count)
	wantSum := map[string]map[string]float64{}
	add := func(name, pt string, v float64) {
		if want[name] == nil {
			want[name] = map[string]float64{}
		}
		want[name][pt] += v
	}
	addSum := func(name, pt string, v float64) {
		if wantSum[name] == nil {
			wantSum[name] = map[string]float64{}
		}
		wantSum[name][pt] += v
	}
	seen := map[string]map[int64]bool{} // group/topic/partition -> offsets delivered
	due := map[string]time.Time{}       // group/topic/partition -> the coming retry's due time
	var outages [][2]time.Time          // by group: began, ended
	outageOf := map[string][]int{}
	for _, ev := range hist.evs {
		g := ev.group
		switch e := ev.e.(type) {
		case stream.DeliveredEvent:
			base := partAttrs(g, e.Topic, e.Partition)
			key := fmt.Sprintf("%s/%s/%d", g, e.Topic, e.Partition)
			if seen[key] == nil {
				seen[key] = map[int64]bool{}
			}
			for o := e.FirstOffset; o <= e.LastOffset; o++ {
				seen[key][o] = true
			}
			pt := append(slices.Clone(base), "messaging.operation.name=process", fmt.Sprintf("redeliver.attempt=%d", min(e.Attempt.Number(), 10)))
			if e.Outcome == stream.Failed {
				pt = append(pt, "error.type="+errType(e.Err))
			}
			add("messaging.process.duration", expected(pt...), 1)
			addSum("messaging.process.duration", expected(pt...), e.Duration.Seconds())
			if d, ok := due[key]; ok && e.Attempt.Retries > 0 {
				delete(due, key)
				held := false
				for _, i := range outageOf[g] {
					o := outages[i]
					held = held || !d.Before(o[0]) && (o[1].IsZero() || d.Before(o[1]))
				}
				if !held {
					add("redeliver.redelivery.lateness", expected(base...), 1)
					addSum("redeliver.redelivery.lateness", expected(base...), e.Start.Sub(d).Seconds())
				}
			}
		case stream.RetryEvent:
			pt := partAttrs(g, e.Topic, e.Partition)
			if e.Err != nil {
				pt = append(pt, "error.type="+errType(e.Err))
			}
			add("redeliver.retries.scheduled", expected(pt...), 1)
			due[fmt.Sprintf("%s/%s/%d", g, e.Topic, e.Partition)] = e.At
		case stream.ExhaustedEvent:
			add("redeliver.batches.given_up", expected(append(partAttrs(g, e.Topic, e.Partition), "redeliver.reason="+reasonNames[e.Err.Reason])...), 1)
		case stream.ActionEvent:
			outcome := "succeeded"
			if e.Skipped {
				outcome = "skipped"
			} else if e.Err != nil {
				outcome = "failed"
			}
			add("redeliver.exhaustion.actions", expected(append(partAttrs(g, e.Topic, e.Partition), "redeliver.action="+actionOf[g], "redeliver.action.outcome="+outcome)...), 1)
		case stream.StoppedEvent:
			add("redeliver.exhaustion.actions", expected(append(partAttrs(g, e.Topic, e.Partition), "redeliver.action="+actionOf[g], "redeliver.action.outcome=stopped")...), 1)
		case outageBegan:
			proc := expected("messaging.system=kafka", "messaging.consumer.group.name="+g)
			add("redeliver.outages", proc, 1)
			add("redeliver.outage.active", proc, 1)
			outages = append(outages, [2]time.Time{e.Since})
			outageOf[g] = append(outageOf[g], len(outages)-1)
		case outageEnded:
			proc := expected("messaging.system=kafka", "messaging.consumer.group.name="+g)
			add("redeliver.outage.active", proc, -1)
			add("redeliver.outage.duration", proc, 1)
			addSum("redeliver.outage.duration", proc, e.Duration.Seconds())
			idx := outageOf[g][len(outageOf[g])-1]
			outages[idx][1] = e.Since.Add(e.Duration)
		case stream.ProbeEvent:
			add("redeliver.outage.probes", expected("messaging.system=kafka", "messaging.consumer.group.name="+g), 1)
		}
	}
	for key, offs := range seen {
		var g, topic string
		var p int32
		parts := strings.Split(key, "/")
		g, topic = parts[0], parts[1]
		fmt.Sscan(parts[2], &p)
		add("messaging.client.consumed.messages", expected(append(partAttrs(g, topic, p), "messaging.operation.name=poll")...), float64(len(offs)))
	}
	// The history must hold each case.
	for _, name := range []string{"redeliver.redelivery.lateness", "redeliver.batches.given_up", "redeliver.outage.duration", "redeliver.outage.probes"} {
		if len(want[name]) == 0 {
			t.Errorf("the history has no %s", name)
		}
	}
	for name, points := range want {
		got, gotSum := values(m[name])
		if !maps.Equal(got, points) {
			t.Errorf("%s:\n got  %v\n want %v (from the history)", name, got, points)
		}
		if ws := wantSum[name]; ws != nil {
			for pt, v := range ws {
				if d := gotSum[pt] - v; d > 1e-9 || d < -1e-9 {
					t.Errorf("%s %s: sum %v, want %v (from the history)", name, pt, gotSum[pt], v)
				}
			}
		}
	}
	// The gauges, at the end: nothing held back.
	for _, name := range []string{"redeliver.partitions.backoff", "redeliver.partitions.stopped", "redeliver.checkpoint.withheld.age"} {
		got, _ := values(m[name])
		for pt, v := range got {
			if v != 0 {
				t.Errorf("%s %s = %v at the end, want 0", name, pt, v)
			}
		}
	}
}

var actionOf = map[string]string{"billing": "dead_letter", "shipping": "stop", "audit": "skip"}

// values returns a metric's points: a counter's or a gauge's value, a
// histogram's count (and its sum).
func values(m metricdata.Metrics) (vals, sums map[string]float64) {
	vals, sums = map[string]float64{}, map[string]float64{}
	switch d := m.Data.(type) {
	case metricdata.Sum[int64]:
		for _, p := range d.DataPoints {
			vals[point(p.Attributes)] = float64(p.Value)
		}
	case metricdata.Gauge[int64]:
		for _, p := range d.DataPoints {
			vals[point(p.Attributes)] = float64(p.Value)
		}
	case metricdata.Gauge[float64]:
		for _, p := range d.DataPoints {
			vals[point(p.Attributes)] = p.Value
		}
	case metricdata.Histogram[float64]:
		for _, p := range d.DataPoints {
			vals[point(p.Attributes)] = float64(p.Count)
			sums[point(p.Attributes)] = p.Sum
		}
	}
	return vals, sums
}

func attributeSetsOf(m metricdata.Metrics) []attribute.Set {
	var sets []attribute.Set
	switch d := m.Data.(type) {
	case metricdata.Sum[int64]:
		for _, p := range d.DataPoints {
			sets = append(sets, p.Attributes)
		}
	case metricdata.Gauge[int64]:
		for _, p := range d.DataPoints {
			sets = append(sets, p.Attributes)
		}
	case metricdata.Gauge[float64]:
		for _, p := range d.DataPoints {
			sets = append(sets, p.Attributes)
		}
	case metricdata.Histogram[float64]:
		for _, p := range d.DataPoints {
			sets = append(sets, p.Attributes)
		}
	}
	return sets
}

// checkSpans checks that every delivery has its span, ended, with the
// delivery's outcome, and that a redelivery links to its batch's first
// delivery.
func checkSpans(t *testing.T, sr *tracetest.SpanRecorder, hist *recorder) {
	t.Helper()
	if started, ended := len(sr.Started()), len(sr.Ended()); started != ended {
		t.Errorf("%d spans started, %d ended", started, ended)
	}
	type partKey struct {
		group     string
		topic     string
		partition string
	}
	spans := map[partKey][]sdktrace.ReadOnlySpan{}
	for _, s := range sr.Ended() {
		a := attribute.NewSet(s.Attributes()...)
		v := func(k string) string { x, _ := a.Value(attribute.Key(k)); return x.Emit() }
		if s.Name() != "process "+v("messaging.destination.name") || v("messaging.operation.name") != "process" || v("messaging.operation.type") != "process" {
			t.Errorf("span %q: operation %q/%q, want process <topic>, process/process", s.Name(), v("messaging.operation.name"), v("messaging.operation.type"))
		}
		if s.InstrumentationScope().SchemaURL != semconv.SchemaURL {
			t.Errorf("span scope %+v, want the schema %s", s.InstrumentationScope(), semconv.SchemaURL)
		}
		k := partKey{v("messaging.consumer.group.name"), v("messaging.destination.name"), v("messaging.destination.partition.id")}
		spans[k] = append(spans[k], s)
	}
	deliveries := map[partKey][]stream.DeliveredEvent{}
	for _, ev := range hist.evs {
		if e, ok := ev.e.(stream.DeliveredEvent); ok {
			k := partKey{ev.group, e.Topic, fmt.Sprint(e.Partition)}
			deliveries[k] = append(deliveries[k], e)
		}
	}
	for k, ds := range deliveries {
		ss := spans[k]
		if len(ss) != len(ds) {
			t.Errorf("%v: %d spans for %d deliveries", k, len(ss), len(ds))
			continue
		}
		var first sdktrace.ReadOnlySpan // the latest failed first delivery
		for i, d := range ds {
			s := ss[i]
			a := attribute.NewSet(s.Attributes()...)
			outcome, _ := a.Value("redeliver.outcome")
			et, _ := a.Value("error.type")
			attempt, _ := a.Value("redeliver.attempt")
			wantOutcome, wantCode := "succeeded", codes.Unset
			if d.Outcome == stream.Failed {
				wantOutcome, wantCode = "failed", codes.Error
			}
			if outcome.AsString() != wantOutcome || s.Status().Code != wantCode || attempt.AsInt64() != int64(d.Attempt.Number()) {
				t.Errorf("%v delivery %d (%s, attempt %d): span outcome %q, status %v, attempt %d", k, i, d.Outcome, d.Attempt.Number(), outcome.AsString(), s.Status().Code, attempt.AsInt64())
			}
			if d.Outcome == stream.Failed && et.AsString() != errType(d.Err) {
				t.Errorf("%v delivery %d: span error.type %q, want %q", k, i, et.AsString(), errType(d.Err))
			}
			if d.Attempt.Retries > 0 {
				linked := false
				for _, l := range s.Links() {
					linked = linked || first != nil && l.SpanContext.SpanID() == first.SpanContext().SpanID()
				}
				if !linked {
					t.Errorf("%v delivery %d (retry %d): links %v, want its batch's first delivery", k, i, d.Attempt.Retries, s.Links())
				}
			}
			if d.Attempt.Retries == 0 && d.Outcome == stream.Failed {
				first = s
			}
		}
	}
	if len(deliveries) != 7 {
		t.Errorf("deliveries on %d partitions, want 7", len(deliveries))
	}
}

// reasonNames are the redeliver.reason values the metric table documents.
var reasonNames = map[checkpoint.Reason]string{
	checkpoint.RetriesSpent:    "retries_spent",
	checkpoint.TimeBudgetSpent: "time_budget_spent",
	checkpoint.RecordTooOld:    "record_too_old",
	checkpoint.NotRetryable:    "not_retryable",
}
