package confluent

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/confluentinc/confluent-kafka-go/v2/kafka"

	"github.com/redeliver-go/redeliver/adapters/internal/kafkaadapter"
	"github.com/redeliver-go/redeliver/internal/actionctx"
	"github.com/redeliver-go/redeliver/internal/batching"
	"github.com/redeliver-go/redeliver/internal/lifecycle"
	"github.com/redeliver-go/redeliver/stream"
)

// claim is one assigned partition: a [stream.Claim] whose buffer
// (batching.Buffer) the poll goroutine (or, at one partition, the worker
// itself: pollSelf) fills with the partition's messages, as Poll returned
// them; the worker makes them records as it
// takes them (Fetch), so that the one poll goroutine, which every
// partition's messages go through, does no more per message than
// librdkafka's own Poll loop. While the worker waits out a backoff (after pauseDelay), or
// the buffer holds max(4 x max batch, 2048) records and its worker has not
// taken it down to half within fullWait, the partition is paused in
// librdkafka (Consumer.Pause), which stops fetching it and drops what it
// had fetched but not yet handed to Poll; on Resume it fetches again from
// the message after the last one polled, so nothing is lost or repeated.
type claim struct {
	e         *engine
	c         *kafka.Consumer
	key       tp
	committed int64
	metadata  string

	ctx    context.Context
	cancel context.CancelCauseFunc
	done   chan struct{} // closed when the worker has returned

	mu         sync.Mutex
	buf        *batching.Buffer[*kafka.Message] // guarded by mu
	paused     bool                             // paused in librdkafka; guarded by mu
	room       chan struct{}                    // gets a value when the buffer stops being full
	pauseTimer *time.Timer                      // pauses the partition pauseDelay into a backoff; guarded by mu

	out     []stream.Record  // the worker's own
	pending []*kafka.Message // the poll goroutine's own: polled, not yet pushed
	polled  int64            // the offset after the last message pushed (or librdkafka's position past it, skip); -1 for none; guarded by mu

	commits kafkaadapter.Coalescer // the partition's commits, success commits coalesced
}

func newClaim(e *engine, c *kafka.Consumer, key tp, committed int64, metadata string) *claim {
	ctx, cancel := context.WithCancelCause(e.runCtx)
	cl := &claim{e: e, c: c, key: key, committed: committed, metadata: metadata, ctx: ctx, cancel: cancel,
		done: make(chan struct{}), room: make(chan struct{}, 1), polled: -1}
	cl.buf = batching.New(&cl.mu, batching.Config[*kafka.Message]{
		Offset: func(m **kafka.Message) int64 { return int64((*m).TopicPartition.Offset) },
		Limit:  max(4*e.cfg.MaxBatch, 2048),
		// A full buffer is not paused at once (see engine.holdFull): a
		// pause drops what librdkafka fetched ahead, and the resume waits
		// for a fetch.
		Watch: cl,
		Reuse: true,
	})
	cl.commits = kafkaadapter.Coalescer{
		Interval: e.cfg.commitInterval, Records: e.cfg.commitRecords,
		Claim: cl,
		Log:   e.log, Topic: key.topic, Partition: key.partition,
	}
	cl.commits.Start(committed, metadata)
	return cl
}

// run runs the processor over the claim until it ends.
func (cl *claim) run() {
	defer close(cl.done)
	var err error
	// The group names the dead letters' __dlq.errors.group header.
	src := actionctx.Source{Group: fmt.Sprint(cl.e.group())}
	lifecycle.Inside(func() { err = cl.e.proc.Process(actionctx.WithSource(cl.ctx, src), cl) })
	ended := cl.ctx.Err() != nil
	cl.cancel(errRevoked)
	// The success commit not written yet (coalesced), before the partition
	// is given up: a revocation waits for the worker (endClaims) before it
	// unassigns the partition, a shutdown before it closes the consumer.
	cl.commits.Final()
	cl.mu.Lock()
	if cl.pauseTimer != nil {
		cl.pauseTimer.Stop()
	}
	cl.buf.Drop()
	if cl.paused {
		// A pause may outlive the assignment: resume before the partition
		// is given up.
		cl.paused = false
		_ = cl.pause(false)
	}
	cl.mu.Unlock()
	if err != nil && !ended {
		cl.e.life.Fail(fmt.Errorf("confluent: worker of %s/%d: %w", cl.key.topic, cl.key.partition, err))
	}
}

// add keeps a polled message for the next flush; the poll goroutine's own.
func (cl *claim) add(m *kafka.Message) { cl.pending = append(cl.pending, m) }

