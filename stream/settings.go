package stream

import (
	"context"
	"errors"
	"log/slog"

	"github.com/redeliver-go/redeliver/checkpoint"
)

// Settings are what a [Processor] was built with: its handler and the
// options that shape the retry contract, read with [Processor.Settings] by
// an adapter's start checks (the publisher of a DeadLetter action, say).
// The contract itself is applied by the Processor alone, for every unit of
// work: a partition's batch ([Processor.Process]) and a leased record
// ([Processor.Leases]).
type Settings struct {
	Handler          Handler
	Policy           checkpoint.Policy
	Logger           *slog.Logger // never nil
	Hooks            Hooks
	Clock            Clock
	NewRand          func() checkpoint.Rand
	Exhaustion       ExhaustionAction // nil skips
	OperationBackoff checkpoint.Backoff
	InMemoryState    bool
	OutageBudget     *Budget // nil for none; record leases refuse one (Processor.Leases)
}

// Settings returns the processor's handler and options.
func (p *Processor) Settings() Settings {
	if p == nil {
		return Settings{Logger: p.Logger()}
	}
	return Settings{
		Handler:          p.h,
		Policy:           p.cfg.policy,
		Logger:           p.Logger(),
		Hooks:            p.cfg.hooks,
		Clock:            p.cfg.clock,
		NewRand:          p.cfg.newRand,
		Exhaustion:       p.cfg.exhaustion,
		OperationBackoff: p.cfg.opBackoff,
		InMemoryState:    p.cfg.memoryOnly,
		OutageBudget:     p.cfg.budget,
	}
}

// RetryRequestOf reads a handler's result as a [Processor] does (see
// [RetryResult] for the rules), for a middleware, say: it returns the retry request err
// makes, or nil and the failure to apply instead of err. A failure beside
// a retry request and an error marked checkpoint.Permanent are failures
// (err itself); an invalid RetryResult is a failure whose error says what
// is wrong. A nil err returns nil, nil.
func RetryRequestOf(err error) (*RetryResult, error) {
	rr := retryRequest(err)
	if rr == nil {
		return nil, err
	}
	if invalid := rr.validate(); invalid != nil {
		return nil, invalid
	}
	return rr, nil
}

// IsStop reports whether err is what [StopPartition] returns, or wraps it.
func IsStop(err error) bool { return errors.Is(err, errStop) }

// Source describes where a dead-lettered record came from beyond its topic,
// partition and offset, for [DeadLetter]'s headers: the group that gave up on
// it (Kafka share groups) and why, in the consumer's words. A consumer puts
// it in the exhaustion action's context with [WithSource].
type Source struct {
	Group  string
	Reason string // empty: the ExhaustedError's message
}

type sourceKey struct{}

// WithSource returns ctx carrying s, for an exhaustion action.
func WithSource(ctx context.Context, s Source) context.Context {
	return context.WithValue(ctx, sourceKey{}, s)
}

// SourceFrom returns the Source that ctx carries, if any.
func SourceFrom(ctx context.Context) (Source, bool) {
	s, ok := ctx.Value(sourceKey{}).(Source)
	return s, ok
}
