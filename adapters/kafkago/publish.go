package kafkago

import (
	"context"
	"errors"

	"github.com/segmentio/kafka-go"

	"github.com/redeliver-go/redeliver/stream"
)

// Publisher produces records through a kafka-go Writer, for
// [stream.DeadLetter]. It is safe for concurrent use.
type Publisher struct {
	w *kafka.Writer
}

// NewPublisher returns a Publisher that writes through w. w must not name a
// topic of its own (the dead-letter topic is given per call) and should wait
// for acknowledgement (its RequiredAcks other than RequireNone), so that
// Publish returns only once the broker has the records.
func NewPublisher(w *kafka.Writer) (*Publisher, error) {
	switch {
	case w == nil:
		return nil, errors.New("kafkago: nil writer for the publisher")
	case w.Topic != "":
		return nil, errors.New("kafkago: the publisher's writer must not set Topic: the topic comes with each call")
	case w.Async:
		return nil, errors.New("kafkago: the publisher's writer must not be Async: a dead-letter produce must be acknowledged")
	}
	return &Publisher{w: w}, nil
}

// Publish writes recs to topic and returns once they are acknowledged, or
// the first error. Records keep their keys, values, headers and
// timestamps.
func (p *Publisher) Publish(ctx context.Context, topic string, recs []stream.Record) error {
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
	return p.w.WriteMessages(ctx, msgs...)
}
