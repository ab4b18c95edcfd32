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
// only (a nil Rand stands for the default). The default is a randomly
// seeded PCG generator for each.
func WithRand(newRand func() checkpoint.Rand) Option {
	return optionFunc(func(c *config) { c.newRand = newRand })
}

// WithExhaustionAction sets what happens to a batch whose retries are spent
// or whose error is not retryable. The default (the option left out) skips
// it. A nil action is refused by [NewProcessor], as the other nil options
// are: leave the option out for the default.
func WithExhaustionAction(a ExhaustionAction) Option {
	return optionFunc(func(c *config) { c.exhaustion, c.nilExhaustion = a, a == nil })
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
// record, settled on its own (a Kafka share group): the transport hands
// each poll's records to a [LeaseLane] of [Processor.Leases]. Both run the
// same code for every retry decision (unit.go). A Processor is safe for
// concurrent use.
type Processor struct {
	h   Handler
	cfg config
	log *slog.Logger

	claims atomic.Uint64 // the latest ClaimID

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
		clock: systemClock{},
		newRand: func() checkpoint.Rand {
			return rand.New(rand.NewPCG(rand.Uint64(), rand.Uint64()))
		},
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
	p := &Processor{h: h, cfg: cfg, log: cfg.logger}
	if p.log == nil {
		p.log = defaultLogger()
	}
	if cfg.budget != nil {
		cfg.budget.listen(&p.cfg.hooks)
	}
	return p, nil
}

// newRand returns a worker's Rand: WithRand's, or a randomly seeded PCG
// when that gives none.
func (p *Processor) newRand() checkpoint.Rand {
	if r := p.cfg.newRand(); !isNil(r) {
		return r
	}
	return rand.New(rand.NewPCG(rand.Uint64(), rand.Uint64()))
}

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
// due, a RetryResult's own count and delay), and just before the retry is
// delivered (marked started). A first delivery commits nothing before it
// runs; a success clears the state. When Process starts, it reads the
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
	if h := p.cfg.hooks.Released; h != nil {
		defer func() { h(ReleaseEvent{Topic: c.Topic(), Partition: c.Partition(), ClaimID: id, Cause: err}) }()
	}
	if p.cfg.keyed.ordering != ByPartition {
		return p.processKeyed(ctx, c, id) // keyed.go
	}
	w := worker{
		claim: id,
		p:     p,
		c:     c,
		m:     checkpoint.NewMachine(p.cfg.policy),
		rnd:   p.newRand(),
		batch: Batch{Topic: c.Topic(), Partition: c.Partition()},
		log:   p.log.With("topic", c.Topic(), "partition", c.Partition()),
		from:  -1,
	}
	w.u = unit{p: p, log: w.log, rnd: w.rnd, claim: id, beforeHalt: w.beforeHalt}
	if !p.cfg.memoryOnly {
		w.readState(off, md)
	}
	if b := p.cfg.budget; b != nil {
		w.member = b.join()
		defer w.member.leave()
	}
	for {
		recs := w.rest
		w.rest = nil
		if len(recs) == 0 {
			recs, err = c.Fetch(ctx)
			if err != nil {
				if ctx.Err() != nil {
					return context.Cause(ctx)
				}
				return fmt.Errorf("stream: fetch %s/%d: %w", c.Topic(), c.Partition(), err)
			}
			if len(recs) == 0 {
				continue
			}
		}
		w.batch.Records = recs
		if err := w.run(ctx); err != nil {
			return err
		}
	}
}

