package stream

import (
	"context"
	"fmt"
	"time"

	"github.com/redeliver-go/redeliver/checkpoint"
)

// Handler processes one batch of one partition. It returns nil when the batch
// is done, an error when it failed (the policy decides whether it is
// delivered again), or a [*RetryResult] (see [Retry]) to ask for the batch
// again without failing.
//
// The context is cancelled when the partition is revoked or lost or the
// consumer shuts down; a handler should then return promptly. Whatever it
// returns after that, the batch is abandoned and its checkpoint is not moved:
// the partition's next owner delivers it again.
type Handler interface {
	Handle(ctx context.Context, b *Batch) error
}

// HandlerFunc adapts a function to a [Handler].
type HandlerFunc func(ctx context.Context, b *Batch) error

// Handle calls f(ctx, b).
func (f HandlerFunc) Handle(ctx context.Context, b *Batch) error { return f(ctx, b) }

// RecordFunc processes a single record.
type RecordFunc func(ctx context.Context, r *Record) error

// PerRecord adapts a per-record function to a batch [Handler]. It calls fn for
// each record in order and stops at the first record that returns an error or
// a RetryResult: that outcome becomes the batch's, so the whole batch is
// delivered again (seed 004: if any record asks for a retry, the entire batch
// is retried).
//
// A share-group consumer, which acknowledges records one by one, calls fn
// for every record instead and retries only those that failed (see
// [RecordFuncOf]).
func PerRecord(fn RecordFunc) Handler { return perRecord(fn) }

type perRecord RecordFunc

func (fn perRecord) Handle(ctx context.Context, b *Batch) error {
	for i := range b.Records {
		if err := fn(ctx, &b.Records[i]); err != nil {
			return err
		}
	}
	return nil
}

// Middleware wraps a Handler with behaviour of its own.
type Middleware func(Handler) Handler

// Chain wraps h in middleware; the first is outermost:
//
//	Chain(h, a, b) handles a batch as  a -> b -> h -> b -> a
func Chain(h Handler, mw ...Middleware) Handler {
	for i := len(mw) - 1; i >= 0; i-- {
		h = mw[i](h)
	}
	return h
}

// RetryResult is what a handler returns to say "processed, but deliver this
// batch again" without failing: seed 004's RetryResult. The delivery counts as
// succeeded; the checkpoint is withheld and the batch comes back after Delay,
// until MaxRetries retries are spent, and then the stream moves on without an
// exhaustion action.
//
// A RetryResult replaces the configured policy for the rest of its batch's
// deliveries (error filter and time limits included); the retries already
// made still count. Return it with [Retry] or as &RetryResult{...}.
type RetryResult struct {
	// MaxRetries limits the batch's retries; [checkpoint.Infinite] (-1)
	// never stops.
	MaxRetries int
	// Delay is the wait before each retry.
	Delay time.Duration
}

// Retry returns a [*RetryResult] as an error value for a handler to return.
func Retry(maxRetries int, delay time.Duration) error {
	return &RetryResult{MaxRetries: maxRetries, Delay: delay}
}

func (r *RetryResult) Error() string {
	return fmt.Sprintf("retry requested (max %d retries, delay %v)", r.MaxRetries, r.Delay)
}

func (r *RetryResult) policy() checkpoint.Policy {
	return checkpoint.Policy{MaxRetries: r.MaxRetries, Backoff: checkpoint.Fixed(r.Delay)}
}

// Permanent marks err as not retryable: the batch is not delivered again and
// goes to the exhaustion action. It is [checkpoint.Permanent].
func Permanent(err error) error { return checkpoint.Permanent(err) }

// PanicError is the error a handler's panic becomes. A panic is treated as a
// retryable failure and the process survives it.
type PanicError struct {
	Value any
	Stack []byte
}

func (e *PanicError) Error() string { return fmt.Sprintf("handler panicked: %v", e.Value) }

// Unwrap returns the panic value when it is an error.
func (e *PanicError) Unwrap() error {
	err, _ := e.Value.(error)
	return err
}
