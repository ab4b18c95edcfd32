package stream

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redeliver-go/redeliver/checkpoint"
	"github.com/redeliver-go/redeliver/internal/lifecycle"
	"github.com/redeliver-go/redeliver/internal/park"
	"github.com/redeliver-go/redeliver/internal/retrystate"
)

// ExhaustionAction runs when a failed batch is given up, before its
// checkpoint advances. If it returns an error (any error, one that wraps
// [ErrRevoked] included), the checkpoint stays where it is and the action is
// tried again after a backoff, until it succeeds or the claim ends. The default action only logs (the Exhausted hook has already
// fired): the stream skips the batch.
type ExhaustionAction func(ctx context.Context, b *Batch, err *checkpoint.ExhaustedError) error

// Option configures a [Processor].
type Option interface{ apply(*config) }

type optionFunc func(*config)

func (f optionFunc) apply(c *config) { f(c) }

type config struct {
	policy     checkpoint.Policy
	logger     *slog.Logger
	hooks      Hooks
	clock      Clock
	newRand    func() checkpoint.Rand
	exhaustion ExhaustionAction
	opBackoff  checkpoint.Backoff
	memoryOnly bool
	budget     *Budget
	keyed      keyedConfig // ordering.go

	// nilExhaustion records WithExhaustionAction(nil), which NewProcessor
	// refuses.
	nilExhaustion bool
	// actionGiven records that WithExhaustionAction was given, which
	// NewProcessor refuses beside a WithKeyMiddleware that brings its own
	// action.
	actionGiven bool
	// nilInOptions records a nil option given to Options, which
	// NewProcessor refuses.
	nilInOptions bool
}

// Options bundles opts into one option, applied in the order given: what
// a package hands out as one option to turn one thing on (such as
// redrive.ParkByKey).
func Options(opts ...Option) Option {
	return optionFunc(func(c *config) {
		for _, o := range opts {
			if isNil(o) {
				c.nilInOptions = true
				continue
			}
			o.apply(c)
		}
	})
}

// WithPolicy sets the retry policy. The default is the zero
// [checkpoint.Policy], which never retries (a host.json without a
// checkpointRetryPolicy): a batch that fails is given up at once, and the
// exhaustion action runs (by default it skips the batch). A give-up is
// never silent: it is logged at Error level (to slog.Default() unless
// [WithLogger] names another logger) and reported to the Exhausted hook.
func WithPolicy(p checkpoint.Policy) Option {
	return optionFunc(func(c *config) { c.policy = p })
}

// WithLogger sets the logger. The default, like a nil logger, sends
// warnings and errors (a batch given up, an outage, a commit or an
// exhaustion action that fails) to slog.Default() and drops the rest; give
// slog.New(slog.DiscardHandler) to discard everything.
func WithLogger(l *slog.Logger) Option {
	return optionFunc(func(c *config) { c.logger = l })
}

// WithHooks adds hooks. Given more than once, every set given is called,
// in the order given (see [MergeHooks]): a later WithHooks never replaces an
// earlier one. The default has none.
func WithHooks(h Hooks) Option {
	return optionFunc(func(c *config) { c.hooks = MergeHooks(c.hooks, h) })
}

// WithClock sets the clock. The default is the system clock.
func WithClock(clk Clock) Option {
	return optionFunc(func(c *config) { c.clock = clk })
}

// WithRand sets the random source of backoff jitter: newRand is called once
// per partition worker, per lease lane and per record given up (for its
// exhaustion action's backoff), and the Rand it returns is used by that one
// only (a nil Rand stands for the default). The default draws from
// math/rand/v2's global source (randomly seeded, and safe for concurrent
// use), shared by all.
func WithRand(newRand func() checkpoint.Rand) Option {
	return optionFunc(func(c *config) { c.newRand = newRand })
}

// WithExhaustionAction sets what happens to a batch whose retries are spent
// or whose error is not retryable. The default (the option left out) skips
// it. A nil action is refused by [NewProcessor], as the other nil options
// are: leave the option out for the default.
func WithExhaustionAction(a ExhaustionAction) Option {
	return optionFunc(func(c *config) { c.exhaustion, c.nilExhaustion, c.actionGiven = a, a == nil, true })
}

// WithInMemoryState keeps retry state in memory only, as the Azure Functions
// checkpoint retry proposal does: when
// a partition moves to another consumer or the process restarts, the batch's
// retry count starts over. The default stores the state of a withheld batch
// with its checkpoint (see [Processor.Process]), so that the next owner
// continues the count.
func WithInMemoryState() Option {
	return optionFunc(func(c *config) { c.memoryOnly = true })
}

