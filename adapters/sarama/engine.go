package sarama

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/IBM/sarama"

	"github.com/redeliver-go/redeliver/adapters/internal/kafkaadapter"
	"github.com/redeliver-go/redeliver/internal/health"
	"github.com/redeliver-go/redeliver/internal/lifecycle"
	"github.com/redeliver-go/redeliver/stream"
)

// How Run stops: it waits leaveWait for sarama's consumer group to close
// (its session released, the member gone from the group) before it closes
// the client's connections, and a commit in flight at most commitGrace.
// After leaveWait it closes the client's connections and waits closeWait
// more before it leaves sarama's goroutines to end on their own.
const (
	leaveWait   = 400 * time.Millisecond
	closeWait   = 150 * time.Millisecond
	commitGrace = 250 * time.Millisecond
)

// clientRetry is how long Run waits before it makes its client again after
// the brokers did not answer.
const clientRetry = time.Second

// errSessionEnded is the cause of a claim whose partition sarama took back
// (a rebalance, a failed heartbeat, a stale commit).
var errSessionEnded = fmt.Errorf("sarama: partition revoked or group session ended: %w", stream.ErrRevoked)

// engine is a Consumer's state.
type engine struct {
	proc *stream.Processor
	cfg  config
	log  *slog.Logger

	life    *lifecycle.Life
	checks  health.Checker
	fetches kafkaadapter.Failing

	wg      sync.WaitGroup    // the workers
	workers lifecycle.Workers // the workers, by partition, for the drain's report

	mu     sync.Mutex
	client sarama.Client        // while Run runs
	group  sarama.ConsumerGroup // while Run runs

	// The producer of the publishers given with WithPublisher, made from
	// producerConf; nil without them.
	owned        *ownedProducer
	producerConf *sarama.Config
}

// heartbeatMargin is how many times Consumer.MaxWaitTime the session
// timeout must be at least. sarama's heartbeats share the connection of
// its fetches, and a broker answers a connection's requests in order: on
// kfake with a 1s session and sarama's default 500ms wait, the member was
// dropped every 1.5-2s with no commit between its heartbeats; at 250ms it
// never was.
const heartbeatMargin = 4

func newEngine(proc *stream.Processor, cfg config) (*engine, error) {
	switch {
	case proc == nil:
		return nil, errors.New("sarama: nil processor")
	case !cfg.groupSet:
		return nil, errors.New("sarama: no consumer group: give one with sarama.WithGroup(brokers, groupID, topics...)")
	case len(cfg.brokers) == 0:
		return nil, errors.New("sarama: WithGroup names no brokers")
	case cfg.group == "":
		return nil, errors.New("sarama: WithGroup has an empty group ID")
	case len(cfg.topics) == 0:
		return nil, errors.New("sarama: WithGroup names no topics")
	case cfg.sarama == nil:
		return nil, errors.New("sarama: WithConfig was given a nil *sarama.Config")
	}
	for i, b := range cfg.brokers {
		if b == "" {
			return nil, fmt.Errorf("sarama: WithGroup's broker %d is empty", i+1)
		}
	}
	if err := cfg.Options.Check("sarama"); err != nil {
		return nil, err
	}
	if err := kafkaadapter.CheckCommitWindow("sarama", cfg.commitInterval, cfg.commitRecords); err != nil {
		return nil, err
	}
	if err := kafkaadapter.CheckTopics("sarama", cfg.topics); err != nil {
		return nil, err
	}
	sc := cfg.sarama
	sc.Consumer.Offsets.AutoCommit.Enable = false
	sc.Consumer.Return.Errors = true
	if err := sc.Validate(); err != nil {
		return nil, fmt.Errorf("sarama: the sarama configuration: %w", err)
	}
	if s, w := sc.Consumer.Group.Session.Timeout, sc.Consumer.MaxWaitTime; s < heartbeatMargin*w {
		return nil, fmt.Errorf("sarama: the sarama configuration: Consumer.Group.Session.Timeout (%v) is less than %d x Consumer.MaxWaitTime (%v): "+
			"sarama sends the group's heartbeats on the connection of its fetches, where each waits behind a fetch the broker holds "+
			"up to MaxWaitTime when there is nothing new, and the member would fall out of the group again and again; "+
			"lower Consumer.MaxWaitTime or raise the session timeout", s, heartbeatMargin, w)
	}
	log := cfg.Logger
	if log == nil {
		log = proc.Logger()
	}
	e := &engine{proc: proc, cfg: cfg, log: log, life: lifecycle.New("sarama", errClosed)}
	if len(cfg.publishers) > 0 {
		pc, err := producerConfig(sc)
		if err != nil {
			return nil, err
		}
		e.owned, e.producerConf = &ownedProducer{}, pc
	}
	e.checks.Log = log
	e.checks.EndAfter, e.checks.End = cfg.FailAfter, e.life.Fail
	return e, nil
}

