package rdotel

import (
	"context"
	"errors"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
	semconv "go.opentelemetry.io/otel/semconv/v1.43.0"

	"github.com/redeliver-go/redeliver/checkpoint"
	"github.com/redeliver-go/redeliver/stream"
)

// maxAttempt caps the redeliver.attempt attribute of the duration
// histogram: later attempts are counted as this one, so that an infinite
// retry policy cannot grow the number of series without bound.
const maxAttempt = 10

// Attribute keys of redeliver's own.
const (
	attemptKey = attribute.Key("redeliver.attempt")
	reasonKey  = attribute.Key("redeliver.reason")
	outcomeKey = attribute.Key("redeliver.action.outcome")
	actionKey  = attribute.Key("redeliver.action")
)

type meter struct {
	cfg *config

	consumed metric.Int64ObservableCounter
	duration metric.Float64Histogram
	retries  metric.Int64Counter
	givenUp  metric.Int64Counter
	actions  metric.Int64Counter
	lateness metric.Float64Histogram

	outages        metric.Int64Counter
	outageActive   metric.Int64UpDownCounter
	outageProbes   metric.Int64Counter
	outageDuration metric.Float64Histogram
	procOpt        metric.MeasurementOption // system and group: the processor-wide instruments'

	parts  sync.Map // partKey -> *part
	totals sync.Map // partKey -> *total: kept across claims, for the cumulative counters
}

// total is a partition's count of records delivered for the first time,
// added to with an atomic on the success path and reported by the
// observable counter messaging.client.consumed.messages, so that a
// delivery costs no SDK measurement for it.
type total struct {
	n   atomic.Int64
	opt metric.ObserveOption
}

type partKey struct {
	topic     string
	partition int32
}

// part is what the meter knows of one claimed partition. Its hooks run in
// the partition's worker, one at a time; the gauges' callbacks read it from
// the SDK's collection goroutine, hence the lock. dirty is set while any of
// the guarded fields is, so that the success path's Checkpointed hook can
// skip the lock.
type part struct {
	base     attribute.Set         // system, topic, partition, group
	first    []metric.RecordOption // base plus attempt 1, no error: the success path's, as a slice passed on without an allocation
	consumed *total
	baseOpt  metric.MeasurementOption // base alone
	topicSet attribute.Set            // system, topic, group: the per-topic gauges'

	claim    atomic.Uint64 // the latest claim of the partition
	dirty    atomic.Bool
	mu       sync.Mutex
	due      time.Time // when the coming retry is due
	withheld time.Time // since when the checkpoint is held back
	backoff  bool
	stopped  bool
}

