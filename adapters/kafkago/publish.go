package kafkago

import (
	"context"
	"errors"
	"fmt"

	"github.com/segmentio/kafka-go"

	"github.com/redeliver-go/redeliver/stream"
)

// Publisher produces records through a kafka-go [kafka.Writer], for
// [stream.DeadLetter]. It is safe for concurrent use.
type Publisher struct {
	w *kafka.Writer
}

// NewPublisher returns a Publisher that produces through w. A dead letter
// must be acknowledged before the checkpoint moves past its batch, so w
// must write synchronously (Async false) with acknowledgements
// (RequiredAcks kafka.RequireOne or kafka.RequireAll: the Writer's default,
// kafka.RequireNone, is refused), and it must not name a Topic of its own
// (the Publisher names the topic of each record). The Publisher does not
// close w.
func NewPublisher(w *kafka.Writer) (*Publisher, error) {
	switch {
	case w == nil:
		return nil, errors.New("kafkago: nil writer for the publisher")
	case w.Async:
		return nil, errors.New("kafkago: the publisher's writer is Async: it must return once the records are acknowledged")
	case w.RequiredAcks == kafka.RequireNone:
		return nil, errors.New("kafkago: the publisher's writer has RequiredAcks RequireNone: set RequireAll or RequireOne")
	case w.Topic != "":
		return nil, fmt.Errorf("kafkago: the publisher's writer has Topic %q: leave it empty, the publisher names the topic", w.Topic)
	}
	return &Publisher{w: w}, nil
}

// Publish produces recs to topic and returns once every record is
// acknowledged, or an error. Records keep their keys, values, headers and
// timestamps; the partition is the writer's balancer's.
func (p *Publisher) Publish(ctx context.Context, topic string, recs []stream.Record) error {
	if p == nil || p.w == nil {
		return errors.New("kafkago: the Publisher was not made by NewPublisher: build it with kafkago.NewPublisher(writer)")
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
	if err := p.w.WriteMessages(ctx, msgs...); err != nil {
		if unknownTopic(err) {
			return fmt.Errorf("kafkago: topic %q does not exist (create it): publish %d records: %v", topic, len(msgs), err)
		}
		return fmt.Errorf("kafkago: publish %d records to topic %q: %v", len(msgs), topic, err)
	}
	return nil
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