// run is Run's body: it makes the client and the group (again, while the
// brokers do not answer), consumes session after session, and on the end
// of ctx stops the workers and leaves the group within about a second,
// whatever the brokers are slow to answer.
func (e *engine) run(ctx context.Context) error {
	checked := make(chan struct{})
	go func() {
		defer close(checked)
		e.checks.Run(ctx, checkInterval, checkTimeout, e.check)
	}()
	defer func() { <-checked }()

	if e.owned != nil {
		// Publishers given with WithPublisher publish while Run runs.
		defer e.stopProducer()
	}
	client, commits, group, producer := e.connect(ctx)
	if producer != nil && !e.owned.Start(producer) {
		_ = producer.Close()
	}
	if client == nil {
		e.log.Info("redeliver: consumer stopped", "group", e.cfg.group, "cause", context.Cause(ctx))
		return nil
	}
	e.mu.Lock()
	e.client, e.group = client, group
	e.mu.Unlock()

	errsDone := make(chan struct{})
	go func() {
		defer close(errsDone)
		for err := range group.Errors() {
			e.groupError(err)
		}
	}()

	commitCtx, stopCommits := lifecycle.Linger(ctx, commitGrace)
	defer stopCommits()
	h := &handler{e: e, client: commits, group: group, runCtx: ctx, commitCtx: commitCtx}
	consumed := make(chan struct{})
	go func() {
		defer close(consumed)
		for ctx.Err() == nil {
			err := group.Consume(ctx, e.cfg.topics, h)
			switch {
			case err == nil || ctx.Err() != nil:
			case errors.Is(err, sarama.ErrClosedConsumerGroup):
				return
			default:
				e.log.Warn("redeliver: consumer group error, sarama joins again", "group", e.cfg.group, "error", err)
				sleep(ctx, e.cfg.sarama.Consumer.Group.Rebalance.Retry.Backoff)
			}
		}
	}()
	<-ctx.Done()
	cause := context.Cause(ctx)

	// The workers end with ctx; sarama's session is released once they
	// have, and Consume returns. Closing the group leaves it. A request
	// the broker does not answer (a JoinGroup, a SyncGroup, metadata) is
	// waited for by sarama up to its Net.ReadTimeout: past leaveWait the
	// client's connections are closed, which ends it.
	closed := make(chan struct{})
	go func() {
		defer close(closed)
		<-consumed
		_ = group.Close()
	}()
	// sarama releases a session once each partition consumer's fetch in
	// flight has come back (the broker holds it up to MaxWaitTime when
	// there is nothing to read), and only then leaves the group.
	wait := max(leaveWait, e.cfg.sarama.Consumer.MaxWaitTime+250*time.Millisecond)
	waitClosed := (<-chan struct{})(closed) // what the drain waits for besides the workers
	t := time.NewTimer(wait)
	select {
	case <-closed:
		t.Stop()
	case <-t.C:
		if len(e.workers.Names()) == 0 {
			e.log.Warn("redeliver: the consumer group did not close in time: a request to the broker is still waiting for its answer; its connections are closed, and the broker removes the member at its session timeout",
				"group", e.cfg.group, "waited", wait)
			_ = client.Close()
			_ = commits.Close()
			t2 := time.NewTimer(closeWait)
			select {
			case <-closed:
			case <-t2.C:
				e.log.Warn("redeliver: sarama's consumer group still has not closed; it is left to close on its own", "group", e.cfg.group)
				waitClosed = nil // the drain waits for the workers only, as before
			}
			t2.Stop()
		}
	}
	// sarama releases the session, and the group closes, once the
	// workers have returned: a handler that ignores the end of its
	// context holds them. Drain reports them, and gives up on them after
	// the drain time. No worker starts once Consume has returned.
	stopped := make(chan struct{})
	go func() {
		if waitClosed != nil {
			<-waitClosed
		}
		e.wg.Wait()
		close(stopped)
	}()
	if err := lifecycle.Drain(stopped, e.log, "sarama", &e.workers, e.cfg.Drain); err != nil {
		// The member leaves at its session timeout; a late commit fails.
		_ = client.Close()
		_ = commits.Close()
		return err
	}
	_ = commits.Close() // a commit the shutdown stopped waiting for fails at once
	select {
	case <-errsDone:
	default:
	}
	e.log.Info("redeliver: consumer stopped", "group", e.cfg.group, "cause", cause)
	return nil
}

