package engine

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/redeliver-go/redeliver/adapters/franz/internal/fetcherr"
	"github.com/redeliver-go/redeliver/adapters/franz/internal/kclient"
	"github.com/redeliver-go/redeliver/internal/health"
	"github.com/redeliver-go/redeliver/internal/lifecycle"
	"github.com/redeliver-go/redeliver/internal/park"
	"github.com/redeliver-go/redeliver/stream"
)

// defaultFetchMaxWait is the kgo.FetchMaxWait of a client the consumer
// builds, unless the caller's options set it.
const defaultFetchMaxWait = 500 * time.Millisecond

// errClientClosed is the error Run returns when the client was closed under
// it.
var errClientClosed = errors.New("franz: kgo client closed")

// errRevoked is the cause of a claim whose partition was revoked.
var errRevoked = fmt.Errorf("franz: partition revoked: %w", stream.ErrRevoked)

// errLost is the cause of a claim whose partition was lost (a fatal group
// error) rather than revoked.
var errLost = fmt.Errorf("franz: partition lost: %w", stream.ErrRevoked)

// Config is what the franz package's options set; its fields are
// documented on those options.
type Config struct {
	Client        *kgo.Client
	ClientSet     bool
	Kopts         []kgo.Opt
	KoptsSet      bool
	MaxBatch      int
	MaxWait       time.Duration
	BufferBytes   int
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
	Publishers []Publisher
	OnAssigned func(map[string][]int32)
	// DeadLetterCheck checks the topic of the processor's dead-letter
	// action when it publishes through a client other than the
	// consumer's; nil for none.
	DeadLetterCheck func(context.Context) []health.Problem
}

// Publisher is a franz.Publisher given with WithPublisher, as the
// consumer sees it.
type Publisher struct {
	// Bind binds it to the consumer's client; nil for a nil publisher.
	Bind func(*kgo.Client) error
	// DeadLetterTopics returns the topics stream.DeadLetter publishes to
	// through it.
	DeadLetterTopics func() []string
}

// DefaultCommitInterval and DefaultCommitRecords are the commit window
// by default (franz.WithCommitWindow): none, every commit is written
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
	return Config{MaxBatch: 500, BufferBytes: 16 << 20, CommitTimeout: 10 * time.Second,
		CommitInterval: DefaultCommitInterval, CommitRecords: DefaultCommitRecords, Drain: lifecycle.DefaultDrain, FailAfter: health.DefaultEndAfter}
}

// Consumer runs a [stream.Processor] over the partitions a franz-go group
// consumer is assigned: one worker per assigned partition, started when
// the partition's committed offset has been fetched and stopped (its
// context cancelled, then waited for) when the partition is revoked or lost
// or the consumer stops. A worker runs on a goroutine of its own while its
// partition has records; while the partition is idle (nothing fetched and
// not delivered, no retry pending) the worker parks: its goroutine ends
// and its state is let go, and it resumes under the same claim (the same
// ClaimID in the stream.Hooks events) when records arrive. Workers that
// start or resume at once share a few goroutines (park.Runners).
//
// A Consumer is safe for concurrent use. [Consumer.Run] may be called once;
// [Consumer.Close] may be called from anywhere, a handler included.
type Consumer struct {
	proc   *stream.Processor
	cl     *kgo.Client
	owned  bool // the consumer built cl and closes it
	g      *group
	log    *slog.Logger
	cfg    Config
	commit *committer
	life   *lifecycle.Life

	fetchErrs fetcherr.Tracker
	checks    health.Checker
	// runners runs the partitions' workers: many partitions that wake
	// at once (an assignment, a poll with records for idle partitions)
	// share a few goroutines instead of starting one each. Only in
	// partition ordering (pooled): a key-ordered worker never parks, and
	// keeps a goroutine of its own for as long as its claim lasts.
	runners park.Runners
	pooled  bool
	// fullBatches holds empty record arrays of cfg.MaxBatch records
	// (*[]stream.Record), from partitions that went idle, for the next
	// full batch of any partition (see claim.letGoMem).
	fullBatches sync.Pool

	closeCl      sync.Once
	cancelClient context.CancelFunc // the owned client's context (kgo.WithContext)
}

