package rdotel

import (
	"context"
	"errors"
	"log/slog"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
	semconv "go.opentelemetry.io/otel/semconv/v1.43.0"

	"github.com/redeliver-go/redeliver/checkpoint"
	"github.com/redeliver-go/redeliver/internal/retrystate"
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

// processBuckets are the bucket boundaries the semantic conventions advise
// for messaging.process.duration, in seconds.
var processBuckets = []float64{0.005, 0.01, 0.025, 0.05, 0.075, 0.1, 0.25, 0.5, 0.75, 1, 2.5, 5, 7.5, 10}

// operation names the messaging.operation.name of the consumed-messages
// counter, as the semantic conventions name the receiving operation of
// each system: Kafka consumers poll, the others receive.
func operation(system string) string {
	if system == "kafka" {
		return "poll"
	}
	return "receive"
}

// meter holds a Telemetry's instruments and the state of every processor
// that uses it. The state of one processor (one call of Hooks) is a scope:
// its partitions are keyed by the scope, so that processors on the same
// topic, and their claim IDs (unique within a processor only), never mix.
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

	redrive *redriveMeter

	scopes atomic.Uint64 // the latest scope's ID
	parts  sync.Map      // partKey -> *part
	totals sync.Map      // topicPartition -> *total: kept across claims and scopes, for the cumulative counter
}

// total is a partition's count of records delivered for the first time,
// added to with an atomic on the success path and reported by the
// observable counter messaging.client.consumed.messages, so that a
// delivery costs no SDK measurement for it.
type total struct {
	n   atomic.Int64
	opt metric.ObserveOption
}

type topicPartition struct {
	topic     string
	partition int32
}

// partKey names a partition of one scope.
type partKey struct {
	scope uint64
	topicPartition
}

