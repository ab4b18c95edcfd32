package engine

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/segmentio/kafka-go"
	"github.com/segmentio/kafka-go/protocol/offsetcommit"

	"github.com/redeliver-go/redeliver/adapters/internal/kafkaadapter"
	"github.com/redeliver-go/redeliver/internal/lifecycle"
	"github.com/redeliver-go/redeliver/stream"
)

// generation is one kafka-go group generation as the consumer serves it: the
// claims of its assigned partitions and the lock that fences their commits.
//
// kafka-go ends a generation as soon as any function given to
// [kafka.Generation.Start] returns, and waits for all of them before it joins
// the next one. The consumer starts one such function per generation, the
// manager: it makes the claims, runs their workers in goroutines of its own,
// and on the generation's end cancels them and waits for them before it
// returns. So kafka-go's wait covers every worker, and the next generation
// never starts while a worker of this one runs.
type generation struct {
	c    *Consumer
	gen  *kafka.Generation
	gctx context.Context // kafka-go's context of the generation: done when it ends
	fail func(error)     // stops Run when a worker fails
	// commitCtx is done commitGrace after Run's context: a shutdown cuts a
	// commit in flight short (a rebalance waits for it, up to the commit
	// timeout).
	commitCtx context.Context

	mu     sync.RWMutex // commits hold it shared for their request; end holds it exclusively
	ended  bool
	claims []*claim
	wg     sync.WaitGroup // the workers

	stale     chan struct{} // closed when the coordinator refused a commit as stale
	staleOnce sync.Once

	cmu     sync.Mutex    // guards pending and sending
	pending []*commitCall // commits waiting for the next request
	sending bool          // sendPending runs
}

// commitCall is one claim's commit, waiting to be sent with the others
// pending.
type commitCall struct {
	cl       *claim
	next     int64
	epoch    int32
	metadata string
	// done gets the call's outcome.
	done chan error
}

// serve starts the manager of gen.
func (c *Consumer) serve(ctx, commitCtx context.Context, gen *kafka.Generation) {
	g := &generation{c: c, gen: gen, fail: c.life.Fail, stale: make(chan struct{}), commitCtx: commitCtx}
	n := 0
	for _, as := range gen.Assignments {
		n += len(as)
	}
	c.log.Info("redeliver: generation started", "group", gen.GroupID, "generation", gen.ID,
		"member", gen.MemberID, "partitions", n)
	c.assigned(gen)
	c.wg.Add(1)
	gen.Start(func(gctx context.Context) {
		defer c.wg.Done()
		g.gctx = gctx
		g.manage(ctx, gctx)
	})
}

// manage runs the generation: it fetches the committed offsets, starts a
// worker per assigned partition, and when the generation ends (gctx), Run
// stops (runCtx) or a commit was refused as stale, ends every claim. On
// shutdown it returns only once kafka-go ends the generation itself (Run
// closes the group), so that kafka-go does not take the return for a
// rebalance and join the group again.
func (g *generation) manage(runCtx, gctx context.Context) {
	ctx, stop := context.WithCancel(runCtx)
	defer stop()
	go func() {
		select {
		case <-gctx.Done():
			stop()
		case <-g.stale:
			stop()
		case <-ctx.Done():
		}
	}()

	committed, err := g.fetchCommitted(ctx)
	if err == nil {
		g.startClaims(runCtx, committed)
	}

	var cause error
	select {
	case <-gctx.Done():
		cause = errGenerationEnded
	case <-g.stale:
		cause = errGenerationEnded
	case <-runCtx.Done():
		cause = context.Cause(runCtx)
	}
	g.end(cause, func() bool { return runCtx.Err() != nil })
	g.c.log.Info("redeliver: generation ended", "group", g.gen.GroupID, "generation", g.gen.ID, "cause", cause)
	if runCtx.Err() != nil {
		<-gctx.Done()
	}
}

// committedOffset is a partition's committed offset (-1 for none) and its
// metadata.
type committedOffset struct {
	offset   int64
	metadata string
}

