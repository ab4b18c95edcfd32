// Package memhub is an in-memory Azure Event Hubs for tests and examples:
// hubs whose partitions hold events with sequence numbers, partition
// clients that read them from a fixed start (no seek) and lose their
// partition when another client opens it for the same consumer group (as
// the service does for owner level 0 readers), a [Processor] that balances
// partitions between processors through a checkpoint store exactly as the
// SDK's Processor does (and so steals from a processor that owns more than
// its share), and a [Store] with the SDK blob store's semantics.
//
// It implements the narrow interfaces of package eventhubs
// ([eventhubs.Processor], [eventhubs.PartitionClient],
// [eventhubs.EventSender]), and any [azeventhubs.CheckpointStore] works
// with it: the SDK's blob store on Azurite, say. It does not speak AMQP;
// nothing of the SDK's networking is exercised.
//
//	hub, err := memhub.New("orders", 4)
//	err = hub.Send("0", &azeventhubs.EventData{Body: []byte("order 1")})
//	store, err := eventhubs.NewCheckpointStore(memhub.NewStore(), "processor-1", nil)
//	p, err := hub.NewProcessor(store, "billing", "processor-1", nil)
//	consumer, err := eventhubs.NewWith(proc, p, store)
package memhub

import (
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/messaging/azeventhubs/v2"
)

// Namespace is the fully qualified namespace of every in-memory hub, as
// checkpoint stores see it.
const Namespace = "memhub.invalid"

// Hub is one in-memory event hub. It is safe for concurrent use. Build it
// with [New]: the zero Hub has no partitions, and its methods return
// errors.
type Hub struct {
	name     string
	parts    []*partition
	geo      atomic.Bool
	maxBytes atomic.Int64
}

type partition struct {
	mu     sync.Mutex
	id     string
	base   int64                            // the sequence number of events[0]: those before it expired
	events []*azeventhubs.ReceivedEventData // the events retained
	links  map[string]int64                 // the current reader per consumer group
	notify chan struct{}                    // closed and replaced on every change
}

func (p *partition) changed() {
	close(p.notify)
	p.notify = make(chan struct{})
}

// New returns an event hub named name with partitions "0" to
// "partitions-1", empty.
func New(name string, partitions int) (*Hub, error) {
	if name == "" || partitions < 1 {
		return nil, fmt.Errorf("memhub: hub %q with %d partitions: want a name and at least 1 partition", name, partitions)
	}
	h := &Hub{name: name}
	for i := range partitions {
		h.parts = append(h.parts, &partition{id: strconv.Itoa(i), links: map[string]int64{}, notify: make(chan struct{})})
	}
	return h, nil
}

// errZeroHub is what the methods of a Hub that was not built return.
var errZeroHub = errors.New("memhub: zero Hub: build it with memhub.New")

// Name returns the hub's name.
func (h *Hub) Name() string {
	if h == nil {
		return ""
	}
	return h.name
}

// PartitionIDs returns the IDs of the hub's partitions.
func (h *Hub) PartitionIDs() []string {
	if h == nil {
		return nil
	}
	ids := make([]string, len(h.parts))
	for i, p := range h.parts {
		ids[i] = p.id
	}
	return ids
}

func (h *Hub) partition(id string) (*partition, error) {
	if h == nil || len(h.parts) == 0 {
		return nil, errZeroHub
	}
	n, err := strconv.Atoi(id)
	if err != nil || n < 0 || n >= len(h.parts) {
		return nil, fmt.Errorf("memhub: hub %s has no partition %q", h.name, id)
	}
	return h.parts[n], nil
}

// Send appends events to a partition: each gets the next sequence number
// (from 0), an offset (its sequence number as text) and the time as its
// enqueued time.
func (h *Hub) Send(partitionID string, events ...*azeventhubs.EventData) error {
	return h.send(partitionID, nil, events)
}

