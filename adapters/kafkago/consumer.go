package kafkago

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/segmentio/kafka-go"

	"github.com/redeliver-go/redeliver/stream"
)

// ErrClosed is the error [Consumer.Run] returns after [Consumer.Close].
var ErrClosed = errors.New("kafkago: consumer closed")

// errGenerationEnded is the cause of a claim whose generation ended (a
// rebalance, a failed heartbeat, a commit the coordinator refused as stale).
var errGenerationEnded = fmt.Errorf("kafkago: group generation ended: %w", stream.ErrRevoked)

// Option configures a [Consumer].
type Option interface{ apply(*config) }

type optionFunc func(*config)

func (f optionFunc) apply(c *config) { f(c) }

type config struct {
	group         kafka.ConsumerGroupConfig
	groupSet      bool
	fetch         kafka.ReadBatchConfig
	client        *kafka.Client
	maxBatch      int
	maxWait       time.Duration
	commitTimeout time.Duration
	logger        *slog.Logger
	onAssigned    func(map[string][]int32) // WithOnAssigned
}

// WithGroupConfig sets the kafka-go consumer group: its ID, brokers and
// topics (required), and optionally its dialer, balancers, heartbeat
// interval, session and rebalance timeouts, start offset and the rest of
// [kafka.ConsumerGroupConfig]. It is required. The consumer creates the
// [kafka.ConsumerGroup] in [Consumer.Run] and closes it when Run returns.
func WithGroupConfig(cfg kafka.ConsumerGroupConfig) Option {
	return optionFunc(func(c *config) { c.group = cfg; c.groupSet = true })
}

// WithFetchConfig sets the fetch requests that read each assigned
// partition from its leader: MinBytes (default 1), MaxBytes (default 1MB,
// the most a fetch answer holds, though a first record larger than it still
// comes), MaxWait (default 10s, how long the broker may wait for MinBytes)
// and IsolationLevel (default kafka.ReadUncommitted), with kafka.Reader's
// defaults. Fields left at zero keep their default.
func WithFetchConfig(cfg kafka.ReadBatchConfig) Option {
	return optionFunc(func(c *config) { c.fetch = cfg })
}

// WithClient sets the client the consumer sends offset fetches and commits
// with. Its Addr must reach the group's cluster; the requests go to the
// group's coordinator. The default is a client on the group's brokers whose
// transport takes DialFunc, Timeout, TLS, SASL and the client ID from the
// group's dialer; the consumer closes its idle connections when Run
// returns. A client given here is not closed.
func WithClient(cl *kafka.Client) Option {
	return optionFunc(func(c *config) { c.client = cl })
}

// WithMaxBatch sets the most records a batch holds, overriding the default
// 500.
func WithMaxBatch(n int) Option {
	return optionFunc(func(c *config) { c.maxBatch = n })
}

// WithMaxWait sets how long a partition's worker waits for a batch to fill up
// to the maximum once its first record is there, overriding the default 0: a
// batch is whatever has been fetched, up to the maximum.
func WithMaxWait(d time.Duration) Option {
	return optionFunc(func(c *config) { c.maxWait = d })
}

// WithCommitTimeout bounds one offset commit, overriding the default 10s. A
// commit that was sent is not cancelled by the end of its generation or by
// shutdown: the end waits for it, for at most this long.
func WithCommitTimeout(d time.Duration) Option {
	return optionFunc(func(c *config) { c.commitTimeout = d })
}

// WithLogger sets the logger. The default, like a nil logger, discards.
func WithLogger(l *slog.Logger) Option {
	return optionFunc(func(c *config) { c.logger = l })
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
	cfg       config
	log       *slog.Logger
	client    *kafka.Client
	transport *kafka.Transport // built by New and owned; nil with WithClient
	dialer    *kafka.Dialer    // the group's dialer, for the fetchers
	brokers   []string         // the group's brokers
	fetch     kafka.ReadBatchConfig
	start     int64 // where a partition without a commit starts

	started   atomic.Bool
	mu        sync.Mutex
	closed    bool
	runCancel context.CancelCauseFunc
	runDone   chan struct{}
	wg        sync.WaitGroup // every goroutine Run starts
}

