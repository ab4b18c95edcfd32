package rdotel

import (
	"context"
	"errors"
	"strconv"
	"sync"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	semconv "go.opentelemetry.io/otel/semconv/v1.43.0"
	"go.opentelemetry.io/otel/trace"

	"github.com/redeliver-go/redeliver/stream"
)

// Span attribute keys of redeliver's own.
const (
	retryKey       = attribute.Key("redeliver.retry")
	spanOutcomeKey = attribute.Key("redeliver.outcome")
)

type tracer struct {
	cfg *config
	t   trace.Tracer

	mu    sync.Mutex
	first map[topicPartition]firstSpan // the first delivery of each partition's pending batch
}

// firstSpan is the span of a batch's first delivery, which its
// redeliveries link to.
type firstSpan struct {
	offset int64
	sc     trace.SpanContext
}

func newTracer(cfg *config, tr trace.Tracer) *tracer {
	return &tracer{cfg: cfg, t: tr, first: map[topicPartition]firstSpan{}}
}

// middleware wraps next with a span per delivery. A handler that panics
// ends its span too, failed, before the panic goes on to the processor
// (which turns it into a *stream.PanicError).
func (t *tracer) middleware(next stream.Handler) stream.Handler {
	return stream.HandlerFunc(func(ctx context.Context, b *stream.Batch) (err error) {
		ctx, span := t.start(ctx, b)
		defer func() {
			if v := recover(); v != nil {
				t.end(span, b, &stream.PanicError{Value: v})
				panic(v) // from within the deferred call: the stack still holds the handler's frames
			}
		}()
		err = next.Handle(ctx, b)
		t.end(span, b, err)
		return err
	})
}

func (t *tracer) start(ctx context.Context, b *stream.Batch) (context.Context, trace.Span) {
	k := topicPartition{b.Topic, b.Partition}
	attrs := []attribute.KeyValue{
		semconv.MessagingSystemKey.String(t.cfg.system),
		semconv.MessagingOperationTypeProcess,
		semconv.MessagingOperationName("process"),
		semconv.MessagingDestinationName(b.Topic),
		semconv.MessagingDestinationPartitionID(strconv.Itoa(int(b.Partition))),
		semconv.MessagingBatchMessageCount(len(b.Records)),
		attemptKey.Int(b.Attempt.Number()),
		retryKey.Bool(b.Attempt.Retries > 0),
	}
	if t.cfg.group != "" {
		attrs = append(attrs, semconv.MessagingConsumerGroupName(t.cfg.group))
	}
	if t.cfg.system == "kafka" && len(b.Records) > 0 {
		attrs = append(attrs, semconv.MessagingKafkaOffset(int(b.FirstOffset())))
	}
	opts := []trace.SpanStartOption{trace.WithSpanKind(trace.SpanKindConsumer), trace.WithAttributes(attrs...)}

	// A single record's trace context is the delivery's parent; a batch's
	// records are linked.
	var links []trace.Link
	parent := ctx
	if len(b.Records) == 1 {
		if rc := t.cfg.propagator.Extract(ctx, carrier(b.Records[0].Headers)); trace.SpanContextFromContext(rc).IsValid() {
			parent = rc
		}
	} else {
		for i := range b.Records {
			if len(links) == t.cfg.maxLinks {
				break
			}
			if len(b.Records[i].Headers) == 0 {
				continue
			}
			sc := trace.SpanContextFromContext(t.cfg.propagator.Extract(ctx, carrier(b.Records[i].Headers)))
			if sc.IsValid() {
				links = append(links, trace.Link{SpanContext: sc})
			}
		}
	}
	// A redelivery links to the batch's first delivery.
	if b.Attempt.Retries > 0 {
		t.mu.Lock()
		f, ok := t.first[k]
		t.mu.Unlock()
		if ok && len(b.Records) > 0 && f.offset <= b.FirstOffset() {
			links = append(links, trace.Link{SpanContext: f.sc, Attributes: []attribute.KeyValue{retryKey.Bool(false)}})
		}
	}
	if len(links) > 0 {
		opts = append(opts, trace.WithLinks(links...))
	}
	return t.t.Start(parent, "process "+b.Topic, opts...)
}

func (t *tracer) end(span trace.Span, b *stream.Batch, err error) {
	outcome := "succeeded"
	var rr *stream.RetryResult
	switch {
	case err == nil:
	case errors.As(err, &rr):
		outcome = "retry_requested"
	default:
		outcome = "failed"
		span.RecordError(err)
		span.SetStatus(codes.Error, err.Error())
		span.SetAttributes(errorType(err))
	}
	span.SetAttributes(spanOutcomeKey.String(outcome))
	span.End()
	// Remember a first delivery that will come again; forget it once a
	// redelivery succeeded. A first delivery that succeeds takes no lock.
	switch k := (topicPartition{b.Topic, b.Partition}); {
	case err != nil && b.Attempt.Retries == 0 && len(b.Records) > 0:
		t.mu.Lock()
		t.first[k] = firstSpan{offset: b.FirstOffset(), sc: span.SpanContext()}
		t.mu.Unlock()
	case err == nil && b.Attempt.Retries > 0:
		t.mu.Lock()
		delete(t.first, k)
		t.mu.Unlock()
	}
}