func newMeter(cfg *config) (*meter, error) {
	mt := cfg.meters.Meter(instrumentation)
	m := &meter{cfg: cfg}
	var errs []error
	add := func(err error) { errs = append(errs, err) }
	var err error
	m.consumed, err = mt.Int64ObservableCounter("messaging.client.consumed.messages", metric.WithUnit("{message}"),
		metric.WithDescription("Records delivered to the handler for the first time."))
	add(err)
	m.duration, err = mt.Float64Histogram("messaging.process.duration", metric.WithUnit("s"),
		metric.WithDescription("Duration of a handler call on a batch, per attempt."))
	add(err)
	m.retries, err = mt.Int64Counter("redeliver.retries.scheduled", metric.WithUnit("{retry}"),
		metric.WithDescription("Batches withheld to be delivered again after a backoff."))
	add(err)
	m.givenUp, err = mt.Int64Counter("redeliver.batches.given_up", metric.WithUnit("{batch}"),
		metric.WithDescription("Failed batches given up, by reason."))
	add(err)
	m.actions, err = mt.Int64Counter("redeliver.exhaustion.actions", metric.WithUnit("{action}"),
		metric.WithDescription("Exhaustion actions run on given-up batches, by outcome."))
	add(err)
	m.lateness, err = mt.Float64Histogram("redeliver.redelivery.lateness", metric.WithUnit("s"),
		metric.WithDescription("Time from a retry's due time to the start of its delivery."),
		metric.WithExplicitBucketBoundaries(0.0001, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5))
	add(err)
	m.outages, err = mt.Int64Counter("redeliver.outages", metric.WithUnit("{outage}"),
		metric.WithDescription("Outages begun: a processor's outage budget ran out, so failures stopped spending retries."))
	add(err)
	m.outageActive, err = mt.Int64UpDownCounter("redeliver.outage.active", metric.WithUnit("{processor}"),
		metric.WithDescription("Processors in an outage: their failing partitions wait for a probe to succeed."))
	add(err)
	m.outageProbes, err = mt.Int64Counter("redeliver.outage.probes", metric.WithUnit("{probe}"),
		metric.WithDescription("Batches delivered during an outage to probe the downstream."))
	add(err)
	m.outageDuration, err = mt.Float64Histogram("redeliver.outage.duration", metric.WithUnit("s"),
		metric.WithDescription("How long an outage lasted, from the failure that ran the budget out to the success that ended it."),
		metric.WithExplicitBucketBoundaries(1, 5, 15, 30, 60, 120, 300, 600, 1800, 3600, 7200, 21600))
	add(err)
	procAttrs := []attribute.KeyValue{semconv.MessagingSystemKey.String(cfg.system)}
	if cfg.group != "" {
		procAttrs = append(procAttrs, semconv.MessagingConsumerGroupName(cfg.group))
	}
	m.procOpt = metric.WithAttributeSet(attribute.NewSet(procAttrs...))
	backoff, err := mt.Int64ObservableGauge("redeliver.partitions.backoff", metric.WithUnit("{partition}"),
		metric.WithDescription("Partitions waiting out a backoff."))
	add(err)
	stopped, err := mt.Int64ObservableGauge("redeliver.partitions.stopped", metric.WithUnit("{partition}"),
		metric.WithDescription("Partitions stopped after a batch was given up (StopPartition)."))
	add(err)
	age, err := mt.Float64ObservableGauge("redeliver.checkpoint.withheld.age", metric.WithUnit("s"),
		metric.WithDescription("Seconds since the partition's checkpoint was first withheld for the batch it holds; 0 when none is."))
	add(err)
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	_, err = mt.RegisterCallback(func(_ context.Context, o metric.Observer) error {
		m.observe(o, backoff, stopped, age)
		m.totals.Range(func(_, v any) bool {
			t := v.(*total)
			o.ObserveInt64(m.consumed, t.n.Load(), t.opt)
			return true
		})
		return nil
	}, backoff, stopped, age, m.consumed)
	if err != nil {
		return nil, err
	}
	return m, nil
}

// observe reports the gauges: per topic the partitions in backoff and
// stopped, per partition the age of its withheld checkpoint.
func (m *meter) observe(o metric.Observer, backoff, stopped metric.Int64Observable, age metric.Float64Observable) {
	now := m.cfg.now()
	type counts struct {
		set              attribute.Set
		backoff, stopped int64
	}
	topics := map[attribute.Distinct]*counts{}
	m.parts.Range(func(_, v any) bool {
		p := v.(*part)
		p.mu.Lock()
		inBackoff, isStopped, since := p.backoff, p.stopped, p.withheld
		p.mu.Unlock()
		c := topics[p.topicSet.Equivalent()]
		if c == nil {
			c = &counts{set: p.topicSet}
			topics[p.topicSet.Equivalent()] = c
		}
		if inBackoff {
			c.backoff++
		}
		if isStopped {
			c.stopped++
		}
		var secs float64
		if !since.IsZero() {
			secs = max(now.Sub(since).Seconds(), 0)
		}
		o.ObserveFloat64(age, secs, p.baseOpt)
		return true
	})
	for _, c := range topics {
		o.ObserveInt64(backoff, c.backoff, metric.WithAttributeSet(c.set))
		o.ObserveInt64(stopped, c.stopped, metric.WithAttributeSet(c.set))
	}
}