// fill makes *r the record the handler sees of a polled message; the
// worker's. Every field is written in place, not a Record built aside and
// copied in (the copy's loads stall behind the stores that built it).
func (cl *claim) fill(r *stream.Record, m *kafka.Message) {
	r.Topic, r.Partition, r.Offset = cl.key.topic, cl.key.partition, int64(m.TopicPartition.Offset)
	r.Key, r.Value, r.Timestamp = m.Key, m.Value, m.Timestamp
	r.Headers = nil
	if len(m.Headers) > 0 {
		r.Headers = make([]stream.Header, len(m.Headers))
		for i, h := range m.Headers {
			r.Headers[i] = stream.Header{Key: h.Key, Value: h.Value}
		}
	}
}

// flush buffers the messages add kept.
func (cl *claim) flush() {
	if len(cl.pending) == 0 {
		return
	}
	n, next := len(cl.pending), int64(cl.pending[len(cl.pending)-1].TopicPartition.Offset)+1
	cl.mu.Lock()
	cl.buf.Push(cl.pending)
	cl.pending = cl.buf.Slice()
	cl.polled = max(cl.polled, next)
	cl.mu.Unlock()
	if cl.pending == nil {
		// No spent slice to fill again (the buffer keeps two, and holds
		// more pushes than that while its worker is behind): one the size
		// of this push, rather than one grown from nothing by doubling,
		// which allocated twice the records' size and copied them
		// (about 80 bytes a record, 12% more than the Poll loop's own).
		cl.pending = make([]*kafka.Message, 0, n)
	}
}

// drained reports whether every message polled has been taken by the
// worker; the poll goroutine's.
func (cl *claim) drained() bool {
	cl.mu.Lock()
	defer cl.mu.Unlock()
	return len(cl.pending) == 0 && cl.buf.Len() == 0
}

// skip notes librdkafka's position of the partition, next: past the
// transaction markers (and aborted messages) it read after the last
// message pushed, if any.
func (cl *claim) skip(next int64) {
	cl.mu.Lock()
	cl.buf.Skip(next)
	cl.polled = max(cl.polled, next)
	cl.mu.Unlock()
}

// Position returns the offset past the transaction markers (and aborted
// messages) read after the last record Fetch returned, when nothing is
// buffered; -1 otherwise ([stream.Positioner]).
func (cl *claim) Position() int64 {
	cl.mu.Lock()
	defer cl.mu.Unlock()
	return cl.buf.Position()
}

// full reports whether the buffer is full and the partition not paused
// yet.
func (cl *claim) full() bool {
	cl.mu.Lock()
	defer cl.mu.Unlock()
	return cl.buf.Full() && !cl.paused
}

// holdIfFull pauses the partition in librdkafka if its buffer is still
// full.
func (cl *claim) holdIfFull() {
	cl.mu.Lock()
	defer cl.mu.Unlock()
	if cl.buf.Full() && cl.ctx.Err() == nil {
		cl.holdLocked()
	}
}

// pause pauses the partition in librdkafka (resumes it when on is false),
// unless the consumer is closed.
func (cl *claim) pause(on bool) error {
	if !cl.e.acquire() {
		return nil
	}
	defer cl.e.release()
	if on {
		return cl.c.Pause(cl.parts())
	}
	return cl.c.Resume(cl.parts())
}

func (cl *claim) parts() []kafka.TopicPartition {
	t := cl.key.topic
	return []kafka.TopicPartition{{Topic: &t, Partition: cl.key.partition}}
}

func (cl *claim) holdLocked() {
	if !cl.paused {
		cl.paused = true
		if err := cl.pause(true); err != nil {
			cl.e.log.Warn("redeliver: pausing a partition failed", "topic", cl.key.topic, "partition", cl.key.partition, "error", err)
		}
	}
}

// BufferFull does nothing: a full buffer is not paused at once
// (batching.Watcher).
func (cl *claim) BufferFull() {}

// BufferDrained resumes the partition once its buffer has drained, and
// wakes a fetch side waiting for room (batching.Watcher).
func (cl *claim) BufferDrained() {
	cl.releaseLocked()
	select {
	case cl.room <- struct{}{}:
	default:
	}
}

func (cl *claim) releaseLocked() {
	if cl.paused && !cl.buf.Full() && !cl.buf.Paused() && cl.ctx.Err() == nil {
		cl.paused = false
		if err := cl.pause(false); err != nil {
			cl.e.log.Warn("redeliver: resuming a partition failed", "topic", cl.key.topic, "partition", cl.key.partition, "error", err)
		}
	}
}

// Topic returns the partition's topic.
func (cl *claim) Topic() string { return cl.key.topic }

// Partition returns the partition's number.
func (cl *claim) Partition() int32 { return cl.key.partition }

// Committed returns the offset and metadata committed when the partition
// was assigned.
func (cl *claim) Committed() (int64, string) { return cl.committed, cl.metadata }

