package stream

import (
	"context"
	"fmt"
	"math"
	"slices"
	"sync"
	"time"

	"github.com/redeliver-go/redeliver/checkpoint"
)

// BudgetConfig configures an outage [Budget]. Its zero value holds the
// defaults.
type BudgetConfig struct {
	// MaxTokens is the size of the budget (default 10). It starts full;
	// each failed delivery spends one token and each successful one
	// refills TokenRatio, up to MaxTokens, as gRPC's retry throttling
	// does. The budget runs out when it holds half of MaxTokens or less
	// while MinPartitions partitions are failing.
	MaxTokens float64
	// TokenRatio is what a successful delivery refills (default 0.1): the
	// budget runs out when more than about one delivery in 1+1/TokenRatio
	// fails (one in 11 by default) for long enough.
	TokenRatio float64
	// MinPartitions is how many partitions must be failing at once (their
	// latest delivery failed and their batch is neither done nor given up)
	// for the budget to run out (default 2, at least 2): the failures of
	// one partition's poison batch never make an outage, whatever the
	// other partitions do.
	MinPartitions int
	// ProbeBackoff is the wait before each probe of an outage, n counting
	// the probes of the outage from 1. The default is 1s, doubled after
	// each failed probe up to 30s:
	// checkpoint.Capped(30*time.Second, checkpoint.Exponential(time.Second)).
	// A wait shorter than [MinProbeDelay] is taken as MinProbeDelay: probes
	// never run hot.
	ProbeBackoff checkpoint.Backoff
}

// MinProbeDelay is the shortest wait before a probe of an outage, whatever
// the ProbeBackoff says: a ProbeBackoff of 0 would otherwise probe the
// downstream back to back while it is down.
const MinProbeDelay = 100 * time.Millisecond

// probeDelay returns the wait before probe n: the ProbeBackoff's, at least
// MinProbeDelay.
func (b *Budget) probeDelay(n int) time.Duration {
	return max(b.cfg.ProbeBackoff(n, 0, nil), MinProbeDelay)
}

// Budget tells an outage of the downstream from a poison batch, for the
// partitions of one [Processor] or of several that share it (see
// [WithOutageBudget]), in the manner of gRPC's retry throttling and Envoy's
// retry budgets: failed deliveries spend it, successful ones refill it.
//
// While tokens remain, nothing changes: retries and exhaustion actions
// work as the policy says. When the budget runs out (see [BudgetConfig]:
// failures outpace successes on several partitions at once), the
// processors treat it as an outage, not as poison:
//
//   - the failure that ran it out, and every failure during the outage,
//     is not counted: no retry is spent, no retry state is committed, and
//     no batch is given up because of it;
//   - a partition whose delivery failed, or whose retry falls due, waits,
//     paused, with its checkpoint in place;
//   - one probe at a time, after the probe backoff, delivers one waiting
//     partition's batch again (the partition that has waited longest, so
//     that one poison batch cannot hold the outage open);
//   - the first successful delivery (the probe's or any other) ends the
//     outage: the budget is full again and the waiting partitions deliver
//     their batches again, their retry counts where they stood.
//
// Poison batches on MinPartitions partitions at once, on a stream where
// no other partition has a batch to succeed with, look like an outage: the
// probes go round them until a delivery succeeds (new records on another
// partition, or the batches fixed). Raise MinPartitions when that is
// likely.
//
// Time spent waiting out an outage does not count against a policy's
// MaxRetryTime (the retry state keeps it as OutageTime; the first failure
// stays what it was). MaxRecordAge still applies: a failed delivery of a
// batch whose records are too old counts during an outage too, and gives
// the batch up (with infinite retries, poison batches on MinPartitions
// partitions are given up that way). A RetryResult, and an
// error the policy does not retry ([checkpoint.Permanent]), neither spend nor refill
// the budget.
//
// # State machine
//
// The budget is in one of three states; each partition worker (a member)
// is failing or not, and waiting in the queue or not:
//
//	Open          no outage: failures count as the policy says
//	Outage        no probe in flight; the next at probeAt, for the first in the queue
//	Probing(m)    member m delivers the probe; nobody else probes
//
// Events, and what they do:
//
//	failure counted          Open: a token spent, m failing; if tokens <= MaxTokens/2
//	                         and failing >= MinPartitions, Outage (OutageBegan),
//	                         the failure not counted, probeAt = now + probe delay 1
//	failure during outage    Outage/Probing: not counted; m failing, waits in the queue
//	retry due during outage  Outage/Probing: m waits in the queue, paused
//	probe granted            Outage, m first in the queue, now >= probeAt: Probing(m)
//	probe failed             Probing(m): Outage, probeAt = now + the next probe delay,
//	                         m back at the end of the queue
//	success (any member)     tokens refilled; in Outage/Probing: Open (OutageEnded),
//	                         tokens full, every waiter released; m not failing
//	RetryResult              m not failing; Probing(m): Outage, probeAt = now + the
//	                         next probe delay
//	not retryable (filter)   Probing(m): Outage, probeAt = now + the next probe delay
//	probe refused when due   Probing(m) (its time limits reached): Outage at once,
//	                         probeAt unchanged (nothing tested the downstream)
//	batch done               m not failing (committed past: a success, a spent
//	                         RetryResult; or given up, before its exhaustion
//	                         action runs, and while StopPartition holds it);
//	                         Probing(m): Outage at once
//	worker stops             m not failing, out of the queue; Probing(m): Outage at once
//
// Whoever holds the probe releases it: by its delivery's outcome, by its
// batch's end, or by stopping; the probe slot is never held by a member
// that no longer delivers. Probe delays come from ProbeBackoff, at least
// [MinProbeDelay] each.
//
// A Budget is safe for concurrent use.
type Budget struct {
	cfg BudgetConfig

	mu      sync.Mutex
	tokens  float64
	failing int // members whose latest delivery failed
	open    bool
	since   time.Time // when the outage began
	queue   []*budgetMember
	probe   *budgetMember // the member delivering the probe
	probes  int           // probes started in this outage
	probeAt time.Time     // when the next probe may start
	changed chan struct{} // closed and replaced when waiters must look again
	hooks   []*Hooks      // of the processors that use the budget
	pending []outageNote  // outage events whose hooks have not run yet

	events sync.Mutex // held while outage hooks run, so that they run in order
}

