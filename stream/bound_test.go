package stream_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/redeliver-go/redeliver/checkpoint"
	"github.com/redeliver-go/redeliver/internal/retrystate"
	"github.com/redeliver-go/redeliver/stream"
	"github.com/redeliver-go/redeliver/stream/streamtest"
)

// runParts runs proc over parts until each is committed to its end or
// within (fake time) passes, and returns whether they all were.
func runParts(t *testing.T, proc *stream.Processor, within time.Duration, parts ...*streamtest.Partition) bool {
	t.Helper()
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() { done <- streamtest.Run(ctx, proc, parts...) }()
	wctx, wcancel := context.WithTimeout(ctx, within)
	defer wcancel()
	ok := true
	for _, p := range parts {
		if err := p.WaitCommitted(wctx, p.End()); err != nil {
			t.Log(err)
			ok = false
			break
		}
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	return ok
}

// A probe whose retry is refused when due (its record too old) gives the
// probe up: the next waiting partition probes, the outage ends when the
// downstream is back, and every other record is handled. The probe slot
// stayed taken, and the outage never ended.
//
// Two processors share the budget: partition 0's has a long backoff, so
// that it is waiting out a retry when the others' failures begin the
// outage, joins the queue when the retry falls due, and probes when its
// record is too old to be retried.
func TestOutageRefusedProbeFreesTheProbe(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		budget, err := stream.NewBudget(stream.BudgetConfig{})
		if err != nil {
			t.Fatal(err)
		}
		var parts []*streamtest.Partition
		for i := range 3 {
			p := streamtest.NewPartition("orders", int32(i), 3)
			if i == 0 {
				// One record, too old to retry from 10s on: once it is
				// given up, its partition is idle.
				p.Append(time.Now().Add(-20*time.Second), "a")
			} else {
				p.Append(time.Now(), "a", "b", "c")
			}
			parts = append(parts, p)
		}
		recovery := time.Now().Add(time.Minute)
		var mu sync.Mutex
		handled := map[string]int{}
		h := stream.PerRecord(func(_ context.Context, r *stream.Record) error {
			if time.Now().Before(recovery) {
				return errDown
			}
			mu.Lock()
			handled[fmt.Sprintf("%d/%d", r.Partition, r.Offset)]++
			mu.Unlock()
			return nil
		})
		var given givenUp
		var ended atomic.Int32
		hooks := stream.WithHooks(stream.Hooks{OutageEnded: func(stream.OutageEvent) { ended.Add(1) }})
		slow, err := stream.NewProcessor(h, stream.WithOutageBudget(budget), stream.WithExhaustionAction(given.action), hooks,
			stream.WithPolicy(checkpoint.Policy{MaxRetries: 10, Backoff: checkpoint.Fixed(5 * time.Second), MaxRecordAge: 30 * time.Second}))
		if err != nil {
			t.Fatal(err)
		}
		fast, err := stream.NewProcessor(h, stream.WithOutageBudget(budget), stream.WithExhaustionAction(given.action),
			stream.WithPolicy(checkpoint.Policy{MaxRetries: 10, Backoff: checkpoint.Fixed(100 * time.Millisecond)}))
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithCancel(t.Context())
		var wg sync.WaitGroup
		wg.Go(func() { streamtest.Run(ctx, slow, parts[0]) })
		wg.Go(func() { streamtest.Run(ctx, fast, parts[1:]...) })
		wctx, wcancel := context.WithTimeout(ctx, 2*time.Hour)
		defer wcancel()
		for _, p := range parts {
			if err := p.WaitCommitted(wctx, p.End()); err != nil {
				t.Errorf("%v: budget %+v, given up %v", err, budget.State(), given.got)
				break
			}
		}
		cancel()
		wg.Wait()
		if fmt.Sprint(given.got) != "[0-0: "+errDown.Error()+"]" || given.errs[0].Reason != checkpoint.RecordTooOld {
			t.Errorf("given up %v, want partition 0's record 0 alone, too old", given.got)
		}
		if ended.Load() != 1 || len(handled) != 6 {
			t.Fatalf("outages ended %d, records handled %v; want 1 and the 6 records of partitions 1 and 2", ended.Load(), handled)
		}
	})
}