// connect makes the client and the consumer group, and the client of the
// commits, trying again every clientRetry while the brokers do not answer.
// It returns nils when ctx ends first; clients made after that are closed.
//
// The commits (and the reads of the committed offsets) go through a client
// of their own, so through a connection of their own to the coordinator:
// a broker answers the requests of a connection one after the other, and
// on the consumer's connection a commit would wait behind a fetch the
// broker holds for up to Consumer.MaxWaitTime when there is nothing new.
//
// With publishers given with WithPublisher, it makes their producer too,
// on a client of its own.
func (e *engine) connect(ctx context.Context) (sarama.Client, sarama.Client, sarama.ConsumerGroup, sarama.SyncProducer) {
	type made struct {
		client   sarama.Client
		commits  sarama.Client
		group    sarama.ConsumerGroup
		producer sarama.SyncProducer
		err      error
		// producerErr: the brokers answer, but the producer of the
		// WithPublisher publishers was not made (idempotence refused,
		// say): worth a Warn, not a Debug as brokers away are (the start
		// check reports those).
		producerErr bool
	}
	var warned time.Time  // the last Warn of a producer not made
	var refused time.Time // since when the producer has not been made
	for {
		ch := make(chan made, 1)
		go func() {
			client, err := sarama.NewClient(e.cfg.brokers, e.cfg.sarama)
			if err != nil {
				ch <- made{err: err}
				return
			}
			commits, err := sarama.NewClient(e.cfg.brokers, e.cfg.sarama)
			if err != nil {
				_ = client.Close()
				ch <- made{err: err}
				return
			}
			var producer sarama.SyncProducer
			if e.producerConf != nil {
				if producer, err = sarama.NewSyncProducer(e.cfg.brokers, e.producerConf); err != nil {
					_ = client.Close()
					_ = commits.Close()
					ch <- made{err: err, producerErr: true}
					return
				}
			}
			group, err := sarama.NewConsumerGroupFromClient(e.cfg.group, client)
			if err != nil {
				_ = client.Close()
				_ = commits.Close()
				if producer != nil {
					_ = producer.Close()
				}
				ch <- made{err: err}
				return
			}
			ch <- made{client: client, commits: commits, group: group, producer: producer}
		}()
		select {
		case m := <-ch:
			if m.err == nil {
				return m.client, m.commits, m.group, m.producer
			}
			if m.producerErr && refused.IsZero() {
				refused = time.Now()
			}
			if m.producerErr && e.cfg.FailAfter > 0 && time.Since(refused) >= e.cfg.FailAfter {
				// As a problem that stops all consumption does
				// (WithFailAfter): the consumer has not started.
				e.life.Fail(fmt.Errorf("sarama: the dead-letter producer of WithPublisher was not made in %v (WithFailAfter): %w", e.cfg.FailAfter, m.err))
				return nil, nil, nil, nil
			}
			if m.producerErr && time.Since(warned) >= producerWarnEvery {
				warned = time.Now()
				e.log.Warn("redeliver: the dead-letter producer of WithPublisher was not made: the consumer waits for it, trying again every second, and ends Run after WithFailAfter",
					"group", e.cfg.group, "error", m.err, "for", time.Since(refused).Round(time.Second), "failAfter", e.cfg.FailAfter)
			} else {
				e.log.Debug("redeliver: sarama client not made, trying again", "error", m.err)
			}
		case <-ctx.Done():
			go func() {
				if m := <-ch; m.err == nil {
					_ = m.group.Close()
					_ = m.commits.Close()
					if m.producer != nil {
						_ = m.producer.Close()
					}
				}
			}()
			return nil, nil, nil, nil
		}
		if !sleep(ctx, clientRetry) {
			return nil, nil, nil, nil
		}
	}
}

