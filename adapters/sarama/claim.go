package sarama

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/IBM/sarama"

	"github.com/redeliver-go/redeliver/adapters/internal/kafkaadapter"
	"github.com/redeliver-go/redeliver/internal/actionctx"
	"github.com/redeliver-go/redeliver/internal/batching"
	"github.com/redeliver-go/redeliver/stream"
)

// tp names a partition.
type tp struct {
	topic     string
	partition int32
}

// claim is one partition of a session: a [stream.Claim] fed by a pump
// goroutine that moves what sarama's partition consumer delivers
// (ConsumerGroupClaim.Messages) into a buffer (batching.Buffer).
//
// The pump reads sarama's channel, so that it sees when sarama closes it
// (the partition revoked, its consumer failed), except while the buffer
// is full: then it waits for the worker to take it down to half, at most
// fullWait, which holds sarama back as its own ConsumeClaim loop would.
// Past that, and once the worker has waited out pauseDelay of a backoff,
// the partition is paused in sarama's consumer (ConsumerGroup.Pause),
// which stops fetching it, until the buffer is down to half and the
// backoff over; what was fetched before comes out in order after the
// resume.
type claim struct {
	h         *handler
	sess      sarama.ConsumerGroupSession
	sc        sarama.ConsumerGroupClaim
	key       tp
	committed int64
	metadata  string

	ctx    context.Context
	cancel context.CancelCauseFunc
	ended  bool          // the claim had ended from outside when Process returned
	pumped chan struct{} // closed when the pump has returned

	mu          sync.Mutex
	buf         *batching.Buffer[stream.Record] // guarded by mu
	groupPaused bool                            // the partition is paused in sarama's consumer; guarded by mu
	pauseTimer  *time.Timer                     // pauses the partition pauseDelay into a backoff; guarded by mu
	room        chan struct{}                   // gets a value when the buffer stops being full

	out []stream.Record // the worker's own

	// The pump's own: the offset after the last record pushed (-1 for
	// none), and the offset and high watermark it last looked past for
	// transaction markers (probe).
	next       int64
	probedFrom int64
	probedHWM  int64
	skipBelow  int64 // the records below it are skipped (add); -1 for none
	skipped    int64 // records skipped so far

	commits kafkaadapter.Coalescer // the partition's commits, success commits coalesced
}

// newClaim reads the partition's committed offset and metadata from the
// group's coordinator and returns its claim.
func newClaim(h *handler, sess sarama.ConsumerGroupSession, sc sarama.ConsumerGroupClaim) (*claim, error) {
	key := tp{sc.Topic(), sc.Partition()}
	ctx, cancel := context.WithCancelCause(h.runCtx)
	stop := context.AfterFunc(sess.Context(), func() { cancel(errSessionEnded) })
	_ = stop // the claim's context ends with the session's; nothing to undo after
	committed, md, err := h.fetchCommitted(ctx, key)
	if err != nil {
		cancel(err)
		return nil, err
	}
	cl := &claim{h: h, sess: sess, sc: sc, key: key, committed: committed, metadata: md,
		ctx: ctx, cancel: cancel, pumped: make(chan struct{}), room: make(chan struct{}, 1),
		next: -1, probedFrom: -1, probedHWM: -1}
	cl.buf = batching.New(&cl.mu, batching.Config[stream.Record]{
		Offset: func(r *stream.Record) int64 { return r.Offset },
		Limit:  highWater(h.e.cfg.MaxBatch),
		Reuse:  true,
		// A full buffer is not paused at once (see waitRoom): a resume
		// waits for sarama's next fetch of the partition.
		Watch: cl,
	})
	cfg := &h.e.cfg
	cl.commits = kafkaadapter.Coalescer{
		Interval: cfg.commitInterval, Records: cfg.commitRecords,
		Claim: cl,
		Log:   h.e.log, Topic: key.topic, Partition: key.partition,
	}
	cl.commits.Start(committed, md)
	cl.skipBelow = -1
	switch at := sc.InitialOffset(); {
	case committed < 0:
	case at >= 0 && at < committed:
		// A commit landed between sarama's read and newClaim's (see add).
		cl.skipBelow = committed
	case at < 0:
		// sarama found no commit it could use: none (and one landed
		// since), or one past the partition's end, which sarama
		// replaced with Consumer.Offsets.Initial. Told apart at the
		// first record (add).
		cl.skipBelow = skipUndecided
	case at > committed:
		// The committed offset went back between sarama's read and
		// newClaim's; sarama's consumer cannot be moved back.
		h.e.log.Warn("redeliver: sarama starts the partition after its committed offset, which went back since its session began; the records between are not delivered",
			"topic", key.topic, "partition", key.partition, "from", at, "committed", committed)
	}
	return cl, nil
}

