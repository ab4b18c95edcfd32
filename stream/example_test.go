package stream_test

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/redeliver-go/redeliver/checkpoint"
	"github.com/redeliver-go/redeliver/stream"
	"github.com/redeliver-go/redeliver/stream/streamtest"
)

// A handler that fails the batch at offset 3 twice: the checkpoint is
// withheld and the same batch comes back until it succeeds.
func ExampleProcessor() {
	part := streamtest.NewPartition("orders", 0, 3)
	part.Append(time.Now(), "a", "b", "c", "d", "e", "f")

	handler := stream.HandlerFunc(func(ctx context.Context, b *stream.Batch) error {
		fmt.Printf("deliver offsets %d-%d, attempt %d\n", b.FirstOffset(), b.LastOffset(), b.Attempt.Number())
		if b.FirstOffset() == 3 && b.Attempt.Retry < 2 {
			return errors.New("downstream unavailable")
		}
		return nil
	})
	proc, err := stream.NewProcessor(handler,
		// retryCount 5; Immediate keeps the example fast, use Fixed(5*time.Second) for sleepDuration "00:00:05"
		stream.WithPolicy(checkpoint.Policy{MaxRetries: 5, Backoff: checkpoint.Immediate()}),
		stream.WithHooks(stream.Hooks{
			Checkpointed: func(e stream.CheckpointEvent) {
				if e.Metadata == "" { // not a withheld batch's retry state
					fmt.Println("checkpoint", e.Next)
				}
			},
		}),
	)
	if err != nil {
		fmt.Println(err)
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	go func() {
		_ = part.WaitCommitted(ctx, part.End())
		cancel()
	}()
	_ = streamtest.Run(ctx, proc, part)
	// Output:
	// deliver offsets 0-2, attempt 1
	// checkpoint 3
	// deliver offsets 3-5, attempt 1
	// deliver offsets 3-5, attempt 2
	// deliver offsets 3-5, attempt 3
	// checkpoint 6
}

// A handler asks for its batch again without failing, with its own count and
// delay (seed 004's RetryResult).
func ExampleRetry() {
	h := stream.HandlerFunc(func(ctx context.Context, b *stream.Batch) error {
		if !ready() {
			return stream.Retry(3, 10*time.Second)
		}
		return nil
	})
	_ = h
	fmt.Println(stream.Retry(3, 10*time.Second))
	// Output: retry requested (max 3 retries, delay 10s)
}

func ready() bool { return false }

// Middleware wraps handlers; the first in Chain is the outermost.
func ExampleChain() {
	trace := func(name string) stream.Middleware {
		return func(next stream.Handler) stream.Handler {
			return stream.HandlerFunc(func(ctx context.Context, b *stream.Batch) error {
				fmt.Println("enter", name)
				defer fmt.Println("leave", name)
				return next.Handle(ctx, b)
			})
		}
	}
	h := stream.Chain(streamtest.Succeed, trace("a"), trace("b"))
	_ = h.Handle(context.Background(), &stream.Batch{Records: make([]stream.Record, 1)})
	// Output:
	// enter a
	// enter b
	// leave b
	// leave a
}