// fetchCommitted fetches the committed offsets and metadata of the assigned
// partitions, trying again until it succeeds or ctx ends. kafka-go's own
// fetch (Generation.Assignments) has the offsets only.
func (g *generation) fetchCommitted(ctx context.Context) (map[tp]committedOffset, error) {
	req := &kafka.OffsetFetchRequest{GroupID: g.gen.GroupID, Topics: make(map[string][]int)}
	for topic, as := range g.gen.Assignments {
		for _, a := range as {
			req.Topics[topic] = append(req.Topics[topic], a.ID)
		}
	}
	if len(req.Topics) == 0 {
		return nil, nil
	}
	var delay time.Duration
	for try := 1; ; try++ {
		res, err := g.fetchOnce(ctx, req)
		if err == nil {
			return res, nil
		}
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		delay = min(max(2*delay, 100*time.Millisecond), 5*time.Second)
		g.c.log.Warn("redeliver: fetching committed offsets failed, will try again", "group", g.gen.GroupID,
			"generation", g.gen.ID, "try", try, "delay", delay, "error", err)
		t := time.NewTimer(delay)
		select {
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
			return nil, ctx.Err()
		}
	}
}

func (g *generation) fetchOnce(ctx context.Context, req *kafka.OffsetFetchRequest) (map[tp]committedOffset, error) {
	ctx, cancel := context.WithTimeout(ctx, g.c.cfg.CommitTimeout)
	defer cancel()
	resp, err := g.c.client.OffsetFetch(ctx, req)
	if err != nil {
		return nil, fmt.Errorf("kafkago: offset fetch: %v", err)
	}
	if resp.Error != nil {
		return nil, fmt.Errorf("kafkago: offset fetch: %v", resp.Error)
	}
	out := make(map[tp]committedOffset)
	for topic, ps := range resp.Topics {
		for _, p := range ps {
			if p.Error != nil {
				return nil, fmt.Errorf("kafkago: offset fetch of %s/%d: %v", topic, p.Partition, p.Error)
			}
			off := p.CommittedOffset
			if off < 0 {
				off = -1
			}
			out[tp{topic, int32(p.Partition)}] = committedOffset{offset: off, metadata: p.Metadata}
		}
	}
	for topic, ps := range req.Topics {
		for _, p := range ps {
			if _, ok := out[tp{topic, int32(p)}]; !ok {
				return nil, fmt.Errorf("kafkago: offset fetch: no answer for %s/%d", topic, p)
			}
		}
	}
	return out, nil
}

// startClaims makes a claim for every fetched partition and starts its
// worker, unless the generation has already ended.
func (g *generation) startClaims(runCtx context.Context, committed map[tp]committedOffset) {
	keys := make([]tp, 0, len(committed))
	for k := range committed {
		keys = append(keys, k)
	}
	slices.SortFunc(keys, func(a, b tp) int {
		if a.topic != b.topic {
			if a.topic < b.topic {
				return -1
			}
			return 1
		}
		return int(a.partition - b.partition)
	})
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.ended || g.gctx.Err() != nil {
		return
	}
	for _, k := range keys {
		co := committed[k]
		cl := newClaim(g, k, co.offset, co.metadata, runCtx)
		g.claims = append(g.claims, cl)
		g.c.log.Info("redeliver: partition assigned", "topic", k.topic, "partition", k.partition,
			"generation", g.gen.ID, "committed", co.offset, "metadata", co.metadata)
		g.wg.Add(1)
		ended := g.c.workers.Start(fmt.Sprintf("%s/%d", k.topic, k.partition))
		go lifecycle.Inside(func() {
			defer ended()
			g.work(cl)
		})
	}
}

// work runs the Processor over cl until the claim ends.
func (g *generation) work(cl *claim) {
	defer g.wg.Done()
	ended, err := cl.run(g.c.proc)
	switch {
	case ended: // by the generation's end or by shutdown
	case errors.Is(err, stream.ErrRevoked): // a commit refused as stale: the manager ends the generation
	default:
		err = fmt.Errorf("kafkago: worker of %s/%d stopped: %w", cl.key.topic, cl.key.partition, err)
		g.c.log.Error("redeliver: worker failed", "topic", cl.key.topic, "partition", cl.key.partition, "error", err)
		g.fail(err)
	}
}

