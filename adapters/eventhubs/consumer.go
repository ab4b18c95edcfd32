package eventhubs

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"sync"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/messaging/azeventhubs/v2"

	"github.com/redeliver-go/redeliver/internal/actionctx"
	"github.com/redeliver-go/redeliver/internal/lifecycle"
	"github.com/redeliver-go/redeliver/stream"
)

// Option configures a [Consumer].
type Option interface{ apply(*config) }

type optionFunc func(*config)

func (f optionFunc) apply(c *config) { f(c) }

type config struct {
	maxBatch      int
	wait          time.Duration
	commitTimeout time.Duration
	closeTimeout  time.Duration
	drain         time.Duration
	logger        *slog.Logger
	procOpts      *azeventhubs.ProcessorOptions
}

// WithMaxBatch sets the most events a batch holds (the count given to
// ReceiveEvents), overriding the default 100.
func WithMaxBatch(n int) Option {
	return optionFunc(func(c *config) { c.maxBatch = n })
}

// WithReceiveWait sets how long one ReceiveEvents call waits for a batch to
// fill before it returns what it has, overriding the default 500ms. A
// partition with fewer events than the batch size delivers them after this
// wait.
func WithReceiveWait(d time.Duration) Option {
	return optionFunc(func(c *config) { c.wait = d })
}

// WithCommitTimeout bounds one checkpoint write (the ownership read of the
// fence, the retry state, the checkpoint), overriding the default 10s. A
// write that has begun is seen through within this bound even when its
// claim ends meanwhile, so that it never lands unreported.
func WithCommitTimeout(d time.Duration) Option {
	return optionFunc(func(c *config) { c.commitTimeout = d })
}

// WithCloseTimeout bounds the Close of a partition client when its claim
// ends, overriding the default 10s.
func WithCloseTimeout(d time.Duration) Option {
	return optionFunc(func(c *config) { c.closeTimeout = d })
}

// WithDrain sets how long Run waits, once it is stopping, for the workers
// to return; the default is 25s (a host's default drain time,
// host.DefaultDrain), and 0 waits as long as they take. A worker whose
// handler ignores the end of its context holds Run: while Run waits, it
// logs at Warn which partitions it waits for and for how long (2s after
// the stop, then every 5s); after d it logs at Error, leaves the workers
// running, stops the processor and hands the partitions back as on any
// stop (another processor may then deliver their events while those
// handlers still run), and returns an error that names them. New and
// NewWith return an error for a negative d.
func WithDrain(d time.Duration) Option {
	return optionFunc(func(c *config) { c.drain = d })
}

// WithLogger sets the logger. The default, like a nil logger, is the
// stream processor's (see [stream.Processor.Logger]).
func WithLogger(l *slog.Logger) Option {
	return optionFunc(func(c *config) { c.logger = l })
}

// WithProcessorOptions sets the options of the SDK Processor that [New]
// builds, instead of the SDK's defaults (balanced load balancing, a 10s
// update interval, 60s partition expiration, start at the latest event
// when a partition has no checkpoint, 300 events of prefetch). [NewWith]
// ignores it.
func WithProcessorOptions(o azeventhubs.ProcessorOptions) Option {
	return optionFunc(func(c *config) { c.procOpts = &o })
}

// Consumer runs a [stream.Processor] over the partitions an Event Hubs
// processor owns: one [stream.Claim] and one worker goroutine per
// partition client. A Consumer is safe for concurrent use; [Consumer.Run]
// may be called once. Build it with [New] or [NewWith]: the zero Consumer
// does nothing but return an error from Run.
type Consumer struct {
	proc  *stream.Processor
	ehp   Processor
	store *CheckpointStore
	cfg   config
	log   *slog.Logger
	life  *lifecycle.Life
	// workers are the partitions' workers, by "hub/partition", for the
	// stop's report.
	workers lifecycle.Workers
}