// A partition that failed once and then ended its batch through a spent
// RetryResult is not failing any more: one poison batch on another
// partition is then no outage, and is given up as the policy says.
func TestRetryResultEndsAFailingPartition(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		budget, err := stream.NewBudget(stream.BudgetConfig{})
		if err != nil {
			t.Fatal(err)
		}
		a, b := streamtest.NewPartition("orders", 0, 5), streamtest.NewPartition("orders", 1, 5)
		a.Append(time.Now(), "a")
		b.Append(time.Now(), "poison")
		h := stream.HandlerFunc(func(_ context.Context, bt *stream.Batch) error {
			switch {
			case bt.Partition == 1:
				return errPoison
			case bt.Attempt.Retries == 0:
				return errTransient
			}
			return stream.Retry(1, time.Second)
		})
		var given givenUp
		var began atomic.Int32
		proc, err := stream.NewProcessor(h, stream.WithOutageBudget(budget), stream.WithExhaustionAction(given.action), fixed(12, time.Second),
			stream.WithHooks(stream.Hooks{OutageBegan: func(stream.OutageEvent) { began.Add(1) }}))
		if err != nil {
			t.Fatal(err)
		}
		if !runParts(t, proc, time.Hour, a, b) || began.Load() != 0 || len(given.errs) != 1 || given.errs[0].Retries != 12 {
			t.Fatalf("outages %d, given up %v, budget %+v; want no outage and the poison batch given up after 12 retries", began.Load(), given.got, budget.State())
		}
	})
}

// OutageEnded's Duration is how long the outage lasted, with or without a
// Delivered hook (without one, the zero time ended it: -2562047h).
func TestOutageDurationWithoutDeliveredHook(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		budget, err := stream.NewBudget(stream.BudgetConfig{})
		if err != nil {
			t.Fatal(err)
		}
		var parts []*streamtest.Partition
		for i := range 2 {
			p := streamtest.NewPartition("orders", int32(i), 5)
			p.AppendN(time.Now(), 5)
			parts = append(parts, p)
		}
		recovery := time.Now().Add(10 * time.Second)
		h := stream.HandlerFunc(func(context.Context, *stream.Batch) error {
			if time.Now().Before(recovery) {
				return errDown
			}
			return nil
		})
		var mu sync.Mutex
		var ended []stream.OutageEvent
		proc, err := stream.NewProcessor(h, stream.WithOutageBudget(budget), fixed(10, time.Second),
			stream.WithHooks(stream.Hooks{OutageEnded: func(e stream.OutageEvent) { mu.Lock(); ended = append(ended, e); mu.Unlock() }}))
		if err != nil {
			t.Fatal(err)
		}
		if !runParts(t, proc, time.Hour, parts...) {
			t.Fatal("not done")
		}
		if len(ended) != 1 || ended[0].Duration <= 0 || ended[0].Duration > 30*time.Second {
			t.Fatalf("OutageEnded %+v, want one that lasted the 10s to 30s of the outage", ended)
		}
	})
}

// A partition stopped by StopPartition and then revoked: its next owner
// delivers the batch again with a fresh count, as StopPartition's doc
// says, instead of stopping at once without a delivery.
func TestStoppedPartitionRedeliveredByTheNextOwner(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var hist streamtest.History
		p := streamtest.NewPartition("orders", 0, 5)
		p.AppendN(time.Now(), 5)
		var calls atomic.Int32
		h := stream.HandlerFunc(func(context.Context, *stream.Batch) error {
			if calls.Add(1) <= 3 {
				return errPoison
			}
			return nil
		})
		stopped := make(chan struct{}, 1)
		a, err := stream.NewProcessor(h, fixed(2, time.Second), stream.WithExhaustionAction(stream.StopPartition),
			stream.WithHooks(stream.MergeHooks(hist.Hooks("a"), stream.Hooks{Stopped: func(stream.StoppedEvent) { stopped <- struct{}{} }})))
		if err != nil {
			t.Fatal(err)
		}
		done := make(chan error, 1)
		go func() { done <- streamtest.Run(t.Context(), a, p) }()
		<-stopped
		synctest.Wait()
		p.Revoke()
		if err := <-done; err != nil {
			t.Fatal(err)
		}
		b, err := stream.NewProcessor(h, fixed(2, time.Second), stream.WithExhaustionAction(stream.StopPartition),
			stream.WithHooks(hist.Hooks("b")))
		if err != nil {
			t.Fatal(err)
		}
		if !runParts(t, b, time.Hour, p) || calls.Load() != 4 || len(b.Stopped()) != 0 {
			t.Fatalf("after the move: %d deliveries in all, stopped %v; want the batch delivered again and handled", calls.Load(), b.Stopped())
		}
		if r := hist.Check(map[streamtest.TopicPartition]int64{{Topic: "orders", Partition: 0}: 5}); len(r.Violations) > 0 {
			t.Fatalf("violations %v", r.Violations)
		}
	})
}