// NewBudget returns a Budget, full. It returns an error when a field of cfg
// is out of range.
func NewBudget(cfg BudgetConfig) (*Budget, error) {
	if cfg.MaxTokens == 0 {
		cfg.MaxTokens = 10
	}
	if cfg.TokenRatio == 0 {
		cfg.TokenRatio = 0.1
	}
	if cfg.MinPartitions == 0 {
		cfg.MinPartitions = 2
	}
	if cfg.ProbeBackoff == nil {
		cfg.ProbeBackoff = checkpoint.Capped(30*time.Second, checkpoint.Exponential(time.Second))
	}
	switch {
	case !(cfg.MaxTokens > 0) || math.IsInf(cfg.MaxTokens, 0):
		return nil, fmt.Errorf("stream: outage budget: MaxTokens %v: want a number greater than 0", cfg.MaxTokens)
	case !(cfg.TokenRatio > 0) || cfg.TokenRatio > cfg.MaxTokens:
		return nil, fmt.Errorf("stream: outage budget: TokenRatio %v: want a number greater than 0 and at most MaxTokens (%v)", cfg.TokenRatio, cfg.MaxTokens)
	case cfg.MinPartitions < 2:
		return nil, fmt.Errorf("stream: outage budget: MinPartitions %d: want 2 or more (with one partition, an outage and a poison batch cannot be told apart)", cfg.MinPartitions)
	}
	return &Budget{cfg: cfg, tokens: cfg.MaxTokens, changed: make(chan struct{})}, nil
}

// Config returns the budget's configuration, with its defaults filled in
// (the zero BudgetConfig for a nil Budget, which is no budget).
func (b *Budget) Config() BudgetConfig {
	if b == nil {
		return BudgetConfig{}
	}
	return b.cfg
}

// BudgetState is what [Budget.State] reports.
type BudgetState struct {
	Tokens  float64   // tokens left
	Failing int       // partitions whose latest delivery failed
	Outage  bool      // the budget ran out: an outage is in force
	Since   time.Time // when the outage began
	Waiting int       // partitions waiting for the outage to end
	Probes  int       // probes started in the outage
}

