package eventhubs

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/messaging/azeventhubs/v2"

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

// WithLogger sets the logger. The default, like a nil logger, discards.
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
// may be called once.
type Consumer struct {
	proc  *stream.Processor
	ehp   Processor
	store *CheckpointStore
	cfg   config
	log   *slog.Logger
	ran   atomic.Bool
}

// New returns a Consumer over an SDK Processor that it builds from
// consumer and store, the user's checkpoint store (the SDK's
// checkpoints.BlobStore, say), which it wraps in a [CheckpointStore] for
// that processor. The caller keeps ownership of consumer and closes it
// after Run returns.
func New(proc *stream.Processor, consumer *azeventhubs.ConsumerClient, store azeventhubs.CheckpointStore, opts ...Option) (*Consumer, error) {
	if consumer == nil {
		return nil, errors.New("eventhubs: nil consumer client")
	}
	cfg, err := newConfig(opts)
	if err != nil {
		return nil, err
	}
	var po azeventhubs.ProcessorOptions
	if cfg.procOpts != nil {
		po = *cfg.procOpts
	}
	cs, err := NewCheckpointStore(store, consumer.InstanceID(), &StoreOptions{PartitionExpirationDuration: po.PartitionExpirationDuration})
	if err != nil {
		return nil, err
	}
	p, err := azeventhubs.NewProcessor(consumer, cs, &po)
	if err != nil {
		return nil, fmt.Errorf("eventhubs: %w", err)
	}
	return newConsumer(proc, sdkProcessor{p}, cs, cfg)
}

// NewWith returns a Consumer over p, a processor that must have been given
// store as its checkpoint store (so that its partition clients'
// UpdateCheckpoint goes through the fence). It is how the adapter runs on
// an in-memory hub (package memhub) and on anything else that behaves as
// the SDK's Processor does.
func NewWith(proc *stream.Processor, p Processor, store *CheckpointStore, opts ...Option) (*Consumer, error) {
	if p == nil {
		return nil, errors.New("eventhubs: nil event hubs processor")
	}
	if store == nil {
		return nil, errors.New("eventhubs: nil checkpoint store")
	}
	cfg, err := newConfig(opts)
	if err != nil {
		return nil, err
	}
	return newConsumer(proc, p, store, cfg)
}

func newConfig(opts []Option) (config, error) {
	cfg := config{maxBatch: 100, wait: 500 * time.Millisecond, commitTimeout: 10 * time.Second, closeTimeout: 10 * time.Second}
	for _, o := range opts {
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
	}
	return cfg, nil
}

func newConsumer(proc *stream.Processor, p Processor, store *CheckpointStore, cfg config) (*Consumer, error) {
	if proc == nil {
		return nil, errors.New("eventhubs: nil stream processor")
	}
	c := &Consumer{proc: proc, ehp: p, store: store, cfg: cfg, log: cfg.logger}
	if c.log == nil {
		c.log = slog.New(slog.DiscardHandler)
	}
	return c, nil
}

// Store returns the consumer's fenced checkpoint store.
func (c *Consumer) Store() *CheckpointStore { return c.store }

// Run runs the Event Hubs processor's load balancing and a worker per
// partition client it hands out, until ctx is done or the processor
// stops. Workers stop first (a batch in flight is abandoned without a
// checkpoint), then the processor, which gives up its ownerships so that
// other processors take the partitions at once.
//
// Run returns a non-nil error that says why it stopped: ctx's cause, or the
// processor's error.
func (c *Consumer) Run(ctx context.Context) error {
	if !c.ran.CompareAndSwap(false, true) {
		return errors.New("eventhubs: Run called more than once")
	}
	procCtx, stopProc := context.WithCancel(context.WithoutCancel(ctx))
	defer stopProc()
	claimsCtx, stopClaims := context.WithCancelCause(ctx)
	defer stopClaims(nil)

	procErr := make(chan error, 1)
	go func() {
		err := c.ehp.Run(procCtx)
		if err == nil && procCtx.Err() == nil {
			err = errors.New("eventhubs: processor stopped")
		}
		if err != nil {
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
	stopClaims(nil)
	wg.Wait()
	stopProc()
	err := <-procErr
	if err != nil && procCtx.Err() == nil {
		return fmt.Errorf("eventhubs: processor: %w", err)
	}
	return context.Cause(ctx)
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
	cctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	g := c.store.register(k, cancel)
	defer c.store.unregister(g)
	start, err := c.store.position(cctx, k)
	if err != nil {
		log.Error("redeliver: reading the checkpoint failed; the processor will open the partition again", "error", err)
		return
	}
	cl := &claim{pc: pc, store: c.store, key: k, partition: int32(n), gate: g, start: start,
		maxBatch: c.cfg.maxBatch, wait: c.cfg.wait, commitTimeout: c.cfg.commitTimeout, cpSeq: -1, stateAt: -1}
	if start.Next >= 0 {
		cl.cpSeq = start.Next - 1
	}
	if start.Metadata != "" {
		cl.stateAt = start.Next
	}
	// The processor may hand out a partition that another processor has
	// taken since (it learns that at its next round): start no claim that
	// is lost already.
	if err := c.store.verify(cctx, k); err != nil {
		log.Info("redeliver: partition lost before its claim started", "cause", err)
		return
	}
	err = c.proc.Process(cctx, cl)
	log.Debug("redeliver: claim ended", "cause", err)
}
