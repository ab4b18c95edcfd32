package sarama

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/IBM/sarama"

	"github.com/redeliver-go/redeliver/adapters/internal/kafkaadapter"
	"github.com/redeliver-go/redeliver/internal/health"
	"github.com/redeliver-go/redeliver/stream"
)

// Publisher produces records through a sarama [sarama.SyncProducer], for
// [stream.DeadLetter]. It is safe for concurrent use.
//
// A Publisher is made with [NewPublisher] on a client of your own, or as
// new(sarama.Publisher), unbound, to produce through a producer the
// consumer makes and closes: give it to [New] with [WithPublisher]. That
// allows the natural order of construction: the publisher, the
// processor's options and the processor, then the consumer, as with the
// franz-go and kafka-go adapters.
type Publisher struct {
	// NewPublisher's client and producer.
	client   sarama.Client
	producer sarama.SyncProducer

	binding kafkaadapter.Binding[sarama.SyncProducer] // to the producer of the consumer WithPublisher bound p to
}

// ownedProducer is the producer a consumer makes for the publishers given
// to it with WithPublisher: made once Run has reached the brokers, closed
// when Run ends, once the sends in flight have returned (closing a sarama
// producer under a send would make it panic).
type ownedProducer struct {
	kafkaadapter.Owned[sarama.SyncProducer]
}

// stop takes the producer away, so that no send starts again, and closes
// it once the sends in flight have returned, waiting for that at most
// wait. It reports whether the producer was closed within wait.
func (o *ownedProducer) stop(wait time.Duration) bool {
	return o.Stop(wait, func(p sarama.SyncProducer) { _ = p.Close() })
}

// bind binds p to the producer o of a consumer, unless p has a producer of
// its own (NewPublisher) or is bound to another consumer.
func (p *Publisher) bind(o *ownedProducer) error {
	if p == nil {
		return errors.New("sarama: WithPublisher: nil publisher")
	}
	return p.binding.Bind("sarama", p.producer, &o.Owned)
}

// unbind undoes bind, for a New that fails after it.
func (p *Publisher) unbind(o *ownedProducer) { p.binding.Unbind(&o.Owned) }

// bound returns the consumer's producer p is bound to, or nil.
func (p *Publisher) bound() *kafkaadapter.Owned[sarama.SyncProducer] { return p.binding.Owned() }

// Bound reports whether p produces through a producer: made by
// [NewPublisher], or bound to a consumer by [WithPublisher] (whose
// producer lives while the consumer's Run runs).
func (p *Publisher) Bound() bool { return p != nil && (p.producer != nil || p.bound() != nil) }

// NewPublisher returns a Publisher that produces through a
// [sarama.SyncProducer] it makes on client
// ([sarama.NewSyncProducerFromClient]). A dead letter must be
// acknowledged before the checkpoint moves past its batch, so the client's
// configuration must have Producer.RequiredAcks sarama.WaitForLocal or
// sarama.WaitForAll (sarama.NoResponse is refused) and
// Producer.Return.Successes and Producer.Return.Errors set, as every
// SyncProducer needs. The partition of a record is the configuration's
// Producer.Partitioner's. [Publisher.Close] closes the producer, not the
// client.
func NewPublisher(client sarama.Client) (*Publisher, error) {
	if client == nil {
		return nil, errors.New("sarama: nil client for the publisher")
	}
	if client.Closed() {
		return nil, errors.New("sarama: the publisher's client is closed")
	}
	conf := client.Config()
	switch {
	case conf == nil:
		return nil, errors.New("sarama: the publisher's client has no configuration")
	case conf.Producer.RequiredAcks == sarama.NoResponse:
		return nil, errors.New("sarama: the publisher's client has Producer.RequiredAcks NoResponse: set WaitForAll or WaitForLocal")
	case !conf.Producer.Return.Successes:
		return nil, errors.New("sarama: the publisher's client has Producer.Return.Successes false: a SyncProducer needs it true")
	case !conf.Producer.Return.Errors:
		return nil, errors.New("sarama: the publisher's client has Producer.Return.Errors false: a SyncProducer needs it true")
	}
	p, err := sarama.NewSyncProducerFromClient(client)
	if err != nil {
		return nil, fmt.Errorf("sarama: make the publisher's producer: %w", err)
	}
	return &Publisher{client: client, producer: p}, nil
}

// Close closes the producer of a Publisher made by [NewPublisher], after
// the records it is sending. It does not close the client. A Publisher
// given to a consumer with [WithPublisher] is closed by the consumer when
// its Run ends: Close returns an error for it.
func (p *Publisher) Close() error {
	if p != nil && p.producer == nil && p.bound() != nil {
		return errors.New("sarama: the Publisher was given to a consumer with WithPublisher: the consumer closes its producer when Run ends")
	}
	if p == nil || p.producer == nil {
		return errNotPublisher
	}
	return p.producer.Close()
}