// The partition worker's states, besides its batch's retry state (the
// machine, checkpoint.Machine) and the restored state it continues (from).
// Each is set for the batch under way, and run resets it when a batch
// begins.
//
// fetch: flowing, or paused (the claim's Pause: no more records are
// fetched while the batch waits).
//
//	flowing -> paused   a retry scheduled with a delay, or due later than
//	                    now; an outage waited out; a batch halted by
//	                    StopPartition (beforeHalt)
//	paused  -> flowing  the batch's checkpoint written (commit)
//
// delivery, in the outage budget's terms (w.member; counted without one):
//
//	counted   -> uncounted  a failure the budget does not count (an
//	                        outage): the machine is put back as it was
//	                        before the delivery, which spent nothing
//	uncounted -> probing    the outage waited out names the batch its
//	                        probe (w.probe is the probe's number)
//	counted   -> probing    the same, for a retry due during an outage
//	probing   -> counted    a retry refused when due (the probe dropped:
//	                        another partition probes)
//	any       -> counted    the next delivery starts (it is the probe when
//	                        probing: Attempt.Probe)
//
// scope, what a give-up of the batch gives up:
//
//	wholeBatch     -> failedRecord    a delivery failed at the batch's
//	                                  first record (FailedAt, PerRecord),
//	                                  or the restored state says its
//	                                  failure was its record's alone
//	wholeBatch     -> previousGiveUp  the restored state is a previous
//	                                  owner's give-up of w.givenUp records
//	previousGiveUp -> wholeBatch      the stopped batch resumed
//	any            -> wholeBatch      a delivery returns, before its
//	                                  result is read
type (
	fetchState    bool
	deliveryState uint8
	giveUpScope   uint8
)

// The values of fetchState.
const (
	flowing fetchState = false
	paused  fetchState = true
)

// The values of deliveryState; the zero value is counted.
const (
	counted deliveryState = iota
	uncounted
	probing
)

// The values of giveUpScope; the zero value is wholeBatch.
const (
	wholeBatch giveUpScope = iota
	failedRecord
	previousGiveUp
)

// worker is the state of one partition's Process call.
type worker struct {
	p     *Processor
	c     Claim
	m     checkpoint.Machine
	rnd   checkpoint.Rand
	batch Batch
	fetch fetchState
	log   *slog.Logger
	claim uint64 // the ClaimID of the events
	u     unit   // what gives a batch up (unit.go)

	// from is the offset of the batch that restored continues; -1 for none.
	from     int64
	restored checkpoint.State

	// scope is what a give-up of the batch gives up; givenUp, in
	// previousGiveUp, how many of its records the previous owner gave up.
	scope   giveUpScope
	givenUp int
	// rest holds the records after those given up (a record given up
	// alone, or the records a previous owner gave up), fetched already:
	// they are delivered as the next batch.
	rest []Record
	// extra is how many records after the batch the restored state
	// also covers (a previous owner's batch that this owner's fetch did
	// not return whole): fetched before the batch is retried or given
	// up, so that they are never delivered again with a fresh count. 0
	// for none.
	extra int

	// member is the worker's place in the outage budget; nil for none.
	member *budgetMember
	// delivery is what the latest or next delivery is in the budget's
	// terms; probe, when probing, the number of the outage's probe.
	delivery deliveryState
	probe    int
}

// pause pauses the claim, unless it is paused.
func (w *worker) pause() {
	if w.fetch == flowing {
		w.c.Pause()
		w.fetch = paused
	}
}

func (w *worker) infoOf(b *Batch) BatchInfo { return w.u.infoOf(b) }

// readState reads the retry state committed by a previous owner.
func (w *worker) readState(off int64, md string) {
	if off < 0 || md == "" {
		return
	}
	s, err := checkpoint.ReadCommitted(off, md)
	var other *checkpoint.OtherRecordError
	switch {
	case errors.Is(err, checkpoint.ErrForeignMetadata):
		w.log.Debug("redeliver: committed metadata is not ours, ignored", "offset", off, "metadata", md)
	case errors.As(err, &other):
		// Not the state of the record at the checkpoint: never apply
		// one record's count to another.
		w.log.Warn("redeliver: committed retry state belongs to another record than the one at the checkpoint, ignored",
			"offset", off, "state_offset", other.Offset, "metadata", md)
	case err != nil:
		w.log.Warn("redeliver: damaged retry state ignored, the batch starts its count over", "offset", off, "error", err)
	default:
		w.from, w.restored = off, s
	}
}

