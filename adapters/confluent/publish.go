package confluent

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/confluentinc/confluent-kafka-go/v2/kafka"

	"github.com/redeliver-go/redeliver/adapters/internal/kafkaadapter"
	"github.com/redeliver-go/redeliver/internal/health"
	"github.com/redeliver-go/redeliver/stream"
)

// Publisher produces records through a confluent-kafka-go
// [kafka.Producer], waiting for each record's delivery report, for
// [stream.DeadLetter]. It is safe for concurrent use.
//
// A Publisher is made with [NewPublisher] on a producer of your own, or as
// new(confluent.Publisher), unbound, to produce through a producer the
// consumer makes and closes: give it to [New] with [WithPublisher]. That
// allows the natural order of construction: the publisher, the
// processor's options and the processor, then the consumer, as with the
// franz-go and kafka-go adapters.
type Publisher struct {
	p *kafka.Producer // NewPublisher's

	binding kafkaadapter.Binding[*kafka.Producer] // to the producer of the consumer WithPublisher bound p to
}

var errNotPublisher = errors.New("confluent: the Publisher has no producer: build it with confluent.NewPublisher(producer), or give new(confluent.Publisher) to confluent.New with WithPublisher")

// ownedProducer is the producer a consumer makes for the publishers given
// to it with WithPublisher: made when Run starts, flushed and closed when
// Run ends, once the Produce calls in progress have returned (librdkafka
// frees a closed producer: a Produce on it would use freed memory).
type ownedProducer struct {
	kafkaadapter.Owned[*kafka.Producer]
}

// stop takes the producer away, so that no Produce starts again, and once
// the Produce calls in progress have returned, flushes it (waiting at most
// flush for the delivery reports of what it holds) and closes it, waiting
// for that at most wait. It reports whether the producer was closed within
// wait.
func (o *ownedProducer) stop(flush, wait time.Duration) bool {
	return o.Stop(wait, func(p *kafka.Producer) {
		p.Flush(int(flush / time.Millisecond))
		p.Close()
	})
}

// bind binds p to the producer o of a consumer, unless p has a producer of
// its own (NewPublisher) or is bound to another consumer.
func (p *Publisher) bind(o *ownedProducer) error {
	if p == nil {
		return errors.New("confluent: WithPublisher: nil publisher")
	}
	return p.binding.Bind("confluent", p.p, &o.Owned)
}

// unbind undoes bind, for a New that fails after it.
func (p *Publisher) unbind(o *ownedProducer) { p.binding.Unbind(&o.Owned) }

// bound returns the consumer's producer p is bound to, or nil.
func (p *Publisher) bound() *kafkaadapter.Owned[*kafka.Producer] { return p.binding.Owned() }

// Bound reports whether p produces through a producer: made by
// [NewPublisher], or bound to a consumer by [WithPublisher] (whose
// producer lives while the consumer's Run runs).
func (p *Publisher) Bound() bool { return p != nil && (p.p != nil || p.bound() != nil) }

// producerConfig is the configuration of the producer of the WithPublisher
// publishers: the consumer's bootstrap.servers and security settings
// (security.protocol, ssl.*, sasl.*, enable.ssl.certificate.verification),
// with acks=all and enable.idempotence=true.
func producerConfig(consumer kafka.ConfigMap) kafka.ConfigMap {
	conf := kafka.ConfigMap{"acks": "all", "enable.idempotence": true}
	for k, v := range consumer {
		if k == "bootstrap.servers" || k == "security.protocol" || k == "enable.ssl.certificate.verification" ||
			strings.HasPrefix(k, "ssl.") || strings.HasPrefix(k, "sasl.") {
			conf[k] = v
		}
	}
	return conf
}

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
//
// A Publisher given to a consumer with [WithPublisher] publishes while the
// consumer's Run runs, and returns an error that says so before and after.
func (p *Publisher) Publish(ctx context.Context, topic string, recs []stream.Record) error {
	if p == nil {
		return errNotPublisher
	}
	producer, release, err := p.binding.Producer("confluent", "when the consumer's Run starts", p.p, errNotPublisher)
	if err != nil {
		return err
	}
	return p.publish(ctx, producer, release, topic, recs)
}

// publish is Publish's body: it produces recs through producer, calls
// release once every Produce call has returned, and waits for the
// delivery reports.
func (p *Publisher) publish(ctx context.Context, producer *kafka.Producer, release func(), topic string, recs []stream.Record) error {
	if len(recs) == 0 {
		release()
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
		if err := producer.Produce(m, reports); err != nil {
			errs[i] = writeError(topic, "1 record", err)
			continue
		}
		pending++
	}
	release() // the consumer closes its producer once no Produce is in progress
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
