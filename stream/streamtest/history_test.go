package streamtest_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/redeliver-go/redeliver/checkpoint"
	"github.com/redeliver-go/redeliver/internal/retrystate"
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
			case b.FirstOffset()%3 == 0 && b.Attempt.Retries < 2:
				return errors.New("transient")
			case b.FirstOffset() == 49:
				return checkpoint.Permanent(errors.New("poison"))
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
		// move caught a first delivery, which commits nothing before it
		// runs.
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
	// retry delivers the whole partition as retry n of a policy allowing 2.
	retry := func(hk stream.Hooks, n int, o stream.Outcome) {
		hk.Delivered(stream.DeliveredEvent{BatchInfo: batch(0, 9), Attempt: stream.Attempt{Retries: n, MaxRetries: 2}, Outcome: o})
	}
	claimed := func(bi stream.BatchInfo, id uint64) stream.BatchInfo { bi.ClaimID = id; return bi }
	// state commits the retry state of the batch at 0 after n counted
	// deliveries: scheduled, or started (retry n about to be delivered).
	state := func(hk stream.Hooks, n int, started bool) {
		md := retrystate.EncodeState(retrystate.State{Retries: n, FirstFailure: time.UnixMilli(1000), Started: started})
		hk.Checkpointed(stream.CheckpointEvent{Topic: "t", Next: 0, Metadata: md})
	}
	failAt := func(hk stream.Hooks, n int, at time.Time) {
		hk.Delivered(stream.DeliveredEvent{BatchInfo: batch(0, 9), Attempt: stream.Attempt{Retries: n, MaxRetries: 2}, Outcome: stream.Failed,
			Err: errors.New("x"), Start: at})
	}
	gaveUp := func(hk stream.Hooks, retries int, first time.Time, last string) {
		var err error
		if last != "" {
			err = errors.New(last)
		}
		hk.Exhausted(stream.ExhaustedEvent{BatchInfo: batch(0, 9), Err: &checkpoint.ExhaustedError{Reason: checkpoint.RetriesSpent, Retries: retries, FirstFailure: first, Last: err}})
	}
	t0 := time.UnixMilli(1000)
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
		// A's commits of 5 and 10 were reported (coalesced) and not
		// written when a crashed: b, starting at 0 after a claim never
		// released, delivers them again. Nothing is lost.
		{"crash before coalesced commits were written", func(a, b stream.Hooks) {
			claim(a, -1)
			ok(a, 0, 4)
			commit(a, 5)
			ok(a, 5, 9)
			commit(a, 10)
			claim(b, -1)
			ok(b, 0, 2)
			commit(b, 3)
			ok(b, 3, 9)
			commit(b, 10)
		}, ""},
		// The same after a's claim was released: a release writes every
		// commit first, so a new owner starting behind is a lost write.
		{"released claim's commits not written", func(a, b stream.Hooks) {
			claim(a, -1)
			ok(a, 0, 4)
			commit(a, 5)
			a.Released(stream.ReleaseEvent{Topic: "t"})
			claim(b, -1)
			ok(b, 0, 2)
			commit(b, 3)
			ok(b, 3, 9)
			commit(b, 10)
		}, "went back"},
		{"stale owner", func(a, b stream.Hooks) {
			claim(a, -1)
			ok(a, 0, 4)
			claim(b, -1)
			commit(a, 5)
			ok(b, 0, 9)
			commit(b, 10)
		}, "while b owns"},
		// A's commit of 5 landed before b's claim read it (b starts at
		// 5), though its report comes after b's: not a stale write.
		{"commit reported after the next owner started from it", func(a, b stream.Hooks) {
			claim(a, -1)
			ok(a, 0, 4)
			claim(b, 5)
			ok(b, 5, 9)
			commit(b, 10)
			commit(a, 5)
		}, ""},
		{"stale commit other than the next owner's start", func(a, b stream.Hooks) {
			claim(a, -1)
			ok(a, 0, 4)
			claim(b, 0)
			ok(b, 0, 9)
			commit(b, 10)
			commit(a, 5)
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
			a.Exhausted(stream.ExhaustedEvent{BatchInfo: batch(3, 3), Err: &checkpoint.ExhaustedError{Reason: checkpoint.NotRetryable, Last: errors.New("x")}})
			a.ActionTried(stream.ActionEvent{BatchInfo: batch(3, 3), Try: 1})
			commit(a, 4)
			ok(a, 4, 9)
			commit(a, 10)
		}, ""},
		// A failure at a known record gives up that record alone: the
		// records after it never failed (issue 46).
		{"partial, the records after it given up with it", func(a, _ stream.Hooks) {
			claim(a, -1)
			a.Delivered(stream.DeliveredEvent{BatchInfo: batch(0, 9), Outcome: stream.Failed, Err: stream.FailedAt(3, errors.New("x"))})
			commit(a, 3)
			a.Exhausted(stream.ExhaustedEvent{BatchInfo: batch(3, 9), Err: &checkpoint.ExhaustedError{Reason: checkpoint.NotRetryable, Last: errors.New("x")}})
			a.ActionTried(stream.ActionEvent{BatchInfo: batch(3, 9), Try: 1})
			commit(a, 10)
		}, "records 3-9 given up, but record 4 never failed"},
		// Blind spots of the first checker (issue 10).
		{"given up, the action failed, commit passes", func(a, _ stream.Hooks) {
			claim(a, -1)
			a.Delivered(stream.DeliveredEvent{BatchInfo: batch(0, 4), Outcome: stream.Failed, Err: errors.New("x")})
			a.Exhausted(stream.ExhaustedEvent{BatchInfo: batch(0, 4)})
			a.ActionTried(stream.ActionEvent{BatchInfo: batch(0, 4), Try: 1, Err: errors.New("dead-letter topic unavailable")})
			ok(a, 5, 9)
			commit(a, 10)
		}, "checkpoint 10 passes record 0, given up but its exhaustion action has not succeeded"},
		{"given up, the action succeeded", func(a, _ stream.Hooks) {
			claim(a, -1)
			a.Delivered(stream.DeliveredEvent{BatchInfo: batch(0, 4), Outcome: stream.Failed, Err: errors.New("x")})
			a.Exhausted(stream.ExhaustedEvent{BatchInfo: batch(0, 4), Err: &checkpoint.ExhaustedError{Reason: checkpoint.RetriesSpent, Last: errors.New("x")}})
			a.ActionTried(stream.ActionEvent{BatchInfo: batch(0, 4), Try: 1, Err: errors.New("dead-letter topic unavailable")})
			a.ActionTried(stream.ActionEvent{BatchInfo: batch(0, 4), Try: 2})
			commit(a, 5)
			ok(a, 5, 9)
			commit(a, 10)
		}, ""},
		{"interrupted retry repeated by the next owner", func(a, b stream.Hooks) {
			claim(a, -1)
			retry(a, 0, stream.Failed)
			state(a, 1, false)
			state(a, 1, true)
			retry(a, 1, stream.Cancelled)
			a.Abandoned(stream.AbandonedEvent{BatchInfo: batch(0, 9), Attempt: stream.Attempt{Retries: 1}})
			a.Released(stream.ReleaseEvent{Topic: "t"})
			claim(b, 0)
			retry(b, 1, stream.Succeeded)
			commit(b, 10)
		}, "delivery of 0-9 as retry 1, but the record at 0 has had 2 counted deliveries"},
		{"retry repeated after a crash", func(a, b stream.Hooks) {
			claim(a, -1)
			retry(a, 0, stream.Failed)
			state(a, 1, true)
			retry(a, 1, stream.Failed)
			claim(b, 0)
			retry(b, 1, stream.Succeeded)
			commit(b, 10)
		}, "delivery of 0-9 as retry 1, but the record at 0 has had 2 counted deliveries"},
		{"retry past the limit", func(a, _ stream.Hooks) {
			claim(a, -1)
			retry(a, 0, stream.Failed)
			for n := 1; n <= 3; n++ {
				state(a, n, true)
				o := stream.Failed
				if n == 3 {
					o = stream.Succeeded
				}
				retry(a, n, o)
			}
			commit(a, 10)
		}, "retry 3 of the record at 0, past the limit of 2"},
		// The bound counts first deliveries too: a count that started
		// over is caught, not trusted.
		{"count started over", func(a, _ stream.Hooks) {
			claim(a, -1)
			retry(a, 0, stream.Failed)
			state(a, 1, true)
			retry(a, 0, stream.Failed)
			state(a, 1, true)
			retry(a, 0, stream.Succeeded)
			commit(a, 10)
		}, "delivery of 0-9 as retry 0, but the record at 0 has had 1 counted deliveries"},
		{"new owner ignores the committed state", func(a, b stream.Hooks) {
			claim(a, -1)
			retry(a, 0, stream.Failed)
			state(a, 1, false)
			a.Released(stream.ReleaseEvent{Topic: "t"})
			b.Claimed(stream.ClaimEvent{Topic: "t", Committed: 0, Metadata: retrystate.EncodeState(retrystate.State{Retries: 1})})
			retry(b, 0, stream.Failed)
			retry(b, 0, stream.Succeeded)
			commit(b, 10)
		}, "delivery of 0-9 as retry 0, but the record at 0 has had 1 counted deliveries"},
		{"retry before its state is committed", func(a, _ stream.Hooks) {
			claim(a, -1)
			retry(a, 0, stream.Failed)
			retry(a, 1, stream.Succeeded)
			commit(a, 10)
		}, "retry 1 of the record at 0 delivered before a retry state that counts it was committed"},
		{"state committed with a count that started over", func(a, _ stream.Hooks) {
			claim(a, -1)
			retry(a, 0, stream.Failed)
			state(a, 1, true)
			retry(a, 1, stream.Failed)
			state(a, 1, true)
		}, "retry state \"rd1;o=0;r=1;f=1000;s=1\" committed for the record at 0, but the record has had 2 counted deliveries"},
		{"a first failure lost in a move is delivered again as a first delivery", func(a, b stream.Hooks) {
			claim(a, -1)
			retry(a, 0, stream.Failed)
			a.Released(stream.ReleaseEvent{Topic: "t"})
			claim(b, -1)
			retry(b, 0, stream.Succeeded)
			commit(b, 10)
		}, ""},
		{"a started retry counts after a crash that hid its delivery", func(a, b stream.Hooks) {
			claim(a, -1)
			retry(a, 0, stream.Failed)
			state(a, 1, true)
			// killed during retry 1: no event of it
			b.Claimed(stream.ClaimEvent{Topic: "t", Committed: 0, Metadata: retrystate.EncodeState(retrystate.State{Retries: 1, Started: true})})
			state(b, 2, true)
			retry(b, 2, stream.Succeeded)
			commit(b, 10)
		}, ""},
		{"given up early", func(a, _ stream.Hooks) {
			claim(a, -1)
			failAt(a, 0, t0)
			gaveUp(a, 1, t0, "x")
		}, "record 0 given up after 2 deliveries, but it has had 1 counted deliveries"},
		{"given up for spent retries before the limit", func(a, _ stream.Hooks) {
			claim(a, -1)
			failAt(a, 0, t0)
			state(a, 1, true)
			failAt(a, 1, t0.Add(time.Second))
			gaveUp(a, 1, t0, "x")
		}, "record 0 given up for spent retries after 1 retry, but the policy allows 2"},
		{"given up with another first failure", func(a, _ stream.Hooks) {
			claim(a, -1)
			failAt(a, 0, t0)
			state(a, 1, true)
			failAt(a, 1, t0.Add(time.Second))
			state(a, 2, true)
			failAt(a, 2, t0.Add(2*time.Second))
			gaveUp(a, 2, t0.Add(time.Second), "x")
		}, "record 0 given up with its first failure at 00:00:02.000000, but it first failed at 00:00:01.000000"},
		{"given up with another error", func(a, _ stream.Hooks) {
			claim(a, -1)
			failAt(a, 0, t0)
			gaveUp(a, 0, t0, "y")
		}, `record 0 given up with the last error "y", but its last counted delivery's was "x"`},
		{"interrupted first delivery repeated, a given-up batch resumed", func(a, b stream.Hooks) {
			claim(a, -1)
			retry(a, 0, stream.Cancelled)
			a.Released(stream.ReleaseEvent{Topic: "t"})
			claim(b, -1)
			failAt(b, 0, t0)
			state(b, 1, true)
			failAt(b, 1, t0)
			state(b, 2, true)
			failAt(b, 2, t0)
			gaveUp(b, 2, t0, "x")
			retry(b, 0, stream.Failed) // Processor.Resume: a fresh count
			state(b, 1, true)
			retry(b, 1, stream.Succeeded)
			commit(b, 10)
		}, ""},
		{"stale claim of a consumer that claimed the partition again", func(a, _ stream.Hooks) {
			a.Claimed(stream.ClaimEvent{Topic: "t", ClaimID: 1, Committed: -1})
			a.Delivered(stream.DeliveredEvent{BatchInfo: claimed(batch(0, 9), 1), Outcome: stream.Succeeded})
			a.Claimed(stream.ClaimEvent{Topic: "t", ClaimID: 2, Committed: -1})
			a.Checkpointed(stream.CheckpointEvent{Topic: "t", ClaimID: 1, Next: 10})
		}, "commit of 10 by a stale claim: claim 2 of the same consumer owns the partition"},
		// A retry state names its record: a new owner ignores one that
		// names another record than the one at the checkpoint, and a
		// state committed naming another record is caught.
		{"new owner ignores a state naming another record", func(a, b stream.Hooks) {
			claim(a, -1)
			ok(a, 0, 2)
			commit(a, 3)
			a.Released(stream.ReleaseEvent{Topic: "t"})
			md := retrystate.EncodeState(retrystate.State{Offset: 1, Retries: 2, FirstFailure: t0, Started: true})
			b.Claimed(stream.ClaimEvent{Topic: "t", Committed: 3, Metadata: md})
			ok(b, 3, 9)
			commit(b, 10)
		}, ""},
		{"state committed naming another record", func(a, _ stream.Hooks) {
			claim(a, -1)
			retry(a, 0, stream.Failed)
			md := retrystate.EncodeState(retrystate.State{Offset: 5, Retries: 1, FirstFailure: t0})
			a.Checkpointed(stream.CheckpointEvent{Topic: "t", Next: 0, Metadata: md})
		}, "committed with the checkpoint at 0, but it names the record at 5"},
		// A next owner gives up again what its previous owner gave up,
		// and no record more (its fetch may hold more).
		{"a next owner gives up more than was given up", func(a, b stream.Hooks) {
			claim(a, -1)
			a.Delivered(stream.DeliveredEvent{BatchInfo: batch(0, 4), Outcome: stream.Failed, Err: errors.New("x"), Start: t0})
			md := retrystate.EncodeState(retrystate.State{FirstFailure: t0, Started: true, GivenUp: checkpoint.RetriesSpent, LastError: "x", Records: 5})
			a.Checkpointed(stream.CheckpointEvent{Topic: "t", Next: 0, Metadata: md})
			a.Exhausted(stream.ExhaustedEvent{BatchInfo: batch(0, 4), Err: &checkpoint.ExhaustedError{Reason: checkpoint.RetriesSpent, FirstFailure: t0, Last: errors.New("x")}})
			a.ActionTried(stream.ActionEvent{BatchInfo: batch(0, 4), Try: 1, Err: errors.New("dead-letter topic unavailable")})
			a.Released(stream.ReleaseEvent{Topic: "t"})
			b.Claimed(stream.ClaimEvent{Topic: "t", Committed: 0, Metadata: md})
			b.Exhausted(stream.ExhaustedEvent{BatchInfo: batch(0, 9), Err: &checkpoint.ExhaustedError{Reason: checkpoint.RetriesSpent, FirstFailure: t0, Last: errors.New("x")}})
			b.ActionTried(stream.ActionEvent{BatchInfo: batch(0, 9), Try: 1})
			commit(b, 10)
		}, "records 0-9 given up again, but a previous owner gave up 0-4"},
		// Issue 46, defect 1: a poison record (FailedAt(0), PerRecord) on
		// its last retry when the partition moves; its state did not say
		// that the failures were the record's alone, and the next owner
		// gave up its whole fetch from it on.
		{"a next owner gives up a poison record's successors", func(a, b stream.Hooks) {
			claim(a, -1)
			poison := func(n int, o stream.Outcome) {
				var err error
				if o == stream.Failed {
					err = stream.FailedAt(0, errors.New("x"))
				}
				a.Delivered(stream.DeliveredEvent{BatchInfo: batch(0, 9), Attempt: stream.Attempt{Retries: n, MaxRetries: 2}, Outcome: o, Err: err, Start: t0})
			}
			poison(0, stream.Failed)
			state(a, 1, false)
			state(a, 1, true)
			poison(1, stream.Failed)
			state(a, 2, false)
			state(a, 2, true)
			poison(2, stream.Cancelled)
			a.Released(stream.ReleaseEvent{Topic: "t"})
			md := retrystate.EncodeState(retrystate.State{Retries: 2, FirstFailure: t0, Started: true})
			b.Claimed(stream.ClaimEvent{Topic: "t", Committed: 0, Metadata: md})
			b.Exhausted(stream.ExhaustedEvent{BatchInfo: batch(0, 9), Err: &checkpoint.ExhaustedError{Reason: checkpoint.RetriesSpent, Retries: 2, FirstFailure: t0, Last: retrystate.ErrInterrupted}})
			b.ActionTried(stream.ActionEvent{BatchInfo: batch(0, 9), Try: 1})
			commit(b, 10)
		}, "records 0-9 given up, but record 1 never failed"},
		// The same with a whole-batch failure: every record of the batch
		// failed with it, and a give-up of them all is right.
		{"a next owner gives up a failed batch", func(a, b stream.Hooks) {
			claim(a, -1)
			failAt(a, 0, t0)
			state(a, 1, false)
			state(a, 1, true)
			failAt(a, 1, t0)
			state(a, 2, false)
			state(a, 2, true)
			retry(a, 2, stream.Cancelled)
			a.Released(stream.ReleaseEvent{Topic: "t"})
			md := retrystate.EncodeState(retrystate.State{Retries: 2, FirstFailure: t0, Started: true, Records: 10})
			b.Claimed(stream.ClaimEvent{Topic: "t", Committed: 0, Metadata: md})
			b.Exhausted(stream.ExhaustedEvent{BatchInfo: batch(0, 9), Err: &checkpoint.ExhaustedError{Reason: checkpoint.RetriesSpent, Retries: 2, FirstFailure: t0, Last: retrystate.ErrInterrupted}})
			b.ActionTried(stream.ActionEvent{BatchInfo: batch(0, 9), Try: 1})
			commit(b, 10)
		}, ""},
		// Issue 46, defect 2: a give-up of 5 whose action failed, and a
		// next owner whose first fetch returned 3: it gave up those 3 and
		// delivered records 3-4 again, with a fresh count.
		{"a next owner delivers records a previous owner gave up", func(a, b stream.Hooks) {
			claim(a, -1)
			whole := func(n int) {
				a.Delivered(stream.DeliveredEvent{BatchInfo: batch(0, 4), Attempt: stream.Attempt{Retries: n, MaxRetries: 2}, Outcome: stream.Failed, Err: errors.New("x"), Start: t0})
			}
			st := func(n int, started bool) {
				md := retrystate.EncodeState(retrystate.State{Retries: n, FirstFailure: t0, Started: started, Records: 5})
				a.Checkpointed(stream.CheckpointEvent{Topic: "t", Next: 0, Metadata: md})
			}
			whole(0)
			st(1, false)
			st(1, true)
			whole(1)
			st(2, false)
			st(2, true)
			whole(2)
			md := retrystate.EncodeState(retrystate.State{Retries: 2, FirstFailure: t0, Started: true, GivenUp: checkpoint.RetriesSpent, LastError: "x", Records: 5})
			a.Checkpointed(stream.CheckpointEvent{Topic: "t", Next: 0, Metadata: md})
			a.Exhausted(stream.ExhaustedEvent{BatchInfo: batch(0, 4), Err: &checkpoint.ExhaustedError{Reason: checkpoint.RetriesSpent, Retries: 2, FirstFailure: t0, Last: errors.New("x")}})
			a.ActionTried(stream.ActionEvent{BatchInfo: batch(0, 4), Try: 1, Err: errors.New("dead-letter topic unavailable")})
			a.Released(stream.ReleaseEvent{Topic: "t"})
			b.Claimed(stream.ClaimEvent{Topic: "t", Committed: 0, Metadata: md})
			b.Exhausted(stream.ExhaustedEvent{BatchInfo: batch(0, 2), Err: &checkpoint.ExhaustedError{Reason: checkpoint.RetriesSpent, Retries: 2, FirstFailure: t0, Last: errors.New("x")}})
			b.ActionTried(stream.ActionEvent{BatchInfo: batch(0, 2), Try: 1})
			commit(b, 3)
			ok(b, 3, 9)
			commit(b, 10)
		}, "delivery of 3-9, but a previous owner gave up the records to 4"},
		// A next owner gives up again what a previous owner gave up, its
		// action not done; the action stops the partition and a Resume
		// delivers the records again with a fresh count: no violation.
		{"given up again, stopped and resumed", func(a, b stream.Hooks) {
			claim(a, -1)
			whole := func(n int) {
				a.Delivered(stream.DeliveredEvent{BatchInfo: batch(0, 4), Attempt: stream.Attempt{Retries: n, MaxRetries: 1}, Outcome: stream.Failed, Err: errors.New("x"), Start: t0})
			}
			whole(0)
			a.Checkpointed(stream.CheckpointEvent{Topic: "t", Next: 0, Metadata: retrystate.EncodeState(retrystate.State{Retries: 1, FirstFailure: t0, Started: true, Records: 5})})
			whole(1)
			md := retrystate.EncodeState(retrystate.State{Retries: 1, FirstFailure: t0, Started: true, GivenUp: checkpoint.RetriesSpent, LastError: "x", Records: 5})
			a.Checkpointed(stream.CheckpointEvent{Topic: "t", Next: 0, Metadata: md})
			a.Exhausted(stream.ExhaustedEvent{BatchInfo: batch(0, 4), Err: &checkpoint.ExhaustedError{Reason: checkpoint.RetriesSpent, Retries: 1, FirstFailure: t0, Last: errors.New("x")}})
			a.Released(stream.ReleaseEvent{Topic: "t"})
			b.Claimed(stream.ClaimEvent{Topic: "t", Committed: 0, Metadata: md})
			b.Exhausted(stream.ExhaustedEvent{BatchInfo: batch(0, 4), Err: &checkpoint.ExhaustedError{Reason: checkpoint.RetriesSpent, Retries: 1, FirstFailure: t0, Last: errors.New("x")}})
			b.Delivered(stream.DeliveredEvent{BatchInfo: batch(0, 4), Attempt: stream.Attempt{MaxRetries: 1}, Outcome: stream.Succeeded})
			commit(b, 5)
			ok(b, 5, 9)
			commit(b, 10)
		}, ""},
		// The retry bound of a record after the first: a next owner that
		// fetched 3 of a failed batch of 5 retried those 3, and records
		// 3-4 came back as a batch of their own, as retry 0, after 2
		// whole-batch failures.
		{"a record after the first delivered past its count", func(a, b stream.Hooks) {
			claim(a, -1)
			var md string
			for n := range 2 {
				a.Delivered(stream.DeliveredEvent{BatchInfo: batch(0, 4), Attempt: stream.Attempt{Retries: n, MaxRetries: 2}, Outcome: stream.Failed, Err: errors.New("x"), Start: t0})
				md = retrystate.EncodeState(retrystate.State{Retries: n + 1, FirstFailure: t0, Records: 5})
				a.Checkpointed(stream.CheckpointEvent{Topic: "t", Next: 0, Metadata: md})
				if n == 0 {
					md = retrystate.EncodeState(retrystate.State{Retries: 1, FirstFailure: t0, Started: true, Records: 5})
					a.Checkpointed(stream.CheckpointEvent{Topic: "t", Next: 0, Metadata: md})
				}
			}
			a.Released(stream.ReleaseEvent{Topic: "t"})
			b.Claimed(stream.ClaimEvent{Topic: "t", Committed: 0, Metadata: md})
			b.Checkpointed(stream.CheckpointEvent{Topic: "t", Next: 0, Metadata: retrystate.EncodeState(retrystate.State{Retries: 2, FirstFailure: t0, Started: true, Records: 5})})
			b.Delivered(stream.DeliveredEvent{BatchInfo: batch(0, 2), Attempt: stream.Attempt{Retries: 2, MaxRetries: 2}, Outcome: stream.Succeeded})
			commit(b, 3)
			ok(b, 3, 9)
			commit(b, 10)
		}, "delivery of 3-9 as retry 0, but the record at 3 has had 2 counted deliveries"},
		// Issue 46, defect 3: a next owner that refuses a scheduled retry
		// gave the record up with no last error.
		{"a refused retry given up with no last error", func(a, b stream.Hooks) {
			claim(a, -1)
			failAt(a, 0, t0)
			state(a, 1, false)
			a.Released(stream.ReleaseEvent{Topic: "t"})
			b.Claimed(stream.ClaimEvent{Topic: "t", Committed: 0, Metadata: retrystate.EncodeState(retrystate.State{Retries: 1, FirstFailure: t0, Records: 10})})
			b.Exhausted(stream.ExhaustedEvent{BatchInfo: batch(0, 9), Err: &checkpoint.ExhaustedError{Reason: checkpoint.RetriesSpent, FirstFailure: t0}})
			b.ActionTried(stream.ActionEvent{BatchInfo: batch(0, 9), Try: 1})
			commit(b, 10)
		}, `record 0 given up with the last error "", but its last counted delivery's was "x"`},
		// a's commit of 10 landed, but a's claim was revoked while it
		// was in flight and never reported it: b starts at 10, where
		// the last commit reported is 5. That is the final checkpoint.
		{"a commit landed unreported", func(a, b stream.Hooks) {
			claim(a, -1)
			ok(a, 0, 4)
			commit(a, 5)
			ok(a, 5, 9)
			a.Released(stream.ReleaseEvent{Topic: "t"})
			claim(b, 10)
		}, ""},
		// The same, where a never handled 7-9: the checkpoint b starts
		// from passed records not handled.
		{"a claim starts past records not handled", func(a, b stream.Hooks) {
			claim(a, -1)
			ok(a, 0, 4)
			commit(a, 5)
			ok(a, 5, 6)
			a.Released(stream.ReleaseEvent{Topic: "t"})
			claim(b, 10)
		}, "checkpoint 10 ahead of record 7, which was not handled"},
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