// highWater is how many buffered records pause the partition until the
// worker has taken them down to half.
func highWater(maxBatch int) int { return max(4*maxBatch, 2048) }

// run runs proc over the claim until it ends, and returns Process's error.
//
// sarama's consumer keeps a partition's pause across sessions (a partition
// paused when its session ended starts paused in the next): the claim
// resumes its partition when it starts, and when it ends paused.
func (cl *claim) run(proc *stream.Processor) error {
	cl.h.group.Resume(map[string][]int32{cl.key.topic: {cl.key.partition}})
	go func() {
		defer close(cl.pumped)
		cl.pump()
	}()
	// The group names the dead letters' __dlq.errors.group header.
	err := proc.Process(actionctx.WithSource(cl.ctx, actionctx.Source{Group: cl.h.e.cfg.group}), cl)
	cl.ended = cl.ctx.Err() != nil
	if err == nil {
		cl.cancel(context.Canceled)
	} else {
		cl.cancel(err)
	}
	<-cl.pumped
	// The success commit not written yet (coalesced), before sarama gives
	// the partition up: ConsumeClaim has not returned, so the session
	// still holds it.
	cl.commits.Final()
	cl.mu.Lock()
	if cl.pauseTimer != nil {
		cl.pauseTimer.Stop()
	}
	cl.buf.Drop()
	if cl.groupPaused {
		cl.groupPaused = false
		cl.h.group.Resume(map[string][]int32{cl.key.topic: {cl.key.partition}})
	}
	cl.mu.Unlock()
	return err
}

// endedFromOutside reports whether the claim had been ended from outside
// (revocation, the session's end, shutdown) when Process returned.
func (cl *claim) endedFromOutside() bool { return cl.ended }

// pumpChunk is the most records the pump moves into the buffer at once.
const pumpChunk = 256

// pump moves the records sarama delivers into the buffer until the claim
// ends or sarama closes the partition's channel, which ends the claim.
func (cl *claim) pump() {
	msgs := cl.sc.Messages()
	for {
		var (
			m    *sarama.ConsumerMessage
			ok   bool
			idle <-chan time.Time
			t    *time.Timer
		)
		if cl.wantProbe() {
			t = time.NewTimer(probeAfter)
			idle = t.C
		}
		select {
		case m, ok = <-msgs:
		case <-cl.ctx.Done():
		case <-idle:
			cl.probe()
			continue
		}
		if t != nil {
			t.Stop()
		}
		if cl.ctx.Err() != nil {
			return // the claim ended
		}
		if !ok {
			cl.cancel(errSessionEnded)
			return
		}
		cl.mu.Lock()
		recs := cl.buf.Slice()
		cl.mu.Unlock()
		recs = cl.add(recs, m)
		closed := false
	drain:
		for len(recs) < pumpChunk {
			select {
			case m, ok = <-msgs:
				if !ok {
					closed = true
					break drain
				}
				recs = cl.add(recs, m)
			default:
				break drain
			}
		}
		if len(recs) == 0 {
			// All below the committed offset: nothing to push.
			if closed {
				cl.cancel(errSessionEnded)
				return
			}
			continue
		}
		cl.next = recs[len(recs)-1].Offset + 1
		cl.mu.Lock()
		cl.buf.Push(recs)
		cl.mu.Unlock()
		cl.h.e.fetches.Clear(kafkaadapter.Partition{Topic: cl.key.topic, Partition: cl.key.partition})
		if closed {
			cl.cancel(errSessionEnded)
			return
		}
		cl.waitRoom()
	}
}

