package engine

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"sync"
	"time"

	"github.com/segmentio/kafka-go"

	"github.com/redeliver-go/redeliver/adapters/internal/kafkaadapter"
	"github.com/redeliver-go/redeliver/internal/health"
	"github.com/redeliver-go/redeliver/internal/lifecycle"
	"github.com/redeliver-go/redeliver/stream"
)

// leaveWait is how long Run's shutdown waits for kafka-go's consumer group
// to close (end its generation and leave the group) before it closes the
// group's connections.
const leaveWait = 400 * time.Millisecond

// commitGrace is how long a shutdown waits for a commit in flight before it
// cuts it short: the broker may have written it already, and its answer
// tells the worker so (its Checkpointed hook fires).
const commitGrace = 250 * time.Millisecond

// errGenerationEnded is the cause of a claim whose generation ended (a
// rebalance, a failed heartbeat, a commit the coordinator refused as stale).
var errGenerationEnded = fmt.Errorf("kafkago: group generation ended: %w", stream.ErrRevoked)

// Config is what the kafkago package's options set; its fields are
// documented on those options.
type Config struct {
	Group         kafka.ConsumerGroupConfig
	GroupSet      bool
	Fetch         kafka.ReadBatchConfig
	Client        *kafka.Client
	ClientSet     bool
	MaxBatch      int
	MaxWait       time.Duration
	CommitTimeout time.Duration
	// CommitInterval and CommitRecords bound the redelivery window of
	// coalesced success commits (see claim.Commit); CommitInterval 0
	// commits every batch synchronously.
	CommitInterval time.Duration
	CommitRecords  int64
	// Drain bounds how long Run waits, once stopping, for its workers;
	// 0 waits as long as they take.
	Drain time.Duration
	// FailAfter is how long a start-check problem that stops all
	// consumption may last before Run ends with it; 0 never.
	FailAfter  time.Duration
	Logger     *slog.Logger
	OnAssigned func(map[string][]int32)
	// DeadLetterCheck checks the topic of the processor's dead-letter
	// action, when it has one through a kafkago.Publisher.
	DeadLetterCheck func(context.Context) []health.Problem
}

// DefaultCommitInterval and DefaultCommitRecords are the commit window
// by default (kafkago.WithCommitWindow): none, every commit is written
// before the next batch is delivered. RecommendedCommitInterval and
// RecommendedCommitRecords are the window the package doc suggests for
// throughput.
const (
	DefaultCommitInterval = 0
	DefaultCommitRecords  = 0

	RecommendedCommitInterval = 500 * time.Millisecond
	RecommendedCommitRecords  = 50000
)

// DefaultConfig returns the configuration before any option.
func DefaultConfig() Config {
	return Config{MaxBatch: 500, CommitTimeout: 10 * time.Second,
		CommitInterval: DefaultCommitInterval, CommitRecords: DefaultCommitRecords, Drain: lifecycle.DefaultDrain, FailAfter: health.DefaultEndAfter}
}

// Consumer runs a [stream.Processor] over the partitions a kafka-go consumer
// group assigns it: for each generation, one worker goroutine per assigned
// partition, started once the partition's committed offset and metadata
// have been fetched, and stopped (its context cancelled, then waited for)
// when the generation ends or the consumer stops.
//
// A Consumer is safe for concurrent use. [Consumer.Run] may be called once.
type Consumer struct {
	proc      *stream.Processor
	cfg       Config
	log       *slog.Logger
	client    *kafka.Client
	transport *kafka.Transport // built by New and owned; nil with WithClient
	dialer    *kafka.Dialer    // the group's dialer, for the fetchers
	brokers   []string         // the group's brokers
	fetch     kafka.ReadBatchConfig
	start     int64 // where a partition without a commit starts

	life          *lifecycle.Life
	wg            sync.WaitGroup // every goroutine Run starts
	workers       lifecycle.Workers
	checks        health.Checker
	fetchProblems kafkaadapter.Failing

	// gaveUp closes when Run's drain gives up on workers that have not
	// returned: the member's heartbeats stop (keepSession), so that the
	// broker takes it out of the group at its session timeout.
	gaveUp chan struct{}
}