// An engine run whose partition moves during retries, stale workers
// included, passes the check: no retry number repeats, interrupted
// deliveries counted.
func TestHistoryRunWithInterruptedRetries(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var h streamtest.History
		p := streamtest.NewPartition("t", 0, 5)
		p.AppendN(time.Now(), 20)
		var (
			mu  sync.Mutex
			cut = map[[2]int64]bool{}
		)
		handler := stream.HandlerFunc(func(ctx context.Context, b *stream.Batch) error {
			k := [2]int64{b.FirstOffset(), int64(b.Attempt.Retries)}
			mu.Lock()
			first := !cut[k]
			cut[k] = true
			mu.Unlock()
			switch {
			case b.Attempt.Retries > 0 && b.Attempt.Retries%2 == 1 && first:
				p.Revoke()
				<-ctx.Done()
				return ctx.Err()
			case b.FirstOffset() == 5:
				return errors.New("poison")
			case b.Attempt.Retries < 2:
				return errors.New("transient")
			}
			return nil
		})
		for i := 0; ; i++ {
			if i == 20 {
				t.Fatal("20 owners and not done")
			}
			member := string(rune('a' + i))
			proc, err := stream.NewProcessor(handler, stream.WithHooks(h.Hooks(member)),
				stream.WithPolicy(checkpoint.Policy{MaxRetries: 4, Backoff: checkpoint.Fixed(time.Second)}))
			if err != nil {
				t.Fatal(err)
			}
			ctx, cancel := context.WithCancel(t.Context())
			go func() {
				if p.WaitCommitted(ctx, 20) == nil {
					cancel()
				}
			}()
			err = streamtest.Run(ctx, proc, p)
			cancel()
			if err != nil {
				t.Fatal(err)
			}
			if c, _ := p.Committed(); c == 20 {
				break
			}
		}
		r := h.Check(map[streamtest.TopicPartition]int64{{Topic: "t", Partition: 0}: 20})
		if len(r.Violations) > 0 || r.Lost != 0 || r.Interrupted == 0 {
			t.Fatalf("report %+v", r)
		}
		// The poison batch: retries 0 to 4, 1 and 3 interrupted, none repeated.
		if n := h.Deliveries()[streamtest.TopicPartition{Topic: "t", Partition: 0}][5]; n != 5 {
			t.Fatalf("the poison batch was delivered %d times, want 5 (retryCount 4)", n)
		}
	})
}