// run delivers w.batch until it is resolved and checkpointed. It returns nil
// when the checkpoint was written, an error when the worker must stop.
//
// Each turn of the loop delivers the batch once and acts on the decision:
// a retry is scheduled (its state committed when there is a backoff to wait
// out), waited for, checked again when due, and marked started in a commit
// before it is delivered; a first delivery commits nothing before it runs.
func (w *worker) run(ctx context.Context) error {
	b := &w.batch
	w.m.Begin(b.Records[0].Timestamp)
	w.scope, w.givenUp, w.extra = wholeBatch, 0, 0
	var (
		d       checkpoint.Decision
		outcome Outcome // of the latest delivery
		cause   error   // the error behind d, for the hooks
		fresh   bool    // d was just made, not restored
		deliver = true
	)
	if w.from >= 0 {
		if w.from == b.FirstOffset() {
			d, outcome, cause, fresh = w.resume(b)
			deliver = d.Action == 0
			if w.extra > 0 {
				if err := w.fetchCovered(ctx, b); err != nil {
					return err
				}
			}
		}
		w.from = -1
	}
	for {
		if deliver {
			var err error
			if d, outcome, cause, err = w.deliver(ctx, b); err != nil {
				return err
			}
			fresh = true
		}
		deliver = true
		if w.delivery == uncounted {
			// An outage: the failure spent nothing. The batch is
			// delivered again when the outage ends or as its probe.
			if err := w.outage(ctx, b); err != nil {
				return err
			}
			continue
		}
		if d.Action == checkpoint.RetryNow || d.Action == checkpoint.RetryLater {
			if fresh {
				w.scheduled(b, d, cause, outcome)
				if d.Delay > 0 {
					// The failure is counted for a next owner before the
					// backoff; with none, the started mark below counts it.
					if err := w.saveState(ctx, b); err != nil {
						return err
					}
				}
			}
			if d.At.After(w.p.cfg.clock.Now()) {
				w.pause()
			}
			if err := w.p.wait(ctx, d.At); err != nil {
				return w.abandon(ctx)
			}
			if w.member != nil && w.member.outage() {
				// A failing partition waits out the outage before
				// its retry.
				if err := w.outage(ctx, b); err != nil {
					return err
				}
			}
			if d = w.m.Start(w.p.cfg.clock.Now()); d.Action != checkpoint.StopRetrying {
				// The retry counts before it starts: a move or a crash
				// during it cannot make a next owner repeat it.
				if err := w.saveState(ctx, b); err != nil {
					return err
				}
				continue
			}
			outcome = Failed // a retry refused when due: the budget ran out
			if w.delivery == probing {
				// It was to be the outage's probe: another partition
				// probes instead.
				w.member.dropProbe()
				w.delivery, w.probe = counted, 0
			}
		}
		done, reply := b, chan<- error(nil)
		if d.Action == checkpoint.StopRetrying && outcome == Failed {
			if w.member != nil {
				// Given up: the partition no longer counts as failing
				// in the outage budget, while its exhaustion action
				// runs or StopPartition holds it.
				w.member.resolved()
			}
			// A batch that failed at a known record gives up that record
			// only, and a batch a previous owner gave up the records it
			// gave up; the records after them are delivered as the next
			// batch.
			given := b
			if n := w.giving(); n < len(b.Records) {
				given = &Batch{Topic: b.Topic, Partition: b.Partition, Records: b.Records[:n], Attempt: b.Attempt}
			}
			if w.p.cfg.exhaustion != nil && !w.p.cfg.memoryOnly {
				// Until its action succeeds, a next owner gives it up
				// again at once, with what it was given up with, and
				// those records only.
				s := w.m.GivenUpState()
				s.Offset, s.Records = b.FirstOffset(), len(given.Records)
				if err := w.write(ctx, b, b.FirstOffset(), checkpoint.EncodeState(s)); err != nil {
					return err
				}
			}
			var xerr *checkpoint.ExhaustedError
			errors.As(w.m.Err(), &xerr)
			again, r, err := w.u.exhaust(ctx, given, xerr)
			if err != nil {
				return w.abandon(ctx)
			}
			if again {
				w.m.Begin(b.Records[0].Timestamp)
				w.givenUp = 0
				if w.scope == previousGiveUp {
					w.scope = wholeBatch
				}
				continue
			}
			done, reply = given, r
			if given != b {
				// Before the records fetched after the batch, if any.
				w.rest = append(b.Records[len(given.Records):], w.rest...)
			}
		}
		err := w.commit(ctx, done)
		if reply != nil {
			if err != nil {
				err = fmt.Errorf("stream: skip of %s/%d at offset %d not written (%w): its next owner delivers the batch again", b.Topic, b.Partition, done.FirstOffset(), err)
			}
			reply <- err
		}
		return err
	}
}

