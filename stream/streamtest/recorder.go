package streamtest

import (
	"context"
	"errors"
	"fmt"
	"sync"

	"github.com/redeliver-go/redeliver/stream"
)

// Delivery is one handler call seen by a [Recorder].
type Delivery struct {
	Topic       string
	Partition   int32
	FirstOffset int64
	LastOffset  int64
	// Attempt is what the handler was told about this delivery
	// (Attempt.Retries is 0 on a first delivery, n on the n-th retry).
	Attempt stream.Attempt
	Err     error // what the wrapped handler returned
}

// Recorder is a middleware that records every delivery. It is safe for
// concurrent use.
type Recorder struct {
	mu         sync.Mutex
	deliveries []Delivery
}

// Middleware returns the recording middleware.
func (r *Recorder) Middleware() stream.Middleware {
	return func(next stream.Handler) stream.Handler {
		return stream.HandlerFunc(func(ctx context.Context, b *stream.Batch) error {
			err := next.Handle(ctx, b)
			r.mu.Lock()
			r.deliveries = append(r.deliveries, Delivery{
				Topic: b.Topic, Partition: b.Partition,
				FirstOffset: b.FirstOffset(), LastOffset: b.LastOffset(),
				Attempt: b.Attempt, Err: err,
			})
			r.mu.Unlock()
			return err
		})
	}
}

// Deliveries returns the deliveries so far, in the order they ended.
func (r *Recorder) Deliveries() []Delivery {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]Delivery(nil), r.deliveries...)
}

// Of returns the deliveries of one partition.
func (r *Recorder) Of(topic string, partition int32) []Delivery {
	var out []Delivery
	for _, d := range r.Deliveries() {
		if d.Topic == topic && d.Partition == partition {
			out = append(out, d)
		}
	}
	return out
}

// ErrInjected is the error of [FailFirst] unless another is given.
var ErrInjected = errors.New("streamtest: injected failure")

// FailFirst returns a middleware that fails the first n deliveries of every
// batch with err (ErrInjected when nil) without calling the handler, and
// passes later deliveries through. n < 0 fails every delivery.
func FailFirst(n int, err error) stream.Middleware {
	if err == nil {
		err = ErrInjected
	}
	return func(next stream.Handler) stream.Handler {
		return stream.HandlerFunc(func(ctx context.Context, b *stream.Batch) error {
			if n < 0 || b.Attempt.Retries < n {
				return fmt.Errorf("offsets %d-%d, delivery %d: %w", b.FirstOffset(), b.LastOffset(), b.Attempt.Number(), err)
			}
			return next.Handle(ctx, b)
		})
	}
}

// Succeed is a handler that succeeds on every batch.
var Succeed stream.Handler = stream.HandlerFunc(func(context.Context, *stream.Batch) error { return nil })
