package stream

import (
	"context"
	"errors"

	"github.com/redeliver-go/redeliver/internal/actionctx"
	"github.com/redeliver-go/redeliver/internal/retrystate"
)

// Clock returns the clock the processor was built with ([WithClock]; the
// system clock by default), for a consumer whose own timers must agree with
// the engine's.
func (p *Processor) Clock() Clock {
	if p == nil || p.cfg.clock == nil {
		return systemClock{}
	}
	return p.cfg.clock
}

// OutageBudget returns the outage budget the processor draws from
// ([WithOutageBudget]), nil for none: read its State to see an outage.
func (p *Processor) OutageBudget() *Budget {
	if p == nil {
		return nil
	}
	return p.cfg.budget
}

// DeadLetter returns the publisher and the topic of the processor's
// exhaustion action when [DeadLetter] made it, and false for any other
// action (one of the application's own, or DeadLetter's wrapped in a
// function of its own) or none. An adapter checks with it, when it is
// built, that the publisher can publish: a publisher that can never
// publish would otherwise be found at the first record given up, which
// would then wait for ever. Only an action made by DeadLetter is asked;
// no other action runs.
func (p *Processor) DeadLetter() (pub Publisher, topic string, ok bool) {
	if p == nil {
		return nil, "", false
	}
	return deadLetterOf(p.cfg.exhaustion)
}

// retryRequestOf reads a handler's result (see [RetryResult] for the
// rules): it returns the retry request err makes, or nil and the failure to
// apply instead of err. A failure beside a retry request and an error
// marked checkpoint.Permanent are failures (err itself); an invalid
// RetryResult is a failure whose error says what is wrong. A nil err
// returns nil, nil.
func retryRequestOf(err error) (*RetryResult, error) {
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

// Source describes where a given-up record came from beyond its topic,
// partition and offset: the consumer group that gave up on it and why, in
// the consumer's words. Every adapter puts it in the context of the
// processor's exhaustion action; [DeadLetter] writes it in its headers, and
// an action of the application's own that records where a record was given
// up (a store of failed records, an alert) reads it with [SourceFrom].
type Source struct {
	Group  string // the consumer group, when the consumer has one
	Reason string // empty: the ExhaustedError's message
}

// SourceFrom returns the Source in the context of an exhaustion action,
// and false when the consumer set none:
//
//	stream.WithExhaustionAction(func(ctx context.Context, b *stream.Batch, err *checkpoint.ExhaustedError) error {
//		src, _ := stream.SourceFrom(ctx)
//		return store.Save(ctx, src.Group, b, err)
//	})
func SourceFrom(ctx context.Context) (Source, bool) {
	s, ok := actionctx.SourceFrom(ctx)
	return Source(s), ok
}

// DescribeMetadata puts in words the retry state that a checkpoint's
// metadata holds ([CheckpointEvent.Metadata], [ClaimEvent.Metadata]), with
// the retry limit of the policy in force, maxRetries
// ([checkpoint.Infinite] for none; a handler's own [RetryResult] in the
// state replaces it):
//
//	retry 2 of 5, due at 12:00:01.5 UTC
//	given up after 3 deliveries (retries spent), its exhaustion action not done; last error: timeout
//
// Empty metadata reads "no retry"; metadata of another tool or damaged
// metadata says so.
func DescribeMetadata(md string, maxRetries int) string {
	return retrystate.Describe(md, maxRetries)
}