// skipUndecided is a claim's skipBelow until its first record tells
// whether sarama started before the committed offset (see add).
const skipUndecided = -2

// add appends m to recs, unless it comes before the offset the claim
// skips to. sarama's consumer starts the partition at the offset sarama
// read when the session began, before newClaim read it again, and a
// commit written between the two reads (the previous owner's last, which
// it may write after the group has moved on) is where the claim starts:
// sarama hands out the records below it all the same, handled and
// committed already, and delivering them would deliver them again under a
// retry state that is not theirs. When sarama found no commit it could
// use, the first record tells why: a committed offset within the
// partition (at most its high watermark, which sarama sets before it
// hands out a fetch's records) was written since, and one past its end
// was replaced by Consumer.Offsets.Initial, where the claim starts as
// sarama does.
func (cl *claim) add(recs []stream.Record, m *sarama.ConsumerMessage) []stream.Record {
	if cl.skipBelow == skipUndecided {
		cl.skipBelow = -1
		if cl.committed <= cl.sc.HighWaterMarkOffset() {
			cl.skipBelow = cl.committed
		}
	}
	if m.Offset < cl.skipBelow {
		cl.skipped++
		if cl.skipped == 1 {
			cl.h.e.log.Info("redeliver: sarama started the partition before its committed offset, committed since its session began; the records below it are skipped",
				"topic", cl.key.topic, "partition", cl.key.partition, "from", m.Offset, "committed", cl.committed)
		}
		return recs
	}
	return append(recs, record(m))
}

// fullWait is how long the pump waits, at most, for the worker to take a
// full buffer down to half before it pauses the partition in sarama's
// consumer. Meanwhile it reads nothing from sarama's channel, which holds
// sarama back as a ConsumeClaim that handles what it reads does (sarama
// stops fetching the partition for a while once it has waited
// Consumer.MaxProcessingTime, 100ms by default, for the channel). A pause
// is resumed only with sarama's next fetch of the partition, which took
// about 100ms on kfake: a worker that keeps up takes half a buffer in a
// millisecond or so and never needs it.
const fullWait = 100 * time.Millisecond

// waitRoom waits, when the buffer is full, until the worker has taken it
// down to half, for at most fullWait, and then pauses the partition in
// sarama's consumer. A worker waiting out a backoff is waited for too: most
// backoffs are short, and a long one pauses the partition anyway
// (pauseDelay). It returns at once when the claim ends.
func (cl *claim) waitRoom() {
	var deadline <-chan time.Time
	for {
		cl.mu.Lock()
		full := cl.buf.Full() && !cl.groupPaused
		cl.mu.Unlock()
		if !full {
			return
		}
		if deadline == nil {
			t := time.NewTimer(fullWait)
			defer t.Stop()
			deadline = t.C
		}
		select {
		case <-cl.room:
		case <-deadline:
			cl.mu.Lock()
			if cl.buf.Full() {
				cl.holdLocked()
			}
			cl.mu.Unlock()
			return
		case <-cl.ctx.Done():
			return
		}
	}
}

// record converts a sarama message.
func record(m *sarama.ConsumerMessage) stream.Record {
	r := stream.Record{Topic: m.Topic, Partition: m.Partition, Offset: m.Offset, Key: m.Key, Value: m.Value, Timestamp: m.Timestamp}
	if len(m.Headers) > 0 {
		r.Headers = make([]stream.Header, 0, len(m.Headers))
		for _, h := range m.Headers {
			if h != nil {
				r.Headers = append(r.Headers, stream.Header{Key: string(h.Key), Value: h.Value})
			}
		}
	}
	return r
}

