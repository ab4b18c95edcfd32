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

// A handler that fails the batch at offset 3 twice: its checkpoint is
// withheld and the same batch comes back until it succeeds. In a program,
// an adapter (franz, kafkago, eventhubs) runs the processor over the
// partitions of a consumer; here runToEnd runs it over an in-memory one.
func ExampleProcessor() {
	handler := stream.HandlerFunc(func(ctx context.Context, b *stream.Batch) error {
		fmt.Printf("deliver offsets %d-%d, attempt %d\n", b.FirstOffset(), b.LastOffset(), b.Attempt.Number())
		if b.FirstOffset() == 3 && b.Attempt.Retries < 2 {
			return errors.New("downstream unavailable")
		}
		return nil
	})
	proc, err := stream.NewProcessor(handler,
		// retryCount 5; Immediate keeps the example fast, Fixed(5*time.Second) is sleepDuration "00:00:05"
		stream.WithPolicy(checkpoint.Policy{MaxRetries: 5, Backoff: checkpoint.Immediate()}),
		printCheckpoints())
	if err != nil {
		fmt.Println(err)
		return
	}
	part := streamtest.NewPartition("orders", 0, 3) // batches of up to 3 records
	part.Append(time.Now(), "a", "b", "c", "d", "e", "f")
	runToEnd(proc, part)
	// Output:
	// deliver offsets 0-2, attempt 1
	// checkpoint 3
	// deliver offsets 3-5, attempt 1
	// deliver offsets 3-5, attempt 2
	// deliver offsets 3-5, attempt 3
	// checkpoint 6
}

// A handler asks for its batch again without failing (it was processed,
// but the next step is not ready): the RetryResult's count and delay
// replace the policy for this batch, and once they are spent the
// checkpoint moves past it.
func ExampleRetry() {
	clock := streamtest.NewClock(time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC))
	handler := stream.HandlerFunc(func(ctx context.Context, b *stream.Batch) error {
		fmt.Println(clock.Now().Format(time.TimeOnly), "delivery", b.Attempt.Number())
		return stream.Retry(2, 10*time.Second) // deliver it again in 10s, at most twice
	})
	proc, err := stream.NewProcessor(handler, stream.WithClock(clock), printCheckpoints())
	if err != nil {
		fmt.Println(err)
		return
	}
	part := streamtest.NewPartition("orders", 0, 3)
	part.Append(clock.Now(), "a", "b")
	runWithClock(proc, part, clock, 10*time.Second)
	// Output:
	// 12:00:00 delivery 1
	// 12:00:10 delivery 2
	// 12:00:20 delivery 3
	// checkpoint 2
}

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

// runToEnd runs proc over part until its checkpoint is past the last
// record.
func runToEnd(proc *stream.Processor, part *streamtest.Partition) {
	runWithClock(proc, part, nil, 0)
}

// runWithClock is runToEnd with a manual clock: each time the worker
// waits (a backoff, a RetryResult's delay), time moves by step.
func runWithClock(proc *stream.Processor, part *streamtest.Partition, clock *streamtest.Clock, step time.Duration) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if clock != nil {
		go func() {
			for clock.WaitTimers(ctx, 1) == nil {
				clock.Advance(step)
			}
		}()
	}
	go func() {
		_ = part.WaitCommitted(ctx, part.End())
		cancel()
	}()
	_ = streamtest.Run(ctx, proc, part)
}

// printCheckpoints prints each checkpoint that moves past records (not
// the retry state a withheld batch commits at its first record).
func printCheckpoints() stream.Option {
	return stream.WithHooks(stream.Hooks{Checkpointed: func(e stream.CheckpointEvent) {
		if e.Metadata == "" {
			fmt.Println("checkpoint", e.Next)
		}
	}})
}

// printGivenUp prints each record range given up.
func printGivenUp() stream.Option {
	return stream.WithHooks(stream.Hooks{Exhausted: func(e stream.ExhaustedEvent) {
		fmt.Printf("given up: offsets %d-%d: %v\n", e.FirstOffset, e.LastOffset, e.Err)
	}})
}