func (h *Hub) send(partitionID string, key *string, events []*azeventhubs.EventData) error {
	p, err := h.partition(partitionID)
	if err != nil {
		return err
	}
	if limit := h.maxBytes.Load(); limit > 0 {
		for i, ev := range events {
			if n := EventBytes(ev); n > limit {
				return fmt.Errorf("memhub: event %d of the send is %d bytes, over hub %s's limit of %d: %w", i, n, h.name, limit, azeventhubs.ErrEventDataTooLarge)
			}
		}
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	now := time.Now().UTC()
	for _, ev := range events {
		seq := p.base + int64(len(p.events))
		at := now
		p.events = append(p.events, &azeventhubs.ReceivedEventData{
			EventData: *ev, SequenceNumber: seq, Offset: strconv.FormatInt(seq, 10), EnqueuedTime: &at, PartitionKey: key,
		})
	}
	p.changed()
	return nil
}

// SendEvents sends events to the partition their partition key hashes to
// (partition "0" without a key): the hub as an [eventhubs.EventSender].
func (h *Hub) SendEvents(ctx context.Context, partitionKey *string, events []*azeventhubs.EventData) error {
	if h == nil || len(h.parts) == 0 {
		return errZeroHub
	}
	id := "0"
	if partitionKey != nil {
		f := fnv.New32a()
		f.Write([]byte(*partitionKey))
		id = strconv.Itoa(int(f.Sum32() % uint32(len(h.parts))))
		k := *partitionKey
		partitionKey = &k
	}
	return h.send(id, partitionKey, events)
}

// Expire drops a partition's events before sequence number before, as the
// service's retention does: a reader positioned before them reads on from
// the earliest event retained.
func (h *Hub) Expire(partitionID string, before int64) error {
	p, err := h.partition(partitionID)
	if err != nil {
		return err
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if n := min(before-p.base, int64(len(p.events))); n > 0 {
		p.events = append([]*azeventhubs.ReceivedEventData(nil), p.events[n:]...)
		p.base += n
		p.changed()
	}
	return nil
}

// SetMaxEventBytes makes the hub refuse events larger than n bytes (as
// [EventBytes] counts them), as the service refuses events over its limit
// (1 MB on the standard tier): a send that holds one fails with an error
// matching [azeventhubs.ErrEventDataTooLarge], and sends none of its
// events. n <= 0, the default, means no limit.
func (h *Hub) SetMaxEventBytes(n int) {
	if h == nil {
		return
	}
	h.maxBytes.Store(int64(n))
}

// EventBytes returns the size of an event as a hub with a limit counts
// it: its body and its properties' names and values (strings and byte
// slices as they are, other values as fmt prints them). The service
// counts the event's AMQP encoding, which is a little more.
func EventBytes(ev *azeventhubs.EventData) int64 {
	if ev == nil {
		return 0
	}
	n := int64(len(ev.Body))
	for k, v := range ev.Properties {
		n += int64(len(k))
		switch x := v.(type) {
		case string:
			n += int64(len(x))
		case []byte:
			n += int64(len(x))
		default:
			n += int64(len(fmt.Sprint(x)))
		}
	}
	return n
}

// SetGeoReplication makes the hub behave as one in a geo-replicated
// namespace, which refuses a start position given as an integer offset
// (the offsets of this hub, and the checkpoints of namespaces before they
// were geo-replicated): a Processor then opens the partition at its
// earliest event, inclusive, as the SDK's does when the service refuses
// the checkpoint's offset.
func (h *Hub) SetGeoReplication(on bool) {
	if h == nil {
		return
	}
	h.geo.Store(on)
}

// bounds returns the sequence numbers of a partition's earliest retained
// event and of the next event to come.
func (p *partition) bounds() (earliest, end int64) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.base, p.base + int64(len(p.events))
}

// Events returns a partition's retained events, in order.
func (h *Hub) Events(partitionID string) ([]*azeventhubs.ReceivedEventData, error) {
	p, err := h.partition(partitionID)
	if err != nil {
		return nil, err
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]*azeventhubs.ReceivedEventData(nil), p.events...), nil
}

// ErrClosed is returned by a closed partition client's ReceiveEvents.
var ErrClosed = errors.New("memhub: partition client closed")