// WithOperationBackoff sets the backoff between tries of a failed commit or
// exhaustion action. The default grows from 100ms to 10s with full jitter.
func WithOperationBackoff(b checkpoint.Backoff) Option {
	return optionFunc(func(c *config) { c.opBackoff = b })
}

// WithOutageBudget makes the processor tell an outage of the downstream
// from a poison batch with b (see [Budget]): when b runs out, failures
// spend no retries, nothing is given up because of them, failing
// partitions wait and one probe at a time tests the downstream until a
// success ends the outage. Give several processors the same Budget to make
// it one for all of them (a host's). The default, like a nil Budget, has
// none: every failure counts toward its batch's give-up, as the policy
// says, even when every partition fails at once. It is off by default
// because it holds batches past the policy's limits while an outage
// lasts, and an upstream fault that makes every record bad looks like an
// outage: with a budget, it stalls the stream instead of dead-lettering.
func WithOutageBudget(b *Budget) Option {
	return optionFunc(func(c *config) { c.budget = b })
}

// Processor is the retry engine: it runs a [Handler] over units of work
// and applies the retry policy to each. A unit is a claimed partition's
// batch, settled by a checkpoint: an adapter calls [Processor.Process] once
// per claimed partition, each in its own goroutine. Or it is a leased
// record, settled on its own (a Kafka share group): the share consumer
// hands each poll's records to the engine's lease driver (lease.go; its
// seam with the transport is internal). Both run the same code for every
// retry decision (unit.go). A Processor is safe for
// concurrent use.
type Processor struct {
	h Handler
	// handle is h's Handle, or h itself when it is a HandlerFunc: called
	// for every delivery, without HandlerFunc.Handle's second call.
	handle HandlerFunc
	cfg    config
	log    *slog.Logger

	claims atomic.Uint64 // the latest ClaimID
	// wrote is how long the latest retry-state commit took, on any of
	// the processor's partitions, in either driver (nanoseconds; 0
	// before the first): a started mark is sent that much ahead of its
	// retry (Processor.markLead).
	wrote atomic.Int64
	// writing is when a retry-state commit now in flight began, on any of
	// the processor's partitions (the clock's UnixNano; 0 for none): until
	// it returns, a commit takes at least the time since (writeTime).
	writing atomic.Int64

	mu      sync.Mutex
	stopped map[unitKey]*stoppedEntry
}

// unitKey names a unit in the stop registry: a partition (offset -1) or
// one record of it.
type unitKey struct {
	topic     string
	partition int32
	offset    int64
}

type stoppedEntry struct {
	key  unitKey
	info StoppedPartition
	cmd  chan command  // from Resume or Skip, taken by the worker
	gone chan struct{} // closed when the worker no longer waits for a command
}

// NewProcessor returns a Processor that runs h. It returns an error that
// says what is wrong when h is nil in any form (a nil Handler, a nil
// HandlerFunc, PerRecord(nil), a nil pointer), when an option is nil or
// out of range (a nil clock, rand factory, operation backoff or exhaustion
// action, a Budget
// not made by NewBudget), or when the policy is invalid.
func NewProcessor(h Handler, opts ...Option) (*Processor, error) {
	if isNil(h) {
		if h == nil {
			return nil, errors.New("stream: NewProcessor: nil handler")
		}
		return nil, fmt.Errorf("stream: NewProcessor: nil handler (a nil %T)", h)
	}
	cfg := config{
		clock:     systemClock{},
		newRand:   func() checkpoint.Rand { return globalRand{} },
		opBackoff: checkpoint.FullJitter(checkpoint.Capped(10*time.Second, checkpoint.Exponential(100*time.Millisecond))),
	}
	for i, o := range opts {
		if isNil(o) {
			return nil, fmt.Errorf("stream: NewProcessor: option %d is nil", i+1)
		}
		o.apply(&cfg)
	}
	if err := cfg.policy.Validate(); err != nil {
		return nil, fmt.Errorf("stream: %w", err)
	}
	switch {
	case isNil(cfg.clock):
		return nil, errors.New("stream: NewProcessor: WithClock(nil): give a clock, or leave the option out for the system clock")
	case cfg.newRand == nil:
		return nil, errors.New("stream: NewProcessor: WithRand(nil): give a function that returns a Rand, or leave the option out")
	case cfg.opBackoff == nil:
		return nil, errors.New("stream: NewProcessor: WithOperationBackoff(nil): give a backoff, or leave the option out")
	case cfg.nilInOptions:
		return nil, errors.New("stream: NewProcessor: Options holds a nil option")
	case cfg.nilExhaustion:
		return nil, errors.New("stream: NewProcessor: WithExhaustionAction(nil): give an action (DeadLetter, StopPartition, a re-drive store's park), or leave the option out to skip a batch given up")
	case cfg.budget != nil && cfg.budget.cfg.ProbeBackoff == nil:
		return nil, errors.New("stream: NewProcessor: WithOutageBudget: the Budget was not made by NewBudget")
	}
	if err := cfg.keyed.prepare(&cfg); err != nil {
		return nil, err
	}
	if len(cfg.keyed.mw) > 0 {
		h = Chain(h, cfg.keyed.mw...)
	}
	p := &Processor{h: h, handle: h.Handle, cfg: cfg, log: cfg.logger}
	if f, ok := h.(HandlerFunc); ok {
		p.handle = f
	}
	if p.log == nil {
		p.log = defaultLogger()
	}
	if cfg.budget != nil {
		cfg.budget.listen(&p.cfg.hooks)
	}
	return p, nil
}

