package franz

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/redeliver-go/redeliver/stream"
)

// Publisher produces records through a franz-go client, for
// [stream.DeadLetter]. It is safe for concurrent use.
//
// A Publisher is made with [NewPublisher] for a client of its own, or as
// new(Publisher), unbound, to produce through a consumer's client: give it
// to [New] with [WithPublisher], which binds it to the consumer's client.
// That allows the natural order of construction: the publisher, the
// processor's options and the processor, then the consumer (see the
// package's examples).
type Publisher struct {
	cl atomic.Pointer[kgo.Client]

	mu     sync.Mutex
	topics []string // the dead-letter topics stream.DeadLetter named
}

// DeadLetterTo notes that [stream.DeadLetter] publishes to topic through p
// (it calls DeadLetterTo), so that a [Consumer] given p with
// [WithPublisher] checks at start that the topic exists.
func (p *Publisher) DeadLetterTo(topic string) {
	if p == nil {
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if !slices.Contains(p.topics, topic) {
		p.topics = append(p.topics, topic)
	}
}

// deadLetterTopics returns the topics DeadLetterTo noted.
func (p *Publisher) deadLetterTopics() []string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return slices.Clone(p.topics)
}

// NewPublisher returns a Publisher that produces through cl.
func NewPublisher(cl *kgo.Client) (*Publisher, error) {
	if cl == nil {
		return nil, errors.New("franz: nil client for the publisher")
	}
	p := &Publisher{}
	p.cl.Store(cl)
	return p, nil
}

// Bound reports whether p produces through a client: made by
// [NewPublisher], or bound to a consumer's by [WithPublisher].
func (p *Publisher) Bound() bool { return p != nil && p.cl.Load() != nil }

// bind makes p produce through cl, unless p is bound to another client.
func (p *Publisher) bind(cl *kgo.Client) error {
	if p == nil {
		return errors.New("franz: WithPublisher: nil publisher")
	}
	if !p.cl.CompareAndSwap(nil, cl) && p.cl.Load() != cl {
		return errors.New("franz: WithPublisher: the publisher is bound to another client already")
	}
	return nil
}

// Publish produces recs to topic and returns once every record is
// acknowledged, or an error. Records keep their keys, values, headers and
// timestamps; the partition is the client's partitioner's. When the broker
// acknowledged some records and failed others (one partition's leader
// away), the error is a [*stream.PublishError] that says which: a record
// reported failed may still have been written if its acknowledgement was
// lost (a timeout).
func (p *Publisher) Publish(ctx context.Context, topic string, recs []stream.Record) error {
	if p == nil {
		return errors.New("franz: nil *Publisher: build it with NewPublisher(client), or new(franz.Publisher) given to franz.New with WithPublisher")
	}
	cl := p.cl.Load()
	if cl == nil {
		return errors.New("franz: the publisher has no client: build it with NewPublisher(client), or give it to franz.New with WithPublisher")
	}
	out := make([]*kgo.Record, len(recs))
	index := make(map[*kgo.Record]int, len(recs))
	for i, r := range recs {
		kr := &kgo.Record{Topic: topic, Key: r.Key, Value: r.Value, Timestamp: r.Timestamp}
		if len(r.Headers) > 0 {
			kr.Headers = make([]kgo.RecordHeader, len(r.Headers))
			for j, h := range r.Headers {
				kr.Headers[j] = kgo.RecordHeader{Key: h.Key, Value: h.Value}
			}
		}
		out[i], index[kr] = kr, i
	}
	results := cl.ProduceSync(ctx, out...)
	err := results.FirstErr()
	if err == nil {
		return nil
	}
	// The results come in the order the records were finished: put each
	// record's error at its index.
	errs := make([]error, len(recs))
	written := 0
	for _, r := range results {
		i, ok := index[r.Record]
		switch {
		case !ok:
		case r.Err != nil:
			errs[i] = produceError(topic, r.Err)
		default:
			written++
		}
	}
	if written == 0 || len(results) != len(recs) {
		return produceError(topic, err)
	}
	return &stream.PublishError{Errs: errs}
}

func produceError(topic string, err error) error {
	if errors.Is(err, kerr.UnknownTopicOrPartition) {
		return fmt.Errorf("franz: topic %q does not exist (create it): %w", topic, err)
	}
	return fmt.Errorf("franz: produce to topic %q: %w", topic, err)
}