// New returns a Consumer that runs proc over the partitions of the consumer
// group given by cfg.Group (kafkago.WithGroupConfig). It returns an error, and never panics,
// when proc is nil, the group is not given, an option is out of range, or
// the group or fetch configuration is one kafka-go would reject.
func New(proc *stream.Processor, cfg Config) (*Consumer, error) {
	if proc == nil {
		return nil, errors.New("kafkago: nil processor")
	}
	switch {
	case !cfg.GroupSet:
		return nil, errors.New("kafkago: no consumer group: give WithGroupConfig")
	case cfg.MaxBatch < 1:
		return nil, fmt.Errorf("kafkago: max batch %d, want at least 1", cfg.MaxBatch)
	case cfg.MaxWait < 0:
		return nil, fmt.Errorf("kafkago: max wait %v, want 0 or more", cfg.MaxWait)
	case cfg.CommitTimeout <= 0:
		return nil, fmt.Errorf("kafkago: commit timeout %v, want more than 0", cfg.CommitTimeout)
	case cfg.CommitInterval < 0 || cfg.CommitRecords < 0 || (cfg.CommitInterval == 0) != (cfg.CommitRecords == 0):
		return nil, fmt.Errorf("kafkago: WithCommitWindow(%v, %d): want both more than 0, or both 0 (every commit synchronous)", cfg.CommitInterval, cfg.CommitRecords)
	case cfg.Drain < 0:
		return nil, fmt.Errorf("kafkago: WithDrain(%v): want 0 (no bound) or more", cfg.Drain)
	case cfg.FailAfter < 0:
		return nil, fmt.Errorf("kafkago: WithFailAfter(%v): want 0 (never) or more", cfg.FailAfter)
	case cfg.ClientSet && cfg.Client == nil:
		return nil, errors.New("kafkago: WithClient(nil): give a client whose Addr reaches the group's cluster, or leave the option out for one on the group's brokers")
	case cfg.Client != nil && cfg.Client.Addr == nil:
		return nil, errors.New("kafkago: WithClient: the client has no Addr: set it to reach the group's cluster, such as kafka.TCP(brokers...)")
	}
	group := cfg.Group // Validate fills in defaults: keep the caller's config as given
	if err := group.Validate(); err != nil {
		return nil, fmt.Errorf("kafkago: group config: %v", err)
	}
	c := &Consumer{proc: proc, cfg: cfg, log: cfg.Logger, start: group.StartOffset, life: lifecycle.New("kafkago", fmt.Errorf("kafkago: consumer %w", stream.ErrClosed)),
		gaveUp: make(chan struct{})}
	if c.log == nil {
		c.log = proc.Logger()
	}
	c.checks.Log = c.log
	c.checks.EndAfter, c.checks.End = cfg.FailAfter, c.life.Fail
	c.brokers, c.dialer = group.Brokers, group.Dialer // kafka.DefaultDialer when the group has none
	if err := c.setFetch(cfg.Fetch); err != nil {
		return nil, err
	}
	if cfg.Client != nil {
		c.client = cfg.Client
	} else {
		d := group.Dialer
		c.transport = &kafka.Transport{Dial: d.DialFunc, TLS: d.TLS, SASL: d.SASLMechanism, ClientID: d.ClientID}
		if d.Timeout > 0 {
			c.transport.DialTimeout = d.Timeout
		}
		c.client = &kafka.Client{Addr: kafka.TCP(group.Brokers...), Transport: c.transport}
	}
	return c, nil
}

// Client returns the kafka-go client the consumer asks the brokers with:
// the one of WithClient, or one on the group's brokers and dialer.
func (c *Consumer) Client() *kafka.Client { return c.client }

// setFetch fills in the fetch configuration's defaults and checks it.
func (c *Consumer) setFetch(f kafka.ReadBatchConfig) error {
	if f.MinBytes == 0 {
		f.MinBytes = 1
	}
	if f.MaxBytes == 0 {
		f.MaxBytes = 1e6
	}
	if f.MaxWait == 0 {
		f.MaxWait = 10 * time.Second
	}
	switch {
	case f.MinBytes < 0 || f.MaxBytes < 0 || f.MinBytes > f.MaxBytes:
		return fmt.Errorf("kafkago: fetch config: MinBytes %d and MaxBytes %d, want 0 <= MinBytes <= MaxBytes", f.MinBytes, f.MaxBytes)
	case f.MaxWait < 0:
		return fmt.Errorf("kafkago: fetch config: MaxWait %v, want 0 or more", f.MaxWait)
	case f.IsolationLevel != kafka.ReadUncommitted && f.IsolationLevel != kafka.ReadCommitted:
		return fmt.Errorf("kafkago: fetch config: unknown IsolationLevel %d", f.IsolationLevel)
	}
	c.fetch = f
	return nil
}

