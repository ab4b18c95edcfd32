package stream_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/redeliver-go/redeliver/checkpoint"
	"github.com/redeliver-go/redeliver/stream"
	"github.com/redeliver-go/redeliver/stream/streamtest"
)

// A batch whose retries are spent goes to a dead-letter topic, each record
// with headers saying where it came from and why; then the checkpoint
// moves past it. printPublisher stands for a Kafka producer
// (franz.Publisher, kafkago.Publisher).
func ExampleDeadLetter() {
	handler := stream.HandlerFunc(func(ctx context.Context, b *stream.Batch) error {
		if b.FirstOffset() == 0 {
			return errors.New("schema registry unreachable")
		}
		return nil
	})
	dl, err := stream.DeadLetter(printPublisher{}, "orders.dlq")
	if err != nil {
		fmt.Println(err)
		return
	}
	proc, err := stream.NewProcessor(handler,
		stream.WithPolicy(checkpoint.Policy{MaxRetries: 1, Backoff: checkpoint.Immediate()}),
		stream.WithExhaustionAction(dl),
		printCheckpoints())
	if err != nil {
		fmt.Println(err)
		return
	}
	part := streamtest.NewPartition("orders", 0, 3)
	part.Append(time.Now(), "a", "b", "c", "d")
	runToEnd(proc, part)
	// Output:
	// to orders.dlq: a (from offset 0, 2 deliveries, error "schema registry unreachable")
	// to orders.dlq: b (from offset 1, 2 deliveries, error "schema registry unreachable")
	// to orders.dlq: c (from offset 2, 2 deliveries, error "schema registry unreachable")
	// checkpoint 3
	// checkpoint 4
}

// A handler that knows which record failed says so with FailedAt: the
// records before it are done (the checkpoint moves to it), the rest is
// retried, and if it is given up, that record alone is; the records after
// it come next as a batch of their own.
func ExampleFailedAt() {
	handler := stream.HandlerFunc(func(ctx context.Context, b *stream.Batch) error {
		fmt.Printf("deliver offsets %d-%d (retry %d)\n", b.FirstOffset(), b.LastOffset(), b.Attempt.Retries)
		for i, r := range b.Records {
			if string(r.Value) == "x" {
				return stream.FailedAt(i, fmt.Errorf("offset %d: not a number", r.Offset))
			}
		}
		return nil
	})
	proc, err := stream.NewProcessor(handler,
		stream.WithPolicy(checkpoint.Policy{MaxRetries: 1, Backoff: checkpoint.Immediate()}),
		printGivenUp(), printCheckpoints())
	if err != nil {
		fmt.Println(err)
		return
	}
	part := streamtest.NewPartition("orders", 0, 10)
	part.Append(time.Now(), "1", "2", "x", "4", "5")
	runToEnd(proc, part)
	// Output:
	// deliver offsets 0-4 (retry 0)
	// checkpoint 2
	// deliver offsets 2-4 (retry 1)
	// given up: offsets 2-2: given up after 2 deliveries (the retry limit, 1 retry, is reached): offset 2: not a number
	// checkpoint 3
	// deliver offsets 3-4 (retry 0)
	// checkpoint 5
}

// PerRecord adapts a per-record function. A record that fails is reported
// as FailedAt that record, so a poison record costs one record: here it is
// not retryable (Permanent) and is given up at once.
func ExamplePerRecord() {
	handler := stream.PerRecord(func(ctx context.Context, r *stream.Record) error {
		if strings.Contains(string(r.Value), "?") {
			return checkpoint.Permanent(errors.New("not a fruit"))
		}
		fmt.Println("handled", string(r.Value))
		return nil
	})
	proc, err := stream.NewProcessor(handler,
		stream.WithPolicy(checkpoint.Policy{MaxRetries: 3, Backoff: checkpoint.Immediate()}),
		printGivenUp())
	if err != nil {
		fmt.Println(err)
		return
	}
	part := streamtest.NewPartition("orders", 0, 10)
	part.Append(time.Now(), "apple", "pear", "???", "plum")
	runToEnd(proc, part)
	// Output:
	// handled apple
	// handled pear
	// given up: offsets 2-2: given up after 1 delivery (the error is not retryable): not a fruit
	// handled plum
}

// StopPartition holds a partition whose batch is given up, until an
// operator resumes it (Processor.Resume, or the host's status page): the
// batch is delivered again with a fresh count.
func ExampleStopPartition() {
	fixed := false // the payment provider, until the operator fixes it
	handler := stream.HandlerFunc(func(ctx context.Context, b *stream.Batch) error {
		fmt.Printf("deliver offsets %d-%d (retry %d)\n", b.FirstOffset(), b.LastOffset(), b.Attempt.Retries)
		if !fixed {
			return errors.New("payment provider rejects the batch")
		}
		return nil
	})
	stopped := make(chan stream.StoppedEvent, 1)
	proc, err := stream.NewProcessor(handler,
		stream.WithPolicy(checkpoint.Policy{MaxRetries: 1, Backoff: checkpoint.Immediate()}),
		stream.WithExhaustionAction(stream.StopPartition),
		stream.WithHooks(stream.Hooks{Stopped: func(e stream.StoppedEvent) { stopped <- e }}),
		printCheckpoints())
	if err != nil {
		fmt.Println(err)
		return
	}
	go func() { // the operator
		e := <-stopped
		fmt.Printf("stopped at offset %d: %v\n", e.FirstOffset, e.Err)
		fixed = true
		_ = proc.Resume(context.Background(), "orders", 0)
	}()
	part := streamtest.NewPartition("orders", 0, 5)
	part.Append(time.Now(), "a", "b", "c")
	runToEnd(proc, part)
	// Output:
	// deliver offsets 0-2 (retry 0)
	// deliver offsets 0-2 (retry 1)
	// stopped at offset 0: given up after 2 deliveries (the retry limit, 1 retry, is reached): payment provider rejects the batch
	// deliver offsets 0-2 (retry 0)
	// checkpoint 3
}

