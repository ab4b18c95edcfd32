package eventhubs

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/messaging/azeventhubs/v2"

	"github.com/redeliver-go/redeliver/internal/batching"
	"github.com/redeliver-go/redeliver/stream"
)

// claim is one partition client as a [stream.Claim].
//
// Invariant: the checkpoint in the store names the sequence number cpSeq
// (-1 for none written or read by this claim), and every event after it
// that the partition still holds is either in the batch last returned by
// Fetch (last) or still to be received, in order. The engine commits the
// batch it holds before it fetches the next, so a checkpoint names an
// event of last, or the one just before an event of last that the claim
// does not hold: before the batch's first, or before one that follows
// events expired from the hub (a positional checkpoint, see
// [PositionOffset]). expect is the sequence number of the event that
// comes next if none expired (-1 while unknown): a batch past it is
// logged as a loss. Before its first batch, a claim on a partition
// with no checkpoint writes a positional one just before that batch, so
// that any next owner starts there whatever its start position (the
// SDK's default is the latest event); and it drops events at or before
// the checkpoint that a client opened earlier than asked delivers (the
// SDK's fallback to the earliest event on a geo-replicated namespace).
// stateAt is the position of the retry state this claim knows in the store
// (-1 for none). Event Hubs has no seek: a batch to deliver again is held
// by the engine, never read again.
type claim struct {
	pc        PartitionClient
	store     *CheckpointStore
	key       partKey
	partition int32
	gate      *gate
	start     Position
	maxBatch  int
	wait      time.Duration
	log       *slog.Logger
	// commitTimeout bounds one Commit.
	commitTimeout time.Duration

	cpSeq   int64
	expect  int64
	stateAt int64
	seed    bool // the store has no checkpoint of the partition
	fetched bool
	last    []*azeventhubs.ReceivedEventData
	recs    []stream.Record
	paused  bool
}

func (c *claim) Topic() string    { return c.key.hub }
func (c *claim) Partition() int32 { return c.partition }

func (c *claim) Committed() (int64, string) { return c.start.Next, c.start.Metadata }

