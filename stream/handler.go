package stream

import (
	"context"
	"fmt"
	"runtime/debug"
	"time"

	"github.com/redeliver-go/redeliver/checkpoint"
	"github.com/redeliver-go/redeliver/internal/retrystate"
)

// Handler processes one batch of one partition. It returns nil when the batch
// is done, an error when it failed (the policy decides whether it is
// delivered again), or a [*RetryResult] (see [Retry]) to ask for the batch
// again without failing.
//
// The context is cancelled when the partition is revoked or lost or the
// consumer shuts down; a handler should then return promptly. Whatever it
// returns after that, the batch is abandoned and its checkpoint is not moved:
// the partition's next owner delivers it again. A batch whose claim has
// ended by the time it is to be delivered is abandoned without a call.
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
// each record in order and stops at the first record that does not return
// nil:
//
//   - an error (or a panic, as a [*PanicError]) becomes [FailedAt] that
//     record: the records before it are done, the batch from that record on
//     is retried under the policy, and if it is given up, that record alone
//     goes to the exhaustion action and the records after it are delivered
//     as the next batch;
//   - a retry request ([Retry]) is returned as it is: the whole batch is
//     delivered again (if any record asks for a retry, the entire batch is
//     retried).
//
// In share mode, where records are acknowledged one by one (the share
// consumer of adapters/franz/share), the engine calls fn for every record
// instead and retries only those that failed.
func PerRecord(fn RecordFunc) Handler { return perRecord(fn) }

type perRecord RecordFunc

func (fn perRecord) Handle(ctx context.Context, b *Batch) error {
	for i := range b.Records {
		if err := callRecord(ctx, RecordFunc(fn), &b.Records[i]); err != nil {
			if retryRequest(err) != nil {
				return err
			}
			return FailedAt(i, err)
		}
	}
	return nil
}

// callRecord calls fn and turns a panic into a *PanicError.
func callRecord(ctx context.Context, fn RecordFunc, r *Record) (err error) {
	defer func() {
		if v := recover(); v != nil {
			err = &PanicError{Value: v, Stack: debug.Stack()}
		}
	}()
	return fn(ctx, r)
}

// Middleware wraps a Handler with behaviour of its own.
type Middleware func(Handler) Handler

// Chain wraps h in middleware; the first is outermost:
//
//	Chain(h, a, b) handles a batch as  a -> b -> h -> b -> a
//
// A nil Middleware is skipped. Chain of a nil h returns nil, which
// NewProcessor refuses.
func Chain(h Handler, mw ...Middleware) Handler {
	if isNil(h) {
		return nil
	}
	for i := len(mw) - 1; i >= 0; i-- {
		if mw[i] != nil {
			h = mw[i](h)
		}
	}
	return h
}

// RetryResult is what a handler returns to say "processed, but deliver this
// batch again" without failing, as in the Azure Functions checkpoint retry proposal. The delivery counts as
// succeeded; the checkpoint is withheld and the batch comes back after Delay,
// until MaxRetries retries are spent, and then the stream moves on without an
// exhaustion action.
//
// A RetryResult replaces the configured policy for the rest of its batch's
// deliveries (error filter and time limits included); the retries already
// made still count. Its count and delay are stored with the batch's retry
// state, so a next owner keeps them. Return it with [Retry] or as
// &RetryResult{...}, alone or as the error of [FailedAt].
//
// # How a handler's result is read
//
// The processor reads what a handler returns in this order:
//
//  1. nil: the batch succeeded.
//  2. a [*BatchError] ([FailedAt]), found with errors.As: the records before
//     its index are done; its Err is read on by the rules below, for the
//     rest of the batch.
//  3. an error marked [checkpoint.Permanent] anywhere in its tree: a
//     failure that is not retried, even when it wraps a RetryResult
//     (checkpoint.Permanent(Retry(...)) gives the batch up).
//  4. a retry request: a *RetryResult, alone or wrapped with %w, or an
//     errors.Join whose every branch is a retry request (the first one
//     applies). A failure beside a RetryResult wins:
//     errors.Join(err, Retry(...)) is a failure with that error, under the
//     policy, never a silent retry or a commit.
//  5. anything else: a failure, under the policy.
//
// A RetryResult with MaxRetries below -1 or a negative Delay is invalid, and
// so is a [FailedAt] index outside the batch: a programming error, taken as
// a failure of the whole batch (retried under the policy, as a handler
// error is) whose error says the result is invalid and what is wrong. It is
// logged at Error each time the handler returns it, and a batch given up
// for it carries that error, so that no record is given up as "retries
// spent" without the reason.
type RetryResult struct {
	// MaxRetries limits the batch's retries; [checkpoint.Infinite] (-1)
	// never stops.
	MaxRetries int
	// Delay is the wait before each retry, 0 or more.
	Delay time.Duration
}

// Retry returns a [*RetryResult] as an error value for a handler to return.
func Retry(maxRetries int, delay time.Duration) error {
	return &RetryResult{MaxRetries: maxRetries, Delay: delay}
}

func (r *RetryResult) Error() string {
	return fmt.Sprintf("retry requested (max %d retries, delay %v)", r.MaxRetries, r.Delay)
}

func (r *RetryResult) request() retrystate.Request {
	return retrystate.Request{MaxRetries: r.MaxRetries, Delay: r.Delay}
}

// validate returns why r is invalid, or nil.
func (r *RetryResult) validate() error {
	switch {
	case r.MaxRetries < checkpoint.Infinite:
		return &invalidResultError{msg: fmt.Sprintf("stream: invalid RetryResult: MaxRetries %d, want %d (no limit) or more", r.MaxRetries, checkpoint.Infinite)}
	case r.Delay < 0:
		return &invalidResultError{msg: fmt.Sprintf("stream: invalid RetryResult: Delay %v, want 0 or more", r.Delay)}
	}
	return nil
}

// retryRequest returns the RetryResult that err asks for, or nil when err is
// not a retry request (see [RetryResult] for the rules).
func retryRequest(err error) *RetryResult {
	if err == nil || checkpoint.IsPermanent(err) {
		return nil
	}
	return retryRequestIn(err)
}

func retryRequestIn(err error) *RetryResult {
	switch e := err.(type) {
	case *RetryResult:
		return e
	case interface{ Unwrap() []error }:
		var first *RetryResult
		for _, x := range e.Unwrap() {
			rr := retryRequestIn(x)
			if rr == nil {
				return nil // a failure beside a retry request wins
			}
			if first == nil {
				first = rr
			}
		}
		return first
	case interface{ Unwrap() error }:
		if inner := e.Unwrap(); inner != nil {
			return retryRequestIn(inner)
		}
	}
	return nil
}

// PanicError is the error a panic of a handler or of an exhaustion action
// becomes. A handler's panic is treated as a retryable failure, an
// exhaustion action's as a failed try of the action; the process survives
// both.
type PanicError struct {
	Value any    // what was passed to panic
	Stack []byte // the panicking goroutine's stack, as debug.Stack gives it

	in string // what panicked; "" for a handler
}

func (e *PanicError) Error() string {
	in := e.in
	if in == "" {
		in = "handler"
	}
	return fmt.Sprintf("%s panicked: %v", in, e.Value)
}

// Unwrap returns the panic value when it is an error.
func (e *PanicError) Unwrap() error {
	err, _ := e.Value.(error)
	return err
}
