package confluent

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/confluentinc/confluent-kafka-go/v2/kafka"

	"github.com/redeliver-go/redeliver/adapters/internal/kafkaadapter"
	"github.com/redeliver-go/redeliver/internal/health"
	"github.com/redeliver-go/redeliver/internal/lifecycle"
	"github.com/redeliver-go/redeliver/stream"
)

// How Run stops: a commit in flight is waited for at most commitGrace, and
// the consumer's Close (leaving the group) at most closeWait, after which
// it is left to finish on its own.
const (
	commitGrace = 250 * time.Millisecond
	closeWait   = 400 * time.Millisecond
	pollTimeout = 50 // ms
	pollBurst   = 500
)

// soloGap is how long the poll goroutine stays out of polling after the
// last poll of a claim's worker (claim.pollSelf): a consumer of one
// partition whose worker keeps polling hands no records from a goroutine
// to another. The poll goroutine polls again once the worker has not for
// soloGap (its handler runs, or it waits out a backoff), so that
// librdkafka is still polled (max.poll.interval.ms, the rebalance
// callbacks) and the buffer filled meanwhile.
const soloGap = 10 * time.Millisecond

// errRevoked is the cause of a claim whose partition librdkafka took back.
var errRevoked = fmt.Errorf("confluent: partition revoked: %w", stream.ErrRevoked)

// tp names a partition.
type tp struct {
	topic     string
	partition int32
}

// engine is a Consumer's state.
type engine struct {
	proc *stream.Processor
	cfg  config
	log  *slog.Logger

	life   *lifecycle.Life
	checks health.Checker

	wg       sync.WaitGroup    // the workers
	workers  lifecycle.Workers // the workers, by partition, for the drain's report
	inflight sync.WaitGroup    // commit requests, also those a shutdown stopped waiting for

	// closing guards the consumer from its Close, which frees it in
	// librdkafka: what a claim does with the consumer (commits, pauses,
	// resumes, the partition's end) runs under the read lock
	// (acquire/release), and not at all once closed is set. So a stop
	// whose drain gave up on workers closes the consumer without them:
	// the member leaves the group at once.
	closing sync.RWMutex
	closed  bool

	// token is held by whoever polls the consumer: the poll goroutine, or
	// the worker of the one claim (solo) while its buffer is empty
	// (claim.pollSelf). The fields below it are the holder's (the
	// rebalance callback runs in Poll, on the holder's goroutine).
	token     chan struct{}
	claims    map[tp]*claim
	last      *claim // the claim of the last message delivered; nil when claims changed since
	poller    *claim // the claim whose worker polls now; nil when the poll goroutine does
	runCtx    context.Context
	commitCtx context.Context

	solo     atomic.Pointer[claim] // the one claim, when there is one: its worker polls for itself
	lastSelf atomic.Int64          // when a worker last polled (UnixNano), 0 for never

	// stopAt is when the stop's drain time ends (drainUntil).
	stopOnce sync.Once
	stopAt   time.Time

	// The producer of the publishers given with WithPublisher, made from
	// producerConf; nil without them.
	owned        *ownedProducer
	producerConf kafka.ConfigMap
}

func newEngine(proc *stream.Processor, cfg config) (*engine, error) {
	switch {
	case proc == nil:
		return nil, errors.New("confluent: nil processor")
	case !cfg.groupSet:
		return nil, errors.New("confluent: no consumer group: give one with confluent.WithGroup(kafka.ConfigMap{...}, topics...)")
	case len(cfg.topics) == 0:
		return nil, errors.New("confluent: WithGroup names no topics")
	}
	if err := cfg.Options.Check("confluent"); err != nil {
		return nil, err
	}
	if err := kafkaadapter.CheckCommitWindow("confluent", cfg.commitInterval, cfg.commitRecords); err != nil {
		return nil, err
	}
	if err := kafkaadapter.CheckTopics("confluent", cfg.topics); err != nil {
		return nil, err
	}
	for _, key := range []string{"bootstrap.servers", "group.id"} {
		v, ok := cfg.conf[key]
		if s, isString := v.(string); !ok || isString && s == "" {
			return nil, fmt.Errorf("confluent: WithGroup's configuration has no %s", key)
		}
	}
	cfg.conf["enable.auto.commit"] = false
	cfg.conf["enable.auto.offset.store"] = false
	setQueueBackoff(cfg.conf)
	log := cfg.Logger
	if log == nil {
		log = proc.Logger()
	}
	e := &engine{proc: proc, cfg: cfg, log: log, life: lifecycle.New("confluent", errClosed)}
	if len(cfg.publishers) > 0 {
		e.owned, e.producerConf = &ownedProducer{}, producerConfig(cfg.conf)
	}
	e.checks.Log = log
	e.checks.EndAfter, e.checks.End = cfg.FailAfter, e.life.Fail
	return e, nil
}

