// Command inmemory runs the redeliver engine over in-memory partitions: a
// handler that fails transiently, asks for retries and meets a poison batch,
// with a timeline of every delivery and checkpoint. No broker is needed.
package main

import (
	"bytes"
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"sync"
	"time"

	"github.com/redeliver-go/redeliver/checkpoint"
	"github.com/redeliver-go/redeliver/stream"
	"github.com/redeliver-go/redeliver/stream/streamtest"
)

func main() {
	var (
		partitions = flag.Int("partitions", 3, "number of partitions")
		records    = flag.Int("records", 40, "records per partition")
		batch      = flag.Int("batch", 10, "records per batch")
		retries    = flag.Int("retries", 3, "retryCount (-1 infinite)")
		sleep      = flag.Duration("sleep", 200*time.Millisecond, "sleepDuration between retries")
	)
	flag.Parse()
	if err := run(*partitions, *records, *batch, *retries, *sleep); err != nil {
		fmt.Fprintln(os.Stderr, "inmemory:", err)
		os.Exit(1)
	}
}

var errDownstream = errors.New("downstream timed out")

func run(partitions, records, batchSize, retries int, sleep time.Duration) error {
	begin := time.Now()
	var parts []*streamtest.Partition
	for i := range partitions {
		p := streamtest.NewPartition("orders", int32(i), batchSize)
		p.AppendN(time.Now(), records)
		parts = append(parts, p)
	}

	// The handler: on partition 0 the second batch fails twice and then
	// succeeds; on partition 1 the first batch asks for one retry with a
	// RetryResult; on the last partition the third batch is poison and
	// always fails.
	handler := stream.HandlerFunc(func(ctx context.Context, b *stream.Batch) error {
		n := int(b.FirstOffset()) / batchSize
		switch {
		case b.Partition == 0 && n == 1 && b.Attempt.Retries < 2:
			return errDownstream
		case b.Partition == 1 && n == 0 && b.Attempt.Retries == 0:
			return stream.Retry(1, sleep/2)
		case int(b.Partition) == partitions-1 && n == 2:
			return fmt.Errorf("record %d: %w", b.FirstOffset(), errors.New("cannot parse"))
		}
		return nil
	})

	var (
		mu        sync.Mutex
		exhausted int
	)
	// print stamps a line under mu, so that lines come out in the order
	// their stamps say.
	print := func(format string, args ...any) {
		mu.Lock()
		defer mu.Unlock()
		fmt.Printf("%6.3fs  "+format+"\n", append([]any{time.Since(begin).Seconds()}, args...)...)
	}
	// The processor's warnings and errors (a batch given up) are lines of
	// the timeline too, in their place among the events.
	logger := slog.New(slog.NewTextHandler(writerFunc(func(p []byte) {
		print("%s", bytes.TrimRight(p, "\n"))
	}), &slog.HandlerOptions{Level: slog.LevelWarn, ReplaceAttr: dropTime}))
	hooks := stream.Hooks{
		Delivered: func(e stream.DeliveredEvent) {
			msg := e.Outcome.String()
			if e.Outcome == stream.Failed {
				msg += ": " + e.Err.Error()
			}
			print("p%d  offsets %3d-%3d  attempt %d  %s", e.Partition, e.FirstOffset, e.LastOffset, e.Attempt.Number(), msg)
		},
		RetryScheduled: func(e stream.RetryEvent) {
			print("p%d  offsets %3d-%3d  retry %d in %v, checkpoint withheld", e.Partition, e.FirstOffset, e.LastOffset, e.Retry, e.Delay)
		},
		Exhausted: func(e stream.ExhaustedEvent) {
			mu.Lock()
			exhausted++
			mu.Unlock()
			print("p%d  offsets %3d-%3d  given up: %v", e.Partition, e.FirstOffset, e.LastOffset, e.Err)
		},
		Checkpointed: func(e stream.CheckpointEvent) {
			if e.Metadata != "" {
				// The checkpoint stays at the withheld batch; the write
				// stores its retry state, for a next owner.
				print("p%d  retry state written (checkpoint stays at %d): %s", e.Partition, e.Next, stream.DescribeMetadata(e.Metadata, retries))
				return
			}
			print("p%d  checkpoint -> %d", e.Partition, e.Next)
		},
	}
	policy := checkpoint.Policy{MaxRetries: retries, Backoff: checkpoint.Fixed(sleep)}
	proc, err := stream.NewProcessor(handler, stream.WithPolicy(policy), stream.WithHooks(hooks), stream.WithLogger(logger))
	if err != nil {
		return err
	}

	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- streamtest.Run(ctx, proc, parts...) }()
	for _, p := range parts {
		if err := p.WaitCommitted(ctx, p.End()); err != nil {
			return err
		}
	}
	cancel()
	if err := <-done; err != nil {
		return err
	}

	// The summary checks itself.
	fmt.Println()
	ok := true
	for _, p := range parts {
		c, _ := p.Committed()
		fmt.Printf("partition %d: checkpoint %d of %d\n", p.Partition(), c, p.End())
		ok = ok && c == p.End()
	}
	wantExhausted := 0
	if retries >= 0 {
		wantExhausted = 1
	}
	fmt.Printf("batches given up: %d (want %d)\n", exhausted, wantExhausted)
	if !ok || exhausted != wantExhausted {
		return errors.New("summary check failed")
	}
	fmt.Println("ok: every partition checkpointed to its end")
	return nil
}

// writerFunc is an io.Writer that hands each write to a function.
type writerFunc func(p []byte)

func (f writerFunc) Write(p []byte) (int, error) { f(p); return len(p), nil }

// dropTime drops a log record's time: the timeline stamps the line.
func dropTime(groups []string, a slog.Attr) slog.Attr {
	if a.Key == slog.TimeKey && len(groups) == 0 {
		return slog.Attr{}
	}
	return a
}