// holdLocked pauses the partition in sarama's consumer: the buffer is full
// or the worker waits out a backoff.
func (cl *claim) holdLocked() {
	if !cl.groupPaused {
		cl.groupPaused = true
		cl.h.group.Pause(map[string][]int32{cl.key.topic: {cl.key.partition}})
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

// releaseLocked resumes the partition unless the buffer is still full or
// the worker still waits out a backoff.
func (cl *claim) releaseLocked() {
	if cl.groupPaused && !cl.buf.Full() && !cl.buf.Paused() {
		cl.groupPaused = false
		cl.h.group.Resume(map[string][]int32{cl.key.topic: {cl.key.partition}})
	}
}

// Topic returns the partition's topic.
func (cl *claim) Topic() string { return cl.key.topic }

// Partition returns the partition's number.
func (cl *claim) Partition() int32 { return cl.key.partition }

// Committed returns the offset and metadata committed when the claim
// began, as read from the group's coordinator before the worker started.
func (cl *claim) Committed() (int64, string) { return cl.committed, cl.metadata }

// idle reports whether nothing is buffered.
func (cl *claim) idle() bool {
	cl.mu.Lock()
	defer cl.mu.Unlock()
	return cl.buf.Len() == 0
}

// Fetch returns the next batch: at most the maximum batch size of buffered
// records, once the batch is full, the maximum wait has passed since records
// were first there, or at once when the maximum wait is 0; never across a
// rewind.
//
// It returns no records when the pump found transaction markers or
// aborted records only (see Position).
func (cl *claim) Fetch(ctx context.Context) ([]stream.Record, error) {
	// The Processor gave the last batch up by calling Fetch: when nothing
	// is buffered, so that the worker is about to wait, let go of its
	// records, so that an idle partition keeps none of them (otherwise the
	// next batch overwrites them).
	if cl.idle() {
		clear(cl.out)
	}
	out := cl.out[:0]
	err := cl.buf.Next(ctx, cl.h.e.cfg.MaxBatch, cl.h.e.cfg.MaxWait, func(part []stream.Record) {
		var base int
		out, base = batching.Extend(out, len(part))
		copy(out[base:], part)
	})
	if err != nil {
		return nil, err
	}
	cl.out = batching.ClearTail(cl.out, out)
	return out, nil
}

// Position returns the offset past the transaction markers (and aborted
// records) found after the last record Fetch returned, when nothing is
// buffered; -1 otherwise ([stream.Positioner]).
func (cl *claim) Position() int64 {
	cl.mu.Lock()
	defer cl.mu.Unlock()
	return cl.buf.Position()
}

// pauseDelay is how long a backoff lasts before its partition is paused in
// sarama's consumer: a resume waits for sarama's next fetch of the
// partition, which costs more than the backoffs of a millisecond or so
// that most retries wait; meanwhile, what comes is buffered, within the
// buffer's bound (a full buffer pauses the partition at once).
const pauseDelay = 100 * time.Millisecond

// Pause pauses the partition in sarama's consumer while the Processor
// waits out a backoff, once the backoff has lasted pauseDelay. Records
// already delivered stay buffered.
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
// delivered, and at the latest when the claim ends, before ConsumeClaim
// returns (kafkaadapter.Coalescer). Any other commit supersedes the
// coalesced one and is written before Commit returns.
func (cl *claim) Commit(_ context.Context, next int64, metadata string) error {
	if cl.ctx.Err() != nil {
		return errSessionEnded
	}
	return cl.commits.Commit(next, -1, metadata)
}

// CaughtUp (kafkaadapter.Sender) reports whether the partition has nothing
// more to deliver: the buffer and sarama's channel are empty, and the
// partition is read to the high watermark of sarama's last fetch (or that
// not known). A buffer emptied while sarama has more of the partition to
// fetch is not caught up: the commit waits for the window, or the
// coalesced commits would be one per batch.
func (cl *claim) CaughtUp() bool {
	cl.mu.Lock()
	n, readTo := cl.buf.Len(), cl.buf.ReadTo()
	cl.mu.Unlock()
	hwm := cl.sc.HighWaterMarkOffset()
	return n == 0 && len(cl.sc.Messages()) == 0 && (hwm <= 0 || readTo >= hwm)
}

// send commits next with metadata under the session's generation and
// member ID, and waits for the coordinator's answer. A commit the
// coordinator refuses as stale (illegal generation, unknown member, a
// rebalance in progress) waits for the outcome: under the cooperative
// protocol sarama joins the next generation keeping the partition, and
// the commit is sent again under it; otherwise the session ends, and with
// it the claim. A shutdown waits for a commit in flight at most 250ms.
//
// final is the claim's last commit, made once its worker has returned and
// before ConsumeClaim does: it is sent although the claim has ended, and
// when refused as stale it is sent once more if sarama has moved to a new
// generation meanwhile (the partition is then nobody's: its next owner
// has not started), and not waited for otherwise.
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
func (cl *claim) Revoked() error { return errSessionEnded }

func (cl *claim) send(next int64, metadata string, final bool) error {
	if !final && cl.ctx.Err() != nil {
		return errSessionEnded
	}
	ctx, cancel := context.WithTimeout(cl.h.commitCtx, cl.h.e.cfg.CommitTimeout)
	defer cancel()
	if !final {
		// A commit other than the last stops waiting when the claim is
		// revoked or its session ends (not when a shutdown ends it: that
		// waits up to its own bound, commitCtx): the revocation waits for
		// the worker, and a worker held by a coordinator that does not
		// answer would hold the partition while its next owner delivers
		// it (issue 51). The request may still land; the coordinator
		// writes it only under the member's current generation. The
		// retry bound holds either way: a commit that carries a retry
		// state and lands counts the retry as started, one more than the
		// worker saw (conservative); one that does not land leaves the
		// state before it.
		stop := context.AfterFunc(cl.ctx, func() {
			if cl.h.runCtx.Err() == nil {
				cancel()
			}
		})
		defer stop()
	}
	if final {
		gen := cl.sess.GenerationID()
		err := cl.h.commit(ctx, cl.sess, gen, cl.key, next, metadata)
		if isStale(err) && cl.sess.GenerationID() != gen {
			err = cl.h.commit(ctx, cl.sess, cl.sess.GenerationID(), cl.key, next, metadata)
		}
		return err
	}
	for {
		gen := cl.sess.GenerationID()
		err := cl.h.commit(ctx, cl.sess, gen, cl.key, next, metadata)
		if err != nil && cl.ctx.Err() != nil && cl.h.runCtx.Err() == nil {
			return errSessionEnded
		}
		if !isStale(err) {
			return err
		}
		// Wait for the generation to move on, or the claim to end.
		for cl.sess.GenerationID() == gen {
			select {
			case <-cl.ctx.Done():
				return errSessionEnded
			case <-ctx.Done():
				cl.cancel(errSessionEnded) // sarama ends the session, and joins again
				return errSessionEnded
			case <-time.After(20 * time.Millisecond):
			}
		}
		if cl.ctx.Err() != nil {
			return errSessionEnded
		}
	}
}

// isStale reports whether the coordinator refused a commit for a member or
// generation that is no longer current.
func isStale(err error) bool {
	return errors.Is(err, sarama.ErrIllegalGeneration) || errors.Is(err, sarama.ErrUnknownMemberId) ||
		errors.Is(err, sarama.ErrRebalanceInProgress) || errors.Is(err, sarama.ErrFencedInstancedId)
}

// isCoordinatorMoved reports whether a request went to a broker that is no
// longer the group's coordinator, or the coordinator is not ready.
func isCoordinatorMoved(err error) bool {
	return errors.Is(err, sarama.ErrNotCoordinatorForConsumer) || errors.Is(err, sarama.ErrConsumerCoordinatorNotAvailable) ||
		errors.Is(err, sarama.ErrOffsetsLoadInProgress)
}

// commit sends one OffsetCommit request for key to the group's
// coordinator, under generation gen and the session's member ID, and
// returns its outcome: the partition's error in the answer, or the
// request's.
func (h *handler) commit(ctx context.Context, sess sarama.ConsumerGroupSession, gen int32, key tp, next int64, metadata string) error {
	sc := h.e.cfg.sarama
	req := sarama.NewOffsetCommitRequest(sc, h.e.cfg.group)
	req.ConsumerGroupGeneration = gen
	req.ConsumerID = sess.MemberID()
	if id := sc.Consumer.Group.InstanceId; id != "" && req.Version >= 7 {
		req.GroupInstanceId = &id
	}
	req.AddBlockWithLeaderEpoch(key.topic, key.partition, next, -1, 0, metadata)
	broker, err := h.client.Coordinator(h.e.cfg.group)
	if err != nil {
		return fmt.Errorf("sarama: commit %s/%d at %d: find the group's coordinator: %w", key.topic, key.partition, next, err)
	}
	type answer struct {
		resp *sarama.OffsetCommitResponse
		err  error
	}
	ch := make(chan answer, 1)
	go func() {
		resp, err := broker.CommitOffset(req)
		ch <- answer{resp, err}
	}()
	var a answer
	select {
	case a = <-ch:
	case <-ctx.Done():
		return fmt.Errorf("sarama: commit %s/%d at %d: no answer: %w", key.topic, key.partition, next, context.Cause(ctx))
	}
	err = a.err
	if err == nil {
		err = sarama.ErrIncompleteResponse
		if ps, ok := a.resp.Errors[key.topic]; ok {
			if kerr, ok := ps[key.partition]; ok {
				err = nil
				if kerr != sarama.ErrNoError {
					err = kerr
				}
			}
		}
	}
	if err == nil {
		return nil
	}
	if isCoordinatorMoved(err) || a.err != nil {
		_ = h.client.RefreshCoordinator(h.e.cfg.group)
	}
	return fmt.Errorf("sarama: commit %s/%d at %d: %w", key.topic, key.partition, next, err)
}

// fetchCommitted reads key's committed offset (-1 for none) and metadata
// from the group's coordinator, trying again a few times when the
// coordinator moved or is loading.
func (h *handler) fetchCommitted(ctx context.Context, key tp) (int64, string, error) {
	var err error
	for try := 0; try < 5; try++ {
		if try > 0 && !sleep(ctx, time.Duration(try)*100*time.Millisecond) {
			return 0, "", context.Cause(ctx)
		}
		var (
			off int64
			md  string
		)
		off, md, err = h.fetchCommittedOnce(ctx, key)
		if err == nil {
			return off, md, nil
		}
		if ctx.Err() != nil {
			return 0, "", err
		}
		_ = h.client.RefreshCoordinator(h.e.cfg.group)
	}
	return 0, "", err
}

func (h *handler) fetchCommittedOnce(ctx context.Context, key tp) (int64, string, error) {
	sc := h.e.cfg.sarama
	broker, err := h.client.Coordinator(h.e.cfg.group)
	if err != nil {
		return 0, "", fmt.Errorf("sarama: find the group's coordinator: %w", err)
	}
	req := sarama.NewOffsetFetchRequest(sc.Version, h.e.cfg.group, map[string][]int32{key.topic: {key.partition}})
	if sc.Consumer.IsolationLevel == sarama.ReadCommitted && req.Version >= 7 {
		req.RequireStable = true
	}
	type answer struct {
		resp *sarama.OffsetFetchResponse
		err  error
	}
	ch := make(chan answer, 1)
	go func() {
		resp, err := broker.FetchOffset(req)
		ch <- answer{resp, err}
	}()
	var a answer
	select {
	case a = <-ch:
	case <-ctx.Done():
		return 0, "", context.Cause(ctx)
	}
	if a.err != nil {
		return 0, "", fmt.Errorf("sarama: fetch the committed offset of %s/%d: %w", key.topic, key.partition, a.err)
	}
	block := a.resp.GetBlock(key.topic, key.partition)
	if block == nil {
		var err error = a.resp.Err
		if a.resp.Err == sarama.ErrNoError {
			err = sarama.ErrIncompleteResponse
		}
		return 0, "", fmt.Errorf("sarama: fetch the committed offset of %s/%d: %w", key.topic, key.partition, err)
	}
	if block.Err != sarama.ErrNoError {
		return 0, "", fmt.Errorf("sarama: fetch the committed offset of %s/%d: %w", key.topic, key.partition, block.Err)
	}
	if block.Offset < 0 {
		return -1, "", nil
	}
	return block.Offset, block.Metadata, nil
}
