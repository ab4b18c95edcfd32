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

// Each record's retries are its own: in a batch of five, record 1 fails
// once and record 3 always fails, under a policy of two retries a second
// apart. Record 1 is retried once; record 3 then starts its own count, is
// delivered three times, and is dead-lettered alone with headers that
// describe it; record 4 follows as a batch of its own. docs/COUNTING.md
// walks through this run.
func ExamplePerRecord_counting() {
	start := time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC)
	clock := streamtest.NewClock(start)
	part := streamtest.NewPartition("orders", 0, 5)
	part.Append(start, "a", "b", "c", "d", "e")
	calls := map[int64]int{}
	handler := stream.PerRecord(func(_ context.Context, r *stream.Record) error {
		calls[r.Offset]++
		if r.Offset == 1 && calls[1] == 1 || r.Offset == 3 {
			return fmt.Errorf("record %d: call %d failed", r.Offset, calls[r.Offset])
		}
		return nil
	})
	at := func(t time.Time) string { return t.Format("15:04:05") }
	dl, err := stream.DeadLetter(headersPublisher{}, "orders.dlq")
	if err != nil {
		fmt.Println(err)
		return
	}
	policy := checkpoint.Policy{MaxRetries: 2, Backoff: checkpoint.Fixed(time.Second)}
	proc, err := stream.NewProcessor(handler, stream.WithPolicy(policy), stream.WithClock(clock),
		stream.WithExhaustionAction(dl),
		stream.WithHooks(stream.Hooks{
			Delivered: func(e stream.DeliveredEvent) {
				var be *stream.BatchError
				what := e.Outcome.String()
				if errors.As(e.Err, &be) {
					what = fmt.Sprintf("failed at offset %d", e.FirstOffset+int64(be.Index))
				}
				fmt.Printf("%s offsets %d-%d, retry %d: %s\n", at(e.Start), e.FirstOffset, e.LastOffset, e.Attempt.Retries, what)
			},
			Checkpointed: func(e stream.CheckpointEvent) {
				fmt.Printf("%s   commit %d %q\n", at(clock.Now()), e.Next, e.Metadata)
			},
		}))
	if err != nil {
		fmt.Println(err)
		return
	}
	runWithClock(proc, part, clock, time.Second)
	// Output:
	// 12:00:00 offsets 0-4, retry 0: failed at offset 1
	// 12:00:00   commit 1 ""
	// 12:00:00   commit 1 "rd1;o=1;r=1;f=1767268800000;d=1000;n=1767268801000;p=1;e=record 1: call 1 failed"
	// 12:00:01   commit 1 "rd1;o=1;r=1;f=1767268800000;d=1000;s=1;p=1;e=record 1: call 1 failed"
	// 12:00:01 offsets 1-4, retry 1: failed at offset 3
	// 12:00:01   commit 3 ""
	// 12:00:01   commit 3 "rd1;o=3;r=1;f=1767268801000;d=1000;n=1767268802000;p=1;e=record 3: call 1 failed"
	// 12:00:02   commit 3 "rd1;o=3;r=1;f=1767268801000;d=1000;s=1;p=1;e=record 3: call 1 failed"
	// 12:00:02 offsets 3-4, retry 1: failed at offset 3
	// 12:00:02   commit 3 "rd1;o=3;r=2;f=1767268801000;d=1000;n=1767268803000;p=1;e=record 3: call 2 failed"
	// 12:00:03   commit 3 "rd1;o=3;r=2;f=1767268801000;d=1000;s=1;p=1;e=record 3: call 2 failed"
	// 12:00:03 offsets 3-4, retry 2: failed at offset 3
	// 12:00:03   commit 3 "rd1;o=3;r=2;f=1767268801000;d=1000;s=1;x=1;c=1;e=record 3: call 3 failed"
	// to orders.dlq: d from offset 3: redeliver-deliveries=3 __dlq.errors.delivery.count=3 redeliver-first-failure=2026-01-01T12:00:01Z redeliver-last-error="record 3: call 3 failed"
	// 12:00:03   commit 4 ""
	// 12:00:03 offsets 4-4, retry 0: succeeded
	// 12:00:03   commit 5 ""
}

// headersPublisher prints the counting headers of what it is given.
type headersPublisher struct{}

func (headersPublisher) Publish(_ context.Context, topic string, recs []stream.Record) error {
	for _, r := range recs {
		h := map[string]string{}
		for _, x := range r.Headers {
			h[x.Key] = string(x.Value)
		}
		fmt.Printf("to %s: %s from offset %s: %s=%s %s=%s %s=%s %s=%q\n", topic, r.Value, h[stream.HeaderOffset],
			stream.HeaderDeliveries, h[stream.HeaderDeliveries], stream.HeaderDLQDeliveryCount, h[stream.HeaderDLQDeliveryCount],
			stream.HeaderFirstFailure, h[stream.HeaderFirstFailure], stream.HeaderError, h[stream.HeaderError])
	}
	return nil
}
