package franz_test

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/redeliver-go/redeliver/checkpoint"
	"github.com/redeliver-go/redeliver/stream"
	"github.com/redeliver-go/redeliver/stream/streamtest"
)

// produceKeyed writes one record per key to the partition, in order.
func produceKeyed(t *testing.T, addrs []string, topic string, partition int32, keys []string) {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(addrs...), kgo.RecordPartitioner(kgo.ManualPartitioner()))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	recs := make([]*kgo.Record, len(keys))
	for i, k := range keys {
		recs[i] = &kgo.Record{Topic: topic, Partition: partition, Key: []byte(k), Value: fmt.Appendf(nil, "%d", i)}
	}
	ctx, cancel := context.WithTimeout(context.Background(), wait)
	defer cancel()
	if err := cl.ProduceSync(ctx, recs...).FirstErr(); err != nil {
		t.Fatal(err)
	}
}

// TestKeyedRetryAcrossMove: in key ordering on franz-go over kfake, a
// record that fails holds back its key only; the partition moves to
// another consumer of the group in the middle of its retries, and the
// next owner skips the records finished before the move and continues
// the record's count from the committed window: the per-key order, the
// per-record bound and no loss hold (History.CheckKeys).
func TestKeyedRetryAcrossMove(t *testing.T) {
	addrs := newCluster(t, "t", 1)
	const n = 40
	keys := make([]string, n)
	for o := range keys {
		keys[o] = fmt.Sprint("k", o%5)
	}
	produceKeyed(t, addrs, "t", 0, keys)
	var h streamtest.History
	var mu sync.Mutex
	calls := map[int64]int{}
	handler := stream.HandlerFunc(func(_ context.Context, b *stream.Batch) error {
		off := b.FirstOffset()
		mu.Lock()
		calls[off]++
		mu.Unlock()
		if off == 6 && b.Attempt.Retry < 3 {
			return fmt.Errorf("record 6 fails (retry %d)", b.Attempt.Retry)
		}
		return nil
	})
	newProc := func(member string) *stream.Processor {
		return newProcessor(t, stream.Chain(handler, h.Middleware(member)), stream.WithOrdering(stream.ByKey), stream.WithConcurrency(4, 0),
			stream.WithHooks(h.Hooks(member)), stream.WithPolicy(checkpoint.Policy{MaxRetries: 5, Backoff: checkpoint.Fixed(700 * time.Millisecond)}))
	}
	a := start(t, addrs, "g", "t", newProc("a"))
	// Wait for the window to carry record 6's count.
	deadline := time.Now().Add(wait)
	for {
		o, ok := committed(t, addrs, "g").Lookup("t", 0)
		if ok && o.Err == nil {
			if w, err := checkpoint.RestoreWindow(o.At, o.Metadata, checkpoint.WindowLimits{}); err == nil {
				if s, ok := w.State(6); ok && s.Retries >= 1 {
					break
				}
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("record 6's retry state never committed (committed %+v)", o)
		}
		time.Sleep(20 * time.Millisecond)
	}
	if err := a.Stop(t); err != nil {
		t.Fatal(err)
	}
	o, _ := committed(t, addrs, "g").Lookup("t", 0)
	if o.At != 6 {
		t.Fatalf("a committed %d, want 6 (the retrying record)", o.At)
	}
	start(t, addrs, "g", "t", newProc("b"))
	waitCommitted(t, addrs, "g", "t", map[int32]int64{0: n})
	r := h.CheckKeys(map[streamtest.TopicPartition][]string{{Topic: "t", Partition: 0}: keys})
	if len(r.Violations) > 0 || r.Lost != 0 {
		t.Fatalf("CheckKeys: lost %d: %s", r.Lost, strings.Join(r.Violations, "\n"))
	}
	mu.Lock()
	defer mu.Unlock()
	if calls[6] != 4 {
		t.Errorf("record 6 delivered %d times, want 4 (3 failures, then a success)", calls[6])
	}
	for off, c := range calls {
		if off != 6 && c != 1 {
			t.Errorf("record %d delivered %d times", off, c)
		}
	}
}