var errNotPublisher = errors.New("sarama: the Publisher has no producer: build it with sarama.NewPublisher(client), or give new(sarama.Publisher) to sarama.New with WithPublisher")

// Publish produces recs to topic and returns once every record is
// acknowledged, or an error. Records keep their keys, values, headers and
// timestamps. When the broker acknowledged some records and failed others
// (one partition's leader away), the error is a [*stream.PublishError]
// that says which, from the producer's [sarama.ProducerErrors]: a record
// reported failed may still have been written if its acknowledgement was
// lost (a timeout). sarama's producer takes no context: a publish that
// ctx ends first returns ctx's error and leaves its records to the
// producer's own timeouts and retries (Producer.Timeout, Producer.Retry).
//
// A Publisher given to a consumer with [WithPublisher] publishes while the
// consumer's Run runs (from once Run has reached the brokers), and returns
// an error that says so before and after.
func (p *Publisher) Publish(ctx context.Context, topic string, recs []stream.Record) error {
	if p == nil {
		return errNotPublisher
	}
	producer, release, err := p.binding.Producer("sarama", "once the consumer's Run has reached the brokers", p.producer, errNotPublisher)
	if err != nil {
		return err
	}
	if len(recs) == 0 {
		release()
		return nil
	}
	msgs := make([]*sarama.ProducerMessage, len(recs))
	index := make(map[*sarama.ProducerMessage]int, len(recs))
	for i, r := range recs {
		m := &sarama.ProducerMessage{Topic: topic, Value: sarama.ByteEncoder(r.Value), Timestamp: r.Timestamp}
		if r.Key != nil {
			m.Key = sarama.ByteEncoder(r.Key)
		}
		if len(r.Headers) > 0 {
			m.Headers = make([]sarama.RecordHeader, len(r.Headers))
			for j, h := range r.Headers {
				m.Headers[j] = sarama.RecordHeader{Key: []byte(h.Key), Value: h.Value}
			}
		}
		msgs[i] = m
		index[m] = i
	}
	done := make(chan error, 1)
	go func() {
		defer release() // the consumer closes its producer once no send is in flight
		done <- producer.SendMessages(msgs)
	}()
	select {
	case err = <-done:
	case <-ctx.Done():
		return fmt.Errorf("sarama: publish %d records to topic %q: %w", len(recs), topic, context.Cause(ctx))
	}
	if err == nil {
		return nil
	}
	var pes sarama.ProducerErrors
	if errors.As(err, &pes) && len(pes) < len(msgs) {
		errs := make([]error, len(msgs))
		for _, pe := range pes {
			if i, ok := index[pe.Msg]; ok && pe.Err != nil {
				errs[i] = writeError(topic, "1 record", pe.Err)
			}
		}
		return &stream.PublishError{Errs: errs}
	}
	return writeError(topic, fmt.Sprintf("%d records", len(msgs)), err)
}

func writeError(topic, what string, err error) error {
	var pes sarama.ProducerErrors
	if errors.As(err, &pes) && len(pes) > 0 && pes[0] != nil {
		// sarama's text only counts the failures: say the first.
		err = fmt.Errorf("%v (%d failed; the first: %w)", err, len(pes), pes[0].Err)
	}
	if unknownTopic(err) {
		return fmt.Errorf("sarama: topic %q does not exist (create it): publish %s: %v", topic, what, err)
	}
	return fmt.Errorf("sarama: publish %s to topic %q: %v", what, topic, err)
}

// unknownTopic reports whether err, or one of the errors of a
// sarama.ProducerErrors, is sarama.ErrUnknownTopicOrPartition.
func unknownTopic(err error) bool {
	var pes sarama.ProducerErrors
	if errors.As(err, &pes) {
		if errors.Is(err, sarama.ErrUnknownTopicOrPartition) {
			return true
		}
		for _, pe := range pes {
			if pe != nil && errors.Is(pe.Err, sarama.ErrUnknownTopicOrPartition) {
				return true
			}
		}
		return false
	}
	return errors.Is(err, sarama.ErrUnknownTopicOrPartition)
}

// checkTopic is a consumer's start check of the topic its processor
// dead-letters to through p: one metadata request to a broker of the
// publisher's client, which may not be the consumer's cluster, that never
// asks to create the topic.
func (p *Publisher) checkTopic(ctx context.Context, topic string) []health.Problem {
	var err error = errors.New("the client knows no broker")
	for _, b := range p.client.Brokers() {
		var res *sarama.MetadataResponse
		res, err = metadata(ctx, b, p.client.Config(), []string{topic})
		if err != nil {
			if ctx.Err() != nil {
				break
			}
			continue
		}
		return topicProblems(res, []string{topic}, "dead-letter")
	}
	return []health.Problem{health.DeadLetterUnreachable("sarama", err)}
}
