package franz_test

import (
	"context"
	"runtime"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/redeliver-go/redeliver/adapters/internal/kafkatest"
)

// BenchmarkScale is the success path with 1,000 partitions: b.N records
// spread over them, through the raw loop and through the adapter (the
// leaves and metrics of BenchmarkSuccessPath). Run it with
// -benchtime=1000000x.
func BenchmarkScale(b *testing.B) {
	kafkatest.RunLeaves(b, loops, []int32{1000}, false, kafkatest.Success)
}

// BenchmarkIdlePartitions measures what a consumer of many partitions
// costs while they are idle, against a plain franz-go group consumer
// (kafkatest.BenchIdlePartitions). Run it with -benchtime=1x.
func BenchmarkIdlePartitions(b *testing.B) {
	kafkatest.BenchIdlePartitions(b, adapter, []int32{1000, 10000}, rawIdle)
}

// BenchmarkWithheldBatchHeap measures the heap a withheld batch retains
// against the batch's bytes (kafkatest.BenchWithheldBatchHeap). Run it
// with -benchtime=1x.
func BenchmarkWithheldBatchHeap(b *testing.B) {
	kafkatest.BenchWithheldBatchHeap(b, adapter, rawHeld)
}

// rawHeld runs a plain franz-go group consumer until it has polled want
// records, and holds the fetches they came in, as a loop that waits out a
// backoff before handling them again would.
func rawHeld(b *testing.B, addrs []string, topic string, want int) (int64, func()) {
	cl, err := kgo.NewClient(append(benchOpts(addrs, topic), kgo.DisableAutoCommit())...)
	if err != nil {
		b.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	var (
		held  []kgo.Fetches
		seen  int
		bytes int64
	)
	for seen < want {
		fs := cl.PollFetches(ctx)
		if err := ctx.Err(); err != nil {
			b.Fatalf("raw: %d of %d records: %v", seen, want, err)
		}
		fs.EachRecord(func(r *kgo.Record) {
			bytes += int64(len(r.Key) + len(r.Value))
			for _, h := range r.Headers {
				bytes += int64(len(h.Key) + len(h.Value))
			}
		})
		seen += fs.NumRecords()
		held = append(held, fs)
	}
	return bytes, func() {
		runtime.KeepAlive(held)
		cl.Close()
	}
}

// rawIdle runs a plain franz-go group consumer until it has consumed and
// committed the topic's one record per partition, and returns its stop.
func rawIdle(b *testing.B, addrs []string, topic string, partitions int32) func() {
	cl, err := kgo.NewClient(append(benchOpts(addrs, topic), kgo.DisableAutoCommit())...)
	if err != nil {
		b.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	seen := 0
	for seen < int(partitions) {
		fs := cl.PollFetches(ctx)
		if err := ctx.Err(); err != nil {
			b.Fatalf("raw: %d of %d records: %v", seen, partitions, err)
		}
		seen += fs.NumRecords()
		if err := cl.CommitUncommittedOffsets(ctx); err != nil {
			b.Fatal(err)
		}
	}
	// Idle, as a consumer is: polling with nothing to fetch.
	polled := make(chan struct{})
	go func() {
		defer close(polled)
		for ctx.Err() == nil {
			cl.PollFetches(ctx)
		}
	}()
	return func() {
		cancel()
		<-polled
		cl.Close()
	}
}