// With LeaseOwnership, a claim reported after the live claim that took its
// partition, and released with nothing done, never held the partition; one
// that did something, or was never released, did.
func TestHistoryLeaseOwnership(t *testing.T) {
	tp := streamtest.TopicPartition{Topic: "t", Partition: 0}
	ends := map[streamtest.TopicPartition]int64{tp: 10}
	add := addEvent
	// during: b's claim 1 runs the partition, and late happens in the
	// middle of it.
	during := func(late func(h *streamtest.History)) func(h *streamtest.History) {
		return func(h *streamtest.History) {
			add(h, streamtest.Claimed, "b", 1, -1, 0)
			add(h, streamtest.Delivered, "b", 1, 0, 4)
			add(h, streamtest.Committed, "b", 1, 5, 0)
			late(h)
			add(h, streamtest.Delivered, "b", 1, 5, 7)
			add(h, streamtest.Committed, "b", 1, 8, 0)
			add(h, streamtest.Delivered, "b", 1, 8, 9)
			add(h, streamtest.Committed, "b", 1, 10, 0)
		}
	}
	// steal: a's claim 1 has its write of 7 in flight when b takes the
	// partition; a reports it, once or more, before b's commit of 8 or
	// after.
	steal := func(afterB bool, late ...int64) func(h *streamtest.History) {
		return func(h *streamtest.History) {
			add(h, streamtest.Claimed, "a", 1, -1, 0)
			add(h, streamtest.Delivered, "a", 1, 0, 4)
			add(h, streamtest.Committed, "a", 1, 5, 0)
			add(h, streamtest.Delivered, "a", 1, 5, 6)
			add(h, streamtest.Claimed, "b", 2, 5, 0)
			a := func() {
				for _, n := range late {
					add(h, streamtest.Committed, "a", 1, n, 0)
				}
				add(h, streamtest.Released, "a", 1, 0, 0)
			}
			if !afterB {
				a()
			}
			add(h, streamtest.Delivered, "b", 2, 5, 7)
			add(h, streamtest.Committed, "b", 2, 8, 0)
			if afterB {
				a()
			}
			add(h, streamtest.Delivered, "b", 2, 8, 9)
			add(h, streamtest.Committed, "b", 2, 10, 0)
		}
	}
	tests := []struct {
		name      string
		script    func(h *streamtest.History)
		lease     string // the violation wanted with LeaseOwnership; "" for none
		rebalance string // and without it
	}{
		// a's claim 3 is reported in the middle of b's claim 1.
		{"idle and released", during(func(h *streamtest.History) {
			add(h, streamtest.Claimed, "a", 3, -1, 0)
			add(h, streamtest.Released, "a", 3, 0, 0)
		}), "", "commit of 8 while a owns"},
		// With LeaseOwnership, b's commit of 8 is the one in flight;
		// its commit of 10 is not.
		{"a delivery before its release", during(func(h *streamtest.History) {
			add(h, streamtest.Claimed, "a", 3, -1, 0)
			add(h, streamtest.Delivered, "a", 3, 0, 4)
			add(h, streamtest.Released, "a", 3, 0, 0)
		}), "commit of 10 while a owns", "commit of 8 while a owns"},
		{"a delivery started, no claim named", during(func(h *streamtest.History) {
			add(h, streamtest.Claimed, "a", 3, -1, 0)
			add(h, streamtest.Started, "a", 0, 0, 4)
			add(h, streamtest.Released, "a", 3, 0, 0)
		}), "commit of 10 while a owns", "commit of 8 while a owns"},
		{"never released", during(func(h *streamtest.History) {
			add(h, streamtest.Claimed, "a", 3, -1, 0)
		}), "commit of 10 while a owns", "commit of 8 while a owns"},
		{"b's own claim again", during(func(h *streamtest.History) {
			add(h, streamtest.Claimed, "b", 2, -1, 0)
			add(h, streamtest.Released, "b", 2, 0, 0)
		}), "by a stale claim", "by a stale claim"},
		{"a write in flight at the steal", steal(false, 7), "", "commit of 7 while b owns"},
		{"a write in flight behind the thief's", steal(true, 7), "", "went back from 8 to 7"},
		{"two writes after the steal", steal(false, 7, 7), "commit of 7 while b owns", "commit of 7 while b owns"},
		{"a write after the release", func(h *streamtest.History) {
			steal(false)(h)
			add(h, streamtest.Committed, "a", 1, 7, 0)
		}, "commit of 7 after its claim ended", "commit of 7 after its claim ended"},
	}
	for _, tt := range tests {
		for _, lease := range []bool{true, false} {
			t.Run(fmt.Sprintf("%s/lease=%v", tt.name, lease), func(t *testing.T) {
				h := &streamtest.History{LeaseOwnership: lease}
				tt.script(h)
				want := tt.rebalance
				if lease {
					want = tt.lease
				}
				got := strings.Join(h.Check(ends).Violations, "\n")
				if want == "" && got != "" || want != "" && !strings.Contains(got, want) {
					t.Fatalf("violations:\n%s\nwant one containing %q", got, want)
				}
			})
		}
	}
}