func (e *engine) group() any { return e.cfg.conf["group.id"] }

// run is Run's body.
func (e *engine) run(ctx context.Context) error {
	if e.owned != nil {
		// Publishers given with WithPublisher publish while Run runs.
		defer e.stopProducer()
		p, err := kafka.NewProducer(&e.producerConf)
		if err != nil {
			return fmt.Errorf("confluent: make the dead-letter producer of WithPublisher (from bootstrap.servers and the security settings of WithGroup's configuration): %w", err)
		}
		go e.producerEvents(p)
		if !e.owned.Start(p) {
			p.Close()
		}
	}
	c, err := kafka.NewConsumer(&e.cfg.conf)
	if err != nil {
		return fmt.Errorf("confluent: make the consumer: %w", err)
	}
	checked := make(chan struct{})
	go func() {
		defer close(checked)
		e.checks.Run(ctx, checkInterval, checkTimeout, e.check)
	}()
	defer func() { <-checked }()

	commitCtx, stopCommits := lifecycle.Linger(ctx, commitGrace)
	defer stopCommits()
	e.claims, e.runCtx, e.commitCtx = make(map[tp]*claim), ctx, commitCtx
	e.token = make(chan struct{}, 1)

	if err := c.SubscribeTopics(e.cfg.topics, e.rebalance); err != nil {
		_ = c.Close()
		return fmt.Errorf("confluent: subscribe to %v: %w", e.cfg.topics, err)
	}
	gap := time.NewTimer(soloGap)
	defer gap.Stop()
	for ctx.Err() == nil {
		if last := e.lastSelf.Load(); last != 0 {
			if d := soloGap - time.Since(time.Unix(0, last)); d > 0 {
				// The solo claim's worker polls: wait for it to stop.
				gap.Reset(d)
				select {
				case <-gap.C:
				case <-ctx.Done():
				}
				continue
			}
		}
		select {
		case e.token <- struct{}{}:
		case <-ctx.Done():
			continue
		}
		e.poll(c)
		e.holdFull(ctx)
		<-e.token
	}
	// The token is the shutdown's from here on: no worker polls again.
	e.token <- struct{}{}
	cause := context.Cause(ctx)
	// The workers end with ctx: a handler that ignores the end of its
	// context holds its worker. Drain reports them, and gives up on them
	// after the drain time. No worker starts once the poll loop is over
	// (assign starts none once ctx has ended).
	e.last = nil
	for _, cl := range e.allClaims() {
		cl.cancel(cause)
		delete(e.claims, cl.key)
	}
	e.claimsChanged()
	workersDone := make(chan struct{})
	go func() {
		e.wg.Wait()
		close(workersDone)
	}()
	drainErr := lifecycle.DrainUntil(workersDone, e.log, "confluent", &e.workers, e.cfg.Drain, e.drainUntil())
	// Close leaves the group: it polls, and the rebalance callback gives
	// the partitions up. It may wait for the broker; past closeWait it is
	// left to finish on its own.
	closed := make(chan struct{})
	go func() {
		defer close(closed)
		// Nothing may use the consumer once it is closed (librdkafka frees
		// it): the health checks and the commits in flight finish first,
		// and the workers have returned, or, after a drain that gave up on
		// them, find it closed (acquire) whenever they come to it.
		<-checked
		e.closing.Lock()
		e.closed = true
		e.closing.Unlock()
		e.inflight.Wait()
		_ = c.Close()
	}()
	// librdkafka's close waits for the fetches in flight, which the broker
	// holds up to fetch.wait.max.ms when there is nothing to read.
	wait := max(closeWait, fetchWait(e.cfg.conf)+250*time.Millisecond)
	t := time.NewTimer(wait)
	select {
	case <-closed:
	case <-t.C:
		e.log.Warn("redeliver: the consumer did not close in time: a request to the broker is still waiting for its answer; it is left to close on its own",
			"group", e.group(), "waited", wait)
	}
	t.Stop()
	if drainErr != nil {
		return drainErr
	}
	e.log.Info("redeliver: consumer stopped", "group", e.group(), "cause", cause)
	return nil
}