// newRand returns a worker's Rand: WithRand's, or the global source when
// that gives none.
func (p *Processor) newRand() checkpoint.Rand {
	if r := p.cfg.newRand(); !isNil(r) {
		return r
	}
	return globalRand{}
}

// globalRand, the default Rand, draws from math/rand/v2's global source,
// which is safe for concurrent use: no partition keeps a generator of its
// own (it would be 32 bytes for every partition, idle or not).
type globalRand struct{}

func (globalRand) Float64() float64 { return rand.Float64() }

// Policy returns the processor's retry policy (the zero Policy for a nil
// Processor).
func (p *Processor) Policy() checkpoint.Policy {
	if p == nil {
		return checkpoint.Policy{}
	}
	return p.cfg.policy
}

// Logger returns the processor's logger (when none was given, one that
// sends warnings and errors to slog.Default()): adapters log to it unless
// they are given a logger of their own.
func (p *Processor) Logger() *slog.Logger {
	if p == nil || p.log == nil {
		return defaultLogger()
	}
	return p.log
}

// Process runs the claim's partition until ctx is done or the claim fails:
// it fetches a batch, delivers it until it succeeds or is given up, writes the
// checkpoint, and goes on with the next. While a batch waits out a backoff the
// claim is paused.
//
// Process always returns a non-nil error that says why it stopped: ctx's
// error when the adapter ended the claim, [ErrRevoked], or the claim's
// failure. A batch in flight when ctx ends is abandoned without a checkpoint.
//
// Unless [WithInMemoryState] is given, the retry state of a withheld batch
// is committed as the checkpoint's metadata, with the checkpoint at the
// batch's first record, at two points of each retry: after the failure, when
// a backoff follows (retries so far, first failure, when the next retry is
// due, a RetryResult's own count and delay), and before the retry is
// delivered (marked started). After a backoff of at most 10ms the mark is
// sent ahead of the retry's due time by what the last such commit took and
// a millisecond, so that it lands about when the backoff ends, and a
// backoff too short for both commits one after the other (once a commit's
// time is known) gets one, the failure with its retry marked started, at
// once; a crash or a move after such a mark landed and before the retry
// was delivered counts the retry, so the batch can be given up one
// delivery early, never late. A longer backoff's mark is written once the
// backoff is over. A first
// delivery commits nothing before it runs; a success clears the state. When Process starts, it reads the
// claim's committed metadata, and a batch that starts at the committed
// offset continues from that state: it waits out what is left of its
// backoff (never longer than the policy allows for that retry) and counts
// its retries from where the previous owner stopped. A retry the previous
// owner had started counts as made even if it never ended (a revocation or
// a crash during it): it is not repeated, and the next one follows after
// the policy's backoff, or the batch is given up once the retries are
// spent. A retry whose time budget ran out by the time it is due is not
// delivered. Metadata written by other tools is ignored.
func (p *Processor) Process(ctx context.Context, c Claim) (err error) {
	switch {
	case p == nil || p.h == nil:
		return errors.New("stream: Process on a Processor not made by NewProcessor")
	case isNil(c):
		return errors.New("stream: Process: nil claim")
	case ctx == nil:
		return errors.New("stream: Process: nil context")
	}
	// Everything the worker calls (the handler, hooks, the exhaustion
	// action) runs inside: the Close of whatever runs this processor (an
	// adapter's consumer, the functions host), called from there, stops
	// it without waiting for this worker, which cannot end before the call
	// returns.
	lifecycle.Inside(func() { err = p.process(ctx, c) })
	return err
}

