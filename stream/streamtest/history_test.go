package streamtest_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/redeliver-go/redeliver/checkpoint"
	"github.com/redeliver-go/redeliver/stream"
	"github.com/redeliver-go/redeliver/stream/streamtest"
)

// A run with failures, retries, a give-up and a rebalance passes the check.
func TestHistoryCleanRun(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var h streamtest.History
		parts := []*streamtest.Partition{streamtest.NewPartition("t", 0, 7), streamtest.NewPartition("t", 1, 7)}
		for _, p := range parts {
			p.AppendN(time.Now(), 100)
		}
		handler := stream.HandlerFunc(func(_ context.Context, b *stream.Batch) error {
			switch {
			case b.FirstOffset()%3 == 0 && b.Attempt.Retry < 2:
				return errors.New("transient")
			case b.FirstOffset() == 49:
				return stream.Permanent(errors.New("poison"))
			}
			return nil
		})
		run := func(member string, until int64) {
			proc, err := stream.NewProcessor(handler, stream.WithHooks(h.Hooks(member)),
				stream.WithPolicy(checkpoint.Policy{MaxRetries: 3, Backoff: checkpoint.Fixed(time.Second)}))
			if err != nil {
				t.Fatal(err)
			}
			ctx, cancel := context.WithCancel(t.Context())
			done := make(chan error, 1)
			go func() { done <- streamtest.Run(ctx, proc, parts...) }()
			wctx, wcancel := context.WithTimeout(ctx, time.Hour)
			defer wcancel()
			for _, p := range parts {
				if err := p.WaitCommitted(wctx, until); err != nil {
					t.Fatal(err)
				}
			}
			for _, p := range parts {
				p.Revoke()
			}
			cancel()
			<-done
		}
		run("a", 40)
		run("b", 100)
		r := h.Check(map[streamtest.TopicPartition]int64{{Topic: "t", Partition: 0}: 100, {Topic: "t", Partition: 1}: 100})
		if len(r.Violations) > 0 || r.Lost != 0 || r.Records != 200 {
			t.Fatalf("report %+v", r)
		}
		// 3 deliveries of a failing batch, plus at most one more when the
		// move caught a delivery whose retry state was not yet written.
		if r.MaxDeliveries < 3 || r.MaxDeliveries > 4 || r.MeanPerRecord <= 1 {
			t.Fatalf("max %d, mean %.2f deliveries per record", r.MaxDeliveries, r.MeanPerRecord)
		}
	})
}

// Each kind of anomaly is caught.
func TestHistoryCatchesAnomalies(t *testing.T) {
	tp := streamtest.TopicPartition{Topic: "t", Partition: 0}
	ends := map[streamtest.TopicPartition]int64{tp: 10}
	batch := func(first, last int64) stream.BatchInfo {
		return stream.BatchInfo{Topic: "t", FirstOffset: first, LastOffset: last, Records: int(last - first + 1)}
	}
	ok := func(hk stream.Hooks, first, last int64) {
		hk.Delivered(stream.DeliveredEvent{BatchInfo: batch(first, last), Outcome: stream.Succeeded})
	}
	commit := func(hk stream.Hooks, next int64) {
		hk.Checkpointed(stream.CheckpointEvent{Topic: "t", Next: next})
	}
	claim := func(hk stream.Hooks, at int64) { hk.Claimed(stream.ClaimEvent{Topic: "t", Committed: at}) }
	tests := []struct {
		name string
		run  func(a, b stream.Hooks)
		want string
	}{
		{"clean", func(a, _ stream.Hooks) { claim(a, -1); ok(a, 0, 4); commit(a, 5); ok(a, 5, 9); commit(a, 10) }, ""},
		{"gap", func(a, _ stream.Hooks) { claim(a, -1); ok(a, 0, 4); commit(a, 5); ok(a, 6, 9); commit(a, 10) }, "checkpoint is at 5"},
		{"commit ahead", func(a, _ stream.Hooks) { claim(a, -1); ok(a, 0, 4); commit(a, 10) }, "ahead of record 5"},
		{"lost", func(a, _ stream.Hooks) { claim(a, -1); ok(a, 0, 4); commit(a, 5) }, "record 5 lost"},
		{"regress", func(a, _ stream.Hooks) {
			claim(a, -1)
			ok(a, 0, 9)
			commit(a, 10)
			commit(a, 5)
		}, "went back"},
		{"stale owner", func(a, b stream.Hooks) {
			claim(a, -1)
			ok(a, 0, 4)
			claim(b, -1)
			commit(a, 5)
			ok(b, 0, 9)
			commit(b, 10)
		}, "while b owns"},
		{"after release", func(a, _ stream.Hooks) {
			claim(a, -1)
			ok(a, 0, 9)
			a.Released(stream.ReleaseEvent{Topic: "t"})
			commit(a, 10)
		}, "after its claim ended"},
		{"partial", func(a, _ stream.Hooks) {
			claim(a, -1)
			a.Delivered(stream.DeliveredEvent{BatchInfo: batch(0, 9), Outcome: stream.Failed, Err: stream.FailedAt(3, errors.New("x"))})
			commit(a, 3)
			a.Exhausted(stream.ExhaustedEvent{BatchInfo: batch(3, 9)})
			commit(a, 10)
		}, ""},
		{"partial ahead", func(a, _ stream.Hooks) {
			claim(a, -1)
			a.Delivered(stream.DeliveredEvent{BatchInfo: batch(0, 9), Outcome: stream.Failed, Err: stream.FailedAt(3, errors.New("x"))})
			commit(a, 5)
		}, "ahead of record 3"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var h streamtest.History
			tt.run(h.Hooks("a"), h.Hooks("b"))
			r := h.Check(ends)
			got := strings.Join(r.Violations, "\n")
			if tt.want == "" && got != "" || tt.want != "" && !strings.Contains(got, tt.want) {
				t.Fatalf("violations:\n%s\nwant one containing %q", got, tt.want)
			}
		})
	}
}
