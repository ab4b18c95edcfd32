package streamtest_test

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/redeliver-go/redeliver/checkpoint"
	"github.com/redeliver-go/redeliver/stream"
	"github.com/redeliver-go/redeliver/stream/streamtest"
)

// Testing a handler without a broker: records appended to an in-memory
// partition, the processor run over it until its checkpoint reaches the
// end, then the checkpoint read back. In a test, run it under
// testing/synctest (or give the processor a Clock) so that backoffs take
// no time.
func Example() {
	var handled []string
	handler := stream.PerRecord(func(ctx context.Context, r *stream.Record) error {
		handled = append(handled, string(r.Value))
		return nil
	})
	proc, err := stream.NewProcessor(handler)
	if err != nil {
		fmt.Println(err)
		return
	}

	part := streamtest.NewPartition("orders", 0, 4) // batches of up to 4 records
	part.Append(time.Now(), "a", "b", "c", "d", "e")
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	go func() {
		_ = part.WaitCommitted(ctx, part.End()) // until every record is checkpointed
		cancel()
	}()
	if err := streamtest.Run(ctx, proc, part); err != nil {
		fmt.Println(err)
		return
	}
	next, _ := part.Committed()
	fmt.Println("handled:", handled, "checkpoint:", next)
	// Output:
	// handled: [a b c d e] checkpoint: 5
}

// A Recorder's middleware sees every delivery, with its attempt and
// result; FailFirst fails the first delivery of every batch before the
// handler runs, so each batch is retried once.
func ExampleRecorder() {
	rec := &streamtest.Recorder{}
	proc, err := stream.NewProcessor(
		stream.Chain(streamtest.Succeed, rec.Middleware(), streamtest.FailFirst(1, errors.New("flaky downstream"))),
		stream.WithPolicy(checkpoint.Policy{MaxRetries: 2, Backoff: checkpoint.Immediate()}))
	if err != nil {
		fmt.Println(err)
		return
	}
	part := streamtest.NewPartition("orders", 0, 4)
	part.AppendN(time.Now(), 6) // values "0" to "5"
	runToEnd(proc, part)
	for _, d := range rec.Deliveries() {
		fmt.Printf("offsets %d-%d, retry %d, error: %v\n", d.FirstOffset, d.LastOffset, d.Attempt.Retries, d.Err)
	}
	// Output:
	// offsets 0-3, retry 0, error: offsets 0-3, delivery 1: flaky downstream
	// offsets 0-3, retry 1, error: <nil>
	// offsets 4-5, retry 0, error: offsets 4-5, delivery 1: flaky downstream
	// offsets 4-5, retry 1, error: <nil>
}

// A History records what the consumers of a test do, through their hooks,
// and Check verifies the delivery contract over it: nothing lost, no
// checkpoint ahead of what was handled, no batch delivered more than its
// policy allows.
func ExampleHistory() {
	var hist streamtest.History
	proc, err := stream.NewProcessor(
		stream.Chain(streamtest.Succeed, streamtest.FailFirst(2, nil)),
		stream.WithPolicy(checkpoint.Policy{MaxRetries: 3, Backoff: checkpoint.Immediate()}),
		stream.WithHooks(hist.Hooks("consumer-a")))
	if err != nil {
		fmt.Println(err)
		return
	}
	part := streamtest.NewPartition("orders", 0, 4)
	part.AppendN(time.Now(), 10)
	runToEnd(proc, part)
	report := hist.Check(map[streamtest.TopicPartition]int64{{Topic: "orders", Partition: 0}: part.End()})
	fmt.Printf("%d records, %d lost, %d deliveries, violations: %v\n", report.Records, report.Lost, report.Deliveries, report.Violations)
	// Output:
	// 10 records, 0 lost, 9 deliveries, violations: []
}

// runToEnd runs proc over parts until each one's checkpoint is past its
// last record.
func runToEnd(proc *stream.Processor, parts ...*streamtest.Partition) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	go func() {
		for _, p := range parts {
			_ = p.WaitCommitted(ctx, p.End())
		}
		cancel()
	}()
	_ = streamtest.Run(ctx, proc, parts...)
}
