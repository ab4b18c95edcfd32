package rdotel

import (
	"context"
	"sync"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
	semconv "go.opentelemetry.io/otel/semconv/v1.43.0"

	"github.com/redeliver-go/redeliver/redrive"
)

// redriveMeter holds the instruments of the re-drive: what a
// [redrive.Scheduler] and the [redrive.Park] action report through their
// hooks. It keeps no state but the attribute sets it made, so the hooks
// of one RedriveHooks call may serve any number of schedulers and Park
// actions.
type redriveMeter struct {
	base []attribute.KeyValue // system and group

	redrives     metric.Int64Counter
	reparks      metric.Int64Counter
	timeouts     metric.Int64Counter
	failures     metric.Int64Counter
	sweepsFailed metric.Int64Counter

	topics sync.Map // topic -> metric.MeasurementOption: base and the topic, made once per topic
}

func newRedriveMeter(mt metric.Meter, base []attribute.KeyValue) (*redriveMeter, []error) {
	m := &redriveMeter{base: base}
	var errs []error
	counter := func(name, unit, desc string) metric.Int64Counter {
		c, err := mt.Int64Counter(name, metric.WithUnit(unit), metric.WithDescription(desc))
		if err != nil {
			errs = append(errs, err)
		}
		return c
	}
	m.redrives = counter("redeliver.redrive.redrives", "{redrive}",
		"Parked entries re-published by the re-drive's scheduler and marked retrying.")
	m.reparks = counter("redeliver.redrive.reparks", "{repark}",
		"Re-driven records that failed again and were handed back to their entry by the Park action, each re-drive once.")
	m.timeouts = counter("redeliver.redrive.timeouts", "{timeout}",
		"Entries timed out by the re-drive's scheduler (retry timeout or maximum re-drives) and reported.")
	m.failures = counter("redeliver.redrive.failures", "{failure}",
		"Entries the re-drive's scheduler could not re-publish or report; each is tried again after the interval.")
	m.sweepsFailed = counter("redeliver.redrive.sweeps.failed", "{sweep}",
		"Sweeps of the re-drive's scheduler ended early by a store error; the next sweep tries again.")
	return m, errs
}

// entry returns the attributes of an entry's event: the Telemetry's
// system and group, and the topic of the entry's record when it has one.
func (m *redriveMeter) entry(e redrive.Entry) metric.MeasurementOption {
	topic := e.Message.Topic
	if v, ok := m.topics.Load(topic); ok {
		return v.(metric.MeasurementOption)
	}
	kvs := m.base[:len(m.base):len(m.base)]
	if topic != "" {
		kvs = append(kvs, semconv.MessagingDestinationName(topic))
	}
	v, _ := m.topics.LoadOrStore(topic, metric.WithAttributeSet(attribute.NewSet(kvs...)))
	return v.(metric.MeasurementOption)
}

func (m *redriveMeter) hooks() redrive.Hooks {
	ctx := context.Background()
	return redrive.Hooks{
		Redriven: func(e redrive.EntryEvent) { m.redrives.Add(ctx, 1, m.entry(e.Entry)) },
		Reparked: func(e redrive.EntryEvent) { m.reparks.Add(ctx, 1, m.entry(e.Entry)) },
		TimedOut: func(e redrive.EntryEvent) { m.timeouts.Add(ctx, 1, m.entry(e.Entry)) },
		Failed: func(e redrive.EntryEvent) {
			kvs := append(m.base[:len(m.base):len(m.base)], semconv.ErrorType(e.Err))
			if e.Entry.Message.Topic != "" {
				kvs = append(kvs, semconv.MessagingDestinationName(e.Entry.Message.Topic))
			}
			m.failures.Add(ctx, 1, metric.WithAttributeSet(attribute.NewSet(kvs...)))
		},
		StoreFailed: func(e redrive.SweepEvent) {
			kvs := append(m.base[:len(m.base):len(m.base)], semconv.ErrorType(e.Err))
			m.sweepsFailed.Add(ctx, 1, metric.WithAttributeSet(attribute.NewSet(kvs...)))
		},
	}
}

// RedriveHooks returns the hooks that count what the re-drive does:
// entries re-published (redeliver.redrive.redrives), re-driven records
// that failed again and went back to their entry
// (redeliver.redrive.reparks, the count to alert on for a poison record
// going round), entries timed out (redeliver.redrive.timeouts), entries
// that could not be re-published or reported (redeliver.redrive.failures)
// and sweeps ended by a store error (redeliver.redrive.sweeps.failed).
// Give them with [redrive.WithHooks] to the [redrive.Scheduler] and to the
// [redrive.Park] action (both take the same options; WithHooks adds them
// to any hooks of your own); in a functions host, to host.WithRedrive,
// which gives its options to both:
//
//	sch, err := redrive.NewScheduler(store, pub, redrive.WithHooks(tel.RedriveHooks()))
//	park, err := redrive.Park(store, 5*time.Minute, redrive.WithHooks(tel.RedriveHooks()))
//	h, err := host.New(cfg, host.WithRedrive(store, redrive.WithHooks(tel.RedriveHooks())))
//
// The hooks keep no state: one call's may serve every scheduler and Park
// action. Their points carry the Telemetry's messaging.system and
// messaging.consumer.group.name (when set), and the topic of the entry's
// record as messaging.destination.name (when it has one; the original
// topic of a re-driven record, not the retry topic).
func (t *Telemetry) RedriveHooks() redrive.Hooks {
	if t == nil || t.meter == nil || t.meter.redrive == nil {
		notNew("RedriveHooks")
		return redrive.Hooks{}
	}
	return t.meter.redrive.hooks()
}