// giving returns how many records of the batch a give-up gives up: the
// failed record alone after a failure at a known record, the records a
// previous owner gave up for a give-up it committed, or all of them.
func (w *worker) giving() int {
	switch {
	case w.scope == failedRecord:
		return 1
	case w.scope == previousGiveUp && w.givenUp > 0:
		return w.givenUp
	}
	return len(w.batch.Records)
}

// deliver calls the handler once and returns the machine's decision on
// what it returned (the zero Decision for a success), the delivery's
// outcome and its error. After a partial success it has moved the
// checkpoint to the failed record and cut the batch there. It returns an
// error when the worker must stop.
func (w *worker) deliver(ctx context.Context, b *Batch) (d checkpoint.Decision, outcome Outcome, cause error, stop error) {
	hooks := &w.p.cfg.hooks
	clock := w.p.cfg.clock
	b.Attempt = attemptOf(&w.m)
	b.Attempt.Probe = w.delivery == probing
	w.delivery, w.probe = counted, 0
	if ctx.Err() != nil {
		// The claim ended since the batch was fetched or its retry marked
		// started (the partition revoked, its lease lost, a shutdown): the
		// handler is not called for a partition this worker no longer
		// holds. Its next owner delivers the batch.
		return d, Cancelled, nil, w.abandon(ctx)
	}
	var start, now time.Time
	if hooks.Delivered != nil {
		start = clock.Now()
	}
	err := w.p.call(ctx, b)
	switch _, system := clock.(systemClock); {
	case system && !start.IsZero():
		// time.Now, less any step of the wall clock during the call:
		// one read of the monotonic clock instead of two clocks.
		now = start.Add(time.Since(start))
	case err != nil || hooks.Delivered != nil || w.member != nil:
		now = clock.Now()
	}
	if ctx.Err() != nil {
		w.p.delivered(w.infoOf(b), b.Attempt, Cancelled, err, start, now, false)
		return d, Cancelled, err, w.abandon(ctx)
	}
	w.scope, w.givenUp = wholeBatch, 0
	res := readResult(err, b, w.log)
	outcome, cause = res.outcome, res.cause
	partial := res.partial // the failed record is known: records before its index are done
	if err != nil {
		if partial != nil && partial.Index > 0 {
			// The retry state belongs to the batch's first record,
			// which is done: the record that failed starts its own
			// count, time budget and age.
			w.m.Begin(b.Records[partial.Index].Timestamp)
		}
		if rr := res.rr; rr != nil {
			d = w.m.RequestRetries(now, rr.request(), w.rnd)
			if w.member != nil {
				w.member.requested(now)
			}
		} else {
			var before checkpoint.Machine
			if w.member != nil {
				before = w.m
			}
			d = w.m.Fail(now, cause, w.rnd)
			switch {
			case w.member == nil:
			case d.Action == checkpoint.StopRetrying && d.Reason == checkpoint.NotRetryable:
				w.member.neutral(now)
			default:
				counts, began := w.member.failed(now, w.infoOf(b))
				if began {
					w.log.Error("redeliver: outage: the outage budget ran out, failures spend no retries until a delivery succeeds",
						"offset", b.FirstOffset(), "error", cause)
				}
				if !counts && (d.Action != checkpoint.StopRetrying || d.Reason != checkpoint.RecordTooOld) {
					// An outage, not this batch's failure: it spends
					// no retry. MaxRecordAge applies all the same: a
					// failure past it counts, and gives the batch up.
					w.m, d, w.delivery = before, checkpoint.Decision{}, uncounted
				}
			}
		}
	} else if w.member != nil {
		if e, ended := w.member.succeeded(now, w.infoOf(b)); ended {
			w.log.Warn("redeliver: outage ended: a delivery succeeded", "offset", b.FirstOffset(),
				"lasted", e.Duration, "probes", e.Probes, "waiting", e.Failing)
		}
	}
	w.p.delivered(w.infoOf(b), b.Attempt, outcome, err, start, now, w.delivery == uncounted)
	if partial != nil && partial.Index > 0 {
		// The records before partial.Index are done: move the checkpoint
		// to the failed record and go on with the rest of the batch.
		if err := w.write(ctx, b, b.Records[partial.Index].Offset, ""); err != nil {
			return d, outcome, cause, err
		}
		b.Records = b.Records[partial.Index:]
	}
	if partial != nil && outcome == Failed {
		w.scope = failedRecord
	}
	return d, outcome, cause, nil
}

