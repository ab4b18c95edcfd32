package stream

import (
	"context"
	"errors"
	"fmt"

	"github.com/redeliver-go/redeliver/checkpoint"
	"github.com/redeliver-go/redeliver/internal/retrystate"
)

// The batch driver's durable side: the retry state a previous owner
// committed, continued, and the commits that keep the state and move the
// checkpoint.

// resume continues the retry state a previous owner committed for b, and
// returns what follows as run takes it: the restored retry to wait for, or,
// when the previous owner had started a retry that never reported its
// outcome, the decision that counts that retry as made (fresh: to be
// scheduled and committed anew). The zero Decision means that b is to be
// delivered as if nothing had been restored.
func (w *worker) resume(b *Batch) (d retrystate.Decision, outcome Outcome, cause error, fresh bool) {
	s := *w.restored
	d = w.m.Resume(s, w.u.p.cfg.clock.Now(), w.u.rnd)
	w.u.log.Info("redeliver: continuing retry state of a previous owner", "offset", b.FirstOffset(),
		"retries", s.Retries, "first_failure", s.FirstFailure, "next_at", s.NextAt, "started", s.Started,
		"next", d.Action.String())
	outcome = Failed
	if !s.Halted {
		w.cover(b, s, d)
	}
	switch {
	case s.GivenUp != 0 && !s.Halted:
		cause = w.m.LastError()
		w.givenUp = s.Records
		if w.scope == wholeBatch && s.Records > 0 {
			w.scope = previousGiveUp
		}
	case s.Started:
		// Its outcome is not known: counted as failed, under a
		// RetryResult too, so that a spent count gives the batch up to
		// the exhaustion action instead of moving past it unhandled.
		cause = retrystate.ErrInterrupted
	case s.Request != (retrystate.Request{}):
		outcome = RetryRequested
	}
	return d, outcome, cause, s.Started && !s.Halted
}

// cover makes b the records that the restored state s covers, as d (the
// machine's answer to it) goes on with them: the record s belongs to
// alone after a failure at that record, or the Records from it. Records
// fetched after those are delivered as the next batch. Records it covers
// that the fetch did not return (a next owner that fetches fewer) are
// w.extra, which run fetches before it retries b or gives it up.
func (w *worker) cover(b *Batch, s retrystate.State, d retrystate.Decision) {
	// A retry state that does not say what it covers (written before
	// states did) is taken as a failure at its record alone: given up,
	// it gives up that record only, never records that may not have
	// failed.
	if s.Alone || s.Records <= 0 && s.GivenUp == 0 {
		w.scope = failedRecord
	}
	if s.Alone || s.Records <= 0 || d.Action == 0 {
		return
	}
	if n := s.Records; n < len(b.Records) {
		// Capped, so that a later split of b (a record given up
		// alone) never writes over the records kept in w.rest.
		w.rest = b.Records[n:]
		b.Records = b.Records[:n:n]
		return
	}
	w.extra = s.Records - len(b.Records)
}

// fetchCovered fetches the records that the restored state of b covers
// and that b does not hold yet (w.extra), and adds them to b: the retry
// is delivered to, or the give-up covers, the batch the previous owner's
// count is for, and none of its records comes back later as a batch with
// a fresh count. The records fetched after them are delivered as the next
// batch. It returns an error when the worker must stop.
func (w *worker) fetchCovered(ctx context.Context, b *Batch) error {
	// The claim owns the slice it returned once Fetch is called again.
	b.Records = append(make([]Record, 0, len(b.Records)+w.extra), b.Records...)
	for w.extra > 0 {
		recs, err := w.c.Fetch(ctx)
		if err != nil {
			if ctx.Err() != nil {
				return w.abandon(ctx)
			}
			return fmt.Errorf("stream: fetch %s/%d: %w", w.c.Topic(), w.c.Partition(), err)
		}
		n := min(len(recs), w.extra)
		b.Records = append(b.Records, recs[:n]...)
		w.extra -= n
		if n < len(recs) {
			w.rest = recs[n:]
		}
	}
	return nil
}

// saveState commits the retry state of the withheld batch b, with the
// checkpoint at its first record.
func (w *worker) saveState(ctx context.Context, b *Batch) error {
	if w.u.p.cfg.memoryOnly {
		return nil
	}
	s := w.m.State()
	alone := w.scope == failedRecord
	s.Offset, s.Alone, s.Records, s.LastError = b.FirstOffset(), alone, 0, ""
	if !alone {
		s.Records = len(b.Records) // a whole-batch failure covers the batch
	}
	if err := w.m.LastError(); err != nil {
		s.LastError = err.Error() // its first 128 bytes are kept
	}
	start := w.u.p.cfg.clock.Now()
	mine := w.u.p.beginWrite(start) // a failure meanwhile knows a write takes at least this long
	err := w.write(ctx, b, b.FirstOffset(), retrystate.EncodeState(s))
	w.u.p.timedWrite(start, mine)
	return err
}