// New returns a Consumer over an SDK Processor that it builds from
// consumer and store, the user's checkpoint store (the SDK's
// checkpoints.BlobStore, say), which it wraps in a [CheckpointStore] for
// that processor. The caller keeps ownership of consumer and closes it
// after Run returns.
func New(proc *stream.Processor, consumer *azeventhubs.ConsumerClient, store azeventhubs.CheckpointStore, opts ...Option) (*Consumer, error) {
	switch {
	case proc == nil:
		return nil, errors.New("eventhubs: New: nil stream processor")
	case consumer == nil:
		return nil, errors.New("eventhubs: New: nil consumer client")
	case isNil(store):
		return nil, fmt.Errorf("eventhubs: New: nil checkpoint store (%T)", store)
	case proc.Ordering() != stream.ByPartition:
		return nil, errOrdering("New", proc.Ordering())
	}
	cfg, err := newConfig(opts)
	if err != nil {
		return nil, err
	}
	var po azeventhubs.ProcessorOptions
	if cfg.procOpts != nil {
		po = *cfg.procOpts
	}
	if err := checkIntervals(po); err != nil {
		return nil, err
	}
	cs, err := NewCheckpointStore(store, consumer.InstanceID(), &StoreOptions{PartitionExpirationDuration: po.PartitionExpirationDuration})
	if err != nil {
		return nil, err
	}
	p, err := azeventhubs.NewProcessor(consumer, cs, &po)
	if err != nil {
		return nil, fmt.Errorf("eventhubs: %w", err)
	}
	return newConsumer(proc, sdkProcessor{p}, cs, cfg), nil
}

// NewWith returns a Consumer over p, a processor that must have been given
// store as its checkpoint store (so that its partition clients'
// UpdateCheckpoint goes through the fence). It is how the adapter runs on
// an in-memory hub (package memhub) and on anything else that behaves as
// the SDK's Processor does.
func NewWith(proc *stream.Processor, p Processor, store *CheckpointStore, opts ...Option) (*Consumer, error) {
	switch {
	case proc == nil:
		return nil, errors.New("eventhubs: NewWith: nil stream processor")
	case isNil(p):
		return nil, fmt.Errorf("eventhubs: NewWith: nil event hubs processor (%T)", p)
	case store == nil:
		return nil, errors.New("eventhubs: NewWith: nil checkpoint store")
	case store.inner == nil:
		return nil, errors.New("eventhubs: NewWith: zero CheckpointStore: build it with eventhubs.NewCheckpointStore")
	case proc.Ordering() != stream.ByPartition:
		return nil, errOrdering("NewWith", proc.Ordering())
	}
	cfg, err := newConfig(opts)
	if err != nil {
		return nil, err
	}
	return newConsumer(proc, p, store, cfg), nil
}

// errOrdering refuses a processor in key or no ordering: an Event Hubs
// checkpoint names an event of the batch last fetched, and the keyed
// driver commits records of earlier batches while it fetches more.
func errOrdering(fn string, o stream.Ordering) error {
	return fmt.Errorf("eventhubs: %s: the stream processor has %s ordering (stream.WithOrdering), which this adapter does not support: an Event Hubs checkpoint names an event of the batch last fetched; use stream.ByPartition", fn, o)
}

// defaultUpdateInterval is the SDK Processor's default UpdateInterval.
const defaultUpdateInterval = 10 * time.Second

// checkIntervals refuses processor options whose partition ownerships
// would expire between the rounds that renew them: the processor renews
// its ownerships once a round, every UpdateInterval x0.8-1.3, and storage
// keeps times in whole seconds.
func checkIntervals(po azeventhubs.ProcessorOptions) error {
	interval, expiry := po.UpdateInterval, po.PartitionExpirationDuration
	if interval == 0 {
		interval = defaultUpdateInterval
	}
	if expiry == 0 {
		expiry = DefaultPartitionExpiration
	}
	switch least := interval*13/10 + time.Second; {
	case interval < 0:
		return fmt.Errorf("eventhubs: New: processor options: UpdateInterval %v, want more than 0", interval)
	case expiry <= least:
		return fmt.Errorf("eventhubs: New: processor options: PartitionExpirationDuration %v must exceed UpdateInterval %v x1.3 (the processor's jitter) plus a second (%v): "+
			"ownerships would expire between the rounds that renew them, and processors would take partitions from each other", expiry, interval, least)
	}
	return nil
}