// producerWarnEvery is how often Run says at Warn, while it lasts, that
// the producer of the WithPublisher publishers cannot be made (at Debug
// between).
const producerWarnEvery = 30 * time.Second

// producerWait is how long Run waits, when it ends, for the producer of
// the WithPublisher publishers to close (its sends in flight to return).
const producerWait = 400 * time.Millisecond

// stopProducer closes the producer of the WithPublisher publishers, and
// makes them refuse to publish from now on.
func (e *engine) stopProducer() {
	if !e.owned.stop(producerWait) {
		e.log.Warn("redeliver: the dead-letter producer did not close in time: a send is still in flight; it is closed once the send returns",
			"group", e.cfg.group, "waited", producerWait)
	}
}

// producerConfig is the configuration of the producer of the WithPublisher
// publishers: a copy of the consumer's, with acknowledgements from every
// in-sync replica, the returns a SyncProducer needs, no transactions, and
// idempotence when the configuration allows it.
func producerConfig(consumer *sarama.Config) (*sarama.Config, error) {
	pc := *consumer
	pc.Producer.RequiredAcks = sarama.WaitForAll
	pc.Producer.Return.Successes, pc.Producer.Return.Errors = true, true
	pc.Producer.Transaction.ID = ""
	pc.Producer.Idempotent = pc.Version.IsAtLeast(sarama.V0_11_0_0) && pc.Producer.Retry.Max >= 1
	if pc.Producer.Idempotent {
		pc.Net.MaxOpenRequests = 1
	}
	if err := pc.Validate(); err != nil {
		return nil, fmt.Errorf("sarama: the configuration of the dead-letter producer WithPublisher asks for (WithConfig's, with acks from all replicas and idempotence): %w", err)
	}
	return &pc, nil
}

// groupError logs an error sarama's consumer group reports, and keeps a
// partition's for Health.
func (e *engine) groupError(err error) {
	var ce *sarama.ConsumerError
	if errors.As(err, &ce) && ce.Partition >= 0 && ce.Topic != "" {
		e.fetches.Add(kafkaadapter.Partition{Topic: ce.Topic, Partition: ce.Partition}, ce.Err, time.Now())
		e.log.Warn("redeliver: sarama reports an error of a partition", "topic", ce.Topic, "partition", ce.Partition, "error", ce.Err)
		return
	}
	e.log.Warn("redeliver: sarama reports an error of the consumer group", "group", e.cfg.group, "error", err)
}