// errConsumerClosed is what a claim's commit returns once Run has closed
// the consumer.
var errConsumerClosed = errors.New("confluent: the consumer is closed: Run has returned")

// acquire reports whether the consumer is open, and keeps it open until
// release; a false return needs no release.
func (e *engine) acquire() bool {
	e.closing.RLock()
	if e.closed {
		e.closing.RUnlock()
		return false
	}
	return true
}

// release ends what acquire began.
func (e *engine) release() { e.closing.RUnlock() }

// How Run ends the producer of the WithPublisher publishers: it flushes
// it, waiting at most producerFlush for the delivery reports of what it
// holds, closes it, and waits for that at most producerWait.
const (
	producerFlush = 400 * time.Millisecond
	producerWait  = time.Second
)

// producerEvents logs the errors librdkafka reports on the producer of the
// WithPublisher publishers (the delivery reports go to each publish): a
// fatal one (its idempotence refused, say: every publish fails from then
// on) at Error, the others, which librdkafka recovers from, at Debug. It
// returns when the producer is closed.
func (e *engine) producerEvents(p *kafka.Producer) {
	for ev := range p.Events() {
		if err, ok := ev.(kafka.Error); ok {
			if err.IsFatal() {
				e.log.Error("redeliver: the dead-letter producer of WithPublisher failed: every dead letter fails until the consumer runs again",
					"group", e.group(), "error", err)
			} else {
				e.log.Debug("redeliver: the dead-letter producer reports an error; it goes on", "error", err)
			}
		}
	}
}

// stopProducer flushes and closes the producer of the WithPublisher
// publishers, and makes them refuse to publish from now on.
func (e *engine) stopProducer() {
	if !e.owned.stop(producerFlush, producerWait) {
		e.log.Warn("redeliver: the dead-letter producer did not close in time: a Produce is still in progress; it is closed once it returns",
			"group", e.group(), "waited", producerWait)
	}
}

// poll takes what Poll has ready at once, up to pollBurst events, pushes it
// to each claim in one piece, and notes the positions of the claims with
// nothing buffered; the token's holder's.
func (e *engine) poll(c *kafka.Consumer) {
	timeout := pollTimeout
	for range pollBurst {
		ev := c.Poll(timeout)
		if ev == nil {
			break
		}
		timeout = 0
		switch ev := ev.(type) {
		case *kafka.Message:
			e.deliver(ev)
		case kafka.Error:
			if ev.IsFatal() {
				e.life.Fail(fmt.Errorf("confluent: fatal error of librdkafka: %w", ev))
			} else {
				e.log.Debug("redeliver: librdkafka reports an error; it goes on", "error", ev)
			}
		}
	}
	e.flush()
	e.positions(c)
}

// claimsChanged makes the one claim, if there is one, the solo claim (its
// worker polls for itself); after every change of claims.
func (e *engine) claimsChanged() {
	var solo *claim
	if len(e.claims) == 1 && e.runCtx.Err() == nil {
		for _, cl := range e.claims {
			solo = cl
		}
	}
	e.solo.Store(solo)
}

// deliver buffers a polled message in its partition's claim. A message of a
// partition with no claim (given up meanwhile) is dropped: its next owner
// reads it again from the committed offset.
func (e *engine) deliver(m *kafka.Message) {
	if m.TopicPartition.Topic == nil {
		return
	}
	// Poll returns a fetch's messages of a partition one after the other:
	// the last message's claim saves a map lookup (and hashing the topic)
	// per message.
	cl := e.last
	if cl == nil || cl.key.partition != m.TopicPartition.Partition || cl.key.topic != *m.TopicPartition.Topic {
		cl = e.claims[tp{*m.TopicPartition.Topic, m.TopicPartition.Partition}]
		if cl == nil {
			return
		}
		e.last = cl
	}
	cl.add(m)
}

// positions moves the Position of each claim that has nothing buffered to
// librdkafka's position of its partition (the offset after the last
// message polled, or past the transaction markers, and under
// read_committed the aborted messages, it read after it), so that a log
// that ends with a marker is committed to its end. A position that is not
// past the last message pushed is ignored (batching.Buffer.Skip).
func (e *engine) positions(c *kafka.Consumer) {
	var parts []kafka.TopicPartition
	for _, cl := range e.claims {
		if cl.drained() {
			parts = append(parts, kafka.TopicPartition{Topic: &cl.key.topic, Partition: cl.key.partition})
		}
	}
	if len(parts) == 0 {
		return
	}
	got, err := c.Position(parts)
	if err != nil {
		return // none known now; the next poll asks again
	}
	for _, p := range got {
		if p.Topic == nil || p.Error != nil || p.Offset < 0 {
			continue
		}
		if cl := e.claims[tp{*p.Topic, p.Partition}]; cl != nil {
			cl.skip(int64(p.Offset))
		}
	}
}