func (w *worker) scheduled(b *Batch, d checkpoint.Decision, err error, outcome Outcome) {
	if outcome == RetryRequested {
		err = nil
	}
	if h := w.p.cfg.hooks.RetryScheduled; h != nil {
		h(RetryEvent{BatchInfo: w.infoOf(b), Retry: d.Retry, Delay: d.Delay, At: d.At, Err: err})
	}
	if w.scope == failedRecord {
		w.log.Info("redeliver: retry scheduled", "offset", b.FirstOffset(), "records", len(b.Records),
			"failed_offset", b.FirstOffset(), "retry", d.Retry, "delay", d.Delay, "error", err)
	} else {
		w.log.Info("redeliver: retry scheduled", "offset", b.FirstOffset(), "records", len(b.Records),
			"retry", d.Retry, "delay", d.Delay, "error", err)
	}
	if d.Delay > 0 {
		w.pause()
	}
}

// outage waits, paused, until the outage ends or b is to be delivered as
// its probe. The time it waits does not count against the policy's time
// budget (it adds to the state's OutageTime). It returns an error when the
// worker must stop.
func (w *worker) outage(ctx context.Context, b *Batch) error {
	w.pause()
	clock := w.p.cfg.clock
	start := clock.Now()
	w.log.Warn("redeliver: outage: partition waits for the downstream", "offset", b.FirstOffset(), "records", len(b.Records), "retry", b.Attempt.Retry)
	probe, since, err := w.member.await(ctx, clock)
	if err != nil {
		return w.abandon(ctx)
	}
	if waited := clock.Now().Sub(start); waited > 0 {
		if s := w.m.State(); !s.FirstFailure.IsZero() {
			s.OutageTime += waited
			w.m.Restore(s)
		}
	}
	if probe > 0 {
		w.delivery, w.probe = probing, probe
		w.log.Info("redeliver: outage: probing the downstream with this batch", "offset", b.FirstOffset(), "records", len(b.Records), "probe", probe)
		if h := w.p.cfg.hooks.Probing; h != nil {
			h(ProbeEvent{BatchInfo: w.infoOf(b), Probe: probe, Since: since})
		}
	}
	return nil
}

// errInvalidResult marks the error a handler's invalid result becomes: a
// FailedAt index outside the batch, a RetryResult out of range.
var errInvalidResult = errors.New("stream: invalid handler result")

// invalidResultError is a handler's invalid result, as the failure it is
// taken for. It wraps the handler's own error (its Err, for FailedAt), so
// that a Permanent error stays one.
type invalidResultError struct {
	msg string
	err error
}

func (e *invalidResultError) Error() string {
	if e.err == nil {
		return e.msg
	}
	return e.msg + ": " + e.err.Error()
}

func (e *invalidResultError) Unwrap() []error {
	if e.err == nil {
		return []error{errInvalidResult}
	}
	return []error{errInvalidResult, e.err}
}