// New returns a Consumer that runs proc over the partitions of a franz-go
// group consumer given by cfg.Client or built from cfg.Kopts; see the
// franz package's New.
func New(proc *stream.Processor, cfg Config) (*Consumer, error) {
	if proc == nil {
		return nil, errors.New("franz: nil processor")
	}
	for i, o := range cfg.Kopts {
		if o == nil {
			return nil, fmt.Errorf("franz: WithKgoOptions: kgo option %d is nil", i+1)
		}
	}
	switch {
	case cfg.MaxBatch < 1:
		return nil, fmt.Errorf("franz: max batch %d, want at least 1", cfg.MaxBatch)
	case cfg.BufferBytes < 1:
		return nil, fmt.Errorf("franz: buffer bytes %d, want at least 1", cfg.BufferBytes)
	case cfg.MaxWait < 0:
		return nil, fmt.Errorf("franz: max wait %v, want 0 or more", cfg.MaxWait)
	case cfg.CommitTimeout <= 0:
		return nil, fmt.Errorf("franz: commit timeout %v, want more than 0", cfg.CommitTimeout)
	case cfg.CommitInterval < 0 || cfg.CommitRecords < 0 || (cfg.CommitInterval == 0) != (cfg.CommitRecords == 0):
		return nil, fmt.Errorf("franz: WithCommitWindow(%v, %d): want both more than 0, or both 0 (every commit synchronous)", cfg.CommitInterval, cfg.CommitRecords)
	case cfg.Drain < 0:
		return nil, fmt.Errorf("franz: WithDrain(%v): want 0 (no bound) or more", cfg.Drain)
	case cfg.FailAfter < 0:
		return nil, fmt.Errorf("franz: WithFailAfter(%v): want 0 (never) or more", cfg.FailAfter)
	case cfg.ClientSet && cfg.Client == nil:
		return nil, errors.New("franz: WithClient(nil): give a client built with franz.ClientOptions(), or use WithKgoOptions")
	case cfg.Client != nil && cfg.KoptsSet:
		return nil, errors.New("franz: both WithClient and WithKgoOptions given")
	case cfg.Client == nil && !cfg.KoptsSet:
		return nil, errors.New("franz: no client: give WithClient or WithKgoOptions")
	}
	for _, pub := range cfg.Publishers {
		if pub.Bind == nil {
			return nil, errors.New("franz: WithPublisher: nil publisher")
		}
	}
	log := cfg.Logger
	if log == nil {
		log = proc.Logger()
	}
	c := &Consumer{proc: proc, cfg: cfg, log: log, life: lifecycle.New("franz", fmt.Errorf("franz: consumer %w", stream.ErrClosed))}
	c.fetchErrs.Log, c.fetchErrs.Pkg = log, "franz"
	c.checks.Log = log
	c.checks.EndAfter, c.checks.End = cfg.FailAfter, c.life.Fail
	c.pooled = proc.Ordering() == stream.ByPartition
	c.runners.Stalled = func(waiting int) {
		log.Debug("redeliver: partition workers held up; the waiting ones start on goroutines of their own", "waiting", waiting, "held_up_for", park.DefaultStall)
	}
	if cfg.Client != nil {
		g, err := checkClient(cfg.Client)
		if err != nil {
			return nil, err
		}
		c.cl, c.g = cfg.Client, g
	} else {
		cctx, cancel := context.WithCancel(context.Background())
		c.cancelClient = cancel
		kopts := append([]kgo.Opt{kgo.FetchMaxWait(defaultFetchMaxWait), kgo.WithContext(cctx)}, cfg.Kopts...)
		if err := checkOpts(kopts); err != nil {
			cancel()
			return nil, err
		}
		kopts = append(kopts, ClientOptions()...)
		cl, err := kgo.NewClient(kopts...)
		if err != nil {
			cancel()
			return nil, fmt.Errorf("franz: %w", err)
		}
		g, err := checkClient(cl)
		if err != nil {
			cl.Close()
			cancel()
			return nil, err
		}
		c.cl, c.g, c.owned = cl, g, true
	}
	for _, pub := range cfg.Publishers {
		if err := pub.Bind(c.cl); err != nil {
			if c.owned {
				c.closeClient()
			}
			return nil, err
		}
	}
	if err := c.g.bind(c); err != nil {
		if c.owned {
			c.closeClient()
		}
		return nil, err
	}
	c.commit = newCommitter(c.cl, cfg.CommitTimeout)
	return c, nil
}