// open makes a reader of the partition for group from sequence number
// start, and takes the partition from the group's previous reader.
func (h *Hub) open(group, id string, start int64) (*PartitionClient, error) {
	p, err := h.partition(id)
	if err != nil {
		return nil, err
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	p.links[group]++
	p.changed()
	return &PartitionClient{hub: h, p: p, group: group, link: p.links[group], pos: start}, nil
}

// PartitionClient reads one partition for one consumer group from a
// position fixed when it was opened, as [azeventhubs.PartitionClient] does.
// It is safe for concurrent use.
type PartitionClient struct {
	hub     *Hub
	p       *partition
	group   string
	link    int64
	store   azeventhubs.CheckpointStore
	cleanup func()

	mu     sync.Mutex
	pos    int64
	closed bool
}

// errZeroClient is what the methods of a PartitionClient that a Processor
// did not hand out return.
var errZeroClient = errors.New("memhub: zero PartitionClient: get one from Processor.NextPartitionClient")

// PartitionID returns the partition's ID ("" for the zero PartitionClient).
func (c *PartitionClient) PartitionID() string {
	if c == nil || c.p == nil {
		return ""
	}
	return c.p.id
}

// ReceiveEvents returns up to count events, waiting until there are count
// or ctx is done (then it returns what it has, or ctx's error if nothing).
// Once another client opened the partition for the same consumer group it
// fails with an [*azeventhubs.Error] whose code is
// [azeventhubs.ErrorCodeOwnershipLost].
func (c *PartitionClient) ReceiveEvents(ctx context.Context, count int, _ *azeventhubs.ReceiveEventsOptions) ([]*azeventhubs.ReceivedEventData, error) {
	if c == nil || c.p == nil {
		return nil, errZeroClient
	}
	if count <= 0 {
		return nil, errors.New("memhub: count should be greater than 0")
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	var out []*azeventhubs.ReceivedEventData
	for {
		c.p.mu.Lock()
		if c.closed {
			c.p.mu.Unlock()
			return nil, ErrClosed
		}
		if c.p.links[c.group] != c.link {
			c.p.mu.Unlock()
			return nil, &azeventhubs.Error{Code: azeventhubs.ErrorCodeOwnershipLost}
		}
		c.pos = max(c.pos, c.p.base) // expired events are gone
		for c.pos-c.p.base < int64(len(c.p.events)) && len(out) < count {
			out = append(out, c.p.events[c.pos-c.p.base])
			c.pos++
		}
		ch := c.p.notify
		c.p.mu.Unlock()
		if len(out) == count {
			return out, nil
		}
		select {
		case <-ch:
		case <-ctx.Done():
			if len(out) > 0 {
				return out, nil
			}
			return nil, ctx.Err()
		}
	}
}

// UpdateCheckpoint writes latest as the partition's checkpoint through the
// processor's checkpoint store.
func (c *PartitionClient) UpdateCheckpoint(ctx context.Context, latest *azeventhubs.ReceivedEventData, _ *azeventhubs.UpdateCheckpointOptions) error {
	switch {
	case c == nil || c.p == nil:
		return errZeroClient
	case c.store == nil:
		return errors.New("memhub: partition client without a checkpoint store")
	case latest == nil:
		return errors.New("memhub: UpdateCheckpoint: nil event")
	}
	seq, off := latest.SequenceNumber, latest.Offset
	return c.store.SetCheckpoint(ctx, azeventhubs.Checkpoint{
		FullyQualifiedNamespace: Namespace, EventHubName: c.hub.name, ConsumerGroup: c.group,
		PartitionID: c.p.id, SequenceNumber: &seq, Offset: &off,
	}, nil)
}

// Close closes the client; a ReceiveEvents waiting returns [ErrClosed].
func (c *PartitionClient) Close(context.Context) error {
	if c == nil || c.p == nil {
		return nil
	}
	c.p.mu.Lock()
	c.closed = true
	c.p.changed()
	c.p.mu.Unlock()
	if c.cleanup != nil {
		c.cleanup()
	}
	return nil
}
