package eventhubs

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/messaging/azeventhubs/v2"

	"github.com/redeliver-go/redeliver/stream"
)

// claim is one partition client as a [stream.Claim].
//
// Invariant: the events of the batch last returned by Fetch (last) are
// the only ones a checkpoint can name, since the engine commits the batch
// it holds before it fetches the next; cpSeq is the sequence number of the
// checkpoint in the store as this claim knows it (-1 for none), and stateAt
// the position of the retry state it wrote (-1 for none). Event Hubs has no
// seek: a batch to deliver again is held by the engine, never read again.
type claim struct {
	pc        PartitionClient
	store     *CheckpointStore
	key       partKey
	partition int32
	gate      *gate
	start     Position
	maxBatch  int
	wait      time.Duration
	// commitTimeout bounds one Commit.
	commitTimeout time.Duration

	cpSeq   int64
	stateAt int64
	fetched bool
	last    []*azeventhubs.ReceivedEventData
	recs    []stream.Record
	paused  bool
}

func (c *claim) Topic() string    { return c.key.hub }
func (c *claim) Partition() int32 { return c.partition }

func (c *claim) Committed() (int64, string) { return c.start.Next, c.start.Metadata }

// Fetch calls ReceiveEvents for up to maxBatch events, each call waiting
// at most wait for them, until some arrive. Ownership lost ends the claim.
func (c *claim) Fetch(ctx context.Context) ([]stream.Record, error) {
	for {
		rctx, cancel := context.WithTimeout(ctx, c.wait)
		evs, err := c.pc.ReceiveEvents(rctx, c.maxBatch, nil)
		cancel()
		if len(evs) > 0 {
			return c.records(evs), nil
		}
		switch {
		case ctx.Err() != nil:
			return nil, context.Cause(ctx)
		case IsOwnershipLost(err):
			lost := fmt.Errorf("%w: %s: %v", ErrOwnershipLost, c.key, err)
			c.store.lose(c.key, lost)
			return nil, lost
		case err == nil || errors.Is(err, context.DeadlineExceeded) || rctx.Err() != nil:
			continue // nothing within the wait
		default:
			return nil, err
		}
	}
}

func (c *claim) records(evs []*azeventhubs.ReceivedEventData) []stream.Record {
	if !c.fetched && c.start.Next < 0 {
		// No checkpoint: the partition starts where the processor's start
		// position put it, and nothing before that needs one.
		c.cpSeq = evs[0].SequenceNumber - 1
	}
	c.fetched = true
	c.last = evs
	c.recs = c.recs[:0]
	for _, ev := range evs {
		c.recs = append(c.recs, Record(c.key.hub, c.partition, ev))
	}
	return c.recs
}

// Record returns ev as a stream.Record of the hub's partition: the offset
// is the event's sequence number, the key its partition key, the headers
// its application properties (in key order; strings and byte slices as
// they are, other values as fmt prints them), the timestamp its enqueued
// time. A nil ev gives a record with the hub and partition only, at offset
// -1.
func Record(hub string, partition int32, ev *azeventhubs.ReceivedEventData) stream.Record {
	if ev == nil {
		return stream.Record{Topic: hub, Partition: partition, Offset: -1}
	}
	r := stream.Record{Topic: hub, Partition: partition, Offset: ev.SequenceNumber, Value: ev.Body}
	if ev.PartitionKey != nil {
		r.Key = []byte(*ev.PartitionKey)
	}
	if ev.EnqueuedTime != nil {
		r.Timestamp = *ev.EnqueuedTime
	}
	if len(ev.Properties) > 0 {
		r.Headers = make([]stream.Header, 0, len(ev.Properties))
		for _, k := range slices.Sorted(maps.Keys(ev.Properties)) {
			var v []byte
			switch x := ev.Properties[k].(type) {
			case string:
				v = []byte(x)
			case []byte:
				v = x
			default:
				v = fmt.Append(nil, x)
			}
			r.Headers = append(r.Headers, stream.Header{Key: k, Value: v})
		}
	}
	return r
}

// Pause and Resume only mark the claim: a paused claim is one the engine
// does not call Fetch on, and so one that does not call ReceiveEvents.
// Meanwhile the SDK's prefetch (ProcessorOptions.Prefetch, 300 events by
// default) fills up to its size and then stops asking for more.
func (c *claim) Pause()  { c.paused = true }
func (c *claim) Resume() { c.paused = false }

// Commit writes the retry state md for next when there is one (or clears
// one this claim wrote there), then the checkpoint at the event before
// next through UpdateCheckpoint when it moves. Both go through the store's
// fence; a lost claim writes nothing and gets [ErrOwnershipLost].
func (c *claim) Commit(ctx context.Context, next int64, md string) error {
	if c.store.lost(c.gate) {
		return fmt.Errorf("%w: %s: this claim lost it earlier", ErrOwnershipLost, c.key)
	}
	// A write once begun is seen through (within the commit timeout), even
	// if the claim ends meanwhile: cut off, it could land unreported.
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), c.commitTimeout)
	defer cancel()
	ctx = context.WithValue(ctx, gateCtxKey{}, c.gate)
	if md != "" || c.stateAt == next {
		// The state first: a state ahead of the checkpoint is ignored, so
		// a crash between the two writes loses nothing.
		if err := c.store.setState(ctx, c.key, next, md); err != nil {
			return err
		}
		c.stateAt = next
		if md == "" {
			c.stateAt = -1
		}
	}
	if next-1 <= c.cpSeq {
		return nil
	}
	var ev *azeventhubs.ReceivedEventData
	for _, e := range c.last {
		if e.SequenceNumber == next-1 {
			ev = e
			break
		}
	}
	if ev == nil {
		return fmt.Errorf("eventhubs: %s: no event at sequence number %d in the batch to checkpoint", c.key, next-1)
	}
	if err := c.pc.UpdateCheckpoint(ctx, ev, nil); err != nil {
		return err
	}
	c.cpSeq = next - 1
	return nil
}

// IsOwnershipLost reports whether err says that another reader took the
// partition: an [*azeventhubs.Error] with code
// [azeventhubs.ErrorCodeOwnershipLost], or [ErrOwnershipLost].
func IsOwnershipLost(err error) bool {
	var e *azeventhubs.Error
	if errors.As(err, &e) && e.Code == azeventhubs.ErrorCodeOwnershipLost {
		return true
	}
	return errors.Is(err, ErrOwnershipLost)
}
