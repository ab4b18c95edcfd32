package franz

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
	"github.com/redeliver-go/redeliver/stream"
)

// defaultFetchMaxWait is the kgo.FetchMaxWait of a client the consumer
// builds, unless the caller's options set it.
const defaultFetchMaxWait = 500 * time.Millisecond

// ErrClosed is the error [Consumer.Run] returns after [Consumer.Close].
var ErrClosed = errors.New("franz: consumer closed")

// errNotMade is what the methods of a Consumer not made by New return.
var errNotMade = errors.New("franz: the Consumer was not made by franz.New: build it with franz.New(proc, options...)")

// errClientClosed is the error Run returns when the client was closed under
// it.
var errClientClosed = errors.New("franz: kgo client closed")

// errRevoked is the cause of a claim whose partition was revoked.
var errRevoked = fmt.Errorf("franz: partition revoked: %w", stream.ErrRevoked)

// errLost is the cause of a claim whose partition was lost (a fatal group
// error) rather than revoked.
var errLost = fmt.Errorf("franz: partition lost: %w", stream.ErrRevoked)

// Option configures a [Consumer].
type Option interface{ apply(*config) }

type optionFunc func(*config)

func (f optionFunc) apply(c *config) { f(c) }

type config struct {
	client        *kgo.Client
	clientSet     bool
	kopts         []kgo.Opt
	kset          bool
	maxBatch      int
	maxWait       time.Duration
	bufferBytes   int
	commitTimeout time.Duration
	logger        *slog.Logger
	publishers    []*Publisher
	onAssigned    func(map[string][]int32)
}

// WithOnAssigned calls fn at the end of each group session's assignment
// with the partitions it newly assigned (empty when it assigned none, as
// after a rebalance that kept them all): a readiness signal. The consumer
// needs the client's own OnPartitionsAssigned (see [ClientOptions]), so a
// kgo.OnPartitionsAssigned among the caller's options is replaced; use
// this instead. fn runs in the client's group goroutine and must be quick.
// A client joins its group as soon as it is built: an assignment made
// before the Consumer was bound to it (before New returned) is reported
// from New.
func WithOnAssigned(fn func(assigned map[string][]int32)) Option {
	return optionFunc(func(c *config) { c.onAssigned = fn })
}

// WithClient makes the consumer use cl, a group consuming client that was
// built with [ClientOptions] (added after the caller's own options). The
// consumer does not close cl: close it after [Consumer.Run] returns, since
// its partitions stay assigned to it. A client serves one Consumer, once. It
// cannot be combined with [WithKgoOptions].
func WithClient(cl *kgo.Client) Option {
	return optionFunc(func(c *config) { c.client, c.clientSet = cl, true })
}