// A record given up whose dead-letter action fails until its partition
// moves: the next owner gives it up again at once, without a delivery,
// with the retries and the error it was given up with, not with
// ErrInterrupted.
func TestFailedActionThenMove(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var hist streamtest.History
		p := streamtest.NewPartition("orders", 0, 5)
		p.AppendN(time.Now(), 5)
		var calls atomic.Int32
		h := stream.HandlerFunc(func(context.Context, *stream.Batch) error {
			calls.Add(1)
			return errPoison
		})
		down := &memPublisher{fail: 1 << 30}
		dlA, _ := stream.DeadLetter(hist.Publisher(down), "dlq")
		tried := make(chan struct{}, 10)
		a, err := stream.NewProcessor(h, fixed(2, time.Second), stream.WithExhaustionAction(dlA),
			stream.WithHooks(stream.MergeHooks(hist.Hooks("a"), stream.Hooks{ActionTried: func(stream.ActionEvent) { tried <- struct{}{} }})))
		if err != nil {
			t.Fatal(err)
		}
		done := make(chan error, 1)
		go func() { done <- streamtest.Run(t.Context(), a, p) }()
		<-tried
		<-tried
		p.Revoke()
		if err := <-done; err != nil {
			t.Fatal(err)
		}
		up := &memPublisher{}
		dlB, _ := stream.DeadLetter(hist.Publisher(up), "dlq")
		b, err := stream.NewProcessor(h, fixed(2, time.Second), stream.WithExhaustionAction(dlB), stream.WithHooks(hist.Hooks("b")))
		if err != nil {
			t.Fatal(err)
		}
		if !runParts(t, b, time.Hour, p) {
			t.Fatal("not done")
		}
		if calls.Load() != 3 || len(up.got["dlq"]) != 5 {
			t.Fatalf("%d deliveries, %d dead-lettered; want 3 (retryCount 2) and the 5 records", calls.Load(), len(up.got["dlq"]))
		}
		h0 := headers(up.got["dlq"][0])
		if h0[stream.HeaderDeliveries] != "3" || h0[stream.HeaderError] != errPoison.Error() {
			t.Fatalf("dead letter headers %v, want 3 deliveries and %q", h0, errPoison)
		}
		if r := hist.Check(map[streamtest.TopicPartition]int64{{Topic: "orders", Partition: 0}: 5}); len(r.Violations) > 0 {
			t.Fatalf("violations %v", r.Violations)
		}
	})
}

// A partition whose batch was given up no longer counts as failing in
// the outage budget while its exhaustion action runs: stopped by
// StopPartition, or retrying a dead-letter action that fails. A poison
// batch on another partition is then given up under its policy, not held
// as an outage. Before, the given-up partition counted as failing, the
// second poison batch began an outage, and it was probed for ever.
func TestGivenUpPartitionIsNotFailing(t *testing.T) {
	for _, tt := range []struct {
		name   string
		action func(pub *memPublisher) stream.ExhaustionAction
	}{
		{"stopped", func(*memPublisher) stream.ExhaustionAction { return stream.StopPartition }},
		{"dead-letter action failing", func(pub *memPublisher) stream.ExhaustionAction {
			dl, _ := stream.DeadLetter(pub, "dlq")
			return dl
		}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				p1 := streamtest.NewPartition("orders", 1, 1)
				p1.Append(time.Now(), "poison 1")
				p2 := streamtest.NewPartition("orders", 2, 1)
				h := stream.HandlerFunc(func(context.Context, *stream.Batch) error { return errPoison })
				budget, _ := stream.NewBudget(stream.BudgetConfig{})
				pub := &memPublisher{fail: 1 << 30} // partition 1's dead letters never go out
				action := tt.action(pub)
				var outages atomic.Int32
				proc, err := stream.NewProcessor(h, fixed(3, time.Second), stream.WithOutageBudget(budget), stream.WithLogger(slog.New(slog.DiscardHandler)),
					stream.WithOperationBackoff(checkpoint.Fixed(time.Second)),
					stream.WithExhaustionAction(func(ctx context.Context, b *stream.Batch, x *checkpoint.ExhaustedError) error {
						if b.Partition == 2 {
							return nil // skipped
						}
						return action(ctx, b, x)
					}),
					stream.WithHooks(stream.Hooks{OutageBegan: func(stream.OutageEvent) { outages.Add(1) }}))
				if err != nil {
					t.Fatal(err)
				}
				ctx, cancel := context.WithCancel(t.Context())
				done := make(chan error, 1)
				go func() { done <- streamtest.Run(ctx, proc, p1, p2) }()
				time.Sleep(time.Minute) // partition 1's batch given up, its action not done
				p2.Append(time.Now(), "poison 2")
				wctx, wcancel := context.WithTimeout(ctx, time.Hour)
				err = p2.WaitCommitted(wctx, 1)
				wcancel()
				cancel()
				if rerr := <-done; rerr != nil {
					t.Fatal(rerr)
				}
				if err != nil || outages.Load() != 0 {
					t.Fatalf("partition 2's poison batch given up: %v (%v), outages %d, budget %+v; want given up, no outage",
						err == nil, err, outages.Load(), budget.State())
				}
			})
		})
	}
}