// State returns the budget's state (the zero BudgetState for a nil
// Budget).
func (b *Budget) State() BudgetState {
	if b == nil {
		return BudgetState{}
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	return BudgetState{Tokens: b.tokens, Failing: b.failing, Outage: b.open, Since: b.since, Waiting: len(b.queue), Probes: b.probes}
}

// OutageEvent reports the beginning or the end of an outage: the outage
// budget of the processor ran out, or a successful delivery ended it.
type OutageEvent struct {
	// BatchInfo is the batch whose failure began the outage or whose
	// success ended it; with a budget shared by several processors, it
	// may be another processor's.
	BatchInfo
	// Since is when the outage began.
	Since time.Time
	// Duration is how long it lasted (OutageEnded only).
	Duration time.Duration
	// Failing is how many partitions were failing: those whose failure
	// made the outage (OutageBegan), those still waiting (OutageEnded).
	Failing int
	// Probes is how many probes the outage started before it ended.
	Probes int
}

// ProbeEvent reports that a waiting partition's batch is delivered again
// during an outage, to test the downstream.
type ProbeEvent struct {
	BatchInfo
	// Probe is the probe's number in the outage, from 1.
	Probe int
	// Since is when the outage began.
	Since time.Time
}

// budgetMember is one partition worker's place in a Budget. Its fields are
// guarded by the budget's lock, except failing, which only its worker
// reads and writes (under the lock as well).
type budgetMember struct {
	b       *Budget
	failing bool
	queued  bool
}

// listen adds a processor's hooks to those told of outages.
func (b *Budget) listen(h *Hooks) {
	if h.OutageBegan == nil && h.OutageEnded == nil {
		return
	}
	b.mu.Lock()
	b.hooks = append(b.hooks, h)
	b.mu.Unlock()
}

// join returns the place of a new partition worker.
func (b *Budget) join() *budgetMember { return &budgetMember{b: b} }

// signal wakes the waiters. The caller holds b.mu.
func (b *Budget) signal() {
	close(b.changed)
	b.changed = make(chan struct{})
}

// unqueue removes m from the waiters. The caller holds b.mu.
func (b *Budget) unqueue(m *budgetMember) {
	if !m.queued {
		return
	}
	m.queued = false
	if i := slices.Index(b.queue, m); i >= 0 {
		b.queue = slices.Delete(b.queue, i, i+1)
	}
}

// note queues an outage event for the hooks and releases b.mu, which the
// caller holds; then it runs the hooks of every queued event, in order,
// without b.mu (a hook may read the budget's State).
func (b *Budget) note(began bool, e OutageEvent) {
	b.pending = append(b.pending, outageNote{began, e})
	b.mu.Unlock()
	b.events.Lock()
	defer b.events.Unlock()
	b.mu.Lock()
	pending, hooks := b.pending, b.hooks
	b.pending = nil
	b.mu.Unlock()
	for _, n := range pending {
		for _, h := range hooks {
			if n.began && h.OutageBegan != nil {
				h.OutageBegan(n.e)
			} else if !n.began && h.OutageEnded != nil {
				h.OutageEnded(n.e)
			}
		}
	}
}

type outageNote struct {
	began bool
	e     OutageEvent
}

// failed spends a token for a failed delivery of m's batch at now, and
// reports whether the failure counts: false when the budget has run out,
// by this failure (began) or before.
func (m *budgetMember) failed(now time.Time, info BatchInfo) (counts, began bool) {
	b := m.b
	b.mu.Lock()
	if !m.failing {
		m.failing = true
		b.failing++
	}
	b.tokens = max(b.tokens-1, 0)
	if b.probe == m {
		b.probe = nil
		b.probeAt = now.Add(b.probeDelay(b.probes + 1))
		b.signal()
	}
	if b.open {
		b.mu.Unlock()
		return false, false
	}
	if b.tokens > b.cfg.MaxTokens/2 || b.failing < b.cfg.MinPartitions {
		b.mu.Unlock()
		return true, false
	}
	b.open, b.since, b.probes, b.probe = true, now, 0, nil
	b.probeAt = now.Add(b.probeDelay(1))
	b.signal()
	b.note(true, OutageEvent{BatchInfo: info, Since: now, Failing: b.failing})
	return false, true
}

// succeeded refills the budget for a successful delivery of m's batch at
// now, and ends an outage (ended, reported by e).
func (m *budgetMember) succeeded(now time.Time, info BatchInfo) (e OutageEvent, ended bool) {
	b := m.b
	b.mu.Lock()
	if m.failing {
		m.failing = false
		b.failing--
	}
	b.tokens = min(b.tokens+b.cfg.TokenRatio, b.cfg.MaxTokens)
	if b.probe == m {
		b.probe = nil
	}
	if !b.open {
		b.mu.Unlock()
		return e, false
	}
	e = OutageEvent{BatchInfo: info, Since: b.since, Duration: now.Sub(b.since), Failing: len(b.queue), Probes: b.probes}
	b.open, b.tokens, b.probe = false, b.cfg.MaxTokens, nil
	for _, w := range b.queue {
		w.queued = false
	}
	b.queue = b.queue[:0]
	b.signal()
	b.note(false, e)
	return e, true
}

// neutral reports a delivery that neither spends nor refills the budget
// (an error the policy does not retry): if it was the probe, the next
// probe follows after the probe backoff.
func (m *budgetMember) neutral(now time.Time) {
	b := m.b
	b.mu.Lock()
	if b.probe == m {
		b.probe = nil
		b.probeAt = now.Add(b.probeDelay(b.probes + 1))
		b.signal()
	}
	b.mu.Unlock()
}

// requested reports a delivery that asked for a retry (a RetryResult): as
// neutral, and the partition's latest delivery did not fail, so it no
// longer counts as failing.
func (m *budgetMember) requested(now time.Time) {
	m.neutral(now)
	m.resolved()
}

// resolved reports that m's batch is done (committed past, or given up,
// whatever becomes of its exhaustion action): the partition no longer
// counts as failing, and a probe it held is given up.
func (m *budgetMember) resolved() {
	b := m.b
	b.mu.Lock()
	defer b.mu.Unlock()
	if m.failing {
		m.failing = false
		b.failing--
	}
	if b.probe == m {
		b.probe = nil
		b.signal()
	}
}

// dropProbe gives up m's probe without a delivery (its retry was refused
// when due): the next waiting partition may probe at once, since nothing
// tested the downstream.
func (m *budgetMember) dropProbe() {
	b := m.b
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.probe == m {
		b.probe = nil
		b.signal()
	}
}

// leave removes m's worker from the budget when it stops.
func (m *budgetMember) leave() {
	b := m.b
	b.mu.Lock()
	defer b.mu.Unlock()
	if m.failing {
		m.failing = false
		b.failing--
	}
	b.unqueue(m)
	if b.probe == m {
		b.probe = nil
	}
	b.signal()
}

// outage reports whether an outage is in force.
func (m *budgetMember) outage() bool {
	m.b.mu.Lock()
	defer m.b.mu.Unlock()
	return m.b.open
}

// await waits, in the queue of failing partitions, until the outage ends
// (probe 0) or m's batch is to be delivered as the probe (the probe's
// number, and when the outage began), or ctx ends (its error). It returns
// at once when no outage is in force.
func (m *budgetMember) await(ctx context.Context, clock Clock) (probe int, since time.Time, err error) {
	b := m.b
	for {
		b.mu.Lock()
		if !b.open {
			b.unqueue(m)
			b.mu.Unlock()
			return 0, time.Time{}, nil
		}
		if !m.queued {
			m.queued = true
			b.queue = append(b.queue, m)
		}
		ch := b.changed
		due := time.Duration(-1)
		if b.probe == nil && b.queue[0] == m {
			now := clock.Now()
			if !now.Before(b.probeAt) {
				b.probes++
				b.probe = m
				b.unqueue(m)
				n, since := b.probes, b.since
				b.signal()
				b.mu.Unlock()
				return n, since, nil
			}
			due = b.probeAt.Sub(now)
		}
		b.mu.Unlock()
		var timer <-chan time.Time
		stop := func() bool { return false }
		if due >= 0 {
			timer, stop = clock.NewTimer(due)
		}
		select {
		case <-ch:
		case <-timer:
		case <-ctx.Done():
			stop()
			b.mu.Lock()
			b.unqueue(m)
			b.signal()
			b.mu.Unlock()
			return 0, time.Time{}, ctx.Err()
		}
		stop()
	}
}
