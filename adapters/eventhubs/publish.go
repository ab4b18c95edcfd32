package eventhubs

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"unicode/utf8"

	"github.com/Azure/azure-sdk-for-go/sdk/messaging/azeventhubs/v2"

	"github.com/redeliver-go/redeliver/redrive"
	"github.com/redeliver-go/redeliver/stream"
)

// EventSender sends events to one event hub and returns once the service
// has accepted them all. partitionKey, when not nil, is the partition key
// of every event of the call. When an event is too large to be sent even
// alone, SendEvents returns an error matching
// [azeventhubs.ErrEventDataTooLarge] and sends nothing of the call.
type EventSender interface {
	SendEvents(ctx context.Context, partitionKey *string, events []*azeventhubs.EventData) error
}

// Publisher sends records to an event hub, for [stream.DeadLetter]: a
// dead-letter hub for an Event Hubs consumer, or for a Kafka one. Each
// record becomes an event whose body is the record's value and whose
// application properties are its headers (strings when they are valid
// UTF-8, bytes otherwise); a record's key becomes the event's partition
// key, so records with one key land in one partition.
//
// A dead letter carries the headers [stream.DeadLetter] adds, so it can be
// too large for the hub where its record was not (a source event near the
// service's limit, 1 MB on the standard tier). Such an event is sent with
// those headers cut down, step by step, until it fits: first the error
// texts ([stream.HeaderError], [stream.HeaderDLQMessage]) cut to
// 256 bytes, then only the original topic, partition and offset kept,
// then none. Each cut is logged at Warn level through slog.Default(). An
// event too large with none of them (a dead-letter hub with a smaller limit
// than the source's) can never be sent: Publish returns an error that says
// so, and the dead-letter action tries again after its backoff while the
// partition waits. The headers a [redrive.Scheduler] adds to a re-driven
// record ([redrive.HeaderKey], [redrive.HeaderNumber],
// [redrive.HeaderState]) are never cut: without them the record could not
// complete its entry, and failing again it would be parked as a new one.
// A re-driven record that does not fit with them is not sent: the
// scheduler reports the failure and times the entry out. A Publisher is
// safe for concurrent use. Build it with [NewPublisher] or [NewSenderPublisher]:
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
// with the same key go in one call to the sender, in order, and a call
// that fails ends the Publish. When calls before it went through, the
// error is a [*stream.PublishError] that says which records were sent, so
// that a re-drive or a dead-letter action sends only the others again. A
// failed call's records all count as not sent, so some are sent again
// when the service took them all the same: an acknowledgement lost, or,
// through the SDK's producer, the batches sent before the one that failed
// when a call's events need more than one.
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
		err := p.sender.SendEvents(ctx, key, evs)
		sent := 0
		if errors.Is(err, azeventhubs.ErrEventDataTooLarge) {
			sent, err = p.sendCut(ctx, hub, key, recs[i:j])
		}
		if err != nil {
			return sentBefore(i+sent, len(recs), fmt.Errorf("eventhubs: send to %s: %w", hub, err))
		}
		i = j
	}
	return nil
}

// sentBefore is the error of a Publish of n records whose first sent were
// sent before err: err itself when none were.
func sentBefore(sent, n int, err error) error {
	if sent == 0 {
		return err
	}
	errs := make([]error, n)
	for i := sent; i < n; i++ {
		errs[i] = err
	}
	return &stream.PublishError{Errs: errs}
}