// Client returns the consumer's franz-go client.
func (c *Consumer) Client() *kgo.Client { return c.cl }

// Run polls the client and runs a worker per assigned partition until ctx
// is done, Close is called, the client is closed, or a worker fails; see
// the franz package's Run.
func (c *Consumer) Run(ctx context.Context) error {
	err := c.life.Run(ctx, c.run)
	if errors.Is(err, stream.ErrClosed) && c.owned {
		c.closeClient() // Close came first, maybe from a callback of the client
	}
	return err
}

func (c *Consumer) run(ctx context.Context) error {
	checked := make(chan struct{})
	go func() {
		defer close(checked)
		c.checks.Run(ctx, checkInterval, checkTimeout, c.check)
	}()
	defer func() { <-checked }()
	c.commit.start(ctx)
	c.g.start(ctx, c.life.Fail)
	c.poll(ctx)
	cause := context.Cause(ctx)
	// Stop every worker, reporting those whose handlers hold the stop and
	// giving up on them after the drain time: the client is closed all
	// the same (the member leaves the group, and a late commit of theirs
	// is refused), and Run returns the drain's error.
	stopped := make(chan struct{})
	go func() {
		c.g.stop(cause)
		close(stopped)
	}()
	drainErr := lifecycle.Drain(stopped, c.log, "franz", &c.g.workers, c.cfg.Drain)
	if drainErr != nil {
		c.g.abandon()
	}
	c.commit.stop()
	c.cl.AllowRebalance()
	if c.owned {
		c.closeClient()
	}
	if drainErr != nil {
		return drainErr
	}
	c.log.Info("redeliver: consumer stopped", "cause", cause)
	return nil
}

// Close stops Run if it runs and waits for it to return, unless called
// from a goroutine Run waits for, and closes a client the consumer owns;
// see the franz package's Close.
func (c *Consumer) Close() {
	inside := c.life.Close()
	switch {
	case !c.owned:
	case !inside:
		c.closeClient()
	case !c.life.Started():
		// From a callback of the client before Run (WithOnAssigned):
		// the client's Close would wait for the callback.
		go c.closeClient()
	}
	// Called inside Run, Close leaves the client to Run's end, which
	// closes it once every worker has stopped.
}

// closeClient closes the client the consumer owns, leaving the group,
// within kclient.LeaveWait (see kclient.Close).
func (c *Consumer) closeClient() {
	c.closeCl.Do(func() { kclient.Close(c.cl, c.cancelClient, c.log) })
}

// poll is the poll loop: it hands every polled record to its partition's
// claim and allows rebalances after each poll, so the group's callbacks run
// between polls, never while a poll's records are being handed out.
func (c *Consumer) poll(ctx context.Context) {
	var backoff fetcherr.Backoff
	for ctx.Err() == nil {
		c.g.throttle(ctx)
		fetches := c.cl.PollFetches(ctx)
		if fetches.IsClientClosed() {
			c.life.Fail(errClientClosed)
			c.cl.AllowRebalance()
			return
		}
		fatal, failed := c.fetchErrs.Seen(fetches, time.Now())
		c.g.dispatch(fetches)
		c.cl.AllowRebalance()
		if fatal != nil {
			c.log.Error("redeliver: consumer stopped by a fetch error", "error", fatal)
			c.life.Fail(fatal)
			return
		}
		fetcherr.Wait(ctx, backoff.Next(failed))
	}
}

// recordArray returns an empty array for a batch of n records: one from
// the pool of full batches' arrays when n is a full batch, a new one of n
// records otherwise. A smaller batch gets an array of its own size: a
// withheld batch keeps its array for as long as it waits.
func (c *Consumer) recordArray(n int) []stream.Record {
	if n == c.cfg.MaxBatch {
		if p, _ := c.fullBatches.Get().(*[]stream.Record); p != nil {
			return *p
		}
	}
	return make([]stream.Record, 0, n)
}