// A claim released with its coalesced commits not all written (Unwritten)
// lets the next owner start before the checkpoints the history saw
// reported; a claim released cleanly does not.
func TestHistoryUnwrittenCommits(t *testing.T) {
	tp := streamtest.TopicPartition{Topic: "t", Partition: 0}
	ends := map[streamtest.TopicPartition]int64{tp: 10}
	add := addEvent
	// a's claim 1 handles 0-5 and reports the checkpoints 3 and 6, and is
	// released; b starts from 3 (6 was never written), delivers 3-9 again
	// (its first commit, 5, is below 6) and commits. unwritten runs before
	// b's claim, after it, or not at all.
	next, nextClaim := "b", uint64(1) // the next owner
	script := func(unwritten func(h *streamtest.History), before bool) func(h *streamtest.History) {
		return func(h *streamtest.History) {
			add(h, streamtest.Claimed, "a", 1, -1, 0)
			add(h, streamtest.Delivered, "a", 1, 0, 2)
			add(h, streamtest.Committed, "a", 1, 3, 0)
			add(h, streamtest.Delivered, "a", 1, 3, 5)
			add(h, streamtest.Committed, "a", 1, 6, 0)
			add(h, streamtest.Released, "a", 1, 0, 0)
			if before {
				unwritten(h)
			}
			add(h, streamtest.Claimed, next, nextClaim, 3, 0)
			if !before {
				unwritten(h)
			}
			add(h, streamtest.Delivered, next, nextClaim, 3, 4)
			add(h, streamtest.Committed, next, nextClaim, 5, 0)
			add(h, streamtest.Delivered, next, nextClaim, 5, 9)
			add(h, streamtest.Committed, next, nextClaim, 10, 0)
		}
	}
	none := func(*streamtest.History) {}
	tests := []struct {
		name      string
		unwritten func(h *streamtest.History)
		want      string // the violation wanted; "" for none
	}{
		{"released cleanly", none, "checkpoint went back from 6 to 5"},
		{"a's last commit unwritten", func(h *streamtest.History) { add(h, streamtest.Unwritten, "a", 0, 6, 0) }, ""},
		{"another member's", func(h *streamtest.History) { add(h, streamtest.Unwritten, "c", 0, 6, 0) }, "went back from 6 to 5"},
		{"another partition's", func(h *streamtest.History) { add(h, streamtest.Unwritten, "a", 0, 6, 1) }, "went back from 6 to 5"},
		{"a checkpoint never reported", func(h *streamtest.History) { add(h, streamtest.Unwritten, "a", 0, 7, 0) }, "went back from 6 to 5"},
	}
	for _, tt := range tests {
		for _, before := range []bool{true, false} {
			for _, n := range []string{"b", "a"} {
				// a itself may claim the partition again (claim 2) before
				// its adapter reports claim 1's last commit unwritten.
				next, nextClaim = n, map[string]uint64{"a": 2, "b": 1}[n]
				t.Run(fmt.Sprintf("%s/before=%v/next=%s", tt.name, before, n), func(t *testing.T) {
					h := &streamtest.History{}
					script(tt.unwritten, before)(h)
					got := strings.Join(h.Check(ends).Violations, "\n")
					if tt.want == "" && got != "" || tt.want != "" && !strings.Contains(got, tt.want) {
						t.Fatalf("violations:\n%s\nwant one containing %q", got, tt.want)
					}
				})
			}
		}
	}
}