// sendCut sends recs one by one, each with its dead-letter headers cut
// down as far as it needs to fit, and returns how many it sent.
func (p *Publisher) sendCut(ctx context.Context, hub string, key *string, recs []stream.Record) (int, error) {
	for i, r := range recs {
		var err error
		for level := range cutLevels {
			if level > 0 {
				slog.Default().Warn("redeliver: dead letter too large for the event hub, its dead-letter headers cut",
					"hub", hub, "topic", headerValue(r, stream.HeaderTopic), "offset", headerValue(r, stream.HeaderOffset),
					"kept", cutLevels[level], "value_bytes", len(r.Value))
			}
			err = p.sender.SendEvents(ctx, key, []*azeventhubs.EventData{Event(cut(r, level))})
			if !errors.Is(err, azeventhubs.ErrEventDataTooLarge) {
				break
			}
		}
		if errors.Is(err, azeventhubs.ErrEventDataTooLarge) {
			return i, fmt.Errorf("the event of %s offset %s (%d bytes of value, %d headers of its own) is too large for event hub %s even with no dead-letter headers, "+
				"and can never be sent there: use a dead-letter hub whose size limit is the source's: %w",
				headerValue(r, stream.HeaderTopic), headerValue(r, stream.HeaderOffset), len(r.Value), len(cut(r, len(cutLevels)-1).Headers), hub, err)
		}
		if err != nil {
			return i, err
		}
	}
	return len(recs), nil
}

// cutLevels says what each level of cut keeps of the dead-letter headers.
var cutLevels = []string{"all", "all, error texts cut to 256 bytes", "original topic, partition and offset", "none"}

// cutText is how much of an error text the first cut keeps, in bytes.
const cutText = 256

// cut returns r with its dead-letter headers cut down to level (see
// cutLevels); headers of its own are kept.
func cut(r stream.Record, level int) stream.Record {
	if level == 0 {
		return r
	}
	hs := make([]stream.Header, 0, len(r.Headers))
	for _, h := range r.Headers {
		switch {
		case !deadLetterHeader(h.Key):
			hs = append(hs, h)
		case level == 1 && (h.Key == stream.HeaderError || h.Key == stream.HeaderDLQMessage) && len(h.Value) > cutText:
			v := h.Value[:cutText]
			for len(v) > 0 && !utf8.Valid(v) { // not in the middle of a character
				v = v[:len(v)-1]
			}
			hs = append(hs, stream.Header{Key: h.Key, Value: append(append([]byte(nil), v...), "..."...)})
		case level == 1 || level == 2 && (h.Key == stream.HeaderTopic || h.Key == stream.HeaderPartition || h.Key == stream.HeaderOffset):
			hs = append(hs, h)
		}
	}
	r.Headers = hs
	return r
}

// deadLetterHeader reports whether key is a header that stream.DeadLetter
// adds, one that a cut may drop. The re-drive's headers (its entry's key,
// its number and state) are never dropped: they tie a re-published record
// to its entry, which it completes, or goes back to when it fails again.
func deadLetterHeader(key string) bool {
	switch key {
	case redrive.HeaderKey, redrive.HeaderNumber, redrive.HeaderState:
		return false
	}
	return strings.HasPrefix(key, "redeliver-") || strings.HasPrefix(key, "__dlq.errors.")
}

func headerValue(r stream.Record, key string) string {
	for _, h := range r.Headers {
		if h.Key == key {
			return string(h.Value)
		}
	}
	return "?"
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
// service's size limit needs. It fills every batch before it sends the
// first, so that an event too large for a batch of its own fails the call
// before anything of it is sent.
type producerSender struct{ pc *azeventhubs.ProducerClient }

func (s producerSender) SendEvents(ctx context.Context, key *string, evs []*azeventhubs.EventData) error {
	opts := &azeventhubs.EventDataBatchOptions{PartitionKey: key}
	batch, err := s.pc.NewEventDataBatch(ctx, opts)
	if err != nil {
		return err
	}
	batches := []*azeventhubs.EventDataBatch{batch}
	for _, ev := range evs {
		err := batch.AddEventData(ev, nil)
		if errors.Is(err, azeventhubs.ErrEventDataTooLarge) && batch.NumEvents() > 0 {
			if batch, err = s.pc.NewEventDataBatch(ctx, opts); err != nil {
				return err
			}
			batches = append(batches, batch)
			err = batch.AddEventData(ev, nil)
		}
		if err != nil {
			return err
		}
	}
	for _, b := range batches {
		if b.NumEvents() == 0 {
			continue
		}
		if err := s.pc.SendEventDataBatch(ctx, b, nil); err != nil {
			return err
		}
	}
	return nil
}
