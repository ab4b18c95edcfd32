package conformance

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redeliver-go/redeliver/checkpoint"
	"github.com/redeliver-go/redeliver/stream"
)

// RunHandOver runs the hand-over of a withheld batch from one client to
// another, in partition and in key ordering: a consumer of adapter from
// fails a poison record's deliveries, writes its retry state with the
// checkpoint and stops; a consumer of adapter to, with its own fetch size
// and backoff (the same retry budget), joins the same group and continues.
// The retry state is one format for every client, so a team that moves a
// group from one client to another (or runs both during a rolling deploy)
// keeps each record's count:
//
//   - the next owner's first delivery of the poison record continues the
//     count (its Attempt.Retries at least the deliveries the first owner
//     made), and no record is delivered more than the policy allows,
//     counted by the history checker over both members' deliveries;
//   - the poison record is given up once the budget is spent, and every
//     other record handled: the partition is checkpointed to its end with
//     no record lost.
func RunHandOver(t *testing.T, p Provider, from, to Adapter) {
	for _, ordering := range []stream.Ordering{stream.ByPartition, stream.ByKey} {
		t.Run(ordering.String(), func(t *testing.T) {
			b := p.Start(t)
			for _, a := range []Adapter{from, to} {
				if a.NeedsKIP848() && !b.KIP848 {
					t.Skipf("%s needs the KIP-848 protocol; the %s broker does not run it", a.Name(), p.Name())
				}
			}
			e := newEnv(t, b, from)
			e.ordering = ordering
			if e.keyed() {
				e.hist.keys = func(p int32) []string { return e.keys[p] }
			}
			handOver(t, e, to)
		})
	}
}

// handOver is RunHandOver's case on e, whose adapter is the first owner's.
func handOver(t *testing.T, e *env, to Adapter) {
	const (
		poison     = 15
		maxRetries = 3
		end        = 30
	)
	e.createTopic(1)
	e.produce(0, 0, end)
	h := stream.HandlerFunc(func(_ context.Context, b *stream.Batch) error {
		if b.FirstOffset() <= poison && poison <= b.LastOffset() {
			return errHandler
		}
		return nil
	})
	// The first owner stops once its second failed delivery of the poison
	// record is written with the checkpoint: the first commit with a retry
	// state after retry 2 is scheduled (the commit follows the
	// RetryScheduled hook, and carries the record's state in either
	// ordering).
	var scheduled atomic.Int32
	written := newSignal()
	hooks := stream.Hooks{
		RetryScheduled: func(ev stream.RetryEvent) {
			if ev.FirstOffset <= poison && poison <= ev.LastOffset && ev.Retry >= 2 {
				scheduled.Store(1)
			}
		},
		Checkpointed: func(ev stream.CheckpointEvent) {
			if scheduled.Load() == 1 && ev.Metadata != "" {
				written.fire()
			}
		},
	}
	first := e.start("a", spec{handler: h, maxBatch: 10, hooks: hooks,
		policy: checkpoint.Policy{MaxRetries: maxRetries, Backoff: checkpoint.Fixed(200 * time.Millisecond)}})
	e.await(written.ch, "the first owner's retry state after two failed deliveries to be committed")
	if err := first.stop(); err != nil {
		t.Fatal(err)
	}
	var madeByA int
	for _, d := range e.hist.deliveries(0) {
		if d.first <= poison && poison <= d.last {
			madeByA++
		}
	}

	// The next owner: another client, batches of at most 4 records, another
	// backoff.
	e.a = to
	e.start("b", spec{handler: h, maxBatch: 4,
		policy: checkpoint.Policy{MaxRetries: maxRetries, Backoff: checkpoint.Fixed(50 * time.Millisecond)}})
	e.waitCommitted(map[int32]int64{0: end})
	e.hist.check(t, map[int32]int64{0: end})

	var firstOfB *event
	total := 0
	for _, d := range e.hist.deliveries(0) {
		if d.first > poison || poison > d.last {
			continue
		}
		total++
		if d.member == "b" && firstOfB == nil {
			firstOfB = &d
		}
	}
	if firstOfB == nil {
		t.Fatalf("the next owner (%s) never delivered record %d; the first owner had delivered it %d times\n%s", to.Name(), poison, madeByA, e.hist.dump())
	}
	if firstOfB.attempt.Retries < madeByA {
		t.Errorf("the next owner (%s) delivered record %d first as retry %d after %d deliveries by the first owner: the retry state committed by the other client was not continued\n%s",
			to.Name(), poison, firstOfB.attempt.Retries, madeByA, e.hist.dump())
	}
	if total > maxRetries+1 {
		t.Errorf("record %d delivered %d times in all, want at most %d (MaxRetries %d)\n%s", poison, total, maxRetries+1, maxRetries, e.hist.dump())
	}
	if n := e.hist.count(func(ev event) bool { return ev.exhausted && ev.first <= poison && poison <= ev.last }); n != 1 {
		t.Errorf("record %d given up %d times, want once\n%s", poison, n, e.hist.dump())
	}
}
