package stream_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/redeliver-go/redeliver/checkpoint"
	"github.com/redeliver-go/redeliver/stream"
	"github.com/redeliver-go/redeliver/stream/streamtest"
)

// An exhaustion action whose error wraps ErrRevoked has failed like any
// other: the checkpoint does not pass its batch until a later try of the
// action succeeds (issue 10, defect 5: the worker went on to the next
// batch, whose commit passed the given-up one).
func TestExhaustionActionErrRevokedIsAFailure(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p := streamtest.NewPartition("t", 0, 5)
		p.AppendN(time.Now(), 10)
		var (
			mu        sync.Mutex
			tries     int
			succeeded bool
			bad       []int64
		)
		action := func(_ context.Context, b *stream.Batch, _ *checkpoint.ExhaustedError) error {
			mu.Lock()
			defer mu.Unlock()
			if b.FirstOffset() != 0 {
				return nil
			}
			tries++
			if tries < 3 {
				return fmt.Errorf("dead-letter producer: %w", stream.ErrRevoked)
			}
			succeeded = true
			return nil
		}
		hooks := stream.Hooks{Checkpointed: func(e stream.CheckpointEvent) {
			mu.Lock()
			defer mu.Unlock()
			if e.Next > 0 && !succeeded {
				bad = append(bad, e.Next)
			}
		}}
		h := stream.HandlerFunc(func(_ context.Context, b *stream.Batch) error {
			if b.FirstOffset() == 0 {
				return errTransient
			}
			return nil
		})
		hs := start(t, h, []*streamtest.Partition{p}, stream.WithExhaustionAction(action), stream.WithHooks(hooks))
		hs.waitAll()
		hs.stop()
		if len(bad) > 0 || tries != 3 {
			t.Fatalf("checkpoints %v written before the action succeeded; %d tries of the action, want 3", bad, tries)
		}
	})
}

// FailedAt(i, Retry(n, d)) moves the checkpoint to record i and retries the
// rest of the batch under the RetryResult (issue 10, defect 9: the whole
// batch was redelivered).
func TestPartialSuccessWithRetryResult(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p := streamtest.NewPartition("t", 0, 10)
		p.AppendN(time.Now(), 10)
		h := stream.HandlerFunc(func(_ context.Context, b *stream.Batch) error {
			if b.FirstOffset() == 0 {
				return stream.FailedAt(3, stream.Retry(2, 7*time.Second))
			}
			if b.Attempt.Retries < 2 {
				return stream.Retry(2, 7*time.Second)
			}
			return nil
		})
		begin := time.Now()
		// The configured policy never retries: only the RetryResult does.
		hs := start(t, h, []*streamtest.Partition{p})
		hs.waitAll()
		hs.stop()
		var got []string
		for _, d := range hs.rec.Deliveries() {
			got = append(got, fmt.Sprintf("%d-%d#%d", d.FirstOffset, d.LastOffset, d.Attempt.Retries))
		}
		if want := "[0-9#0 3-9#1 3-9#2]"; fmt.Sprint(got) != want {
			t.Fatalf("deliveries %v, want %s", got, want)
		}
		if got := advancing(p.Commits()); fmt.Sprint(got) != "[3 10]" {
			t.Fatalf("advancing commits %v, want [3 10]", got)
		}
		if took := time.Since(begin); took != 14*time.Second {
			t.Fatalf("took %v, want two 7s delays of the RetryResult", took)
		}
		if d := hs.ev.delivered[0]; d.Outcome != stream.RetryRequested {
			t.Fatalf("first delivery's outcome %v, want %v", d.Outcome, stream.RetryRequested)
		}
	})
}

// owners runs the partition through one owner after another, each until it
// loses the partition or the partition is committed to its end, and returns
// the deliveries of them all (interrupted ones included).
func owners(t *testing.T, p *streamtest.Partition, h stream.Handler, opts ...stream.Option) []streamtest.Delivery {
	t.Helper()
	var all []streamtest.Delivery
	for range 20 {
		hs := start(t, h, []*streamtest.Partition{p}, opts...)
		go func() {
			if p.WaitCommitted(t.Context(), p.End()) == nil {
				hs.cancel()
			}
		}()
		if err := <-hs.done; err != nil {
			t.Fatalf("owner: %v", err)
		}
		all = append(all, hs.rec.Deliveries()...)
		if c, _ := p.Committed(); c == p.End() {
			return all
		}
	}
	t.Fatal("20 owners and the partition is not done")
	return nil
}

