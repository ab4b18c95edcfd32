package stream

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/redeliver-go/redeliver/checkpoint"
	"github.com/redeliver-go/redeliver/internal/retrystate"
)

// Ordering says which records of a partition a [Processor] keeps in order,
// and so what a failing record holds back.
type Ordering uint8

const (
	// ByPartition delivers a partition's records in batches, one batch at
	// a time, in offset order: a failing batch holds back its whole
	// partition while it waits for its retry. The default.
	ByPartition Ordering = iota
	// ByKey delivers the records of one key one at a time, in offset
	// order, and records of different keys at the same time (up to
	// [WithConcurrency]): a failing record holds back the later records
	// of its key only. Records without a key share one queue (ordered by
	// partition), unless [WithKeyFunc] gives them keys. See docs/KEYS.md.
	ByKey
	// ByNone delivers every record on its own, at the same time as the
	// others (up to [WithConcurrency]), in no order: a failing record
	// holds back nothing but itself. Its commits are those of ByKey.
	ByNone
)

// String returns "partition", "key" or "none".
func (o Ordering) String() string {
	switch o {
	case ByPartition:
		return "partition"
	case ByKey:
		return "key"
	case ByNone:
		return "none"
	}
	return fmt.Sprintf("Ordering(%d)", uint8(o))
}

// ParseOrdering reads "partition", "key" or "none" (any case; "" is
// "partition"), as host.json's "ordering" setting says it.
func ParseOrdering(s string) (Ordering, error) {
	switch strings.ToLower(strings.TrimSpace(s)) {
	case "", "partition":
		return ByPartition, nil
	case "key":
		return ByKey, nil
	case "none":
		return ByNone, nil
	}
	return ByPartition, fmt.Errorf("stream: ordering %q: want \"partition\", \"key\" or \"none\"", s)
}

// Ordering returns the processor's ordering ([WithOrdering]);
// ByPartition for a nil Processor.
func (p *Processor) Ordering() Ordering {
	if p == nil {
		return ByPartition
	}
	return p.cfg.keyed.ordering
}

// DefaultConcurrency is how many records of one partition a Processor in
// [ByKey] or [ByNone] ordering hands to the handler at once, unless
// [WithConcurrency] says otherwise.
const DefaultConcurrency = 16

// WithOrdering sets the ordering: [ByPartition] (the default), [ByKey] or
// [ByNone]. With ByKey or ByNone every record is a unit of its own, with
// its own retry count, backoff and give-up (its exhaustion action gets a
// batch of that record alone), and a partition's commit is the lowest
// record not finished, with the records finished above it and the retry
// state of each record retrying in the commit's metadata (docs/KEYS.md):
// a next owner skips the finished records and goes
// on with each retrying record's count.
func WithOrdering(o Ordering) Option {
	return optionFunc(func(c *config) { c.keyed.ordering = o })
}

// WithConcurrency limits, in [ByKey] and [ByNone] ordering, how many
// records are being handled at once: perPartition per claimed partition
// (0: [DefaultConcurrency]) and perProcessor over every partition of the
// processor (0: no limit but the partitions'). NewProcessor refuses it
// with ByPartition ordering, which handles one batch per partition at a
// time.
func WithConcurrency(perPartition, perProcessor int) Option {
	return optionFunc(func(c *config) {
		c.keyed.perPartition, c.keyed.perProcessor = perPartition, perProcessor
		c.keyed.set = append(c.keyed.set, "WithConcurrency")
	})
}

// WithKeyFunc gives, in [ByKey] ordering, the key that orders each record:
// records with the same key are handled one at a time, in offset order.
// Without it a record's key is its Key, and records without a key share
// one queue per partition. It is called on the partition's driver
// goroutine, once per record, and must not keep r.
func WithKeyFunc(fn func(r *Record) string) Option {
	return optionFunc(func(c *config) {
		c.keyed.keyFn, c.keyed.keyFnSet = fn, true
		c.keyed.set = append(c.keyed.set, "WithKeyFunc")
	})
}