func newConfig(opts []Option) (config, error) {
	cfg := config{maxBatch: 100, wait: 500 * time.Millisecond, commitTimeout: 10 * time.Second, closeTimeout: 10 * time.Second,
		drain: lifecycle.DefaultDrain}
	for i, o := range opts {
		if isNil(o) {
			return cfg, fmt.Errorf("eventhubs: option %d of %d is nil", i+1, len(opts))
		}
		o.apply(&cfg)
	}
	switch {
	case cfg.maxBatch < 1:
		return cfg, fmt.Errorf("eventhubs: max batch %d, want at least 1", cfg.maxBatch)
	case cfg.wait <= 0:
		return cfg, fmt.Errorf("eventhubs: receive wait %v, want more than 0", cfg.wait)
	case cfg.commitTimeout <= 0:
		return cfg, fmt.Errorf("eventhubs: commit timeout %v, want more than 0", cfg.commitTimeout)
	case cfg.closeTimeout <= 0:
		return cfg, fmt.Errorf("eventhubs: close timeout %v, want more than 0", cfg.closeTimeout)
	case cfg.drain < 0:
		return cfg, fmt.Errorf("eventhubs: WithDrain(%v): want 0 (no bound) or more", cfg.drain)
	}
	return cfg, nil
}

func newConsumer(proc *stream.Processor, p Processor, store *CheckpointStore, cfg config) *Consumer {
	c := &Consumer{proc: proc, ehp: p, store: store, cfg: cfg, log: cfg.logger,
		life: lifecycle.New("eventhubs", fmt.Errorf("eventhubs: consumer %w", stream.ErrClosed))}
	if c.log == nil {
		c.log = proc.Logger()
	}
	return c
}

// Store returns the consumer's fenced checkpoint store (nil for the zero
// Consumer).
func (c *Consumer) Store() *CheckpointStore {
	if c == nil {
		return nil
	}
	return c.store
}

// errZeroConsumer is what Run says on a Consumer that was not built.
var errZeroConsumer = errors.New("eventhubs: Run on a zero Consumer: build it with eventhubs.New or eventhubs.NewWith")

// Run runs the Event Hubs processor's load balancing and a worker per
// partition client it hands out, until ctx is done or the processor
// stops. Workers stop first (a batch in flight is abandoned without a
// checkpoint; a handler that ignores the end of its context is waited for
// within the drain time, [WithDrain]), then the processor; then Run hands
// back the partitions this processor still owns, so that other processors
// take them at their next balancing round instead of waiting for the
// ownership to expire (the SDK processor's own hand-back names ownership
// ETags that the fence of [CheckpointStore] has renewed since, and is
// refused).
//
// Run returns nil when it stopped because ctx was done or [Consumer.Close]
// was called (a clean shutdown), [stream.ErrClosed] when Close came before
// it, and an error when the processor stopped on its own (its error, such
// as a checkpoint store or a namespace that cannot be reached), when the
// drain time passed with handlers still running (an error that names
// their partitions), when Run was called before, or on a zero Consumer.
func (c *Consumer) Run(ctx context.Context) error {
	if c == nil || c.ehp == nil || c.store == nil || c.proc == nil {
		return errZeroConsumer
	}
	if ctx == nil {
		return errors.New("eventhubs: Run: nil context")
	}
	return c.life.Run(ctx, c.run)
}

// Close stops Run as the end of its context does and waits for it to
// return, unless it is called from within the consumer (a handler, a
// hook): then it returns at once, and Run returns once the handler does.
// It may be called more than once and from any goroutine; a Run after
// Close returns [stream.ErrClosed] at once.
func (c *Consumer) Close() error {
	if c == nil || c.ehp == nil || c.store == nil || c.proc == nil {
		return errZeroConsumer
	}
	c.life.Close()
	return nil
}

