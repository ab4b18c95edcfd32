package eventhubs

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"unicode/utf8"

	"github.com/Azure/azure-sdk-for-go/sdk/messaging/azeventhubs/v2"

	"github.com/redeliver-go/redeliver/stream"
)

// EventSender sends events to one event hub and returns once the service
// has accepted them all. partitionKey, when not nil, is the partition key
// of every event of the call.
type EventSender interface {
	SendEvents(ctx context.Context, partitionKey *string, events []*azeventhubs.EventData) error
}

// Publisher sends records to an event hub, for [stream.DeadLetter]: a
// dead-letter hub for an Event Hubs consumer, or for a Kafka one. Each
// record becomes an event whose body is the record's value and whose
// application properties are its headers (strings when they are valid
// UTF-8, bytes otherwise); a record's key becomes the event's partition
// key, so records with one key land in one partition. A Publisher is safe
// for concurrent use. Build it with [NewPublisher] or [NewSenderPublisher]:
// the zero Publisher's Publish returns an error.
type Publisher struct {
	hub    string
	sender EventSender
	lookup func(context.Context) (string, error)

	mu sync.Mutex
}

// NewPublisher returns a Publisher that sends through pc, bound to one
// event hub. Publish refuses a topic other than that hub's name (read once
// from the service).
func NewPublisher(pc *azeventhubs.ProducerClient) (*Publisher, error) {
	if pc == nil {
		return nil, errors.New("eventhubs: NewPublisher: nil producer client")
	}
	return &Publisher{sender: producerSender{pc}, lookup: func(ctx context.Context) (string, error) {
		props, err := pc.GetEventHubProperties(ctx, nil)
		return props.Name, err
	}}, nil
}

// NewSenderPublisher returns a Publisher that sends to the event hub named
// hub through s (an in-memory hub's sender, say).
func NewSenderPublisher(hub string, s EventSender) (*Publisher, error) {
	switch {
	case isNil(s):
		return nil, fmt.Errorf("eventhubs: NewSenderPublisher: nil sender (%T)", s)
	case hub == "":
		return nil, errors.New("eventhubs: NewSenderPublisher: empty hub name")
	}
	return &Publisher{hub: hub, sender: s}, nil
}

// Publish sends recs to the publisher's hub, whose name topic must be, and
// returns once all are accepted, or the first error. Consecutive records
// with the same key go in one call.
func (p *Publisher) Publish(ctx context.Context, topic string, recs []stream.Record) error {
	if p == nil || p.sender == nil {
		return errors.New("eventhubs: Publish on a zero Publisher: build it with eventhubs.NewPublisher or eventhubs.NewSenderPublisher")
	}
	hub, err := p.hubName(ctx)
	if err != nil {
		return err
	}
	if topic != hub {
		return fmt.Errorf("eventhubs: publisher sends to event hub %q, not %q", hub, topic)
	}
	for i := 0; i < len(recs); {
		j := i + 1
		for j < len(recs) && string(recs[j].Key) == string(recs[i].Key) {
			j++
		}
		var key *string
		if len(recs[i].Key) > 0 {
			k := string(recs[i].Key)
			key = &k
		}
		evs := make([]*azeventhubs.EventData, 0, j-i)
		for _, r := range recs[i:j] {
			evs = append(evs, Event(r))
		}
		if err := p.sender.SendEvents(ctx, key, evs); err != nil {
			return fmt.Errorf("eventhubs: send to %s: %w", hub, err)
		}
		i = j
	}
	return nil
}

func (p *Publisher) hubName(ctx context.Context) (string, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.hub == "" {
		name, err := p.lookup(ctx)
		if err != nil {
			return "", fmt.Errorf("eventhubs: read the publisher's event hub name: %w", err)
		}
		p.hub = name
	}
	return p.hub, nil
}

// Event returns r as an event to send: its value as the body, its headers
// as application properties (strings when valid UTF-8, bytes otherwise;
// a repeated header keeps its last value).
func Event(r stream.Record) *azeventhubs.EventData {
	ev := &azeventhubs.EventData{Body: r.Value}
	if len(r.Headers) > 0 {
		ev.Properties = make(map[string]any, len(r.Headers))
		for _, h := range r.Headers {
			if utf8.Valid(h.Value) {
				ev.Properties[h.Key] = string(h.Value)
			} else {
				ev.Properties[h.Key] = h.Value
			}
		}
	}
	return ev
}

// producerSender sends through a ProducerClient, in as many batches as the
// service's size limit needs.
type producerSender struct{ pc *azeventhubs.ProducerClient }

func (s producerSender) SendEvents(ctx context.Context, key *string, evs []*azeventhubs.EventData) error {
	opts := &azeventhubs.EventDataBatchOptions{PartitionKey: key}
	batch, err := s.pc.NewEventDataBatch(ctx, opts)
	if err != nil {
		return err
	}
	for _, ev := range evs {
		err := batch.AddEventData(ev, nil)
		if errors.Is(err, azeventhubs.ErrEventDataTooLarge) && batch.NumEvents() > 0 {
			if err := s.pc.SendEventDataBatch(ctx, batch, nil); err != nil {
				return err
			}
			if batch, err = s.pc.NewEventDataBatch(ctx, opts); err != nil {
				return err
			}
			err = batch.AddEventData(ev, nil)
		}
		if err != nil {
			return err
		}
	}
	if batch.NumEvents() == 0 {
		return nil
	}
	return s.pc.SendEventDataBatch(ctx, batch, nil)
}