// invalidIndex returns err, or, when err holds a *BatchError whose index
// names none of the n records, the error saying so: the whole batch fails.
func invalidIndex(err error, n int) error {
	var be *BatchError
	if !errors.As(err, &be) {
		return err
	}
	msg := fmt.Sprintf("stream: invalid handler result: FailedAt(%d, ...) names no record of this batch of %d (indexes 0 to %d): the whole batch fails", be.Index, n, n-1)
	if be.Err == nil {
		msg += ", with no error given"
	}
	return &invalidResultError{msg: msg, err: be.Err}
}

// asBatchError returns err's *BatchError when its index names one of the n
// records of the batch: an index out of range fails the whole batch.
func asBatchError(err error, n int) *BatchError {
	var be *BatchError
	if errors.As(err, &be) && be.Index >= 0 && be.Index < n {
		return be
	}
	return nil
}

// resume continues the retry state a previous owner committed for b, and
// returns what follows as run takes it: the restored retry to wait for, or,
// when the previous owner had started a retry that never reported its
// outcome, the decision that counts that retry as made (fresh: to be
// scheduled and committed anew). The zero Decision means that b is to be
// delivered as if nothing had been restored.
func (w *worker) resume(b *Batch) (d checkpoint.Decision, outcome Outcome, cause error, fresh bool) {
	s := w.restored
	d = w.m.Resume(s, w.p.cfg.clock.Now(), w.rnd)
	w.log.Info("redeliver: continuing retry state of a previous owner", "offset", b.FirstOffset(),
		"retries", s.Retries, "first_failure", s.FirstFailure, "next_at", s.NextAt, "started", s.Started,
		"next", d.Action.String())
	outcome = Failed
	if !s.Halted {
		w.cover(b, s, d)
	}
	switch {
	case s.GivenUp != 0 && !s.Halted:
		cause = w.m.LastError()
		w.givenUp = s.Records
		if w.scope == wholeBatch && s.Records > 0 {
			w.scope = previousGiveUp
		}
	case s.Started:
		// Its outcome is not known: counted as failed, under a
		// RetryResult too, so that a spent count gives the batch up to
		// the exhaustion action instead of moving past it unhandled.
		cause = checkpoint.ErrInterrupted
	case s.Request != (checkpoint.Request{}):
		outcome = RetryRequested
	}
	return d, outcome, cause, s.Started && !s.Halted
}

// cover makes b the records that the restored state s covers, as d (the
// machine's answer to it) goes on with them: the record s belongs to
// alone after a failure at that record, or the Records from it. Records
// fetched after those are delivered as the next batch. Records it covers
// that the fetch did not return (a next owner that fetches fewer) are
// w.extra, which run fetches before it retries b or gives it up.
func (w *worker) cover(b *Batch, s checkpoint.State, d checkpoint.Decision) {
	// A retry state that does not say what it covers (written before
	// states did) is taken as a failure at its record alone: given up,
	// it gives up that record only, never records that may not have
	// failed.
	if s.Alone || s.Records <= 0 && s.GivenUp == 0 {
		w.scope = failedRecord
	}
	if s.Alone || s.Records <= 0 || d.Action == 0 {
		return
	}
	if n := s.Records; n < len(b.Records) {
		// Capped, so that a later split of b (a record given up
		// alone) never writes over the records kept in w.rest.
		w.rest = b.Records[n:]
		b.Records = b.Records[:n:n]
		return
	}
	w.extra = s.Records - len(b.Records)
}

// fetchCovered fetches the records that the restored state of b covers
// and that b does not hold yet (w.extra), and adds them to b: the retry
// is delivered to, or the give-up covers, the batch the previous owner's
// count is for, and none of its records comes back later as a batch with
// a fresh count. The records fetched after them are delivered as the next
// batch. It returns an error when the worker must stop.
func (w *worker) fetchCovered(ctx context.Context, b *Batch) error {
	// The claim owns the slice it returned once Fetch is called again.
	b.Records = append(make([]Record, 0, len(b.Records)+w.extra), b.Records...)
	for w.extra > 0 {
		recs, err := w.c.Fetch(ctx)
		if err != nil {
			if ctx.Err() != nil {
				return w.abandon(ctx)
			}
			return fmt.Errorf("stream: fetch %s/%d: %w", w.c.Topic(), w.c.Partition(), err)
		}
		n := min(len(recs), w.extra)
		b.Records = append(b.Records, recs[:n]...)
		w.extra -= n
		if n < len(recs) {
			w.rest = recs[n:]
		}
	}
	return nil
}