// flush pushes what deliver added to each claim.
func (e *engine) flush() {
	for _, cl := range e.claims {
		cl.flush()
	}
}

// fullWait is how long the poll goroutine waits, at most, for the workers
// of full buffers to take them down to half before it pauses their
// partitions in librdkafka. A pause drops what librdkafka fetched ahead and
// a resume waits for a new fetch, which a worker that keeps up (it takes
// half a buffer in a millisecond or so) never needs; meanwhile librdkafka
// holds back what it fetches, within its own queue's bounds, as a Poll
// loop that handles what it polls does. A slow worker's partition is
// paused after fullWait, so that it holds the others back no longer.
const fullWait = 100 * time.Millisecond

// holdFull waits for the full buffers to be taken down to half, together at
// most fullWait, and pauses the partitions of those still full. A worker
// waiting out a backoff is waited for too: most backoffs are short, and a
// long one pauses the partition anyway (pauseDelay).
func (e *engine) holdFull(ctx context.Context) {
	var deadline <-chan time.Time
	expired := false
	for _, cl := range e.claims {
		for {
			if !cl.full() {
				break
			}
			if expired {
				cl.holdIfFull()
				break
			}
			if deadline == nil {
				t := time.NewTimer(fullWait)
				defer t.Stop()
				deadline = t.C
			}
			select {
			case <-cl.room:
			case <-deadline:
				expired = true
			case <-ctx.Done():
				return
			}
		}
	}
}

func (e *engine) allClaims() []*claim {
	out := make([]*claim, 0, len(e.claims))
	for _, cl := range e.claims {
		out = append(out, cl)
	}
	return out
}

// endClaims ends claims with cause, waits for their workers, and forgets
// them. It waits as long as their handlers run, as the other adapters'
// revocations do, so that no other member delivers a partition's records
// while its handler still runs: up to the group's rebalance timeout
// (max.poll.interval.ms), past which the broker has taken the member out
// of the group anyway and the workers are left to end, or, once Run is
// stopping, up to the end of the stop's drain time (drainUntil), which
// Run's drain then finishes. While it waits, lifecycle.WaitRevoked
// reports the partitions whose handlers have not returned, also during a
// stop, whose own report cannot begin until this callback returns.
//
// A claim whose worker polls (the callback runs in its Poll) is not waited
// for: its worker is in Fetch, between batches, so no commit of its comes
// but the coalesced one, which is written here (and one in flight waited
// for, kafkaadapter.Coalescer.Final) before the partition is given up; the
// worker returns once the callback has.
func (e *engine) endClaims(cls []*claim, cause error) {
	e.last = nil
	defer e.claimsChanged()
	for _, cl := range cls {
		cl.cancel(cause)
	}
	var waiting []*claim
	for _, cl := range cls {
		if cl == e.poller {
			cl.commits.Final()
			delete(e.claims, cl.key)
			continue
		}
		waiting = append(waiting, cl)
	}
	if len(waiting) == 0 {
		return
	}
	defer func() {
		for _, cl := range waiting {
			delete(e.claims, cl.key)
		}
	}()
	ended := make(chan struct{})
	go func() {
		for _, cl := range waiting {
			<-cl.done
		}
		close(ended)
	}()
	revoked := make(map[string]bool, len(waiting))
	for _, cl := range waiting {
		revoked[fmt.Sprintf("%s/%d", cl.key.topic, cl.key.partition)] = true
	}
	reported := make(chan struct{})
	defer func() { <-reported }()
	waited := make(chan struct{})
	defer close(waited)
	go func() {
		defer close(reported)
		lifecycle.WaitRevoked(waited, nil, e.log, lifecycle.Only(&e.workers, revoked), nil)
	}()

	limit := rebalanceTimeout(e.cfg.conf)
	rebalance := time.NewTimer(limit)
	defer rebalance.Stop()
	stopping := e.runCtx.Done()
	var drained <-chan time.Time
	for {
		select {
		case <-ended:
			return
		case <-stopping:
			stopping = nil
			if until := e.drainUntil(); !until.IsZero() {
				t := time.NewTimer(time.Until(until))
				defer t.Stop()
				drained = t.C
			}
		case <-drained:
			// Run's drain reports them and returns its error.
			return
		case <-rebalance.C:
			for _, cl := range waiting {
				select {
				case <-cl.done:
				default:
					e.log.Warn("redeliver: a worker did not stop within the group's rebalance timeout (max.poll.interval.ms): its partition is given up while its handler still runs",
						"topic", cl.key.topic, "partition", cl.key.partition, "waited", limit)
				}
			}
			return
		}
	}
}