// A redeploy that lowers the retry count: the next owner, whose policy
// allows 2 retries, does not deliver retry 4 that the previous owner's
// policy scheduled; it gives the batch up, and the history checker finds
// no retry past the limit in force.
func TestLoweredRetryCountAfterAMove(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var hist streamtest.History
		p := streamtest.NewPartition("orders", 0, 5)
		p.AppendN(time.Now(), 5)
		now := time.Now()
		p.SetCheckpoint(0, retrystate.EncodeState(retrystate.State{Offset: 0, Retries: 4, FirstFailure: now.Add(-time.Minute),
			LastDelay: time.Second, NextAt: now.Add(time.Second), Records: 5}))
		var calls atomic.Int32
		h := stream.HandlerFunc(func(context.Context, *stream.Batch) error {
			calls.Add(1)
			return errTransient
		})
		var given givenUp
		proc, err := stream.NewProcessor(h, fixed(2, time.Second), stream.WithExhaustionAction(given.action),
			stream.WithLogger(slog.New(slog.DiscardHandler)), stream.WithHooks(hist.Hooks("b")))
		if err != nil {
			t.Fatal(err)
		}
		if !runParts(t, proc, time.Hour, p) {
			t.Fatal("not done")
		}
		if calls.Load() != 0 || len(given.errs) != 1 || given.errs[0].Reason != checkpoint.RetriesSpent {
			t.Fatalf("%d deliveries, given up %v; want none, given up for spent retries", calls.Load(), given.got)
		}
		if r := hist.Check(map[streamtest.TopicPartition]int64{{Topic: "orders", Partition: 0}: 5}); len(r.Violations) > 0 {
			t.Fatalf("violations %v", r.Violations)
		}
	})
}

