package kafkago

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/segmentio/kafka-go"

	"github.com/redeliver-go/redeliver/internal/health"
	"github.com/redeliver-go/redeliver/stream"
)

// Publisher produces records through a kafka-go [kafka.Writer], for
// [stream.DeadLetter]. Make it with [NewPublisher] and a writer of your
// own, or give new(kafkago.Publisher) to [New] with [WithPublisher]: it
// then writes to the consumer's brokers, as franz's Publisher does. It is
// safe for concurrent use.
type Publisher struct {
	mu sync.RWMutex
	w  *kafka.Writer
}

// writer returns p's writer, nil before it has one.
func (p *Publisher) writer() *kafka.Writer {
	p.mu.RLock()
	defer p.mu.RUnlock()
	return p.w
}

// bind gives p, which must have no writer yet, a writer on cl's brokers
// and transport, with the settings NewPublisher requires.
func (p *Publisher) bind(cl *kafka.Client) error {
	if p == nil {
		return errors.New("kafkago: WithPublisher: nil publisher")
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.w != nil {
		return errors.New("kafkago: WithPublisher: the publisher has a writer already (made by NewPublisher, or given to another consumer)")
	}
	w := &kafka.Writer{Addr: cl.Addr, RequiredAcks: kafka.RequireAll, BatchTimeout: PublisherBatchTimeout}
	if t, ok := cl.Transport.(*kafka.Transport); ok && t != nil {
		w.Transport = t
	}
	p.w = w
	return nil
}

// checkTopic is a consumer's start check of the topic its processor
// dead-letters to through p: one metadata request through the writer's
// transport, to the writer's cluster, which may not be the consumer's.
// The transport answers from the cluster's metadata it keeps (refreshed
// every few seconds, kafka.Transport's MetadataTTL), and never asks to
// create a topic.
func (p *Publisher) checkTopic(ctx context.Context, topic string) []health.Problem {
	w := p.writer()
	rt := w.Transport
	if rt == nil {
		rt = kafka.DefaultTransport
	}
	cl := &kafka.Client{Addr: w.Addr, Transport: rt}
	res, err := cl.Metadata(ctx, &kafka.MetadataRequest{Topics: []string{topic}})
	if err != nil {
		return []health.Problem{health.DeadLetterUnreachable("kafkago", err)}
	}
	err = kafka.UnknownTopicOrPartition
	for _, t := range res.Topics {
		if t.Name == topic {
			err = t.Error
		}
	}
	if err != nil {
		return []health.Problem{health.Topic("kafkago", topic, "dead-letter", err)}
	}
	return nil
}

// NewPublisher returns a Publisher that produces through w. w needs an
// Addr (the cluster's brokers). A dead letter must be acknowledged before
// the checkpoint moves past its batch, so w must write synchronously (Async false) with acknowledgements
// (RequiredAcks kafka.RequireOne or kafka.RequireAll: the Writer's default,
// kafka.RequireNone, is refused), and it must not name a Topic of its own
// (the Publisher names the topic of each record). The Publisher does not
// close w.
//
// A Writer sends a partition's records once its batch is full (BatchSize,
// 100 by default) or its BatchTimeout has passed, and kafka-go's default
// BatchTimeout of 1s would hold every dead letter up to a second while its
// partition waits. So a w whose BatchTimeout is 0 gets BatchTimeout
// [PublisherBatchTimeout] from NewPublisher: give it the writer before its
// first use, or set BatchTimeout yourself (the cost of a longer one is that
// much more wait per dead letter; a shorter one sends smaller requests when
// many records are published at once).
func NewPublisher(w *kafka.Writer) (*Publisher, error) {
	switch {
	case w == nil:
		return nil, errors.New("kafkago: nil writer for the publisher")
	case w.Addr == nil:
		return nil, errors.New("kafkago: the publisher's writer has no Addr: set it to the cluster's brokers, such as kafka.TCP(brokers...)")
	case w.Async:
		return nil, errors.New("kafkago: the publisher's writer is Async: it must return once the records are acknowledged")
	case w.RequiredAcks == kafka.RequireNone:
		return nil, errors.New("kafkago: the publisher's writer has RequiredAcks RequireNone: set RequireAll or RequireOne")
	case w.Topic != "":
		return nil, fmt.Errorf("kafkago: the publisher's writer has Topic %q: leave it empty, the publisher names the topic", w.Topic)
	case w.BatchTimeout < 0:
		return nil, fmt.Errorf("kafkago: the publisher's writer has BatchTimeout %v: want 0 (for PublisherBatchTimeout) or more", w.BatchTimeout)
	case w.BatchTimeout == 0:
		w.BatchTimeout = PublisherBatchTimeout
	}
	return &Publisher{w: w}, nil
}

// PublisherBatchTimeout is the BatchTimeout [NewPublisher] gives a writer
// that has none: how long a dead letter may wait for its batch to fill.
const PublisherBatchTimeout = time.Millisecond

// Publish produces recs to topic and returns once every record is
// acknowledged, or an error. Records keep their keys, values, headers and
// timestamps; the partition is the writer's balancer's. When the broker
// acknowledged some records and failed others (one partition's leader
// away), the error is a [*stream.PublishError] that says which, from the
// writer's [kafka.WriteErrors]: a record reported failed may still have
// been written if its acknowledgement was lost (a timeout).
func (p *Publisher) Publish(ctx context.Context, topic string, recs []stream.Record) error {
	var w *kafka.Writer
	if p != nil {
		w = p.writer()
	}
	if w == nil {
		return errors.New("kafkago: the Publisher has no writer: build it with kafkago.NewPublisher(writer), or give new(kafkago.Publisher) to kafkago.New with WithPublisher")
	}
	msgs := make([]kafka.Message, len(recs))
	for i, r := range recs {
		m := kafka.Message{Topic: topic, Key: r.Key, Value: r.Value, Time: r.Timestamp}
		if len(r.Headers) > 0 {
			m.Headers = make([]kafka.Header, len(r.Headers))
			for j, h := range r.Headers {
				m.Headers[j] = kafka.Header{Key: h.Key, Value: h.Value}
			}
		}
		msgs[i] = m
	}
	err := w.WriteMessages(ctx, msgs...)
	if err == nil {
		return nil
	}
	var we kafka.WriteErrors
	if errors.As(err, &we) && len(we) == len(msgs) && we.Count() < len(msgs) {
		errs := make([]error, len(msgs))
		for i, e := range we {
			if e != nil {
				errs[i] = writeError(topic, "1 record", e)
			}
		}
		return &stream.PublishError{Errs: errs}
	}
	return writeError(topic, fmt.Sprintf("%d records", len(msgs)), err)
}

func writeError(topic, what string, err error) error {
	if unknownTopic(err) {
		return fmt.Errorf("kafkago: topic %q does not exist (create it): publish %s: %v", topic, what, err)
	}
	return fmt.Errorf("kafkago: publish %s to topic %q: %v", what, topic, err)
}

// unknownTopic reports whether err, or one of the errors of a
// kafka.WriteErrors, is kafka.UnknownTopicOrPartition.
func unknownTopic(err error) bool {
	var we kafka.WriteErrors
	if errors.As(err, &we) {
		for _, e := range we {
			if e != nil && unknownTopic(e) {
				return true
			}
		}
		return false
	}
	return errors.Is(err, kafka.UnknownTopicOrPartition)
}