// New returns a Consumer that runs proc over the partitions of the consumer
// group given by [WithGroupConfig]. It returns an error, and never panics,
// when proc is nil, the group is not given, an option is out of range, or
// the group or fetch configuration is one kafka-go would reject.
func New(proc *stream.Processor, opts ...Option) (*Consumer, error) {
	if proc == nil {
		return nil, errors.New("kafkago: nil processor")
	}
	cfg := config{maxBatch: 500, commitTimeout: 10 * time.Second}
	for _, o := range opts {
		o.apply(&cfg)
	}
	switch {
	case !cfg.groupSet:
		return nil, errors.New("kafkago: no consumer group: give WithGroupConfig")
	case cfg.maxBatch < 1:
		return nil, fmt.Errorf("kafkago: max batch %d, want at least 1", cfg.maxBatch)
	case cfg.maxWait < 0:
		return nil, fmt.Errorf("kafkago: max wait %v, want 0 or more", cfg.maxWait)
	case cfg.commitTimeout <= 0:
		return nil, fmt.Errorf("kafkago: commit timeout %v, want more than 0", cfg.commitTimeout)
	}
	group := cfg.group // Validate fills in defaults: keep the caller's config as given
	if err := group.Validate(); err != nil {
		return nil, fmt.Errorf("kafkago: group config: %v", err)
	}
	c := &Consumer{proc: proc, cfg: cfg, log: cfg.logger, runDone: make(chan struct{}), start: group.StartOffset}
	if c.log == nil {
		c.log = slog.New(slog.DiscardHandler)
	}
	c.brokers, c.dialer = group.Brokers, group.Dialer // kafka.DefaultDialer when the group has none
	if err := c.setFetch(cfg.fetch); err != nil {
		return nil, err
	}
	if cfg.client != nil {
		c.client = cfg.client
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
// Run always returns a non-nil error that says why it stopped: ctx's cause,
// [ErrClosed], or the failure. It may be called once.
func (c *Consumer) Run(ctx context.Context) error {
	if !c.started.CompareAndSwap(false, true) {
		return errors.New("kafkago: Run called more than once")
	}
	defer close(c.runDone)
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		return ErrClosed
	}
	c.runCancel = cancel
	c.mu.Unlock()

	cg, err := kafka.NewConsumerGroup(c.cfg.group)
	if err != nil {
		return fmt.Errorf("kafkago: %v", err)
	}
	for ctx.Err() == nil {
		gen, err := cg.Next(ctx)
		if err != nil {
			if errors.Is(err, kafka.ErrGroupClosed) {
				cancel(fmt.Errorf("kafkago: %v", err)) // only Run closes it: cannot happen
			} else if ctx.Err() == nil {
				c.log.Warn("redeliver: consumer group error, kafka-go joins again", "group", c.cfg.group.ID, "error", err)
			}
			continue
		}
		c.serve(ctx, cancel, gen)
	}
	err = context.Cause(ctx)
	// Closing the group ends the generation: its manager ends every claim
	// and waits for their workers, then the member leaves the group.
	_ = cg.Close()
	c.wg.Wait()
	if c.transport != nil {
		c.transport.CloseIdleConnections()
	}
	c.log.Info("redeliver: consumer stopped", "group", c.cfg.group.ID, "cause", err)
	return err
}

// roundTrip sends req through the client's transport to the client's
// cluster, as kafka.Client's own methods do.
func (c *Consumer) roundTrip(ctx context.Context, req kafka.Request) (kafka.Response, error) {
	rt := c.client.Transport
	if rt == nil {
		rt = kafka.DefaultTransport
	}
	if c.client.Timeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, c.client.Timeout)
		defer cancel()
	}
	return rt.RoundTrip(ctx, c.client.Addr, req)
}

// Close stops [Consumer.Run] if it runs and waits for it to return. Close is
// idempotent.
func (c *Consumer) Close() {
	c.mu.Lock()
	c.closed = true
	cancel := c.runCancel
	c.mu.Unlock()
	if cancel != nil {
		cancel(ErrClosed)
		<-c.runDone
	}
}