// idle reports whether nothing is buffered.
func (cl *claim) idle() bool {
	cl.mu.Lock()
	defer cl.mu.Unlock()
	return cl.buf.Len() == 0
}

// Fetch returns the next batch of buffered records.
//
// It returns no records when librdkafka read transaction markers or
// aborted messages only (see Position).
func (cl *claim) Fetch(ctx context.Context) ([]stream.Record, error) {
	// The Processor gave the last batch up by calling Fetch: when nothing
	// is buffered, so that the worker is about to wait, let go of its
	// records, so that an idle partition keeps none of them (otherwise the
	// next batch overwrites them).
	if cl.idle() {
		clear(cl.out)
		cl.pollSelf(ctx)
	}
	out := cl.out[:0]
	err := cl.buf.Next(ctx, cl.e.cfg.MaxBatch, cl.e.cfg.MaxWait, func(part []*kafka.Message) {
		var base int
		out, base = batching.Extend(out, len(part))
		for i, m := range part {
			cl.fill(&out[base+i], m)
		}
	})
	if err != nil {
		return nil, err
	}
	cl.out = batching.ClearTail(cl.out, out)
	return out, nil
}

// pollSelf polls the consumer on the worker, while the claim is the one
// claim (engine.solo) and nothing is buffered, so that a consumer of one
// partition hands no records from the poll goroutine to the worker: it
// takes the token (waiting for a poll of the poll goroutine to end), and
// polls until something is buffered, librdkafka's position moves past
// what was buffered (Position), the claim ends or stops being the one
// claim; what Poll returns goes where the poll goroutine puts it
// (engine.poll). The rebalance callbacks run here then: an idle consumer
// of one partition polls on its worker.
func (cl *claim) pollSelf(ctx context.Context) {
	e := cl.e
	if e.solo.Load() != cl {
		return
	}
	select {
	case e.token <- struct{}{}:
	case <-ctx.Done():
		return
	}
	defer func() { <-e.token }()
	pos := cl.Position()
	for e.solo.Load() == cl && ctx.Err() == nil && cl.idle() && cl.Position() == pos {
		e.poller = cl
		e.poll(cl.c)
		e.poller = nil
		e.lastSelf.Store(time.Now().UnixNano())
	}
}

// pauseDelay is how long a backoff lasts before its partition is paused in
// librdkafka: a pause drops what librdkafka has fetched ahead and a resume
// fetches it again, which costs more than the backoffs of a millisecond or
// so that most retries wait; meanwhile, what comes is buffered, within the
// buffer's bound.
const pauseDelay = 100 * time.Millisecond

// Pause pauses the partition in librdkafka while the Processor waits out a
// backoff, once the backoff has lasted pauseDelay.
func (cl *claim) Pause() {
	cl.mu.Lock()
	defer cl.mu.Unlock()
	cl.buf.Pause()
	if cl.pauseTimer == nil {
		cl.pauseTimer = time.AfterFunc(pauseDelay, func() {
			cl.mu.Lock()
			defer cl.mu.Unlock()
			if cl.buf.Paused() && cl.ctx.Err() == nil {
				cl.holdLocked()
			}
		})
	} else {
		cl.pauseTimer.Reset(pauseDelay)
	}
}

// Resume undoes Pause.
func (cl *claim) Resume() {
	cl.mu.Lock()
	defer cl.mu.Unlock()
	if cl.pauseTimer != nil {
		cl.pauseTimer.Stop()
	}
	cl.buf.Resume()
	cl.releaseLocked()
}

// Commit commits next with metadata for the partition. It returns
// [stream.ErrRevoked] once the claim has ended.
//
// A success commit (no metadata) that follows one without a retry state
// is coalesced when the consumer's commit window is set (the default):
// Commit notes it and returns, and it is written in the background, one
// request in flight per partition, once the window's records or interval
// have passed since the last commit sent or the partition has nothing more
// buffered, and at the latest when the claim ends, before the partition is
// given up (kafkaadapter.Coalescer). Any other commit supersedes the
// coalesced one and is written before Commit returns.
func (cl *claim) Commit(_ context.Context, next int64, metadata string) error {
	if cl.ctx.Err() != nil {
		return errRevoked
	}
	return cl.commits.Commit(next, -1, metadata)
}

