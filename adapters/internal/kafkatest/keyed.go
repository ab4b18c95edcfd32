package kafkatest

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/redeliver-go/redeliver/checkpoint"
	"github.com/redeliver-go/redeliver/internal/retrystate"
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

// interruptedRetries counts the retries of the record at offset off of
// partition p that a claim committed as started (the mark written before
// a retry is delivered) and that no claim delivered: a move that lands
// between the mark and the handler's call. The next owner counts such a
// retry as made (the bound is never exceeded; the record can be given up
// one delivery early), so it stands for a delivery in the record's count.
func interruptedRetries(events []streamtest.Event, p int32, off int64) int {
	delivered := map[int]bool{}
	for _, e := range events {
		if e.Kind == streamtest.Delivered && e.Partition == p && e.First == off {
			delivered[e.Retry] = true
		}
	}
	cut := map[int]bool{}
	for _, e := range events {
		if e.Kind != streamtest.Claimed || e.Partition != p || e.Metadata == "" {
			continue
		}
		w, err := retrystate.RestoreWindow(e.Offset, e.Metadata, checkpoint.WindowLimits{})
		if err != nil {
			continue
		}
		if s, ok := w.State(off); ok && s.Started && !delivered[s.Retries] {
			cut[s.Retries] = true
		}
	}
	return len(cut)
}

// keyedRetryAcrossMove: in key ordering, a record that fails holds back
// its key only. Two partitions each have a record that fails three
// times; once both retry states are committed, a second consumer joins
// the group (a rebalance moves one partition to it in the middle of its
// retries, the first consumer keeping the other), then the first one
// stops (the other partition moves). Each next owner skips the records
// finished before its move and continues the record's count from the
// committed window: the per-key order, the per-record bound and no loss
// hold (History.CheckKeys), each failing record is delivered exactly 4
// times (a retry committed as started and cut off by a move before its
// delivery counting as one: interruptedRetries), and no record a
// committed window said was finished is delivered again (a record in
// flight at a move may be).
func keyedRetryAcrossMove(t *testing.T, a Adapter) {
	_, addrs := NewCluster(t, "t", 2)
	const n = 40
	keys := make([]string, n)
	for o := range keys {
		keys[o] = fmt.Sprint("k", o%5)
	}
	for p := range int32(2) {
		ProduceKeyed(t, addrs, "t", p, keys)
	}
	var h streamtest.History
	var mu sync.Mutex
	type at struct {
		p   int32
		off int64
	}
	calls := map[at]int{}
	handler := stream.HandlerFunc(func(_ context.Context, b *stream.Batch) error {
		off := b.FirstOffset()
		mu.Lock()
		calls[at{b.Partition, off}]++
		mu.Unlock()
		if off == 6 && b.Attempt.Retries < 3 {
			return fmt.Errorf("record %d/6 fails (retry %d)", b.Partition, b.Attempt.Retries)
		}
		return nil
	})
	newProc := func(member string) *stream.Processor {
		p, err := stream.NewProcessor(stream.Chain(handler, h.Middleware(member)), stream.WithOrdering(stream.ByKey), stream.WithConcurrency(4, 0),
			stream.WithHooks(h.Hooks(member)), stream.WithPolicy(checkpoint.Policy{MaxRetries: 5, Backoff: checkpoint.Fixed(time.Second)}))
		if err != nil {
			t.Fatal(err)
		}
		return p
	}
	// windows returns the committed window of each partition that carries
	// record 6's count.
	windows := func() map[int32]*retrystate.Window {
		out := map[int32]*retrystate.Window{}
		offs := Committed(t, addrs, "g")
		for p := range int32(2) {
			o, ok := offs.Lookup("t", p)
			if !ok || o.Err != nil {
				continue
			}
			if w, err := retrystate.RestoreWindow(o.At, o.Metadata, checkpoint.WindowLimits{}); err == nil {
				if s, ok := w.State(6); ok && s.Retries >= 1 {
					out[p] = w
				}
			}
		}
		return out
	}
	waitWindows := func(what string) map[int32]*retrystate.Window {
		deadline := time.Now().Add(Wait)
		for {
			if ws := windows(); len(ws) == 2 {
				return ws
			}
			if time.Now().After(deadline) {
				t.Fatalf("%s: the retry states of records 6 were not committed (committed %v)", what, OffsetsOf(Committed(t, addrs, "g"), "t"))
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
	first := Start(t, a, Config{Addrs: addrs, Group: "g", Topic: "t", Processor: newProc("a")})
	moved := waitWindows("before the rebalance")
	Start(t, a, Config{Addrs: addrs, Group: "g", Topic: "t", Processor: newProc("b")})
	// Wait until b delivers, then move the rest to it.
	deadline := time.Now().Add(Wait)
	for !slices.ContainsFunc(h.Events(), func(e streamtest.Event) bool { return e.Member == "b" && e.Kind == streamtest.Started }) {
		if time.Now().After(deadline) {
			t.Fatal("the second consumer delivered nothing after the rebalance")
		}
		time.Sleep(20 * time.Millisecond)
	}
	if err := first.Stop(t); err != nil {
		t.Fatal(err)
	}
	WaitCommitted(t, addrs, "g", "t", map[int32]int64{0: n, 1: n})
	tps := map[streamtest.TopicPartition][]string{}
	for p := range int32(2) {
		tps[streamtest.TopicPartition{Topic: "t", Partition: p}] = keys
	}
	r := h.CheckKeys(tps)
	if len(r.Violations) > 0 || r.Lost != 0 {
		t.Fatalf("CheckKeys: lost %d: %s", r.Lost, strings.Join(r.Violations, "\n"))
	}
	mu.Lock()
	defer mu.Unlock()
	again, finished := 0, 0
	for c, k := range calls {
		w := moved[c.p]
		switch {
		case c.off == 6:
			if cut := interruptedRetries(h.Events(), c.p, 6); k+cut != 4 {
				t.Errorf("record %d/6 delivered %d times and %d retries committed as started were never delivered, want 4 in all (3 failures, then a success)", c.p, k, cut)
			}
		case c.off < w.Next() && w.Finished(c.off):
			finished++
			if k != 1 {
				t.Errorf("record %d/%d, finished before the moves, delivered %d times", c.p, c.off, k)
			}
		case k > 1:
			again++ // in flight at a move
		}
	}
	t.Logf("%d records finished before the moves, none delivered again; %d in flight at a move delivered again", finished, again)
}
