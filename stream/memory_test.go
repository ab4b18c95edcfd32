package stream_test

import (
	"context"
	"runtime"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/redeliver-go/redeliver/checkpoint"
	"github.com/redeliver-go/redeliver/stream"
	"github.com/redeliver-go/redeliver/stream/streamtest"
)

// TestBackoffHourHoldsTheBatch: a batch of 500 records of 1 KB fails every
// minute for an hour (of fake time). Each redelivery hands the handler the
// same records, in the same memory (held, not fetched again or copied), and
// the live heap does not grow from the first retry to the sixtieth by more
// than a small fraction of the batch.
func TestBackoffHourHoldsTheBatch(t *testing.T) {
	const (
		records = 500
		size    = 1000
		retries = 60
	)
	synctest.Test(t, func(t *testing.T) {
		p := streamtest.NewPartition("t", 0, records)
		values := make([]string, records)
		for i := range values {
			values[i] = strings.Repeat("x", size)
		}
		p.Append(time.Now(), values...)
		ctx, cancel := context.WithCancel(t.Context())
		defer cancel()
		var (
			first    *stream.Record
			heapAt1  uint64
			heapLast uint64
			copies   int
		)
		h := stream.HandlerFunc(func(_ context.Context, b *stream.Batch) error {
			if len(b.Records) != records {
				t.Errorf("delivery %d: %d records, want %d", b.Attempt.Number(), len(b.Records), records)
			}
			switch {
			case first == nil:
				first = &b.Records[0]
			case &b.Records[0] != first:
				copies++
			}
			switch b.Attempt.Retries {
			case 1:
				heapAt1 = liveHeap()
			case retries:
				heapLast = liveHeap()
				cancel()
			}
			return errTransient
		})
		proc, err := stream.NewProcessor(h, stream.WithInMemoryState(),
			stream.WithPolicy(checkpoint.Policy{MaxRetries: checkpoint.Infinite, Backoff: checkpoint.Fixed(time.Minute)}))
		if err != nil {
			t.Fatal(err)
		}
		start := time.Now()
		_ = streamtest.Run(ctx, proc, p)
		if got := time.Since(start); got < retries*time.Minute {
			t.Fatalf("ran %v of fake time, want at least %v", got, retries*time.Minute)
		}
		if copies > 0 {
			t.Errorf("%d of %d redeliveries handed over other memory than the first delivery", copies, retries)
		}
		// A copy of the batch per retry would add records*size bytes each
		// time; allow a twentieth of one batch over the whole hour.
		if grew := int64(heapLast) - int64(heapAt1); grew > records*size/20 {
			t.Errorf("live heap grew by %d bytes from retry 1 to retry %d (the batch is %d bytes)", grew, retries, records*size)
		} else {
			t.Logf("live heap from retry 1 to retry %d: %+d bytes (the batch is %d bytes)", retries, grew, records*size)
		}
	})
}

// liveHeap returns the live heap after a collection.
func liveHeap() uint64 {
	var ms runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&ms)
	return ms.HeapAlloc
}