// WithKeyMiddleware wraps the handler, in [ByKey] ordering, with mw: mw
// sees each record alone, with its ordering key in [OrderKey] of the
// context, before the handler does. It is how a re-drive store parks the
// records of a key that waits behind its parked records (see
// redrive.ParkByKey), which gives it as part of one option. name names
// the option in the errors of NewProcessor, which refuses it in another
// ordering.
//
// A non-nil action is the exhaustion action mw goes with (a park that
// locks the key mw checks): it becomes the processor's, and NewProcessor
// refuses a WithExhaustionAction beside it, in either order, since one
// would replace the other in silence.
func WithKeyMiddleware(name string, mw Middleware, action ExhaustionAction) Option {
	return optionFunc(func(c *config) {
		if name == "" {
			name = "WithKeyMiddleware"
		}
		c.keyed.mw = append(c.keyed.mw, mw)
		c.keyed.mwNames = append(c.keyed.mwNames, name)
		if action != nil {
			c.exhaustion = action
			c.keyed.actionBy = append(c.keyed.actionBy, name)
		}
	})
}

// orderKeyCtx is the context key of [OrderKey].
type orderKeyCtx struct{}

// parkedBehindCtx is the context key of a keyed handler call's mark of
// [MarkParkedBehind].
type parkedBehindCtx struct{}

// MarkParkedBehind tells the processor, from a key middleware (see
// [WithKeyMiddleware]) in the context of a handler call in [ByKey]
// ordering, that the call's record was not handled but parked behind the
// parked records of its key (redrive.ParkByKey does it). When the call
// then returns nil, the Delivered hook reports the [ParkedBehind] outcome
// instead of [Succeeded], and the record is finished for the commit as a
// success would be; a call that returns an error is read from the error,
// the mark ignored. It returns false, and does nothing, outside a handler
// call of a ByKey processor that has a key middleware.
func MarkParkedBehind(ctx context.Context) bool {
	if ctx == nil {
		return false
	}
	m, ok := ctx.Value(parkedBehindCtx{}).(*atomic.Bool)
	if !ok {
		return false
	}
	m.Store(true)
	return true
}

// OrderKey returns, in [ByKey] ordering, the key that orders the record
// being handled (its Key, or what [WithKeyFunc] returned for it), in the
// context of a handler call and of an exhaustion action; ok is false in
// another ordering.
func OrderKey(ctx context.Context) (key string, ok bool) {
	if ctx == nil {
		return "", false
	}
	key, ok = ctx.Value(orderKeyCtx{}).(string)
	return key, ok
}

// WithWindowLimits sets, in [ByKey] and [ByNone] ordering, how much
// commit metadata a partition may write (MaxBytes: the broker's
// offset.metadata.max.bytes, 4096 by default; a managed Kafka service may
// allow less) and how much of each retrying record's last error it keeps.
// A record's state takes room only once it failed
// (ReserveOnFailure is always on here): when a failed record's state does
// not fit, its retry waits (its key waits, the partition takes in no new
// record) until a retrying record finishes or is given up. See
// docs/KEYS.md.
func WithWindowLimits(l checkpoint.WindowLimits) Option {
	return optionFunc(func(c *config) {
		c.keyed.limits = l
		c.keyed.set = append(c.keyed.set, "WithWindowLimits")
	})
}

// keyedConfig is the configuration of the keyed driver (keyed.go).
type keyedConfig struct {
	ordering     Ordering
	perPartition int
	perProcessor int
	keyFn        func(*Record) string
	keyFnSet     bool
	limits       checkpoint.WindowLimits
	// set names the keyed-only options given, for the error that refuses
	// them with ByPartition.
	set []string
	// lim is the processor's concurrency limit; nil for none.
	lim *limiter
	// mw wraps the handler in ByKey ordering (WithKeyMiddleware), mwNames
	// names each.
	mw      []Middleware
	mwNames []string
	// actionBy names the WithKeyMiddleware options that brought an
	// exhaustion action.
	actionBy []string
}