// Skip releases a partition that StopPartition holds by moving its
// checkpoint past the given-up batch, which is not delivered again.
func ExampleProcessor_Skip() {
	handler := stream.HandlerFunc(func(ctx context.Context, b *stream.Batch) error {
		fmt.Printf("deliver offsets %d-%d (retry %d)\n", b.FirstOffset(), b.LastOffset(), b.Attempt.Retries)
		return errors.New("currency XTS is not supported")
	})
	stopped := make(chan stream.StoppedEvent, 1)
	proc, err := stream.NewProcessor(handler,
		stream.WithPolicy(checkpoint.Policy{MaxRetries: 1, Backoff: checkpoint.Immediate()}),
		stream.WithExhaustionAction(stream.StopPartition),
		stream.WithHooks(stream.Hooks{Stopped: func(e stream.StoppedEvent) { stopped <- e }}),
		printCheckpoints())
	if err != nil {
		fmt.Println(err)
		return
	}
	go func() { // the operator
		e := <-stopped
		fmt.Printf("stopped at offset %d; skip it\n", e.FirstOffset)
		_ = proc.Skip(context.Background(), "orders", 0)
	}()
	part := streamtest.NewPartition("orders", 0, 5)
	part.Append(time.Now(), "a", "b", "c")
	runToEnd(proc, part)
	// Output:
	// deliver offsets 0-2 (retry 0)
	// deliver offsets 0-2 (retry 1)
	// stopped at offset 0; skip it
	// checkpoint 3
}

// Hooks report what happens to each batch. While a batch is withheld, its
// retry state is committed with the checkpoint as metadata;
// DescribeMetadata puts it in words. A manual clock makes the times
// exact.
func ExampleHooks() {
	clock := streamtest.NewClock(time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC))
	at := func() string { return clock.Now().Format("15:04:05.0") }
	handler := stream.HandlerFunc(func(ctx context.Context, b *stream.Batch) error {
		if b.Attempt.Retries < 2 {
			return errors.New("warehouse unavailable")
		}
		return nil
	})
	policy := checkpoint.Policy{MaxRetries: 5, Backoff: checkpoint.Fixed(1500 * time.Millisecond)}
	proc, err := stream.NewProcessor(handler, stream.WithPolicy(policy), stream.WithClock(clock),
		stream.WithHooks(stream.Hooks{
			Delivered: func(e stream.DeliveredEvent) {
				fmt.Printf("%s delivered offsets %d-%d, retry %d: %v\n", at(), e.FirstOffset, e.LastOffset, e.Attempt.Retries, e.Outcome)
			},
			RetryScheduled: func(e stream.RetryEvent) {
				fmt.Printf("%s retry %d scheduled in %v: %v\n", at(), e.Retry, e.Delay, e.Err)
			},
			Checkpointed: func(e stream.CheckpointEvent) {
				if e.Metadata != "" {
					fmt.Printf("%s retry state written, checkpoint stays at %d: %s\n", at(), e.Next, stream.DescribeMetadata(e.Metadata, policy.MaxRetries))
					return
				}
				fmt.Printf("%s checkpoint moved to %d\n", at(), e.Next)
			},
		}))
	if err != nil {
		fmt.Println(err)
		return
	}
	part := streamtest.NewPartition("orders", 0, 5)
	part.Append(clock.Now(), "a", "b")
	runWithClock(proc, part, clock, 1500*time.Millisecond)
	// Output:
	// 12:00:00.0 delivered offsets 0-1, retry 0: failed
	// 12:00:00.0 retry 1 scheduled in 1.5s: warehouse unavailable
	// 12:00:00.0 retry state written, checkpoint stays at 0: retry 1 of 5, due at 12:00:01.5 UTC
	// 12:00:01.5 retry state written, checkpoint stays at 0: retry 1 of 5, started
	// 12:00:01.5 delivered offsets 0-1, retry 1: failed
	// 12:00:01.5 retry 2 scheduled in 1.5s: warehouse unavailable
	// 12:00:01.5 retry state written, checkpoint stays at 0: retry 2 of 5, due at 12:00:03 UTC
	// 12:00:03.0 retry state written, checkpoint stays at 0: retry 2 of 5, started
	// 12:00:03.0 delivered offsets 0-1, retry 2: succeeded
	// 12:00:03.0 checkpoint moved to 2
}

// printPublisher is a stream.Publisher that prints what it is given.
type printPublisher struct{}

func (printPublisher) Publish(_ context.Context, topic string, recs []stream.Record) error {
	for _, r := range recs {
		h := map[string]string{}
		for _, x := range r.Headers {
			h[x.Key] = string(x.Value)
		}
		fmt.Printf("to %s: %s (from offset %s, %s deliveries, error %q)\n", topic, r.Value,
			h[stream.HeaderOffset], h[stream.HeaderDeliveries], h[stream.HeaderError])
	}
	return nil
}
