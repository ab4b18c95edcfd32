package confluent

import (
	"context"
	"errors"
	"fmt"

	"github.com/confluentinc/confluent-kafka-go/v2/kafka"

	"github.com/redeliver-go/redeliver/internal/health"
	"github.com/redeliver-go/redeliver/stream"
)

// Publisher produces records through a confluent-kafka-go
// [kafka.Producer], waiting for each record's delivery report, for
// [stream.DeadLetter]. It is safe for concurrent use.
type Publisher struct {
	p *kafka.Producer
}

var errNotPublisher = errors.New("confluent: the Publisher was not made by NewPublisher: build it with confluent.NewPublisher(producer)")

// NewPublisher returns a Publisher that produces through p. A dead letter
// must be acknowledged before the checkpoint moves past its batch: p's
// configuration must keep acks at all or 1 (librdkafka's default is all),
// and message.timeout.ms bounds how long a publish may wait for a record's
// report (a topic that does not exist is reported failed after
// topic.metadata.propagation.max.ms at most). The Publisher does not close
// p.
func NewPublisher(p *kafka.Producer) (*Publisher, error) {
	if p == nil {
		return nil, errors.New("confluent: nil producer for the publisher")
	}
	if p.IsClosed() {
		return nil, errors.New("confluent: the publisher's producer is closed")
	}
	return &Publisher{p: p}, nil
}

// Publish produces recs to topic and returns once every record's delivery
// report has come, or an error. Records keep their keys, values, headers
// and timestamps; the partition is the producer's partitioner's. When the
// broker acknowledged some records and failed others, the error is a
// [*stream.PublishError] that says which, from the delivery reports: a
// record reported failed may still have been written if its
// acknowledgement was lost (a timeout). librdkafka's producer takes no
// context: a publish that ctx ends first returns ctx's error, and its
// records are still sent (or fail) under message.timeout.ms.
func (p *Publisher) Publish(ctx context.Context, topic string, recs []stream.Record) error {
	if p == nil || p.p == nil {
		return errNotPublisher
	}
	if len(recs) == 0 {
		return nil
	}
	reports := make(chan kafka.Event, len(recs))
	errs := make([]error, len(recs))
	pending := 0
	for i, r := range recs {
		t := topic
		m := &kafka.Message{TopicPartition: kafka.TopicPartition{Topic: &t, Partition: kafka.PartitionAny},
			Key: r.Key, Value: r.Value, Timestamp: r.Timestamp, Opaque: i}
		for _, h := range r.Headers {
			m.Headers = append(m.Headers, kafka.Header{Key: h.Key, Value: h.Value})
		}
		if err := p.p.Produce(m, reports); err != nil {
			errs[i] = writeError(topic, "1 record", err)
			continue
		}
		pending++
	}
	for pending > 0 {
		select {
		case ev := <-reports:
			m, ok := ev.(*kafka.Message)
			if !ok {
				continue
			}
			pending--
			if i, ok := m.Opaque.(int); ok && i >= 0 && i < len(errs) && m.TopicPartition.Error != nil {
				errs[i] = writeError(topic, "1 record", m.TopicPartition.Error)
			}
		case <-ctx.Done():
			return fmt.Errorf("confluent: publish %d records to topic %q: %w", len(recs), topic, context.Cause(ctx))
		}
	}
	failed := 0
	var first error
	for _, err := range errs {
		if err != nil {
			failed++
			if first == nil {
				first = err
			}
		}
	}
	switch {
	case failed == 0:
		return nil
	case failed == len(recs):
		return fmt.Errorf("%d of %d records not published, the first: %w", failed, len(recs), first)
	}
	return &stream.PublishError{Errs: errs}
}

func writeError(topic, what string, err error) error {
	var ke kafka.Error
	if errors.As(err, &ke) && (ke.Code() == kafka.ErrUnknownTopicOrPart || ke.Code() == kafka.ErrUnknownTopic) {
		return fmt.Errorf("confluent: topic %q does not exist (create it): publish %s: %v", topic, what, err)
	}
	return fmt.Errorf("confluent: publish %s to topic %q: %v", what, topic, err)
}

// checkTopic is a consumer's start check of the topic its processor
// dead-letters to through p: a metadata request through the producer.
func (p *Publisher) checkTopic(ctx context.Context, topic string) []health.Problem {
	errs, err := topicMetadata(ctx, p.p.GetMetadata, []string{topic}, nil)
	if err != nil {
		return []health.Problem{health.DeadLetterUnreachable("confluent", err)}
	}
	if errs[topic] != nil {
		return []health.Problem{health.Topic("confluent", topic, "dead-letter", errs[topic])}
	}
	return nil
}