// WithKgoOptions makes the consumer build its own client from opts, which
// must name a consumer group and what to consume. [ClientOptions] are added
// after opts and override any of them they touch (autocommit, the partition
// callbacks, BlockRebalanceOnPoll). Before opts comes
// kgo.FetchMaxWait(500ms), Kafka's own default (franz-go's is 5s), which
// opts may override. The consumer owns this client and closes it when
// [Consumer.Run] returns or at [Consumer.Close].
func WithKgoOptions(opts ...kgo.Opt) Option {
	return optionFunc(func(c *config) { c.kopts = append(c.kopts, opts...); c.kset = true })
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

// WithBufferBytes sets how much polled data a partition holds ahead of its
// worker, overriding the default 16 MiB; each record counts its key and value
// plus 256 bytes. A partition waiting out a backoff goes on buffering, so
// that its next records are there when the backoff ends. A full partition
// holds the poll loop back until its worker has taken it down to half, for
// at most 100ms while another partition could take records (the client
// fetches nothing while the loop is held): then, or at once when its worker
// waits out a backoff, the partition is paused in the client (which drops
// what franz-go had fetched for it). When another partition starves, the
// loop polls at once, and a partition beyond twice the limit is paused. So a partition holds at most about twice this plus one
// fetch. A partition resumed in the client fetches its next records with
// requests of its own, through a second client the consumer makes for this,
// until the client's fetches include it again: franz-go would leave it out
// of the fetch in flight, which can wait up to the fetch max wait.
func WithBufferBytes(n int) Option {
	return optionFunc(func(c *config) { c.bufferBytes = n })
}

// WithCommitTimeout bounds one offset commit, overriding the default 10s. A
// commit that was sent is not cancelled by a revocation: the revocation
// waits for it, for at most this long. A shutdown waits for it at most
// 250ms, then cuts it short.
func WithCommitTimeout(d time.Duration) Option {
	return optionFunc(func(c *config) { c.commitTimeout = d })
}

// WithLogger sets the logger. The default is the processor's logger
// ([stream.Processor.Logger]).
func WithLogger(l *slog.Logger) Option {
	return optionFunc(func(c *config) { c.logger = l })
}

// WithPublisher binds pub, an unbound [Publisher] (new(franz.Publisher)),
// to the consumer's client, so that a dead-letter action made before the
// consumer produces through it. New returns an error when pub is nil or
// bound to another client.
func WithPublisher(pub *Publisher) Option {
	return optionFunc(func(c *config) { c.publishers = append(c.publishers, pub) })
}

// Consumer runs a [stream.Processor] over the partitions a franz-go group
// consumer is assigned: one worker goroutine per assigned partition, started
// when the partition's committed offset has been fetched and stopped (its
// context cancelled, then waited for) when the partition is revoked or lost
// or the consumer stops.
//
// A Consumer is safe for concurrent use. [Consumer.Run] may be called once;
// [Consumer.Close] may be called from anywhere, a handler included. Its
// zero value is not usable: its methods return an error that says to call
// [New].
type Consumer struct {
	proc   *stream.Processor
	cl     *kgo.Client
	owned  bool // the consumer built cl and closes it
	g      *group
	log    *slog.Logger
	cfg    config
	commit *committer
	life   *lifecycle.Life

	fetchErrs fetcherr.Tracker
	checks    health.Checker

	closeCl      sync.Once
	cancelClient context.CancelFunc // the owned client's context (kgo.WithContext)
}

// New returns a Consumer that runs proc over the partitions of a franz-go
// group consumer given by [WithClient] or built from [WithKgoOptions]. It
// returns an error when proc is nil, when neither or both of those options
// are given, when an option is out of range, or when the client is not set
// up for the adapter.
func New(proc *stream.Processor, opts ...Option) (*Consumer, error) {
	if proc == nil {
		return nil, errors.New("franz: nil processor")
	}
	cfg := config{maxBatch: 500, bufferBytes: 16 << 20, commitTimeout: 10 * time.Second}
	for i, o := range opts {
		if o == nil {
			return nil, fmt.Errorf("franz: option %d of New is nil", i+1)
		}
		o.apply(&cfg)
	}
	for i, o := range cfg.kopts {
		if o == nil {
			return nil, fmt.Errorf("franz: WithKgoOptions: kgo option %d is nil", i+1)
		}
	}
	switch {
	case cfg.maxBatch < 1:
		return nil, fmt.Errorf("franz: max batch %d, want at least 1", cfg.maxBatch)
	case cfg.bufferBytes < 1:
		return nil, fmt.Errorf("franz: buffer bytes %d, want at least 1", cfg.bufferBytes)
	case cfg.maxWait < 0:
		return nil, fmt.Errorf("franz: max wait %v, want 0 or more", cfg.maxWait)
	case cfg.commitTimeout <= 0:
		return nil, fmt.Errorf("franz: commit timeout %v, want more than 0", cfg.commitTimeout)
	case cfg.clientSet && cfg.client == nil:
		return nil, errors.New("franz: WithClient(nil): give a client built with franz.ClientOptions(), or use WithKgoOptions")
	case cfg.client != nil && cfg.kset:
		return nil, errors.New("franz: both WithClient and WithKgoOptions given")
	case cfg.client == nil && !cfg.kset:
		return nil, errors.New("franz: no client: give WithClient or WithKgoOptions")
	}
	for _, pub := range cfg.publishers {
		if pub == nil {
			return nil, errors.New("franz: WithPublisher: nil publisher")
		}
	}
	log := cfg.logger
	if log == nil {
		log = proc.Logger()
	}
	c := &Consumer{proc: proc, cfg: cfg, log: log, life: lifecycle.New("franz", ErrClosed)}
	c.fetchErrs.Log, c.fetchErrs.Pkg = log, "franz"
	c.checks.Log = log
	if cfg.client != nil {
		g, err := checkClient(cfg.client)
		if err != nil {
			return nil, err
		}
		c.cl, c.g = cfg.client, g
	} else {
		cctx, cancel := context.WithCancel(context.Background())
		c.cancelClient = cancel
		kopts := append([]kgo.Opt{kgo.FetchMaxWait(defaultFetchMaxWait), kgo.WithContext(cctx)}, cfg.kopts...)
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
	fail := func(err error) (*Consumer, error) {
		if c.owned {
			c.closeClient()
		}
		return nil, err
	}
	for _, pub := range cfg.publishers {
		if err := pub.bind(c.cl); err != nil {
			return fail(err)
		}
	}
	if pub, topic, ok := stream.DeadLetterOf(proc.Settings().Exhaustion); ok {
		if fp, isFranz := pub.(*Publisher); isFranz && !fp.Bound() {
			// It would fail every record given up, for ever.
			return fail(fmt.Errorf("franz: the processor dead-letters to %q through a franz.Publisher bound to no client: give it to New with WithPublisher(pub), or make it with NewPublisher", topic))
		}
	}
	if err := c.g.bind(c); err != nil {
		return fail(err)
	}
	c.commit = newCommitter(c.cl, cfg.commitTimeout)
	return c, nil
}

// Client returns the consumer's franz-go client, for producing, admin
// requests or inspection. Do not poll it or commit with it.
func (c *Consumer) Client() *kgo.Client {
	if c == nil {
		return nil
	}
	return c.cl
}

// Run polls the client and runs a worker per assigned partition until ctx is
// done, [Consumer.Close] is called, the client is closed, or a worker fails.
// On return, every worker has stopped, its batch in flight abandoned without
// a commit, and a client the consumer owns is closed (leaving the group).
// Run returns within a second of its context's end whatever the broker is
// slow to answer: a commit in flight is cut short after 250ms, and closing
// an owned client waits at most 400ms for the broker before its requests
// in flight are cancelled (the broker then removes the member at its
// session timeout). An owned client is built with kgo.WithContext for this; a
// kgo.WithContext given in WithKgoOptions replaces it.
//
// Run returns nil after a clean shutdown: ctx done (cancelled or past its
// deadline) or [Consumer.Close] called. Otherwise it returns the error that
// stopped it: the client closed under it, or a worker's failure. It
// returns [ErrClosed] when Close was called before it. It may be called
// once.
func (c *Consumer) Run(ctx context.Context) error {
	if c == nil || c.life == nil {
		return errNotMade
	}
	err := c.life.Run(ctx, c.run)
	if errors.Is(err, ErrClosed) && c.owned {
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
	c.g.stop(cause)
	c.commit.stop()
	c.cl.AllowRebalance()
	if c.owned {
		c.closeClient()
	}
	c.log.Info("redeliver: consumer stopped", "cause", cause)
	return nil
}

// Close stops [Consumer.Run] if it runs and waits for it to return, and
// closes a client the consumer owns. A client given with [WithClient] stays
// open. Close is idempotent and may be called from anywhere: called from a
// goroutine Run waits for (a handler, a hook of the processor, the
// WithOnAssigned function), it stops Run and returns without waiting for
// it, and Run closes an owned client when it returns. It returns an error
// only for a Consumer not made by [New].
func (c *Consumer) Close() error {
	if c == nil || c.life == nil {
		return errNotMade
	}
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
	return nil
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