// part returns the state of the event's partition, making it on first use.
func (m *meter) part(topic string, partition int32) *part {
	k := partKey{topic, partition}
	if v, ok := m.parts.Load(k); ok {
		return v.(*part)
	}
	topicAttrs := []attribute.KeyValue{semconv.MessagingSystemKey.String(m.cfg.system), semconv.MessagingDestinationName(topic)}
	if m.cfg.group != "" {
		topicAttrs = append(topicAttrs, semconv.MessagingConsumerGroupName(m.cfg.group))
	}
	attrs := append(topicAttrs[:len(topicAttrs):len(topicAttrs)], semconv.MessagingDestinationPartitionID(strconv.Itoa(int(partition))))
	p := &part{base: attribute.NewSet(attrs...), topicSet: attribute.NewSet(topicAttrs...)}
	p.baseOpt = metric.WithAttributeSet(p.base)
	p.first = []metric.RecordOption{metric.WithAttributeSet(attribute.NewSet(append(attrs, attemptKey.Int(1))...))}
	t, _ := m.totals.LoadOrStore(k, &total{opt: p.baseOpt})
	p.consumed = t.(*total)
	v, _ := m.parts.LoadOrStore(k, p)
	return v.(*part)
}

// with returns p's attributes plus extra, as a measurement option.
func (p *part) with(extra ...attribute.KeyValue) metric.MeasurementOption {
	kvs := append(p.base.ToSlice(), extra...)
	return metric.WithAttributeSet(attribute.NewSet(kvs...))
}

func (m *meter) hooks() stream.Hooks {
	return stream.Hooks{
		Claimed:        m.claimed,
		Released:       m.released,
		Delivered:      m.delivered,
		RetryScheduled: m.retryScheduled,
		Exhausted:      m.exhausted,
		Stopped:        m.stopped,
		ActionTried:    m.actionTried,
		Checkpointed:   m.checkpointed,
		OutageBegan:    m.outageBegan,
		OutageEnded:    m.outageEnded,
		Probing:        m.probing,
	}
}

func (m *meter) outageBegan(stream.OutageEvent) {
	ctx := context.Background()
	m.outages.Add(ctx, 1, m.procOpt)
	m.outageActive.Add(ctx, 1, m.procOpt)
}

func (m *meter) outageEnded(e stream.OutageEvent) {
	ctx := context.Background()
	m.outageActive.Add(ctx, -1, m.procOpt)
	m.outageDuration.Record(ctx, e.Duration.Seconds(), m.procOpt)
}

func (m *meter) probing(stream.ProbeEvent) {
	m.outageProbes.Add(context.Background(), 1, m.procOpt)
}

// claimed starts the partition's gauges from the retry state a previous
// owner committed, if any: a batch withheld before the move is still
// withheld, since its first failure.
func (m *meter) claimed(e stream.ClaimEvent) {
	p := m.part(e.Topic, e.Partition)
	p.claim.Store(e.ClaimID)
	s, err := checkpoint.DecodeState(e.Metadata)
	if e.Metadata == "" || err != nil {
		return
	}
	p.mu.Lock()
	p.due, p.withheld = s.NextAt, s.FirstFailure
	p.backoff = s.NextAt.After(m.cfg.now())
	p.mu.Unlock()
	p.dirty.Store(true)
}

// released forgets the partition, unless a later claim of it already
// took over (a partition can be claimed again before the old claim's
// worker is done).
func (m *meter) released(e stream.ReleaseEvent) {
	k := partKey{e.Topic, e.Partition}
	if v, ok := m.parts.Load(k); ok && v.(*part).claim.Load() == e.ClaimID {
		m.parts.CompareAndDelete(k, v)
	}
}