// beforeHalt pauses the claim and commits the batch's state as halted,
// before the partition is registered as stopped: a next owner, should the
// partition move meanwhile, delivers the batch again with a fresh count.
func (w *worker) beforeHalt(ctx context.Context, b *Batch, _ *checkpoint.ExhaustedError) error {
	w.pause()
	if w.u.p.cfg.memoryOnly {
		return nil
	}
	s := w.m.GivenUpState()
	s.Offset, s.Halted = b.FirstOffset(), true
	return w.write(ctx, b, b.FirstOffset(), retrystate.EncodeState(s))
}

// commit writes the checkpoint past b, or past the records the claim
// skipped after it when nothing fetched waits after b, and resumes a
// paused claim. The partition no longer counts as failing in the outage
// budget.
func (w *worker) commit(ctx context.Context, b *Batch) error {
	next := b.LastOffset() + 1
	if w.positioned && len(w.rest) == 0 && w.extra == 0 {
		// The claim's position ([Positioner]) is past b's last record
		// when it skipped records after it.
		next = max(next, positionOf(w.c))
	}
	if err := w.write(ctx, b, next, ""); err != nil {
		return err
	}
	if w.member != nil {
		w.member.resolved()
	}
	if w.fetch == paused {
		w.c.Resume()
		w.fetch = flowing
	}
	return nil
}

// skip writes the checkpoint at the claim's position after a Fetch that
// returned no records (it skipped records only: transaction markers, or
// aborted records), when that is past the last checkpoint written. It runs
// between batches: every record fetched before is finished. A restored
// retry state whose record was skipped is dropped with it, as when the
// first batch fetched does not start at its record.
func (w *worker) skip(ctx context.Context) error {
	next := positionOf(w.c)
	if next <= w.lastNext || next <= w.from {
		return nil
	}
	w.from = -1
	b := &w.batch
	b.Records = nil
	return w.write(ctx, b, next, "")
}

// write commits next with metadata, trying again until it succeeds. It
// returns an error only when the worker must stop.
func (w *worker) write(ctx context.Context, b *Batch, next int64, md string) error {
	if err := w.c.Commit(ctx, next, md); err != nil {
		// Out of line: a commit that succeeds, once per batch, does
		// not set up the retries' frame.
		if err := w.rewrite(ctx, b, next, md, err); err != nil {
			return err
		}
	}
	w.lastNext = next
	if h := w.u.p.cfg.hooks.Checkpointed; h != nil {
		h(CheckpointEvent{Topic: b.Topic, Partition: b.Partition, ClaimID: w.u.claim, Next: next, Metadata: md})
	}
	return nil
}

// rewrite is write after the commit of next failed with err: it tries
// again until the commit succeeds (nil) or the worker must stop.
func (w *worker) rewrite(ctx context.Context, b *Batch, next int64, md string, err error) error {
	if !errors.Is(err, ErrRevoked) {
		err = w.u.repeat(ctx, "commit", true, func() error { return w.c.Commit(ctx, next, md) })
	}
	if err == nil {
		return nil
	}
	if errors.Is(err, ErrRevoked) {
		return w.abandonWith(ErrRevoked)
	}
	// The claim ended (a stop, a revocation) while the commit waited to
	// be tried again: never silent, as a write given up.
	w.u.log.Warn("redeliver: commit given up: the claim ended before a failed commit was written; the partition's next owner starts from the last checkpoint written, and delivers the records after it again",
		"next", next, "offset", b.FirstOffset(), "records", len(b.Records), "cause", context.Cause(ctx))
	return w.abandon(ctx)
}

// errAbandoned is why a worker stops when it abandons a batch for no other
// reason it knows of.
var errAbandoned = errors.New("stream: batch abandoned")

// abandon reports the batch in flight and returns why the worker stops.
func (w *worker) abandon(ctx context.Context) error {
	return w.abandonWith(context.Cause(ctx))
}

func (w *worker) abandonWith(cause error) error {
	if cause == nil {
		// Never nil: the caller stops, and a nil would let the worker go
		// on as if the batch were done.
		cause = errAbandoned
	}
	b := &w.batch
	if h := w.u.p.cfg.hooks.Abandoned; h != nil {
		h(AbandonedEvent{BatchInfo: w.infoOf(b), Attempt: b.Attempt, Cause: cause})
	}
	w.u.log.Info("redeliver: batch abandoned, checkpoint left in place", "offset", b.FirstOffset(),
		"records", len(b.Records), "retry", b.Attempt.Retries, "cause", cause)
	return cause
}
