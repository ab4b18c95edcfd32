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

// Testing a handler without a broker: in-memory partitions, a Recorder
// that sees every delivery, a fault injected in front of the handler, and
// the History checker that verifies the delivery contract over the run.
// In a test, run it under testing/synctest so that backoffs take no time.
func Example() {
	part := streamtest.NewPartition("orders", 0, 4)
	part.AppendN(time.Now(), 10) // values "0" to "9"

	var handled []string
	handler := stream.PerRecord(func(ctx context.Context, r *stream.Record) error {
		handled = append(handled, string(r.Value))
		return nil
	})
	rec := &streamtest.Recorder{}
	var hist streamtest.History
	proc, err := stream.NewProcessor(
		// the first delivery of every batch fails before the handler runs
		stream.Chain(handler, rec.Middleware(), streamtest.FailFirst(1, errors.New("flaky downstream"))),
		stream.WithPolicy(checkpoint.Policy{MaxRetries: 2, Backoff: checkpoint.Immediate()}),
		stream.WithHooks(hist.Hooks("consumer-a")),
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
	if err := streamtest.Run(ctx, proc, part); err != nil {
		fmt.Println(err)
		return
	}

	for _, d := range rec.Deliveries() {
		fmt.Printf("offsets %d-%d, retry %d, error: %v\n", d.FirstOffset, d.LastOffset, d.Attempt.Retry, d.Err)
	}
	fmt.Println("handled:", handled)
	report := hist.Check(map[streamtest.TopicPartition]int64{{Topic: "orders", Partition: 0}: part.End()})
	fmt.Printf("%d records, %d lost, %d deliveries, violations: %v\n", report.Records, report.Lost, report.Deliveries, report.Violations)
	// Output:
	// offsets 0-3, retry 0, error: offsets 0-3, delivery 1: flaky downstream
	// offsets 0-3, retry 1, error: <nil>
	// offsets 4-7, retry 0, error: offsets 4-7, delivery 1: flaky downstream
	// offsets 4-7, retry 1, error: <nil>
	// offsets 8-9, retry 0, error: offsets 8-9, delivery 1: flaky downstream
	// offsets 8-9, retry 1, error: <nil>
	// handled: [0 1 2 3 4 5 6 7 8 9]
	// 10 records, 0 lost, 6 deliveries, violations: []
}