// part is what the meter knows of one partition of a scope. Its hooks run
// in the partition's worker, one at a time; the gauges' callbacks read it
// from the SDK's collection goroutine, hence the lock. dirty is set while
// any of the guarded fields is, so that the success path's hooks can skip
// the lock.
type part struct {
	base     attribute.Set         // system, topic, partition, group
	first    []metric.RecordOption // base plus operation, attempt 1, no error: the success path's duration options, passed on without an allocation
	consumed *total
	counted  *atomic.Int64            // the next offset to count as consumed: kept across the scope's claims
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

// scope is the state of one processor: one call of Hooks.
type scope struct {
	m  *meter
	id uint64

	counted sync.Map // topicPartition -> *atomic.Int64
	live    sync.Map // claim ID -> struct{}: the claims running, to tell when two processors share these hooks
	shared  sync.Once

	mu     sync.Mutex
	outage struct{ began, ended time.Time } // the latest outage of the processor, by its events
}

func newMeter(cfg *config) (*meter, error) {
	mt := cfg.meters.Meter(instrumentation, metric.WithSchemaURL(semconv.SchemaURL))
	m := &meter{cfg: cfg}
	var errs []error
	add := func(err error) { errs = append(errs, err) }
	var err error
	m.consumed, err = mt.Int64ObservableCounter("messaging.client.consumed.messages", metric.WithUnit("{message}"),
		metric.WithDescription("Number of messages that were delivered to the application: records delivered to the handler, each counted once."))
	add(err)
	m.duration, err = mt.Float64Histogram("messaging.process.duration", metric.WithUnit("s"),
		metric.WithDescription("Duration of processing operation: a handler call on a batch, per attempt."),
		metric.WithExplicitBucketBoundaries(processBuckets...))
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
		metric.WithDescription("Time from a retry's due time to the start of its delivery, for retries no outage held."),
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
	var rerrs []error
	m.redrive, rerrs = newRedriveMeter(mt, procAttrs)
	errs = append(errs, rerrs...)
	backoff, err := mt.Int64ObservableGauge("redeliver.partitions.backoff", metric.WithUnit("{partition}"),
		metric.WithDescription("Partitions waiting out a backoff."))
	add(err)
	stopped, err := mt.Int64ObservableGauge("redeliver.partitions.stopped", metric.WithUnit("{partition}"),
		metric.WithDescription("Partitions stopped after a batch was given up (StopPartition), until Resume or Skip."))
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
// stopped, per partition the age of its withheld checkpoint (the oldest,
// when processors of the same group hold the same partition).
func (m *meter) observe(o metric.Observer, backoff, stopped metric.Int64Observable, age metric.Float64Observable) {
	now := m.cfg.now()
	type counts struct {
		set              attribute.Set
		backoff, stopped int64
	}
	type ageOf struct {
		opt  metric.MeasurementOption
		secs float64
	}
	topics := map[attribute.Distinct]*counts{}
	ages := map[attribute.Distinct]*ageOf{}
	m.parts.Range(func(_, v any) bool {
		p := v.(*part)
		p.mu.Lock()
		// A retry that fell due is no longer waited out (an outage may
		// still hold it: the withheld age tells).
		inBackoff, isStopped, since := p.backoff && p.due.After(now), p.stopped, p.withheld
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
		if a := ages[p.base.Equivalent()]; a == nil {
			ages[p.base.Equivalent()] = &ageOf{opt: p.baseOpt, secs: secs}
		} else {
			a.secs = max(a.secs, secs)
		}
		return true
	})
	for _, c := range topics {
		o.ObserveInt64(backoff, c.backoff, metric.WithAttributeSet(c.set))
		o.ObserveInt64(stopped, c.stopped, metric.WithAttributeSet(c.set))
	}
	for _, a := range ages {
		o.ObserveFloat64(age, a.secs, a.opt)
	}
}

// newScope returns the state of a new processor.
func (m *meter) newScope() *scope { return &scope{m: m, id: m.scopes.Add(1)} }

// part returns the state of the event's partition, making it on first use.
func (s *scope) part(topic string, partition int32) *part {
	k := partKey{s.id, topicPartition{topic, partition}}
	if v, ok := s.m.parts.Load(k); ok {
		return v.(*part)
	}
	cfg := s.m.cfg
	topicAttrs := []attribute.KeyValue{semconv.MessagingSystemKey.String(cfg.system), semconv.MessagingDestinationName(topic)}
	if cfg.group != "" {
		topicAttrs = append(topicAttrs, semconv.MessagingConsumerGroupName(cfg.group))
	}
	attrs := append(topicAttrs[:len(topicAttrs):len(topicAttrs)], semconv.MessagingDestinationPartitionID(strconv.Itoa(int(partition))))
	p := &part{base: attribute.NewSet(attrs...), topicSet: attribute.NewSet(topicAttrs...)}
	p.baseOpt = metric.WithAttributeSet(p.base)
	p.first = []metric.RecordOption{metric.WithAttributeSet(attribute.NewSet(append(attrs[:len(attrs):len(attrs)],
		semconv.MessagingOperationName("process"), attemptKey.Int(1))...))}
	t, _ := s.m.totals.LoadOrStore(k.topicPartition, &total{opt: metric.WithAttributeSet(attribute.NewSet(append(attrs[:len(attrs):len(attrs)],
		semconv.MessagingOperationName(operation(cfg.system)))...))})
	p.consumed = t.(*total)
	c, _ := s.counted.LoadOrStore(k.topicPartition, new(atomic.Int64))
	p.counted = c.(*atomic.Int64)
	v, _ := s.m.parts.LoadOrStore(k, p)
	return v.(*part)
}

// with returns p's attributes plus extra, as a measurement option.
func (p *part) with(extra ...attribute.KeyValue) metric.MeasurementOption {
	kvs := append(p.base.ToSlice(), extra...)
	return metric.WithAttributeSet(attribute.NewSet(kvs...))
}

func (s *scope) hooks() stream.Hooks {
	return stream.Hooks{
		Claimed:        s.claimed,
		Released:       s.released,
		Delivered:      s.delivered,
		RetryScheduled: s.retryScheduled,
		Exhausted:      s.exhausted,
		Stopped:        s.stopped,
		ActionTried:    s.actionTried,
		Checkpointed:   s.checkpointed,
		OutageBegan:    s.outageBegan,
		OutageEnded:    s.outageEnded,
		Probing:        s.probing,
	}
}

func (s *scope) outageBegan(e stream.OutageEvent) {
	ctx := context.Background()
	s.m.outages.Add(ctx, 1, s.m.procOpt)
	s.m.outageActive.Add(ctx, 1, s.m.procOpt)
	s.mu.Lock()
	s.outage.began, s.outage.ended = e.Since, time.Time{}
	s.mu.Unlock()
}

func (s *scope) outageEnded(e stream.OutageEvent) {
	ctx := context.Background()
	s.m.outageActive.Add(ctx, -1, s.m.procOpt)
	s.m.outageDuration.Record(ctx, e.Duration.Seconds(), s.m.procOpt)
	s.mu.Lock()
	s.outage.began, s.outage.ended = e.Since, e.Since.Add(e.Duration)
	s.mu.Unlock()
}

// heldByOutage reports whether a retry due at due fell due during the
// processor's latest outage, which held it back by design.
func (s *scope) heldByOutage(due time.Time) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	o := s.outage
	return !o.began.IsZero() && !due.Before(o.began) && (o.ended.IsZero() || due.Before(o.ended))
}

func (s *scope) probing(stream.ProbeEvent) {
	s.m.outageProbes.Add(context.Background(), 1, s.m.procOpt)
}

// claimed starts the partition's gauges from the retry state a previous
// owner committed, if any: a batch withheld before the move is still
// withheld, since its first failure.
func (s *scope) claimed(e stream.ClaimEvent) {
	if _, dup := s.live.LoadOrStore(e.ClaimID, struct{}{}); dup {
		s.shared.Do(func() {
			slog.Default().Error("rdotel: the hooks of one Telemetry.Hooks call are used by more than one processor: " +
				"their partitions mix and the metrics are wrong; call Hooks once for each processor")
		})
	}
	p := s.part(e.Topic, e.Partition)
	p.claim.Store(e.ClaimID)
	st, err := retrystate.DecodeState(e.Metadata)
	if e.Metadata == "" || err != nil {
		return
	}
	p.mu.Lock()
	p.due, p.withheld = st.NextAt, st.FirstFailure
	p.backoff = st.NextAt.After(s.m.cfg.now())
	p.mu.Unlock()
	p.dirty.Store(true)
}

// released forgets the partition, unless a later claim of it already
// took over (a partition can be claimed again before the old claim's
// worker is done).
func (s *scope) released(e stream.ReleaseEvent) {
	s.live.Delete(e.ClaimID)
	k := partKey{s.id, topicPartition{e.Topic, e.Partition}}
	if v, ok := s.m.parts.Load(k); ok && v.(*part).claim.Load() == e.ClaimID {
		s.m.parts.CompareAndDelete(k, v)
	}
}

// actionTried counts the exhaustion action's tries by outcome. A Skip
// releases a stopped partition.
func (s *scope) actionTried(e stream.ActionEvent) {
	p := s.part(e.Topic, e.Partition)
	outcome := "succeeded"
	switch {
	case e.Skipped:
		outcome = "skipped"
		p.mu.Lock()
		p.stopped = false
		p.mu.Unlock()
	case e.Err != nil:
		outcome = "failed"
	}
	s.m.actions.Add(context.Background(), 1, p.with(s.m.actionAttrs(outcome)...))
}

// count adds the records of a delivery that the scope has not counted yet
// to the consumed counter: a redelivery (a retry, the rest of a batch
// after a partial success, a batch resumed after a stop) counts nothing
// again. The records past the ones counted are taken as consecutive.
func (p *part) count(e *stream.DeliveredEvent) {
	for {
		next := p.counted.Load()
		if e.LastOffset < next {
			return // counted already
		}
		n := int64(e.Records)
		if e.FirstOffset < next {
			n = min(n, e.LastOffset+1-next)
		}
		if p.counted.CompareAndSwap(next, e.LastOffset+1) {
			p.consumed.n.Add(n)
			return
		}
	}
}

func (s *scope) delivered(e stream.DeliveredEvent) {
	p := s.part(e.Topic, e.Partition)
	ctx := context.Background()
	if e.Records > 0 {
		p.count(&e)
	}
	if e.Outcome == stream.ParkedBehind {
		// Not handled (redrive.ParkByKey parked it behind its key's
		// parked records): no processing to time, not a success; it
		// counts as a park of the key's action.
		s.m.actions.Add(ctx, 1, p.with(s.m.actionAttrs("parked_behind")...))
		return
	}
	opts := p.first
	if e.Attempt.Retries > 0 || e.Outcome == stream.Failed || e.Outcome == stream.Cancelled {
		extra := []attribute.KeyValue{semconv.MessagingOperationName("process"), attemptKey.Int(min(e.Attempt.Number(), maxAttempt))}
		if e.Outcome == stream.Failed || e.Outcome == stream.Cancelled {
			extra = append(extra, errorType(e.Err))
		}
		opts = []metric.RecordOption{p.with(extra...)}
	}
	s.m.duration.Record(ctx, e.Duration.Seconds(), opts...)
	if e.Uncounted {
		// A failure during an outage: the batch waits, its checkpoint
		// withheld.
		p.mu.Lock()
		if p.withheld.IsZero() {
			p.withheld = e.Start.Add(e.Duration)
		}
		p.mu.Unlock()
		p.dirty.Store(true)
	}
	if !p.dirty.Load() {
		return
	}
	p.mu.Lock()
	due := p.due
	if e.Attempt.Retries > 0 {
		p.due, p.backoff = time.Time{}, false
	}
	p.stopped = false // a delivery: resumed, if it was stopped
	p.mu.Unlock()
	if e.Attempt.Retries > 0 && !due.IsZero() && !e.Start.IsZero() && !s.heldByOutage(due) {
		s.m.lateness.Record(ctx, max(e.Start.Sub(due).Seconds(), 0), p.baseOpt)
	}
}

func (s *scope) retryScheduled(e stream.RetryEvent) {
	p := s.part(e.Topic, e.Partition)
	var opt metric.AddOption = p.baseOpt
	if e.Err != nil {
		opt = p.with(errorType(e.Err))
	}
	s.m.retries.Add(context.Background(), 1, opt)
	p.mu.Lock()
	p.due, p.backoff, p.stopped = e.At, e.Delay > 0, false
	if p.withheld.IsZero() {
		p.withheld = e.At.Add(-e.Delay) // the failure the retry was decided at
	}
	p.mu.Unlock()
	p.dirty.Store(true)
}

func (s *scope) exhausted(e stream.ExhaustedEvent) {
	p := s.part(e.Topic, e.Partition)
	reason := "unknown"
	if e.Err != nil {
		reason = reasonName(e.Err.Reason)
	}
	s.m.givenUp.Add(context.Background(), 1, p.with(reasonKey.String(reason)))
	p.mu.Lock()
	p.due, p.backoff = time.Time{}, false
	p.mu.Unlock()
}

// actionAttrs returns the attributes of an exhaustion action's try:
// its outcome, and the action's name when the program gave one.
func (m *meter) actionAttrs(outcome string) []attribute.KeyValue {
	if m.cfg.action == "" {
		return []attribute.KeyValue{outcomeKey.String(outcome)}
	}
	return []attribute.KeyValue{actionKey.String(m.cfg.action), outcomeKey.String(outcome)}
}

func (s *scope) stopped(e stream.StoppedEvent) {
	p := s.part(e.Topic, e.Partition)
	s.m.actions.Add(context.Background(), 1, p.with(s.m.actionAttrs("stopped")...))
	p.mu.Lock()
	p.stopped, p.backoff = true, false
	p.mu.Unlock()
	p.dirty.Store(true)
}

func (s *scope) checkpointed(e stream.CheckpointEvent) {
	if e.Metadata != "" {
		return // the retry state of a withheld batch: still held back
	}
	p := s.part(e.Topic, e.Partition)
	if !p.dirty.Load() {
		return
	}
	p.mu.Lock()
	p.due, p.withheld, p.backoff, p.stopped = time.Time{}, time.Time{}, false, false
	p.mu.Unlock()
	p.dirty.Store(false)
}

// errorType is the error.type attribute of err: the type of the error
// itself, not of the *stream.BatchError that names the record it failed at.
func errorType(err error) attribute.KeyValue {
	var be *stream.BatchError
	if errors.As(err, &be) && be.Err != nil {
		err = be.Err
	}
	return semconv.ErrorType(err)
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