// CaughtUp (kafkaadapter.Sender) reports whether the partition has nothing
// more to deliver for now: nothing buffered, and nothing past what was
// polled in the partition's log as librdkafka last saw it (the high
// watermark of its last fetch, a local read), or nothing known of it. An
// empty buffer alone is not enough: a worker that keeps up empties it
// after each batch while librdkafka holds tens of thousands of records
// fetched ahead, and a commit written each time is a request to the
// coordinator per batch or two (1,223 commits for 1,000,000 records, where
// librdkafka's own loop writes one: docs/BENCHMARKS.md). Behind the log's
// end, a coalesced commit waits for the window instead.
func (cl *claim) CaughtUp() bool {
	cl.mu.Lock()
	n, polled := cl.buf.Len(), cl.polled
	cl.mu.Unlock()
	if n > 0 {
		return false
	}
	if polled < 0 {
		return true
	}
	if !cl.e.acquire() {
		return true // the commit then fails as the consumer is closed
	}
	_, high, err := cl.c.GetWatermarkOffsets(cl.key.topic, cl.key.partition)
	cl.e.release()
	return err != nil || high < 0 || polled >= high
}

// send commits next with metadata for the partition
// (Consumer.CommitOffsets, synchronous) and returns the broker's answer,
// waiting for it at most the commit timeout (WithCommitTimeout). A
// shutdown waits for a commit in flight at most 250ms. final is the
// claim's last commit, made once its worker has returned: it is sent
// although the claim has ended, and waited for until the shutdown's bound
// or the commit timeout (the revocation waits for the worker, endClaims).
//
// Any other commit stops waiting when the claim is revoked or lost (not
// when a shutdown ends it: that waits up to its own bound, above): the
// revocation waits for the worker before it gives the partition up, and a
// worker held by a coordinator that does not answer would hold the
// revocation, and with it the group's rebalance. The request may still land:
// the coordinator writes it only under the member's generation, which a
// rebalance ends. Either way the retry bound holds: a commit that carries
// a retry state and lands counts the retry as started, one more than the
// worker saw, which is conservative; one that does not land leaves the
// state before it, from which the next owner delivers the batch again
// under the count committed. The success commit it superseded, if any, is
// put back for Final (kafkaadapter.Coalescer) on the revoked error.
// SendCommit writes one of the claim's commits for its Coalescer
// (kafkaadapter.Sender): see send.
func (cl *claim) SendCommit(next int64, _ int32, metadata string, kind kafkaadapter.SendKind) error {
	return cl.send(next, metadata, kind == kafkaadapter.SendFinal)
}

// Ended reports whether the claim is ending (kafkaadapter.Sender).
func (cl *claim) Ended() bool { return cl.ctx.Err() != nil }

// Background runs a background flush on a goroutine of its own
// (kafkaadapter.Sender).
func (cl *claim) Background(fn func()) { go fn() }

// Revoked is what Commit returns once the claim has ended
// (kafkaadapter.Sender).
func (cl *claim) Revoked() error { return errRevoked }

func (cl *claim) send(next int64, metadata string, final bool) error {
	if !final && cl.ctx.Err() != nil {
		return errRevoked
	}
	var revoked <-chan struct{} // nil for the final commit: the claim has ended
	if !final {
		var stop func() bool
		revoked, stop = kafkaadapter.Revocation(cl.ctx, cl.e.runCtx)
		defer stop()
	}
	t, md := cl.key.topic, metadata
	type answer struct {
		parts []kafka.TopicPartition
		err   error
	}
	ch := make(chan answer, 1)
	cl.e.inflight.Add(1)
	go func() {
		defer cl.e.inflight.Done()
		if !cl.e.acquire() {
			ch <- answer{err: errConsumerClosed}
			return
		}
		parts, err := cl.c.CommitOffsets([]kafka.TopicPartition{{Topic: &t, Partition: cl.key.partition, Offset: kafka.Offset(next), Metadata: &md}})
		cl.e.release()
		ch <- answer{parts, err}
	}()
	timeout := time.NewTimer(cl.e.cfg.CommitTimeout)
	defer timeout.Stop()
	var a answer
	select {
	case a = <-ch:
	case <-cl.e.commitCtx.Done():
		return fmt.Errorf("confluent: commit %s/%d at %d: no answer: %w", t, cl.key.partition, next, context.Cause(cl.e.commitCtx))
	case <-timeout.C:
		// The request goes on, as above.
		return fmt.Errorf("confluent: commit %s/%d at %d: no answer within the commit timeout (%v)", t, cl.key.partition, next, cl.e.cfg.CommitTimeout)
	case <-revoked:
		// The request goes on (inflight: the consumer is closed after
		// it); its answer is dropped.
		return errRevoked
	}
	err := a.err
	if err == nil {
		for _, p := range a.parts {
			if p.Topic != nil && *p.Topic == t && p.Partition == cl.key.partition && p.Error != nil {
				err = p.Error
			}
		}
	}
	if err == nil {
		return nil
	}
	if !final && cl.ctx.Err() != nil {
		return errRevoked
	}
	return fmt.Errorf("confluent: commit %s/%d at %d: %w", t, cl.key.partition, next, err)
}