// Run joins the group and runs a worker per assigned partition, generation
// after generation, until ctx is done, [Consumer.Close] is called, or a
// worker fails. On return, every worker has stopped, its batch in flight
// abandoned without a commit, and the consumer has left the group.
//
// Run returns nil after a clean shutdown: ctx done (cancelled or past its
// deadline) or [Consumer.Close] called. Otherwise it returns the error that
// stopped it, a worker's failure. It returns [stream.ErrClosed] when Close was
// called before it. It may be called once.
func (c *Consumer) Run(ctx context.Context) error { return c.life.Run(ctx, c.run) }

func (c *Consumer) run(ctx context.Context) error {
	gcfg := c.cfg.Group
	var conns *groupConns
	gcfg.Dialer, conns = trackDialer(gcfg.Dialer)
	cg, err := kafka.NewConsumerGroup(gcfg)
	if err != nil {
		return fmt.Errorf("kafkago: %v", err)
	}
	checked := make(chan struct{})
	go func() {
		defer close(checked)
		c.checks.Run(ctx, checkInterval, checkTimeout, c.check)
	}()
	defer func() { <-checked }()
	commitCtx, stopCommits := lifecycle.Linger(ctx, commitGrace)
	defer stopCommits()
	for ctx.Err() == nil {
		gen, err := cg.Next(ctx)
		if err != nil {
			if errors.Is(err, kafka.ErrGroupClosed) {
				c.life.Fail(fmt.Errorf("kafkago: %v", err)) // only Run closes it: cannot happen
			} else if ctx.Err() == nil {
				c.log.Warn("redeliver: consumer group error, kafka-go joins again", "group", c.cfg.Group.ID, "error", err)
			}
			continue
		}
		c.serve(ctx, commitCtx, gen)
	}
	cause := context.Cause(ctx)
	// Closing the group ends the generation: its manager ends every claim
	// and waits for their workers, then the member leaves the group.
	// kafka-go waits for a request of the group in flight (a JoinGroup, a
	// SyncGroup, metadata), which the broker may hold up to the group's
	// rebalance timeout: past leaveWait its connections are closed.
	closed := make(chan struct{})
	go func() {
		_ = cg.Close()
		close(closed)
	}()
	t := time.NewTimer(leaveWait)
	select {
	case <-closed:
		t.Stop()
	case <-t.C:
		if len(c.workers.Names()) == 0 {
			c.log.Warn("redeliver: the consumer group did not close in time: a request to the broker is still waiting for its answer; its connections are closed, and the broker removes the member at its session timeout",
				"group", c.cfg.Group.ID, "waited", leaveWait)
			conns.closeAll()
		}
	}
	// The group closes once the generation's workers have returned: a
	// handler that ignores the end of its context holds it. Drain reports
	// them, and gives up on them after the drain time.
	stopped := make(chan struct{})
	go func() {
		<-closed
		c.wg.Wait()
		close(stopped)
	}()
	if err := lifecycle.Drain(stopped, c.log, "kafkago", &c.workers, c.cfg.Drain); err != nil {
		close(c.gaveUp)
		conns.closeAll() // the member leaves at its session timeout; a late commit is refused
		return err
	}
	if c.transport != nil {
		c.transport.CloseIdleConnections()
	}
	c.log.Info("redeliver: consumer stopped", "group", c.cfg.Group.ID, "cause", cause)
	return nil
}

// roundTrip sends req through the client's transport to the client's
// cluster, as kafka.Client's own methods do.
func (c *Consumer) roundTrip(ctx context.Context, req kafka.Request) (kafka.Response, error) {
	return c.roundTripTo(ctx, c.client.Addr, req)
}

// roundTripTo is roundTrip to addr: a request the transport would not
// route to the broker it is for by itself (a heartbeat, to the group's
// coordinator).
func (c *Consumer) roundTripTo(ctx context.Context, addr net.Addr, req kafka.Request) (kafka.Response, error) {
	rt := c.client.Transport
	if rt == nil {
		rt = kafka.DefaultTransport
	}
	if c.client.Timeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, c.client.Timeout)
		defer cancel()
	}
	return rt.RoundTrip(ctx, addr, req)
}

// Close stops [Consumer.Run] if it runs and waits for it to return, unless
// called from a goroutine Run waits for (see the kafkago package's Close).
func (c *Consumer) Close() { c.life.Close() }