// drainUntil returns when the stop's drain time ends: Drain after the
// first call, which comes once Run's context has ended (the zero Time for
// a drain without a bound).
func (e *engine) drainUntil() time.Time {
	e.stopOnce.Do(func() {
		if e.cfg.Drain > 0 {
			e.stopAt = time.Now().Add(e.cfg.Drain)
		}
	})
	return e.stopAt
}

// rebalance is librdkafka's rebalance callback, on the poll goroutine.
func (e *engine) rebalance(c *kafka.Consumer, ev kafka.Event) error {
	cooperative := c.GetRebalanceProtocol() == "COOPERATIVE"
	switch ev := ev.(type) {
	case kafka.AssignedPartitions:
		parts := e.assign(c, ev.Partitions)
		var err error
		if cooperative {
			err = c.IncrementalAssign(parts)
		} else {
			err = c.Assign(parts)
		}
		if err != nil {
			e.log.Warn("redeliver: assigning partitions failed", "error", err)
		}
	case kafka.RevokedPartitions:
		var cls []*claim
		if cooperative {
			for _, p := range ev.Partitions {
				if p.Topic != nil {
					if cl := e.claims[tp{*p.Topic, p.Partition}]; cl != nil {
						cls = append(cls, cl)
					}
				}
			}
		} else {
			cls = e.allClaims()
		}
		e.endClaims(cls, errRevoked)
		var err error
		if cooperative {
			err = c.IncrementalUnassign(ev.Partitions)
		} else {
			err = c.Unassign()
		}
		if err != nil && e.runCtx.Err() == nil {
			e.log.Warn("redeliver: giving partitions up failed", "error", err)
		}
	}
	return nil
}

// assign reads the committed offsets and metadata of newly assigned
// partitions and starts their workers. It returns the partitions to give
// librdkafka's Assign, each at the offset its claim starts from (the one
// read here), so that librdkafka does not read the committed offsets again
// on its own: a second read could answer otherwise (an error it takes for
// no commit, and starts from auto.offset.reset), and the claim's records
// would not start at its checkpoint. A partition with no commit is left to
// librdkafka (auto.offset.reset).
func (e *engine) assign(c *kafka.Consumer, parts []kafka.TopicPartition) []kafka.TopicPartition {
	if e.runCtx.Err() != nil {
		return parts
	}
	byKey, err := e.readCommitted(c, parts)
	if err != nil {
		// The workers would start without the retry state: the consumer
		// ends instead, rather than start a withheld batch's count over.
		e.life.Fail(fmt.Errorf("confluent: read the committed offsets of %d partitions: %w", len(parts), err))
		return parts
	}
	at := make([]kafka.TopicPartition, len(parts))
	copy(at, parts)
	var started []*claim
	for i, p := range parts {
		if p.Topic == nil {
			continue
		}
		key := tp{*p.Topic, p.Partition}
		if old := e.claims[key]; old != nil {
			e.endClaims([]*claim{old}, errRevoked)
		}
		off, md := int64(-1), ""
		if cp := byKey[key]; cp.Offset >= 0 {
			off = int64(cp.Offset)
			if cp.Metadata != nil {
				md = *cp.Metadata
			}
			at[i].Offset = cp.Offset
		}
		cl := newClaim(e, c, key, off, md)
		e.claims[key] = cl
		e.last = nil
		started = append(started, cl)
	}
	e.claimsChanged()
	e.log.Info("redeliver: partitions assigned", "group", e.group(), "partitions", len(started), "owned", len(e.claims))
	if fn := e.cfg.OnAssigned; fn != nil {
		m := make(map[string][]int32)
		for k := range e.claims {
			m[k.topic] = append(m[k.topic], k.partition)
		}
		lifecycle.Inside(func() { fn(m) })
	}
	for _, cl := range started {
		e.wg.Add(1)
		ended := e.workers.Start(fmt.Sprintf("%s/%d", cl.key.topic, cl.key.partition))
		go func() {
			defer e.wg.Done()
			defer ended()
			cl.run()
		}()
	}
	return at
}