// end ends every claim with cause: their contexts are cancelled, commits are
// refused from now on (once the commit calls in flight have returned: at
// their answer, or at once for a claim revoked while Run goes on), and
// their workers are waited for, with a report while they hold the
// rebalance, unless stopping says Run stops (its drain reports then).
func (g *generation) end(cause error, stopping func() bool) {
	g.mu.RLock()
	claims := g.claims
	g.mu.RUnlock()
	for _, cl := range claims {
		cl.cancel(cause)
	}
	g.mu.Lock()
	g.ended = true
	claims = g.claims
	g.mu.Unlock()
	for _, cl := range claims {
		cl.cancel(cause)
	}
	workers := make(chan struct{})
	go func() {
		g.wg.Wait()
		close(workers)
	}()
	// kafka-go's heartbeats stop with the generation: the member keeps its
	// session while it waits.
	released := make(chan struct{})
	defer close(released)
	go g.keepSession(g.gctx, released)
	lifecycle.WaitRevoked(workers, nil, g.c.log, &g.c.workers, stopping)
	// The success commits not written yet (coalesced), before the
	// partitions are given up.
	var fw sync.WaitGroup
	for _, cl := range claims {
		fw.Go(cl.final)
	}
	fw.Wait()
	for _, cl := range claims {
		g.c.log.Info("redeliver: partition released", "topic", cl.key.topic, "partition", cl.key.partition,
			"generation", g.gen.ID, "cause", cause)
	}
}

// markStale ends the generation early: the coordinator refused a commit
// because this member's generation is no longer current.
func (g *generation) markStale() {
	g.staleOnce.Do(func() { close(g.stale) })
}

// commit commits next with metadata for cl's partition through the group
// generation and waits for the coordinator's answer. It returns
// [stream.ErrRevoked] once the generation has ended (kafka-go ended it or
// the manager did) or the claim is ending, and when the coordinator says the
// generation is stale.
//
// Commits of several partitions made at once share one request: while a
// request is in flight, the commits made meanwhile wait, and the goroutine
// that sends the requests (sendPending) then sends them all in the next
// (the coordinator answers a request at a time, so a hundred partitions
// ending their backoffs together would otherwise each wait for the
// ninety-nine commits before them).
//
// final is the claim's last commit, made by end once the claim's worker has
// returned: it is sent all the same, and waited for until its request's
// bound (the commit timeout, or the shutdown's).
//
// Any other commit stops waiting when the claim is revoked (not when a
// shutdown ends it: that waits up to its own bound, commitCtx), and
// returns [stream.ErrRevoked]: the generation's end waits for the workers
// before kafka-go joins the next one, and a worker held by a coordinator
// that does not answer would hold its partition while the next owner
// delivers it (up to the commit timeout). The request goes on, sent by a goroutine of its
// own, and may still land; the coordinator writes it only under the
// member's current generation, which a rebalance ends. The retry bound
// holds either way: a commit that carries a retry state and lands counts
// the retry as started, one more than the worker saw (conservative); one
// that does not land leaves the state before it.
func (g *generation) commit(cl *claim, next int64, epoch int32, metadata string, final bool) error {
	var ended <-chan struct{} // nil for the final commit: the claim has ended
	if !final {
		g.mu.RLock()
		defer g.mu.RUnlock()
		if g.ended || g.gctx.Err() != nil || cl.ctx.Err() != nil {
			return stream.ErrRevoked
		}
		revoked, stop := kafkaadapter.Revocation(cl.ctx, cl.runCtx)
		defer stop()
		ended = revoked
	}
	call := &commitCall{cl: cl, next: next, epoch: epoch, metadata: metadata, done: make(chan error, 1)}
	g.cmu.Lock()
	g.pending = append(g.pending, call)
	lead := !g.sending
	g.sending = true
	g.cmu.Unlock()
	if lead {
		// Run waits for it (c.wg), as for the manager it runs under.
		g.c.wg.Add(1)
		go g.sendPending()
	}
	select {
	case err := <-call.done:
		return err
	case <-ended:
		return stream.ErrRevoked
	}
}

