package stream_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/redeliver-go/redeliver/checkpoint"
	"github.com/redeliver-go/redeliver/stream"
	"github.com/redeliver-go/redeliver/stream/streamtest"
)

var errDown = errors.New("downstream unavailable")

// outageRun is one processor over 8 partitions whose handler fails while
// the downstream is down, and always on the poison record if any.
type outageRun struct {
	parts    []*streamtest.Partition
	hist     streamtest.History
	ev       events
	given    givenUp
	began    atomic.Int32
	ended    atomic.Int32
	probes   atomic.Int32
	mu       sync.Mutex
	handled  map[string]int // "partition/offset" -> successful deliveries
	inOutage int            // deliveries while the downstream was down
}

// outageCase runs the handler over 8 partitions of 20 records each, in
// batches of 5, with the downstream down from the start for down, and
// returns what happened. poison is "partition/offset" of a record that
// always fails ("" for none).
func outageCase(t *testing.T, budget *stream.Budget, policy checkpoint.Policy, down time.Duration, poison string) *outageRun {
	t.Helper()
	r := &outageRun{handled: map[string]int{}}
	for i := range 8 {
		p := streamtest.NewPartition("orders", int32(i), 5)
		p.AppendN(time.Now(), 20)
		r.parts = append(r.parts, p)
	}
	recovery := time.Now().Add(down)
	h := stream.PerRecord(func(_ context.Context, rec *stream.Record) error {
		key := fmt.Sprintf("%d/%d", rec.Partition, rec.Offset)
		if time.Now().Before(recovery) {
			r.mu.Lock()
			r.inOutage++
			r.mu.Unlock()
			return errDown
		}
		if key == poison {
			return errPoison
		}
		r.mu.Lock()
		r.handled[key]++
		r.mu.Unlock()
		return nil
	})
	hooks := stream.MergeHooks(r.hist.Hooks("a"), r.ev.hooks(), stream.Hooks{
		OutageBegan: func(stream.OutageEvent) { r.began.Add(1) },
		OutageEnded: func(stream.OutageEvent) { r.ended.Add(1) },
		Probing:     func(stream.ProbeEvent) { r.probes.Add(1) },
	})
	opts := []stream.Option{stream.WithPolicy(policy), stream.WithHooks(hooks), stream.WithExhaustionAction(r.given.action)}
	if budget != nil {
		opts = append(opts, stream.WithOutageBudget(budget))
	}
	proc, err := stream.NewProcessor(h, opts...)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() { done <- streamtest.Run(ctx, proc, r.parts...) }()
	wctx, wcancel := context.WithTimeout(t.Context(), 24*time.Hour) // fake time
	defer wcancel()
	for _, p := range r.parts {
		if err := p.WaitCommitted(wctx, p.End()); err != nil {
			t.Fatalf("partition %d: %v", p.Partition(), err)
		}
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	ends := map[streamtest.TopicPartition]int64{}
	for _, p := range r.parts {
		ends[streamtest.TopicPartition{Topic: "orders", Partition: p.Partition()}] = p.End()
	}
	rep := r.hist.Check(ends)
	for _, v := range rep.Violations {
		t.Error(v)
	}
	return r
}

// The policy's worst case: 3 retries 1s apart, and no retry later than 10s
// after the first failure.
var outagePolicy = checkpoint.Policy{MaxRetries: 3, Backoff: checkpoint.Fixed(time.Second), MaxRetryTime: 10 * time.Second}

// A downstream outage across 8 partitions that lasts a minute, far longer
// than the policy's worst-case retry time: with the budget, nothing is
// given up, retries stop being spent, the partitions wait while a probe at
// a time tests the downstream, and every record is handled after the
// recovery. Without it, batches are given up: the case the budget is for.
func TestOutageGivesNothingUp(t *testing.T) {
	t.Run("budget", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			budget, err := stream.NewBudget(stream.BudgetConfig{})
			if err != nil {
				t.Fatal(err)
			}
			start := time.Now()
			r := outageCase(t, budget, outagePolicy, time.Minute, "")
			if len(r.given.got) != 0 {
				t.Fatalf("given up during an outage: %v", r.given.got)
			}
			for _, p := range r.parts {
				for o := range p.End() {
					if n := r.handled[fmt.Sprintf("%d/%d", p.Partition(), o)]; n != 1 {
						t.Fatalf("record %d/%d handled %d times, want once", p.Partition(), o, n)
					}
				}
			}
			if r.began.Load() != 1 || r.ended.Load() != 1 {
				t.Fatalf("outages began %d, ended %d; want 1 and 1", r.began.Load(), r.ended.Load())
			}
			// The outage began within the first round of failures (the
			// fifth spends the budget's half): few retries were spent.
			if n := len(r.ev.retries); n > 8 {
				t.Fatalf("%d retries scheduled, want at most 8: the outage spent retries", n)
			}
			uncounted := 0
			for _, d := range r.ev.delivered {
				if d.Uncounted {
					uncounted++
				}
			}
			// Probes 1s, 2s, 4s, 8s, 16s and 30s after one another:
			// 6 or 7 in the minute, and the first delivery of each
			// partition's first batch and of its retries before then.
			if p := r.probes.Load(); p < 5 || p > 8 {
				t.Fatalf("%d probes in a one-minute outage, want 5 to 8 (1s doubling to 30s)", p)
			}
			if r.inOutage > 30 || uncounted == 0 {
				t.Fatalf("%d deliveries during the outage (%d uncounted): want a few probes, not a retry storm", r.inOutage, uncounted)
			}
			if s := budget.State(); s.Outage || s.Failing != 0 {
				t.Fatalf("budget after the run: %+v", s)
			}
			if took := time.Since(start); took > 2*time.Minute {
				t.Fatalf("the run took %v after a one-minute outage", took)
			}
		})
	})
	t.Run("no budget", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			r := outageCase(t, nil, outagePolicy, time.Minute, "")
			if len(r.given.got) == 0 {
				t.Fatal("nothing given up without a budget: the outage case does not test the budget")
			}
		})
	})
}