// addEvent adds to h, through its hooks where one reports the kind, an
// event of member's claim on partition 0 of topic "t": Claimed (first is
// the committed offset), Released, Delivered (a success of first-last),
// Committed (first is the checkpoint), Unwritten (first is the checkpoint,
// last the partition), or any other kind with first and last as they are.
func addEvent(h *streamtest.History, kind streamtest.EventKind, member string, claim uint64, first, last int64) {
	hk := h.Hooks(member)
	bi := stream.BatchInfo{Topic: "t", ClaimID: claim, FirstOffset: first, LastOffset: last, Records: int(last - first + 1)}
	switch kind {
	case streamtest.Claimed:
		hk.Claimed(stream.ClaimEvent{Topic: "t", ClaimID: claim, Committed: first})
	case streamtest.Released:
		hk.Released(stream.ReleaseEvent{Topic: "t", ClaimID: claim})
	case streamtest.Delivered:
		hk.Delivered(stream.DeliveredEvent{BatchInfo: bi, Outcome: stream.Succeeded})
	case streamtest.Committed:
		hk.Checkpointed(stream.CheckpointEvent{Topic: "t", ClaimID: claim, Next: first})
	case streamtest.Unwritten:
		h.Add(streamtest.Event{Kind: streamtest.Unwritten, Member: member, Topic: "t", Partition: int32(last), Offset: first})
	default:
		h.Add(streamtest.Event{Kind: kind, Member: member, Claim: claim, Topic: "t", First: first, Last: last})
	}
}