// sendPending sends the pending commits, a request at a time, until none
// is left.
func (g *generation) sendPending() {
	defer g.c.wg.Done()
	for {
		g.cmu.Lock()
		calls := g.pending
		g.pending = nil
		if len(calls) == 0 {
			g.sending = false
			g.cmu.Unlock()
			return
		}
		g.cmu.Unlock()
		g.send(calls)
	}
}

// send commits calls, in one request unless a partition comes twice, and
// gives each call its outcome.
func (g *generation) send(calls []*commitCall) {
	for len(calls) > 0 {
		var (
			req  = &offsetcommit.Request{GroupID: g.gen.GroupID, GenerationID: g.gen.ID, MemberID: g.gen.MemberID, RetentionTimeMs: -1}
			sent []*commitCall
			rest []*commitCall
			seen = make(map[tp]bool, len(calls))
			at   = make(map[string]int) // topic -> index in req.Topics
		)
		for _, c := range calls {
			if seen[c.cl.key] {
				rest = append(rest, c) // in the next request, after this one's
				continue
			}
			seen[c.cl.key] = true
			sent = append(sent, c)
			i, ok := at[c.cl.key.topic]
			if !ok {
				i = len(req.Topics)
				at[c.cl.key.topic] = i
				req.Topics = append(req.Topics, offsetcommit.RequestTopic{Name: c.cl.key.topic})
			}
			req.Topics[i].Partitions = append(req.Topics[i].Partitions, offsetcommit.RequestPartition{
				PartitionIndex: c.cl.key.partition, CommittedOffset: c.next, CommittedLeaderEpoch: c.epoch,
				CommitTimestamp: -1, CommittedMetadata: c.metadata,
			})
		}
		g.sendRequest(req, sent)
		calls = rest
	}
}

// sendRequest sends req, the commits of calls, and gives each call its
// outcome.
func (g *generation) sendRequest(req *offsetcommit.Request, calls []*commitCall) {
	ctx, cancel := context.WithTimeout(g.commitCtx, g.c.cfg.CommitTimeout)
	defer cancel()
	// kafka.Client.OffsetCommit sends leader epoch 0 with every commit
	// (its OffsetCommit has no epoch), so the request is sent as Kafka
	// defines it, through the client's transport, which routes it to the
	// group's coordinator.
	m, err := g.c.roundTrip(ctx, req)
	res, ok := m.(*offsetcommit.Response)
	if err == nil && !ok {
		err = fmt.Errorf("unexpected answer %T", m)
	}
	codes := make(map[tp]int16)
	if err == nil {
		for _, t := range res.Topics {
			for _, p := range t.Partitions {
				codes[tp{t.Name, p.PartitionIndex}] = p.ErrorCode
			}
		}
	}
	for _, c := range calls {
		c.done <- g.outcome(c, codes, err)
	}
}

// outcome is what a commit call returns, given the request's error and the
// error codes of the partitions in the answer.
func (g *generation) outcome(c *commitCall, codes map[tp]int16, err error) error {
	what := fmt.Sprintf("kafkago: commit of %s/%d at offset %d", c.cl.key.topic, c.cl.key.partition, c.next)
	if err != nil {
		return fmt.Errorf("%s: %v", what, err)
	}
	code, ok := codes[c.cl.key]
	switch {
	case !ok:
		return fmt.Errorf("%s: no answer for the partition", what)
	case code == 0:
		return nil
	}
	perr := kafka.Error(code)
	if staleGeneration(perr) {
		g.markStale()
		return fmt.Errorf("%s refused (%v): %w", what, perr, stream.ErrRevoked)
	}
	return fmt.Errorf("%s: %v", what, perr)
}

// staleGeneration reports whether a commit error means that this member's
// generation is over.
func staleGeneration(err error) bool {
	return errors.Is(err, kafka.IllegalGeneration) || errors.Is(err, kafka.UnknownMemberId) ||
		errors.Is(err, kafka.RebalanceInProgress) || errors.Is(err, kafka.FencedInstanceID)
}