// MaxRecordAge applies during an outage: with infinite retries and a
// downstream that never comes back, every batch is given up once its
// records are too old, instead of the partitions waiting for ever (the
// failures of an outage count for nothing else).
func TestOutageKeepsMaxRecordAge(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		budget, err := stream.NewBudget(stream.BudgetConfig{})
		if err != nil {
			t.Fatal(err)
		}
		policy := checkpoint.Policy{MaxRetries: checkpoint.Infinite, Backoff: checkpoint.Fixed(time.Second), MaxRecordAge: 30 * time.Second}
		r := outageCase(t, budget, policy, 1000*time.Hour, "")
		if r.began.Load() == 0 {
			t.Fatal("no outage: the case does not test the budget")
		}
		if len(r.given.errs) == 0 {
			t.Fatal("nothing given up")
		}
		for _, xerr := range r.given.errs {
			if xerr.Reason != checkpoint.RecordTooOld || !errors.Is(xerr, errDown) {
				t.Fatalf("given up with %v, want for record age after %v", xerr, errDown)
			}
		}
	})
}

// A poison record during the outage is given up after the recovery, with
// the retries of its policy, as the only record given up; the probe that
// tests it never holds the outage open, since the next probe is another
// partition's.
func TestOutageWithPoisonBatch(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		budget, err := stream.NewBudget(stream.BudgetConfig{ProbeBackoff: checkpoint.Capped(5*time.Second, checkpoint.Exponential(time.Second))})
		if err != nil {
			t.Fatal(err)
		}
		r := outageCase(t, budget, outagePolicy, 30*time.Second, "3/7")
		if fmt.Sprint(r.given.got) != "[7-7: invalid order id]" {
			t.Fatalf("given up %v, want the poison record 7 of partition 3 alone", r.given.got)
		}
		if xerr := r.given.errs[0]; xerr.Reason != checkpoint.RetriesSpent || xerr.Retries != 3 {
			t.Fatalf("poison record given up with %v, want after its 3 retries", xerr)
		}
		if r.began.Load() != 1 || r.ended.Load() != 1 {
			t.Fatalf("outages began %d, ended %d; want 1 and 1", r.began.Load(), r.ended.Load())
		}
	})
}

// A poison batch on one partition while the others succeed is given up as
// the policy says, with no outage, even with a long retry count that
// empties the budget: one partition's failures are never an outage.
func TestPoisonBatchIsNotAnOutage(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		budget, err := stream.NewBudget(stream.BudgetConfig{})
		if err != nil {
			t.Fatal(err)
		}
		policy := checkpoint.Policy{MaxRetries: 12, Backoff: checkpoint.Fixed(time.Second)}
		r := outageCase(t, budget, policy, 0, "5/12")
		if fmt.Sprint(r.given.got) != "[12-12: invalid order id]" {
			t.Fatalf("given up %v, want the poison record alone", r.given.got)
		}
		if r.began.Load() != 0 {
			t.Fatal("a poison batch made an outage")
		}
		if s := budget.State(); s.Tokens > 5 {
			t.Fatalf("budget %+v: the poison batch's 13 failures should have emptied it", s)
		}
	})
}

// A processor's outage hooks fire for every processor sharing the budget,
// and a budget shared by two processors sees both processors' partitions.
func TestOutageBudgetShared(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		budget, err := stream.NewBudget(stream.BudgetConfig{})
		if err != nil {
			t.Fatal(err)
		}
		var began [2]atomic.Int32
		recovery := time.Now().Add(10 * time.Second)
		h := stream.HandlerFunc(func(context.Context, *stream.Batch) error {
			if time.Now().Before(recovery) {
				return errDown
			}
			return nil
		})
		ctx, cancel := context.WithCancel(t.Context())
		var wg sync.WaitGroup
		var parts []*streamtest.Partition
		var given givenUp
		for i := range 2 {
			proc, err := stream.NewProcessor(h, fixed(2, time.Second), stream.WithOutageBudget(budget),
				stream.WithExhaustionAction(given.action),
				stream.WithHooks(stream.Hooks{OutageBegan: func(stream.OutageEvent) { began[i].Add(1) }}))
			if err != nil {
				t.Fatal(err)
			}
			// One partition each: neither processor alone has two
			// failing partitions.
			p := streamtest.NewPartition(fmt.Sprintf("t%d", i), 0, 10)
			p.AppendN(time.Now(), 10)
			parts = append(parts, p)
			wg.Go(func() { streamtest.Run(ctx, proc, p) })
		}
		for _, p := range parts {
			if err := p.WaitCommitted(t.Context(), 10); err != nil {
				t.Fatal(err)
			}
		}
		cancel()
		wg.Wait()
		if began[0].Load() != 1 || began[1].Load() != 1 || len(given.got) != 0 {
			t.Fatalf("outages began %d and %d, given up %v; want one outage seen by both, nothing given up",
				began[0].Load(), began[1].Load(), given.got)
		}
	})
}