// readCommitted reads the committed offsets and metadata of parts, by
// partition. An error of the read or of one of its partitions (a
// coordinator still loading its offsets, or moving, a connection reset) is
// tried again, up to readTries times, 100ms x try apart: librdkafka gives
// such a partition's answer an invalid offset, which must not be taken for
// no commit.
func (e *engine) readCommitted(c *kafka.Consumer, parts []kafka.TopicPartition) (map[tp]kafka.TopicPartition, error) {
	var err error
	for try := range readTries {
		if try > 0 {
			e.log.Warn("redeliver: reading the committed offsets failed, will try again", "group", e.group(), "try", try, "error", err)
			t := time.NewTimer(time.Duration(try) * 100 * time.Millisecond)
			select {
			case <-t.C:
			case <-e.runCtx.Done():
				t.Stop()
				return nil, context.Cause(e.runCtx)
			}
		}
		var committed []kafka.TopicPartition
		committed, err = c.Committed(parts, int(e.cfg.CommitTimeout/time.Millisecond))
		if err != nil {
			continue
		}
		byKey := make(map[tp]kafka.TopicPartition, len(committed))
		for _, p := range committed {
			if p.Topic == nil {
				continue
			}
			if p.Error != nil {
				err = fmt.Errorf("%s/%d: %w", *p.Topic, p.Partition, p.Error)
				break
			}
			byKey[tp{*p.Topic, p.Partition}] = p
		}
		for _, p := range parts {
			if _, ok := byKey[tp{*p.Topic, p.Partition}]; p.Topic != nil && !ok && err == nil {
				err = fmt.Errorf("%s/%d: no answer for the partition", *p.Topic, p.Partition)
			}
		}
		if err == nil {
			return byKey, nil
		}
	}
	return nil, err
}

// readTries is how many times readCommitted reads before it gives up.
const readTries = 5

// queueBackoff is the fetch.queue.backoff.ms the consumer sets when conf
// does not: how long librdkafka waits before it fetches a partition again
// once its local queue holds queued.min.messages (100,000 by default) or
// queued.max.messages.kbytes. librdkafka's default, 1000ms, stalled the
// consumer: the poll goroutine hands records to the workers a little
// slower than librdkafka fetches them from several partitions at once, the
// queue reached 100,000 records (8 partitions, two fetches of 1 MB each),
// and once the poll goroutine had taken them, nothing came for up to a
// second (docs/BENCHMARKS.md, 160 k records/s instead of 500 k and more at
// 8 partitions). Fetching again 10ms later keeps the queue as bounded as
// before, at the cost of a check every 10ms while it is over the bound.
const queueBackoff = 10 // ms

// setQueueBackoff sets fetch.queue.backoff.ms (queueBackoff) in conf,
// unless conf sets it or the librdkafka linked in is older than 2.4, which
// does not know it.
func setQueueBackoff(conf kafka.ConfigMap) {
	if _, set := conf["fetch.queue.backoff.ms"]; set {
		return
	}
	if v, _ := kafka.LibraryVersion(); v < 0x02040000 {
		return
	}
	conf["fetch.queue.backoff.ms"] = queueBackoff
}

// rebalanceTimeout returns librdkafka's max.poll.interval.ms of conf (its
// default, 300000, when conf does not set it): the rebalance timeout the
// member joins the group with.
func rebalanceTimeout(conf kafka.ConfigMap) time.Duration {
	return msOf(conf, "max.poll.interval.ms", 300000)
}

// fetchWait is the configuration's fetch.wait.max.ms (librdkafka's default:
// 500ms).
func fetchWait(conf kafka.ConfigMap) time.Duration {
	return msOf(conf, "fetch.wait.max.ms", 500)
}

// msOf returns the milliseconds property key of conf, or def when conf
// does not set it (or sets it to what is not a number of milliseconds).
func msOf(conf kafka.ConfigMap, key string, def int) time.Duration {
	ms := def
	switch v := conf[key].(type) {
	case int:
		ms = v
	case int64:
		ms = int(v)
	case string:
		if n, err := strconv.Atoi(v); err == nil {
			ms = n
		}
	}
	return time.Duration(ms) * time.Millisecond
}
