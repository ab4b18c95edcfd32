package kafkatest

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

// ProduceKeyed writes one record per key to the partition, in order, its
// value its index in keys.
func ProduceKeyed(t testing.TB, addrs []string, topic string, partition int32, keys []string) {
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
	ctx, cancel := context.WithTimeout(context.Background(), Wait)
	defer cancel()
	if err := cl.ProduceSync(ctx, recs...).FirstErr(); err != nil {
		t.Fatal(err)
	}
}

// keyedRetryAcrossMove: in key ordering, a record that fails holds back
// its key only; the partition moves to another consumer of the group in
// the middle of its retries (its owner stops), and the next owner skips
// the records finished before the move and continues the record's count
// from the committed window: the per-key order, the per-record bound and
// no loss hold (History.CheckKeys), and no record the window said was
// finished is delivered again (a record in flight at the stop may be).
func keyedRetryAcrossMove(t *testing.T, a Adapter) {
	_, addrs := NewCluster(t, "t", 1)
	const n = 40
	keys := make([]string, n)
	for o := range keys {
		keys[o] = fmt.Sprint("k", o%5)
	}
	ProduceKeyed(t, addrs, "t", 0, keys)
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
		p, err := stream.NewProcessor(stream.Chain(handler, h.Middleware(member)), stream.WithOrdering(stream.ByKey), stream.WithConcurrency(4, 0),
			stream.WithHooks(h.Hooks(member)), stream.WithPolicy(checkpoint.Policy{MaxRetries: 5, Backoff: checkpoint.Fixed(700 * time.Millisecond)}))
		if err != nil {
			t.Fatal(err)
		}
		return p
	}
	first := Start(t, a, Config{Addrs: addrs, Group: "g", Topic: "t", Processor: newProc("a")})
	// Wait for the window to carry record 6's count.
	deadline := time.Now().Add(Wait)
	for {
		o, ok := Committed(t, addrs, "g").Lookup("t", 0)
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
	if err := first.Stop(t); err != nil {
		t.Fatal(err)
	}
	o, _ := Committed(t, addrs, "g").Lookup("t", 0)
	if o.At != 6 {
		t.Fatalf("the first owner committed %d, want 6 (the retrying record)", o.At)
	}
	moved, err := checkpoint.RestoreWindow(o.At, o.Metadata, checkpoint.WindowLimits{})
	if err != nil {
		t.Fatal(err)
	}
	Start(t, a, Config{Addrs: addrs, Group: "g", Topic: "t", Processor: newProc("b")})
	WaitCommitted(t, addrs, "g", "t", map[int32]int64{0: n})
	r := h.CheckKeys(map[streamtest.TopicPartition][]string{{Topic: "t", Partition: 0}: keys})
	if len(r.Violations) > 0 || r.Lost != 0 {
		t.Fatalf("CheckKeys: lost %d: %s", r.Lost, strings.Join(r.Violations, "\n"))
	}
	mu.Lock()
	defer mu.Unlock()
	if calls[6] != 4 {
		t.Errorf("record 6 delivered %d times, want 4 (3 failures, then a success)", calls[6])
	}
	again, finished := 0, 0
	for off := range int64(n) {
		if off < moved.Next() && moved.Finished(off) {
			finished++
		}
	}
	for off, c := range calls {
		switch {
		case off != 6 && moved.Finished(off) && c != 1:
			t.Errorf("record %d, finished before the move, delivered %d times", off, c)
		case c > 1 && off != 6:
			again++ // in flight at the stop
		}
	}
	t.Logf("%d records finished before the move, none delivered again; %d in flight at the stop delivered again", finished, again)
}