// prepare checks the keyed options and fills in their defaults; it is
// called by NewProcessor.
func (k *keyedConfig) prepare(c *config) error {
	for i, mw := range k.mw {
		switch {
		case mw == nil:
			return fmt.Errorf("stream: NewProcessor: %s: nil middleware", k.mwNames[i])
		case k.ordering != ByKey:
			return fmt.Errorf("stream: NewProcessor: %s applies to ByKey ordering only (it keeps each key's order), and the ordering is %s: give WithOrdering(stream.ByKey)", k.mwNames[i], k.ordering)
		}
	}
	switch {
	case len(k.actionBy) > 1:
		return fmt.Errorf("stream: NewProcessor: %s each bring an exhaustion action: give one of them", strings.Join(k.actionBy, " and "))
	case len(k.actionBy) == 1 && c.actionGiven:
		return fmt.Errorf("stream: NewProcessor: WithExhaustionAction beside %s, which brings its own exhaustion action (the one would replace the other): leave WithExhaustionAction out", k.actionBy[0])
	}
	switch {
	case k.ordering > ByNone:
		return fmt.Errorf("stream: NewProcessor: WithOrdering(%d): want ByPartition, ByKey or ByNone", uint8(k.ordering))
	case k.ordering == ByPartition && len(k.set) > 0:
		return fmt.Errorf("stream: NewProcessor: %s applies to ByKey and ByNone ordering only: give WithOrdering(stream.ByKey), or leave it out", strings.Join(k.set, ", "))
	case k.ordering == ByPartition:
		return nil
	case k.perPartition < 0 || k.perProcessor < 0:
		return fmt.Errorf("stream: NewProcessor: WithConcurrency(%d, %d): want 0 (the default) or more", k.perPartition, k.perProcessor)
	case k.keyFnSet && k.keyFn == nil:
		return errors.New("stream: NewProcessor: WithKeyFunc(nil): give a function, or leave the option out to order by the records' keys")
	case k.keyFnSet && k.ordering == ByNone:
		return errors.New("stream: NewProcessor: WithKeyFunc with ByNone ordering, which orders nothing: give WithOrdering(stream.ByKey)")
	case c.budget != nil:
		return fmt.Errorf("stream: NewProcessor: WithOutageBudget is not applied in %s ordering yet: leave it out, or use ByPartition ordering", k.ordering)
	}
	k.limits.ReserveOnFailure = true
	if _, err := retrystate.NewWindow(0, k.limits); err != nil {
		return fmt.Errorf("stream: NewProcessor: WithWindowLimits: %w", err)
	}
	if k.perPartition == 0 {
		k.perPartition = DefaultConcurrency
	}
	if k.perProcessor > 0 {
		k.lim = &limiter{max: k.perProcessor, waiters: map[*kdriver]struct{}{}}
	}
	return nil
}

// limiter is a processor's concurrency limit over its partitions.
type limiter struct {
	mu      sync.Mutex
	n, max  int
	waiters map[*kdriver]struct{}
}

// acquire takes a place, or registers d to be woken when one is free.
func (l *limiter) acquire(d *kdriver) bool {
	if l == nil {
		return true
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.n < l.max {
		l.n++
		return true
	}
	l.waiters[d] = struct{}{}
	return false
}

// release gives a place back and wakes the drivers waiting for one.
func (l *limiter) release() {
	if l == nil {
		return
	}
	l.mu.Lock()
	l.n--
	ws := l.waiters
	l.waiters = map[*kdriver]struct{}{}
	l.mu.Unlock()
	for d := range ws {
		d.wake()
	}
}

// forget drops d from the waiters.
func (l *limiter) forget(d *kdriver) {
	if l == nil {
		return
	}
	l.mu.Lock()
	delete(l.waiters, d)
	l.mu.Unlock()
}

// keyOf returns the key that orders r in key ordering, as the operator
// sees it (StoppedPartition.Key): the key function's, or r's key. A key
// function that panics gives "" (the driver ordered the record with the
// records without a key, and logged it).
func (k *keyedConfig) keyOf(r *Record) (key string) {
	if k.keyFn == nil || k.ordering != ByKey {
		return string(r.Key)
	}
	defer func() {
		if recover() != nil {
			key = ""
		}
	}()
	return k.keyFn(r)
}