// A give-up whose dead-letter action fails until the partition moves is
// given up again by the next owner with the records given up then, no
// more: a record given up alone (FailedAt) stays alone, and a batch the
// next owner fetches with more records behind it gives up the records of
// the batch given up. The records after them are delivered, not
// dead-lettered (the next owner gave up its whole fetch).
func TestGiveUpAfterAMoveKeepsItsRecords(t *testing.T) {
	for _, tt := range []struct {
		name     string
		maxBatch int
		h        func(calls map[int64]int) stream.Handler
		dlq      string // the offsets dead-lettered
	}{
		{"a record given up alone", 6, func(calls map[int64]int) stream.Handler {
			return stream.PerRecord(func(_ context.Context, r *stream.Record) error {
				if calls[r.Offset]++; r.Offset == 2 {
					return errPoison
				}
				return nil
			})
		}, "[2]"},
		{"a batch, more records behind it at the next owner", 10, func(calls map[int64]int) stream.Handler {
			return stream.HandlerFunc(func(_ context.Context, b *stream.Batch) error {
				for _, r := range b.Records {
					calls[r.Offset]++
				}
				if b.FirstOffset() == 0 {
					return errPoison
				}
				return nil
			})
		}, "[0 1 2]"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				var hist streamtest.History
				p := streamtest.NewPartition("orders", 0, tt.maxBatch)
				p.AppendN(time.Now(), 3)
				calls := map[int64]int{}
				h := tt.h(calls)
				down := &memPublisher{fail: 1 << 30}
				dlA, _ := stream.DeadLetter(hist.Publisher(down), "dlq")
				tried := make(chan struct{}, 10)
				a, err := stream.NewProcessor(h, fixed(1, time.Second), stream.WithExhaustionAction(dlA), stream.WithLogger(slog.New(slog.DiscardHandler)),
					stream.WithHooks(stream.MergeHooks(hist.Hooks("a"), stream.Hooks{ActionTried: func(stream.ActionEvent) { tried <- struct{}{} }})))
				if err != nil {
					t.Fatal(err)
				}
				done := make(chan error, 1)
				go func() { done <- streamtest.Run(t.Context(), a, p) }()
				<-tried
				p.Revoke()
				if err := <-done; err != nil {
					t.Fatal(err)
				}
				p.AppendN(time.Now(), 3) // the next owner's fetch holds them too
				up := &memPublisher{}
				dlB, _ := stream.DeadLetter(hist.Publisher(up), "dlq")
				b, err := stream.NewProcessor(h, fixed(1, time.Second), stream.WithExhaustionAction(dlB), stream.WithLogger(slog.New(slog.DiscardHandler)),
					stream.WithHooks(hist.Hooks("b")))
				if err != nil {
					t.Fatal(err)
				}
				if !runParts(t, b, time.Hour, p) {
					t.Fatal("not done")
				}
				var got []string
				for _, r := range up.got["dlq"] {
					got = append(got, headers(r)[stream.HeaderOffset])
				}
				if fmt.Sprint(got) != tt.dlq {
					t.Errorf("dead-lettered %v, want %s", got, tt.dlq)
				}
				for o := int64(3); o < 6; o++ {
					if calls[o] != 1 {
						t.Errorf("record %d delivered %d times, want once", o, calls[o])
					}
				}
				if r := hist.Check(map[streamtest.TopicPartition]int64{{Topic: "orders", Partition: 0}: 6}); len(r.Violations) > 0 {
					t.Errorf("violations %v", r.Violations)
				}
			})
		})
	}
}

// A restored retry keeps a throttled delay across a move (a retry-after
// hint here), and the next owner does not give up a batch whose Decide
// retries only the errors it knows when the previous owner's retry was
// cut short.
func TestMovedRetryKeepsItsDelayAndDecide(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p := streamtest.NewPartition("orders", 0, 5)
		p.AppendN(time.Now(), 5)
		throttled := errors.New("throttled")
		var calls []time.Time
		h := stream.HandlerFunc(func(context.Context, *stream.Batch) error {
			calls = append(calls, time.Now())
			if len(calls) == 1 {
				return checkpoint.RetryAfter(throttled, time.Minute)
			}
			return nil
		})
		policy := checkpoint.Policy{MaxRetries: 3, Decide: func(_ int, err error, _ time.Duration, _ checkpoint.Rand) (time.Duration, bool) {
			return time.Second, errors.Is(err, throttled)
		}}
		revoke := stream.Hooks{Checkpointed: func(e stream.CheckpointEvent) {
			if e.Metadata != "" {
				p.Revoke()
			}
		}}
		a, err := stream.NewProcessor(h, stream.WithPolicy(policy), stream.WithHooks(revoke))
		if err != nil {
			t.Fatal(err)
		}
		if err := streamtest.Run(t.Context(), a, p); err != nil {
			t.Fatal(err)
		}
		b, err := stream.NewProcessor(h, stream.WithPolicy(policy))
		if err != nil {
			t.Fatal(err)
		}
		if !runParts(t, b, time.Hour, p) {
			t.Fatal("not done")
		}
		if len(calls) != 2 || calls[1].Sub(calls[0]) < time.Minute {
			t.Fatalf("deliveries at %v, want the retry a minute after the first, as its hint said", calls)
		}
	})
}