// A revocation while a retry runs does not make the next owner repeat it:
// with retryCount 3 and revocations during retries 1, 2 and 3, the batch is
// delivered 4 times in all (issue 10, defect 6: 7 times).
func TestRetryBoundAcrossInterruptedDeliveries(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p := streamtest.NewPartition("t", 0, 5)
		p.AppendN(time.Now(), 5)
		var (
			mu          sync.Mutex
			interrupted = map[int]bool{}
		)
		h := stream.HandlerFunc(func(ctx context.Context, b *stream.Batch) error {
			mu.Lock()
			cut := b.Attempt.Retries > 0 && !interrupted[b.Attempt.Retries]
			interrupted[b.Attempt.Retries] = true
			mu.Unlock()
			if cut {
				p.Revoke() // a rebalance while the handler runs
				<-ctx.Done()
				return ctx.Err()
			}
			return errTransient
		})
		ds := owners(t, p, h, fixed(3, time.Second))
		var got []int
		for _, d := range ds {
			got = append(got, d.Attempt.Retries)
		}
		if len(ds) != 4 {
			t.Fatalf("%d deliveries (retries %v), want 4: retryCount 3 across the moves", len(ds), got)
		}
	})
}

// A crash (or a revocation) after a retry started, before its outcome was
// committed, counts the retry: the next owner goes on with the following
// one, after the policy's backoff.
func TestStartedRetryCountsForTheNextOwner(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p := streamtest.NewPartition("t", 0, 5)
		p.AppendN(time.Now(), 5)
		p.SetCheckpoint(0, "rd1;r=2;f="+itoa(time.Now().UnixMilli())+";d=1000;s=1")
		begin := time.Now()
		hs := start(t, streamtest.FailFirst(-1, nil)(streamtest.Succeed), []*streamtest.Partition{p}, fixed(3, time.Second))
		hs.waitAll()
		hs.stop()
		ds := hs.rec.Deliveries()
		if len(ds) != 1 || ds[0].Attempt.Retries != 3 {
			t.Fatalf("deliveries %+v, want retry 3 only", ds)
		}
		if took := time.Since(begin); took != time.Second {
			t.Fatalf("retry 3 came after %v, want the policy's 1s", took)
		}
		if len(hs.ev.exhausted) != 1 {
			t.Fatalf("%d batches given up, want 1", len(hs.ev.exhausted))
		}
	})
}

// A first delivery commits nothing before it runs: one that a move
// interrupts is delivered again as a first delivery (the bound's one
// exception, stated in the README).
func TestInterruptedFirstDeliveryIsRepeated(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p := streamtest.NewPartition("t", 0, 5)
		p.AppendN(time.Now(), 5)
		var once sync.Once
		h := stream.HandlerFunc(func(ctx context.Context, b *stream.Batch) error {
			cut := false
			once.Do(func() { cut = true })
			if cut {
				p.Revoke()
				<-ctx.Done()
				return ctx.Err()
			}
			return errTransient
		})
		ds := owners(t, p, h, fixed(2, time.Second))
		var got []int
		for _, d := range ds {
			got = append(got, d.Attempt.Retries)
		}
		if fmt.Sprint(got) != "[0 0 1 2]" {
			t.Fatalf("retries of the deliveries %v, want [0 0 1 2]", got)
		}
	})
}

// Every commit of the retry path: the failure's state before the backoff,
// the started mark before the retry; a first delivery commits nothing
// before it runs.
func TestRetryPathCommits(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p := streamtest.NewPartition("t", 0, 5)
		p.AppendN(time.Now(), 5)
		begin := time.Now()
		hs := start(t, streamtest.FailFirst(2, nil)(streamtest.Succeed), []*streamtest.Partition{p}, fixed(3, time.Second))
		hs.waitAll()
		hs.stop()
		var got []string
		for _, c := range p.Commits() {
			got = append(got, fmt.Sprintf("%d %s", c.Next, c.Metadata))
		}
		f, n1, n2 := itoa(begin.UnixMilli()), itoa(begin.UnixMilli()+1000), itoa(begin.UnixMilli()+2000)
		// Each state covers the batch (c=5) and keeps its last error.
		e1, e2 := ";c=5;e=offsets 0-4, delivery 1: streamtest: injected failure", ";c=5;e=offsets 0-4, delivery 2: streamtest: injected failure"
		want := fmt.Sprint([]string{
			"0 rd1;o=0;r=1;f=" + f + ";d=1000;n=" + n1 + e1,
			"0 rd1;o=0;r=1;f=" + f + ";d=1000;s=1" + e1,
			"0 rd1;o=0;r=2;f=" + f + ";d=1000;n=" + n2 + e2,
			"0 rd1;o=0;r=2;f=" + f + ";d=1000;s=1" + e2,
			"5 ",
		})
		if fmt.Sprint(got) != want {
			t.Fatalf("commits\n%v\nwant\n%v", got, want)
		}
	})
}