func (c *Consumer) run(ctx context.Context) error {
	procCtx, stopProc := context.WithCancel(context.WithoutCancel(ctx))
	defer stopProc()
	claimsCtx, stopClaims := context.WithCancelCause(ctx)
	defer stopClaims(nil)

	procErr := make(chan error, 1)
	go func() {
		err := c.ehp.Run(procCtx)
		if procCtx.Err() == nil {
			// It stopped on its own: end the claims with why.
			if err == nil {
				err = errors.New("the processor stopped")
			}
			stopClaims(err)
		}
		procErr <- err
	}()

	var wg sync.WaitGroup
	for {
		pc := c.ehp.NextPartitionClient(claimsCtx)
		if pc == nil {
			break
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			c.serve(claimsCtx, pc)
		}()
	}
	// No partition client comes any more: ctx is done, or the processor
	// stopped on its own.
	shutdown := ctx.Err() != nil
	stopClaims(nil)
	// The workers end with their claims: a handler that ignores the end
	// of its context holds its worker. Drain reports them, and gives up on
	// them after the drain time.
	served := make(chan struct{})
	go func() {
		wg.Wait()
		close(served)
	}()
	drainErr := lifecycle.Drain(served, c.log, "eventhubs", &c.workers, c.cfg.drain)
	stopProc()
	err := <-procErr
	c.relinquish()
	if shutdown {
		return drainErr
	}
	if err == nil {
		err = errors.New("the processor stopped")
	}
	return errors.Join(fmt.Errorf("eventhubs: processor: %w", err), drainErr)
}

// relinquish hands back the partitions this consumer's processor still
// owns, once it has stopped, so that other processors take them at once
// instead of waiting for the ownerships to expire.
func (c *Consumer) relinquish() {
	ctx, cancel := context.WithTimeout(context.Background(), c.cfg.closeTimeout)
	defer cancel()
	n, err := c.store.relinquish(ctx)
	if err != nil {
		c.log.Warn("redeliver: handing back partitions at shutdown failed; other processors take them when the ownership expires",
			"expiry", c.store.expiry, "error", err)
		return
	}
	if n > 0 {
		c.log.Info("redeliver: partitions handed back at shutdown", "partitions", n)
	}
}

// serve runs the engine over one partition client until its claim ends,
// then closes the client, which lets the processor open the partition
// again if it still owns it.
func (c *Consumer) serve(ctx context.Context, pc PartitionClient) {
	id := pc.PartitionID()
	log := c.log.With("partition", id)
	defer func() {
		cctx, cancel := context.WithTimeout(context.Background(), c.cfg.closeTimeout)
		defer cancel()
		if err := pc.Close(cctx); err != nil {
			log.Warn("redeliver: closing the partition client failed", "error", err)
		}
	}()
	n, err := strconv.ParseInt(id, 10, 32)
	if err != nil || n < 0 {
		log.Error("redeliver: partition ID is not a number; the partition is not consumed", "id", id)
		return
	}
	k, ok := c.store.keyOf(id)
	if !ok {
		log.Error("redeliver: the processor handed out a partition before listing ownership through the store; is the store the processor's?")
		return
	}
	defer c.workers.Start(k.hub + "/" + id)()
	cctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	g := c.store.register(k, cancel)
	defer c.store.unregister(g)
	start, err := c.store.position(cctx, k)
	if err != nil {
		log.Error("redeliver: reading the checkpoint failed; the processor will open the partition again", "error", err)
		return
	}
	cl := &claim{pc: pc, store: c.store, key: k, partition: int32(n), gate: g, start: start.Position, seed: !start.checkpointed,
		log: log, maxBatch: c.cfg.maxBatch, wait: c.cfg.wait, commitTimeout: c.cfg.commitTimeout, cpSeq: -1, expect: start.Next, stateAt: start.stateAt}
	if start.Next >= 0 {
		cl.cpSeq = start.Next - 1
	}
	// The processor may hand out a partition that another processor has
	// taken since (it learns that at its next round): start no claim that
	// is lost already. (A steal after this check and before the claim's
	// first batch is caught when that batch renews the ownership.)
	if err := c.store.verify(cctx, k); err != nil {
		log.Info("redeliver: partition lost before its claim started", "cause", err)
		return
	}
	// A handler that ignores the end of its context runs on after the
	// partition is lost: reported while it does (a stop's wait is the
	// drain's to report).
	processed := make(chan struct{})
	defer close(processed)
	defer context.AfterFunc(cctx, func() {
		if ctx.Err() == nil && errors.Is(context.Cause(cctx), ErrOwnershipLost) {
			lifecycle.WaitLost(processed, log, k.hub+"/"+id)
		}
	})()
	// The consumer group names the dead letters' __dlq.errors.group header.
	err = c.proc.Process(actionctx.WithSource(cctx, actionctx.Source{Group: k.group}), cl)
	log.Debug("redeliver: claim ended", "cause", err)
}