// checkpoint.Permanent is never retried, whatever the policy's error filter.
func TestPermanentNeverRetried(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p := streamtest.NewPartition("orders", 0, 5)
		p.AppendN(time.Now(), 5)
		var calls atomic.Int32
		h := stream.HandlerFunc(func(context.Context, *stream.Batch) error {
			calls.Add(1)
			return checkpoint.Permanent(errPoison)
		})
		proc, err := stream.NewProcessor(h, stream.WithPolicy(checkpoint.Policy{MaxRetries: 5, Retryable: func(error) bool { return true }}))
		if err != nil {
			t.Fatal(err)
		}
		if !runParts(t, proc, time.Hour, p) || calls.Load() != 1 {
			t.Fatalf("%d deliveries of a Permanent error under a filter that retries all, want 1", calls.Load())
		}
	})
}

// A restored first failure after now (two owners' clocks disagree) does
// not stretch MaxRetryTime: a 10s budget allows about 10s of retries.
func TestFutureFirstFailureDoesNotStretchTheBudget(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p := streamtest.NewPartition("orders", 0, 5)
		p.AppendN(time.Now(), 5)
		p.SetCheckpoint(0, fmt.Sprintf("rd1;o=0;r=1;f=%d;d=10;s=1", time.Now().Add(time.Hour).UnixMilli()))
		var calls atomic.Int32
		h := stream.HandlerFunc(func(context.Context, *stream.Batch) error {
			calls.Add(1)
			return errTransient
		})
		begin := time.Now()
		proc, err := stream.NewProcessor(h, stream.WithPolicy(checkpoint.Policy{MaxRetries: checkpoint.Infinite,
			Backoff: checkpoint.Fixed(10 * time.Millisecond), MaxRetryTime: 10 * time.Second}))
		if err != nil {
			t.Fatal(err)
		}
		if !runParts(t, proc, 2*time.Hour, p) {
			t.Fatal("not done")
		}
		if took := time.Since(begin); took > 11*time.Second || calls.Load() > 1001 {
			t.Fatalf("%d retries over %v with a 10s budget", calls.Load(), took)
		}
	})
}

// Decisions: an operator's Resume that races a revocation returns nil (the
// worker took it) or an error wrapping ErrNotStopped (it came too late);
// either way nothing is lost: the batch is delivered again, by the next
// owner, with a fresh count, as Resume promises.
func TestResumeRacingARevocation(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p := streamtest.NewPartition("orders", 0, 5)
		p.AppendN(time.Now(), 5)
		var fail atomic.Bool
		fail.Store(true)
		var retries []int
		var mu sync.Mutex
		h := stream.HandlerFunc(func(_ context.Context, b *stream.Batch) error {
			mu.Lock()
			retries = append(retries, b.Attempt.Retries)
			mu.Unlock()
			if fail.Load() {
				return errPoison
			}
			return nil
		})
		stopped := make(chan struct{}, 1)
		a, err := stream.NewProcessor(h, fixed(1, time.Second), stream.WithExhaustionAction(stream.StopPartition), stream.WithLogger(slog.New(slog.DiscardHandler)),
			stream.WithHooks(stream.Hooks{Stopped: func(stream.StoppedEvent) { stopped <- struct{}{} }}))
		if err != nil {
			t.Fatal(err)
		}
		done := make(chan error, 1)
		go func() { done <- streamtest.Run(t.Context(), a, p) }()
		<-stopped
		synctest.Wait()
		fail.Store(false)
		p.Revoke() // the worker has not seen it yet
		if err := a.Resume(t.Context(), "orders", 0); err != nil && !errors.Is(err, stream.ErrNotStopped) {
			t.Fatalf("Resume racing a revocation: %v, want nil or ErrNotStopped", err)
		}
		if err := <-done; err != nil {
			t.Fatal(err)
		}
		if c, _ := p.Committed(); c != 0 {
			t.Fatalf("checkpoint %d, want 0: the batch not done", c)
		}
		b, err := stream.NewProcessor(h, fixed(1, time.Second), stream.WithLogger(slog.New(slog.DiscardHandler)))
		if err != nil {
			t.Fatal(err)
		}
		if !runParts(t, b, time.Hour, p) {
			t.Fatal("not done")
		}
		mu.Lock()
		defer mu.Unlock()
		if fmt.Sprint(retries) != "[0 1 0]" {
			t.Fatalf("deliveries as retries %v, want [0 1 0]: the next owner delivers the batch with a fresh count", retries)
		}
	})
}