// Fetch calls ReceiveEvents for up to maxBatch events, each call waiting
// at most wait for them, until some arrive. Ownership lost ends the claim;
// so does a claim ended while ReceiveEvents ran, whose events (the SDK
// returns what it has when its context ends) are not delivered.
func (c *claim) Fetch(ctx context.Context) ([]stream.Record, error) {
	for {
		rctx, cancel := context.WithTimeout(ctx, c.wait)
		evs, err := c.pc.ReceiveEvents(rctx, c.maxBatch, nil)
		cancel()
		switch {
		case ctx.Err() != nil:
			return nil, context.Cause(ctx)
		case len(evs) > 0:
			if !c.fetched {
				evs = c.skipBefore(evs)
				if len(evs) == 0 {
					continue
				}
				if err := c.first(ctx, evs[0].SequenceNumber); err != nil {
					return nil, err
				}
				c.fetched = true
			}
			c.gaps(evs)
			return c.records(evs), nil
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

// skipBefore drops the events before the claim's starting position: a
// client opened at the partition's earliest event instead of after the
// checkpoint (the SDK does so when a geo-replicated namespace refuses the
// checkpoint's offset) delivers them, and they were handled already.
func (c *claim) skipBefore(evs []*azeventhubs.ReceivedEventData) []*azeventhubs.ReceivedEventData {
	if c.start.Next < 0 {
		return evs
	}
	n := 0
	for n < len(evs) && evs[n].SequenceNumber < c.start.Next {
		n++
	}
	if n > 0 {
		c.log.Info("redeliver: events before the checkpoint skipped: the partition client started before it",
			"from", evs[0].SequenceNumber, "to", evs[n-1].SequenceNumber, "checkpoint_next", c.start.Next)
	}
	return evs[n:]
}

// gaps logs the events that expired from the hub before the claim
// received them: those between the event expected next and evs, and
// between events of evs. The retention took them, for every reader.
func (c *claim) gaps(evs []*azeventhubs.ReceivedEventData) {
	for _, e := range evs {
		if c.expect >= 0 && e.SequenceNumber > c.expect {
			c.log.Error("redeliver: events expired from the event hub before they were handled: they are not delivered (is the hub's retention shorter than the longest retry, or the consumer behind by more than the retention?)",
				"from", c.expect, "to", e.SequenceNumber-1, "events", e.SequenceNumber-c.expect)
		}
		c.expect = e.SequenceNumber + 1
	}
}

// first prepares the claim's first batch, which starts at sequence number
// seq, before it is delivered. It renews the partition's ownership through
// the store's fence: another processor may have taken the partition
// between this processor's claim of it and now, and this claim then
// delivers nothing (it ends with [ErrOwnershipLost]). Renewed, any later
// steal comes after this claim began, as its hooks report it. On a
// partition with no checkpoint it writes a positional checkpoint just
// before seq instead (fenced the same way), so that the batch is never
// lost to a next owner's start position. It tries again until it succeeds
// or the claim ends.
func (c *claim) first(ctx context.Context, seq int64) error {
	delay := 100 * time.Millisecond
	for try := 1; ; try++ {
		wctx, cancel := context.WithTimeout(context.WithValue(ctx, gateCtxKey{}, c.gate), c.commitTimeout)
		var err error
		if c.seed {
			err = c.store.setPosition(wctx, c.key, seq-1)
		} else {
			err = c.store.verify(wctx, c.key)
		}
		cancel()
		switch {
		case err == nil:
			if c.seed {
				c.cpSeq = seq - 1
			}
			return nil
		case ctx.Err() != nil:
			return context.Cause(ctx)
		case IsOwnershipLost(err):
			return err
		}
		what := "renewing the partition's ownership"
		if c.seed {
			what = "writing the partition's first checkpoint"
		}
		c.log.Warn("redeliver: "+what+" failed, will try again before its first batch",
			"next", seq, "try", try, "delay", delay, "error", err)
		t := time.NewTimer(delay)
		select {
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
			return context.Cause(ctx)
		}
		delay = min(2*delay, 10*time.Second)
	}
}

func (c *claim) records(evs []*azeventhubs.ReceivedEventData) []stream.Record {
	c.last = evs
	recs := c.recs[:0]
	for _, ev := range evs {
		recs = append(recs, Record(c.key.hub, c.partition, ev))
	}
	c.recs = batching.ClearTail(c.recs, recs)
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

// Commit writes the retry state md for next when there is one, then the
// checkpoint at the event before next when it moves (through
// UpdateCheckpoint, or as a positional checkpoint when the claim does not
// hold that event: next starts the batch held, or follows events that
// expired), then clears
// a retry state the checkpoint moved past or that md clears. Each write
// goes through the store's fence; a lost claim writes nothing and gets
// [ErrOwnershipLost]. Once the checkpoint has moved past the state, the
// commit is done: a clearing that fails then is logged and done again at
// the next commit, and the commit succeeds.
func (c *claim) Commit(ctx context.Context, next int64, md string) error {
	if c.store.lost(c.gate) {
		return fmt.Errorf("%w: %s: this claim lost it earlier", ErrOwnershipLost, c.key)
	}
	// A write once begun is seen through (within the commit timeout), even
	// if the claim ends meanwhile: cut off, it could land unreported.
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), c.commitTimeout)
	defer cancel()
	ctx = context.WithValue(ctx, gateCtxKey{}, c.gate)
	if md != "" {
		// The state first: a state ahead of the checkpoint is ignored, so
		// a crash between the two writes loses nothing.
		if err := c.store.setState(ctx, c.key, next, md); err != nil {
			return err
		}
		c.stateAt = next
	}
	if next-1 > c.cpSeq {
		if err := c.checkpoint(ctx, next); err != nil {
			return err
		}
		c.cpSeq = next - 1
	}
	if md == "" && c.stateAt >= 0 {
		// A success, or a checkpoint past the batch the state was for:
		// the state applies no more. Cleared after the checkpoint, so that
		// a crash between the two leaves a state the checkpoint has passed
		// (ignored), never a withheld batch without its count.
		if err := c.store.setState(ctx, c.key, next, ""); err != nil {
			if c.stateAt == next || IsOwnershipLost(err) {
				// The checkpoint stays at the state's record: the state
				// still applies to it.
				return err
			}
			// The checkpoint has landed past the state, which no reader
			// applies while it stays there: the commit is done (reported
			// as failed, a stop before its next try would leave it
			// unreported). The state is cleared at the next commit, so
			// that a rewind to it later does not bring it back.
			c.log.Warn("redeliver: clearing the retry state the checkpoint has passed failed; it is ignored while the checkpoint stays past it, and cleared at the next commit",
				"next", next, "state_at", c.stateAt, "error", err)
			return nil
		}
		c.stateAt = -1
	}
	return nil
}

// checkpoint writes the checkpoint at the event before next: through
// UpdateCheckpoint when the batch holds it, else as a positional
// checkpoint, when next is the batch's first event or the first after
// events that expired.
func (c *claim) checkpoint(ctx context.Context, next int64) error {
	for _, e := range c.last { // in order: next-1 comes before next
		switch e.SequenceNumber {
		case next - 1:
			return c.pc.UpdateCheckpoint(ctx, e, nil)
		case next:
			return c.store.setPosition(ctx, c.key, next-1)
		}
	}
	return fmt.Errorf("eventhubs: %s: no event at sequence number %d or %d in the batch to checkpoint", c.key, next-1, next)
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