// actionTried counts the exhaustion action's tries by outcome.
func (m *meter) actionTried(e stream.ActionEvent) {
	p := m.part(e.Topic, e.Partition)
	outcome := "succeeded"
	switch {
	case e.Skipped:
		outcome = "skipped"
	case e.Err != nil:
		outcome = "failed"
	}
	m.actions.Add(context.Background(), 1, p.with(actionKey.String(m.cfg.action), outcomeKey.String(outcome)))
}

func (m *meter) delivered(e stream.DeliveredEvent) {
	p := m.part(e.Topic, e.Partition)
	ctx := context.Background()
	if e.Attempt.Retry == 0 {
		p.consumed.n.Add(int64(e.Records))
	}
	opts := p.first
	if e.Attempt.Retry > 0 || e.Outcome == stream.Failed || e.Outcome == stream.Cancelled {
		extra := []attribute.KeyValue{attemptKey.Int(min(e.Attempt.Number(), maxAttempt))}
		if e.Outcome == stream.Failed || e.Outcome == stream.Cancelled {
			extra = append(extra, semconv.ErrorType(e.Err))
		}
		opts = []metric.RecordOption{p.with(extra...)}
	}
	m.duration.Record(ctx, e.Duration.Seconds(), opts...)
	if e.Attempt.Retry > 0 && p.dirty.Load() {
		p.mu.Lock()
		due := p.due
		p.due, p.backoff = time.Time{}, false
		p.mu.Unlock()
		if !due.IsZero() && !e.Start.IsZero() {
			m.lateness.Record(ctx, max(e.Start.Sub(due).Seconds(), 0), p.baseOpt)
		}
	}
}

func (m *meter) retryScheduled(e stream.RetryEvent) {
	p := m.part(e.Topic, e.Partition)
	var opt metric.AddOption = p.baseOpt
	if e.Err != nil {
		opt = p.with(semconv.ErrorType(e.Err))
	}
	m.retries.Add(context.Background(), 1, opt)
	p.mu.Lock()
	p.due, p.backoff = e.At, e.Delay > 0
	if p.withheld.IsZero() {
		p.withheld = e.At.Add(-e.Delay) // the failure the retry was decided at
	}
	p.mu.Unlock()
	p.dirty.Store(true)
}

func (m *meter) exhausted(e stream.ExhaustedEvent) {
	p := m.part(e.Topic, e.Partition)
	reason := "unknown"
	if e.Err != nil {
		reason = reasonName(e.Err.Reason)
	}
	m.givenUp.Add(context.Background(), 1, p.with(reasonKey.String(reason)))
}

func (m *meter) stopped(e stream.StoppedEvent) {
	p := m.part(e.Topic, e.Partition)
	m.actions.Add(context.Background(), 1, p.with(actionKey.String(m.cfg.action), outcomeKey.String("stopped")))
	p.mu.Lock()
	p.stopped, p.backoff = true, false
	p.mu.Unlock()
	p.dirty.Store(true)
}

func (m *meter) checkpointed(e stream.CheckpointEvent) {
	if e.Metadata != "" {
		return // the retry state of a withheld batch: still held back
	}
	p := m.part(e.Topic, e.Partition)
	if !p.dirty.Load() {
		return
	}
	p.mu.Lock()
	p.due, p.withheld, p.backoff, p.stopped = time.Time{}, time.Time{}, false, false
	p.mu.Unlock()
	p.dirty.Store(false)
}

// reasonName is a give-up reason as an attribute value.
func reasonName(r checkpoint.Reason) string {
	switch r {
	case checkpoint.RetriesSpent:
		return "retries_spent"
	case checkpoint.TimeBudgetSpent:
		return "time_budget_spent"
	case checkpoint.RecordTooOld:
		return "record_too_old"
	case checkpoint.NotRetryable:
		return "not_retryable"
	}
	return "unknown"
}