// A retry restored after its time budget ran out while nobody owned the
// partition is not delivered: the batch is given up (issue 10, defect 7).
func TestLateRestoredRetryPastItsBudget(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p := streamtest.NewPartition("t", 0, 5)
		p.AppendN(time.Now(), 5)
		failed := time.Now().Add(-time.Hour)
		p.SetCheckpoint(0, "rd1;r=1;f="+itoa(failed.UnixMilli())+";d=5000;n="+itoa(failed.Add(5*time.Second).UnixMilli())+";c=5")
		hs := start(t, streamtest.FailFirst(-1, nil)(streamtest.Succeed), []*streamtest.Partition{p},
			stream.WithPolicy(checkpoint.Policy{MaxRetries: 10, Backoff: checkpoint.Fixed(5 * time.Second), MaxRetryTime: time.Minute}))
		hs.waitAll()
		hs.stop()
		if n := len(hs.rec.Deliveries()); n != 0 {
			t.Fatalf("%d deliveries of a retry past its budget, want 0", n)
		}
		if len(hs.ev.exhausted) != 1 || hs.ev.exhausted[0].Err.Reason != checkpoint.TimeBudgetSpent {
			t.Fatalf("exhausted events %+v, want one for the time budget", hs.ev.exhausted)
		}
	})
}

// A RetryResult's own count and delay survive a move: the next owner keeps
// them instead of the configured policy (issue 10, defect 8: a failure
// after the move was given up under the configured policy's 0 retries).
func TestRetryResultSurvivesAMove(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p := streamtest.NewPartition("t", 0, 5)
		p.AppendN(time.Now(), 5)
		h := stream.HandlerFunc(func(_ context.Context, b *stream.Batch) error {
			switch b.Attempt.Retries {
			case 0:
				return stream.Retry(5, 2*time.Second)
			case 1, 2:
				return errTransient
			}
			return nil
		})
		var once sync.Once
		revoke := stream.Hooks{Checkpointed: func(e stream.CheckpointEvent) {
			if e.Metadata != "" {
				once.Do(p.Revoke) // during the first backoff
			}
		}}
		first := start(t, h, []*streamtest.Partition{p}, stream.WithHooks(revoke))
		if err := <-first.done; err != nil {
			t.Fatal(err)
		}
		moved := time.Now()
		second := start(t, h, []*streamtest.Partition{p}) // the configured policy never retries
		second.waitAll()
		second.stop()
		ds := second.rec.Deliveries()
		var got []string
		for _, d := range ds {
			got = append(got, fmt.Sprintf("#%d/%d", d.Attempt.Retries, d.Attempt.MaxRetries))
		}
		if fmt.Sprint(got) != "[#1/5 #2/5 #3/5]" || len(second.ev.exhausted) != 0 {
			t.Fatalf("next owner's deliveries %v, %d given up; want [#1/5 #2/5 #3/5] under the RetryResult", got, len(second.ev.exhausted))
		}
		if took := time.Since(moved); took != 6*time.Second {
			t.Fatalf("the next owner took %v, want 3 delays of the RetryResult's 2s", took)
		}
	})
}

// A restored due time far in the future (a skewed clock, a foreign writer)
// is capped at what the policy allows (issue 10, defect 10: the partition
// paused for 100 days).
func TestRestoredWaitCapped(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p := streamtest.NewPartition("t", 0, 5)
		p.AppendN(time.Now(), 5)
		p.SetCheckpoint(0, "rd1;r=1;f="+itoa(time.Now().UnixMilli())+";d=5000;n="+itoa(time.Now().Add(100*24*time.Hour).UnixMilli()))
		begin := time.Now()
		hs := start(t, streamtest.Succeed, []*streamtest.Partition{p}, fixed(3, 5*time.Second))
		hs.waitAll()
		hs.stop()
		if took := time.Since(begin); took != 5*time.Second {
			t.Fatalf("redelivered after %v, want the policy's 5s", took)
		}
	})
}