// handler is the sarama.ConsumerGroupHandler of one Run.
type handler struct {
	e         *engine
	client    sarama.Client // the commits' client, apart from the consumer's (see connect)
	group     sarama.ConsumerGroup
	runCtx    context.Context
	commitCtx context.Context // ends commitGrace after runCtx

	sessMu   sync.Mutex
	sessDone chan struct{} // closed by the session's Cleanup
}

// Setup reports the partitions of a new session. Once the session ends,
// until its Cleanup, sarama waits for its workers before it joins the
// group again: that wait is reported while a handler holds it.
func (h *handler) Setup(sess sarama.ConsumerGroupSession) error {
	done := make(chan struct{})
	h.sessMu.Lock()
	h.sessDone = done
	h.sessMu.Unlock()
	context.AfterFunc(sess.Context(), func() {
		// A stopping Run reports its own wait (lifecycle.Drain).
		lifecycle.WaitRevoked(done, nil, h.e.log, &h.e.workers, func() bool { return h.runCtx.Err() != nil })
	})
	claims := sess.Claims()
	n := 0
	for _, ps := range claims {
		n += len(ps)
	}
	h.e.log.Info("redeliver: generation started", "group", h.e.cfg.group, "generation", sess.GenerationID(),
		"member", sess.MemberID(), "partitions", n)
	if fn := h.e.cfg.OnAssigned; fn != nil {
		cp := make(map[string][]int32, len(claims))
		for t, ps := range claims {
			cp[t] = append([]int32(nil), ps...)
		}
		lifecycle.Inside(func() { fn(cp) })
	}
	return nil
}

// Cleanup logs the end of a session.
func (h *handler) Cleanup(sess sarama.ConsumerGroupSession) error {
	h.sessMu.Lock()
	if h.sessDone != nil {
		close(h.sessDone)
		h.sessDone = nil
	}
	h.sessMu.Unlock()
	h.e.log.Info("redeliver: generation ended", "group", h.e.cfg.group, "generation", sess.GenerationID(),
		"cause", context.Cause(sess.Context()))
	return nil
}

// ConsumeClaim runs the processor over one partition until sarama takes
// it back, the session ends or Run stops.
func (h *handler) ConsumeClaim(sess sarama.ConsumerGroupSession, sc sarama.ConsumerGroupClaim) error {
	if h.runCtx.Err() != nil {
		return nil
	}
	h.e.wg.Add(1)
	defer h.e.wg.Done()
	defer h.e.workers.Start(fmt.Sprintf("%s/%d", sc.Topic(), sc.Partition()))()
	cl, err := newClaim(h, sess, sc)
	if err != nil {
		if h.runCtx.Err() == nil && sess.Context().Err() == nil {
			h.e.log.Warn("redeliver: reading the committed offset failed: the session ends, and sarama joins again",
				"topic", sc.Topic(), "partition", sc.Partition(), "error", err)
		}
		return nil
	}
	// A revocation of this partition alone (the cooperative protocol: the
	// session goes on) is reported while a handler holds it; the session's
	// end is reported as a whole (Setup), and a stop by the drain. A
	// session that ends while this report runs takes it over: its report
	// names this partition too, and two reports would name it twice.
	name := fmt.Sprintf("%s/%d", sc.Topic(), sc.Partition())
	returned := make(chan struct{})
	defer close(returned)
	defer context.AfterFunc(cl.ctx, func() {
		if sess.Context().Err() != nil || h.runCtx.Err() != nil {
			return
		}
		lifecycle.WaitRevoked(returned, sess.Context().Done(), h.e.log, lifecycle.Only(&h.e.workers, map[string]bool{name: true}), nil)
	})()
	var perr error
	lifecycle.Inside(func() { perr = cl.run(h.e.proc) })
	if perr != nil && !cl.endedFromOutside() {
		h.e.life.Fail(fmt.Errorf("sarama: worker of %s/%d: %w", sc.Topic(), sc.Partition(), perr))
	}
	return nil
}

// sleep waits d or until ctx is done; it reports whether d passed.
func sleep(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	}
}