// Decisions: an operator's Skip that races a revocation returns an error,
// never nil for a skip that was lost; a Skip that returns nil has moved
// the checkpoint past the batch.
func TestSkipRacingARevocation(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		for _, race := range []bool{false, true} {
			p := streamtest.NewPartition("orders", 0, 5)
			p.AppendN(time.Now(), 5)
			h := stream.HandlerFunc(func(_ context.Context, b *stream.Batch) error { return errPoison })
			stopped := make(chan struct{}, 1)
			proc, err := stream.NewProcessor(h, fixed(0, 0), stream.WithExhaustionAction(stream.StopPartition),
				stream.WithHooks(stream.Hooks{Stopped: func(stream.StoppedEvent) { stopped <- struct{}{} }}))
			if err != nil {
				t.Fatal(err)
			}
			done := make(chan error, 1)
			go func() { done <- streamtest.Run(t.Context(), proc, p) }()
			<-stopped
			synctest.Wait()
			if race {
				p.Revoke() // the worker has not seen it yet
			}
			err = proc.Skip(t.Context(), "orders", 0)
			c, _ := p.Committed()
			switch {
			case race && (err == nil || c == 5):
				t.Fatalf("Skip racing a revocation: %v, checkpoint %d; want an error and the checkpoint in place", err, c)
			case !race && (err != nil || c != 5):
				t.Fatalf("Skip: %v, checkpoint %d; want nil and the checkpoint past the batch when it returns", err, c)
			}
			if race && (!strings.Contains(err.Error(), "next owner") || !errors.Is(err, stream.ErrNotStopped) && !errors.Is(err, stream.ErrRevoked)) {
				t.Errorf("Skip's error %q does not say what happens next", err)
			}
			p.Revoke()
			if err := <-done; err != nil {
				t.Fatal(err)
			}
		}
	})
}

// Decisions: stream.IsStop and the engine both see StopPartition's result
// through wrapping.
func TestWrappedStopStopsThePartition(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		stop := func(ctx context.Context, b *stream.Batch, x *checkpoint.ExhaustedError) error {
			return fmt.Errorf("orders: %w", stream.StopPartition(ctx, b, x))
		}
		if !stream.IsStop(stop(context.Background(), nil, nil)) {
			t.Fatal("IsStop of a wrapped stop is false")
		}
		p := streamtest.NewPartition("orders", 0, 5)
		p.AppendN(time.Now(), 5)
		stopped := make(chan struct{}, 1)
		proc, err := stream.NewProcessor(stream.HandlerFunc(func(context.Context, *stream.Batch) error { return errPoison }),
			stream.WithExhaustionAction(stop), stream.WithHooks(stream.Hooks{Stopped: func(stream.StoppedEvent) { stopped <- struct{}{} }}))
		if err != nil {
			t.Fatal(err)
		}
		done := make(chan error, 1)
		go func() { done <- streamtest.Run(t.Context(), proc, p) }()
		<-stopped
		p.Revoke()
		<-done
	})
}

// A retry started under a RetryResult whose count it spends, cut short by
// a move: its outcome is not known, so the next owner counts it as
// failed and gives the batch up to the exhaustion action, instead of
// moving past it unhandled as a spent RetryResult would (found by
// TestRandomEngine, seed 367).
func TestStartedLastRetryResultAfterAMove(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p := streamtest.NewPartition("orders", 0, 5)
		p.AppendN(time.Now(), 5)
		p.SetCheckpoint(0, fmt.Sprintf("rd1;o=0;r=2;f=%d;d=1000;s=1;rr=2:1000", time.Now().UnixMilli()))
		var hist streamtest.History
		var given givenUp
		var calls atomic.Int32
		proc, err := stream.NewProcessor(stream.HandlerFunc(func(context.Context, *stream.Batch) error { calls.Add(1); return nil }),
			fixed(5, time.Second), stream.WithExhaustionAction(given.action), stream.WithHooks(hist.Hooks("b")))
		if err != nil {
			t.Fatal(err)
		}
		if !runParts(t, proc, time.Hour, p) {
			t.Fatal("not done")
		}
		if len(given.errs) != 1 || given.errs[0].Retries != 2 || !errors.Is(given.errs[0], retrystate.ErrInterrupted) {
			t.Fatalf("given up %v, want the batch after its 2 retries, its last one interrupted", given.got)
		}
		if r := hist.Check(map[streamtest.TopicPartition]int64{{Topic: "orders", Partition: 0}: 5}); len(r.Violations) > 0 {
			t.Fatalf("violations %v", r.Violations)
		}
	})
}