func (p *Processor) process(ctx context.Context, c Claim) (err error) {
	off, md := c.Committed()
	id := p.claims.Add(1)
	if h := p.cfg.hooks.Claimed; h != nil {
		h(ClaimEvent{Topic: c.Topic(), Partition: c.Partition(), ClaimID: id, Committed: off, Metadata: md})
	}
	if p.cfg.keyed.ordering != ByPartition {
		if h := p.cfg.hooks.Released; h != nil {
			defer func() { h(ReleaseEvent{Topic: c.Topic(), Partition: c.Partition(), ClaimID: id, Cause: err}) }()
		}
		return p.processKeyed(ctx, c, id) // keyed.go
	}
	s := &partition{p: p, ctx: ctx, c: c, claim: id, lastNext: off, from: -1, rnd: p.newRand()}
	if b := p.cfg.budget; b != nil {
		s.member = b.join()
	}
	return s.run(off, md)
}

// partition is what a partition's worker keeps for as long as its claim
// lasts, parked or not: a claim that parks its worker while nothing is
// buffered (park.Claim) ends the worker's goroutine and lets go of the
// rest of the worker (its retry machine, its batch, its logger), and the
// worker is made again from this when records arrive or the claim ends.
type partition struct {
	p      *Processor
	ctx    context.Context
	c      Claim
	claim  uint64          // the ClaimID of its events
	rnd    checkpoint.Rand // WithRand's, made once per claim
	member *budgetMember   // nil for none
	// The worker's lastNext, from and restored when it parked: the offset
	// last committed, and a restored retry state not yet applied (a
	// worker that parks before its first batch keeps it for that batch).
	lastNext, from int64
	restored       *retrystate.State
}

// run runs the partition's worker until the claim ends, the worker fails,
// or it parks (park.ErrParked). off and md are the committed offset and
// metadata the claim started with, read for a retry state when md is not
// empty (the first run only).
func (s *partition) run(off int64, md string) (err error) {
	p, c, ctx := s.p, s.c, s.ctx
	defer func() {
		if err == park.ErrParked {
			return // the claim goes on, and resumes the worker
		}
		if s.member != nil {
			s.member.leave()
		}
		if h := p.cfg.hooks.Released; h != nil {
			h(ReleaseEvent{Topic: c.Topic(), Partition: c.Partition(), ClaimID: s.claim, Cause: err})
		}
	}()
	w := worker{
		c:        c,
		m:        retrystate.NewMachineOf(&p.cfg.policy),
		batch:    Batch{Topic: c.Topic(), Partition: c.Partition()},
		from:     s.from,
		restored: s.restored,
		lastNext: s.lastNext,
		member:   s.member,
	}
	_, w.positioned = c.(Positioner)
	w.first = attemptOf(&w.m)
	w.u = unit{p: p, log: partitionLogger(p.log, c.Topic(), c.Partition()), rnd: s.rnd, claim: s.claim, beforeHalt: w.beforeHalt}
	if !p.cfg.memoryOnly && md != "" {
		w.readState(off, md)
	}
	pc, _ := c.(park.Claim)
	for {
		recs := w.rest
		w.rest = nil
		if len(recs) == 0 {
			if pc != nil && w.fetch == flowing && w.delivery == counted {
				// Nothing held: the worker parks, unless the claim has
				// records or has ended.
				s.lastNext, s.from, s.restored = w.lastNext, w.from, w.restored
				if pc.Park(s.resume) {
					return park.ErrParked
				}
			}
			recs, err = c.Fetch(ctx)
			if err != nil {
				if ctx.Err() != nil {
					return context.Cause(ctx)
				}
				return fmt.Errorf("stream: fetch %s/%d: %w", c.Topic(), c.Partition(), err)
			}
			if len(recs) == 0 {
				if err := w.skip(ctx); err != nil {
					return err
				}
				continue
			}
		}
		w.batch.Records = recs
		if err := w.run(ctx); err != nil {
			return err
		}
		// The batch is checkpointed: the worker lets go of its records,
		// so that an idle partition keeps neither them nor their array
		// (the claim may reuse it, or let it go).
		w.batch.Records = nil
	}
}

// resume runs a parked worker again, on the goroutine the claim started
// for it (see park.Claim).
func (s *partition) resume() (err error) {
	lifecycle.Inside(func() { err = s.run(-1, "") })
	return err
}
