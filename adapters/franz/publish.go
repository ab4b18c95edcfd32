package franz

import (
	"context"
	"errors"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/redeliver-go/redeliver/stream"
)

// Publisher produces records through a franz-go client, for
// [stream.DeadLetter]. It is safe for concurrent use.
type Publisher struct {
	cl *kgo.Client
}

// NewPublisher returns a Publisher that produces through cl, which may be
// the consumer's own client ([Consumer.Client]) or another one.
func NewPublisher(cl *kgo.Client) (*Publisher, error) {
	if cl == nil {
		return nil, errors.New("franz: nil client for the publisher")
	}
	return &Publisher{cl: cl}, nil
}

// Publish produces recs to topic and returns once every record is
// acknowledged, or the first error. Records keep their keys, values,
// headers and timestamps; the partition is the client's partitioner's.
func (p *Publisher) Publish(ctx context.Context, topic string, recs []stream.Record) error {
	out := make([]*kgo.Record, len(recs))
	for i, r := range recs {
		kr := &kgo.Record{Topic: topic, Key: r.Key, Value: r.Value, Timestamp: r.Timestamp}
		if len(r.Headers) > 0 {
			kr.Headers = make([]kgo.RecordHeader, len(r.Headers))
			for j, h := range r.Headers {
				kr.Headers[j] = kgo.RecordHeader{Key: h.Key, Value: h.Value}
			}
		}
		out[i] = kr
	}
	return p.cl.ProduceSync(ctx, out...).FirstErr()
}