// saveState commits the retry state of the withheld batch b, with the
// checkpoint at its first record.
func (w *worker) saveState(ctx context.Context, b *Batch) error {
	if w.p.cfg.memoryOnly {
		return nil
	}
	s := w.m.State()
	alone := w.scope == failedRecord
	s.Offset, s.Alone, s.Records, s.LastError = b.FirstOffset(), alone, 0, ""
	if !alone {
		s.Records = len(b.Records) // a whole-batch failure covers the batch
	}
	if err := w.m.LastError(); err != nil {
		s.LastError = err.Error() // its first 128 bytes are kept
	}
	return w.write(ctx, b, b.FirstOffset(), checkpoint.EncodeState(s))
}

// beforeHalt pauses the claim and commits the batch's state as halted,
// before the partition is registered as stopped: a next owner, should the
// partition move meanwhile, delivers the batch again with a fresh count.
func (w *worker) beforeHalt(ctx context.Context, b *Batch, _ *checkpoint.ExhaustedError) error {
	w.pause()
	if w.p.cfg.memoryOnly {
		return nil
	}
	s := w.m.GivenUpState()
	s.Offset, s.Halted = b.FirstOffset(), true
	return w.write(ctx, b, b.FirstOffset(), checkpoint.EncodeState(s))
}

// commit writes the checkpoint past b and resumes a paused claim. The
// partition no longer counts as failing in the outage budget.
func (w *worker) commit(ctx context.Context, b *Batch) error {
	if err := w.write(ctx, b, b.LastOffset()+1, ""); err != nil {
		return err
	}
	if w.member != nil {
		w.member.resolved()
	}
	if w.fetch == paused {
		w.c.Resume()
		w.fetch = flowing
	}
	return nil
}

// write commits next with metadata, trying again until it succeeds. It
// returns an error only when the worker must stop.
func (w *worker) write(ctx context.Context, b *Batch, next int64, md string) error {
	err := w.c.Commit(ctx, next, md)
	if err != nil && !errors.Is(err, ErrRevoked) {
		err = w.u.repeat(ctx, "commit", true, func() error { return w.c.Commit(ctx, next, md) })
	}
	switch {
	case errors.Is(err, ErrRevoked):
		return w.abandonWith(ErrRevoked)
	case err != nil:
		// The claim ended (a stop, a revocation) while the commit waited
		// to be tried again: never silent, as a write given up.
		w.log.Warn("redeliver: commit given up: the claim ended before a failed commit was written; the partition's next owner starts from the last checkpoint written, and delivers the records after it again",
			"next", next, "offset", b.FirstOffset(), "records", len(b.Records), "cause", context.Cause(ctx))
		return w.abandon(ctx)
	}
	if h := w.p.cfg.hooks.Checkpointed; h != nil {
		h(CheckpointEvent{Topic: b.Topic, Partition: b.Partition, ClaimID: w.claim, Next: next, Metadata: md})
	}
	return nil
}

// errAbandoned is why a worker stops when it abandons a batch for no other
// reason it knows of.
var errAbandoned = errors.New("stream: batch abandoned")

// abandon reports the batch in flight and returns why the worker stops.
func (w *worker) abandon(ctx context.Context) error {
	return w.abandonWith(context.Cause(ctx))
}

func (w *worker) abandonWith(cause error) error {
	if cause == nil {
		// Never nil: the caller stops, and a nil would let the worker go
		// on as if the batch were done.
		cause = errAbandoned
	}
	b := &w.batch
	if h := w.p.cfg.hooks.Abandoned; h != nil {
		h(AbandonedEvent{BatchInfo: w.infoOf(b), Attempt: b.Attempt, Cause: cause})
	}
	w.log.Info("redeliver: batch abandoned, checkpoint left in place", "offset", b.FirstOffset(),
		"records", len(b.Records), "retry", b.Attempt.Retry, "cause", cause)
	return cause
}
