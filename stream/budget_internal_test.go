package stream

import (
	"context"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/redeliver-go/redeliver/checkpoint"
)

func TestNewBudgetDefaultsAndErrors(t *testing.T) {
	b, err := NewBudget(BudgetConfig{})
	if err != nil {
		t.Fatal(err)
	}
	cfg := b.Config()
	if cfg.MaxTokens != 10 || cfg.TokenRatio != 0.1 || cfg.MinPartitions != 2 || cfg.ProbeBackoff == nil {
		t.Fatalf("defaults %+v", cfg)
	}
	var delays []time.Duration
	for n := 1; n <= 7; n++ {
		delays = append(delays, cfg.ProbeBackoff(n, 0, nil))
	}
	if got := fmtDurations(delays); got != "1s 2s 4s 8s 16s 30s 30s" {
		t.Fatalf("probe delays %s", got)
	}
	if s := b.State(); s.Tokens != 10 || s.Outage {
		t.Fatalf("new budget %+v, want full and no outage", s)
	}
	for _, tt := range []struct {
		cfg  BudgetConfig
		want string
	}{
		{BudgetConfig{MaxTokens: -1}, "MaxTokens -1"},
		{BudgetConfig{TokenRatio: -0.5}, "TokenRatio -0.5"},
		{BudgetConfig{MaxTokens: 2, TokenRatio: 3}, "at most MaxTokens (2)"},
		{BudgetConfig{MinPartitions: 1}, "MinPartitions 1: want 2 or more"},
	} {
		if _, err := NewBudget(tt.cfg); err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("NewBudget(%+v) = %v, want an error with %q", tt.cfg, err, tt.want)
		}
	}
}

func fmtDurations(ds []time.Duration) string {
	s := make([]string, len(ds))
	for i, d := range ds {
		s[i] = d.String()
	}
	return strings.Join(s, " ")
}

// outageLog records the outage hooks of a processor.
type outageLog struct {
	began, ended []OutageEvent
}

func (l *outageLog) hooks() *Hooks {
	return &Hooks{
		OutageBegan: func(e OutageEvent) { l.began = append(l.began, e) },
		OutageEnded: func(e OutageEvent) { l.ended = append(l.ended, e) },
	}
}

// One partition's failures never make an outage, however many: its batch
// is a poison batch, given up by its policy.
func TestBudgetOnePartitionNeverRunsOut(t *testing.T) {
	b, _ := NewBudget(BudgetConfig{})
	var log outageLog
	h := log.hooks()
	b.listen(h)
	poison := b.join()
	now := time.Unix(0, 0)
	for i := range 50 {
		if counts, began := poison.failed(now, BatchInfo{}); !counts || began {
			t.Fatalf("failure %d: counts %v, began %v; want counted, no outage", i+1, counts, began)
		}
	}
	if s := b.State(); s.Tokens != 0 || s.Failing != 1 || s.Outage {
		t.Fatalf("state %+v: want empty, one failing, no outage", s)
	}
	if len(log.began) != 0 {
		t.Fatalf("outage began: %+v", log.began)
	}
}

// Failures on two partitions run the budget out once it holds half its
// tokens or less; the failure that runs it out does not count.
func TestBudgetRunsOut(t *testing.T) {
	b, _ := NewBudget(BudgetConfig{})
	var log outageLog
	h := log.hooks()
	b.listen(h)
	p, q := b.join(), b.join()
	now := time.Unix(100, 0)
	for i, m := range []*budgetMember{p, q, p, q} { // tokens 9, 8, 7, 6
		if counts, _ := m.failed(now, BatchInfo{}); !counts {
			t.Fatalf("failure %d not counted with %v tokens", i+1, b.State().Tokens)
		}
	}
	counts, began := p.failed(now, BatchInfo{Partition: 7}) // 5: half
	if counts || !began {
		t.Fatalf("fifth failure: counts %v, began %v; want the outage to begin", counts, began)
	}
	if len(log.began) != 1 || log.began[0].Failing != 2 || log.began[0].Partition != 7 || !log.began[0].Since.Equal(now) {
		t.Fatalf("OutageBegan events %+v", log.began)
	}
	if counts, began := q.failed(now, BatchInfo{}); counts || began {
		t.Fatalf("failure during the outage: counts %v, began %v; want uncounted", counts, began)
	}
	if s := b.State(); !s.Outage || !s.Since.Equal(now) {
		t.Fatalf("state %+v, want an outage since %v", s, now)
	}
	// A success ends it and fills the budget.
	e, ended := q.succeeded(now.Add(time.Minute), BatchInfo{Partition: 2})
	if !ended || e.Duration != time.Minute || e.Partition != 2 {
		t.Fatalf("success: ended %v %+v", ended, e)
	}
	if s := b.State(); s.Outage || s.Tokens != 10 || s.Failing != 1 {
		t.Fatalf("state after the outage %+v, want full, one failing (p), no outage", s)
	}
	if len(log.ended) != 1 || log.ended[0].Duration != time.Minute {
		t.Fatalf("OutageEnded events %+v", log.ended)
	}
}

// Successes refill the budget: a poison batch retried while the other
// partitions succeed never runs it out, even with another partition
// failing now and then.
func TestBudgetSuccessesRefill(t *testing.T) {
	b, _ := NewBudget(BudgetConfig{})
	poison, flaky, healthy := b.join(), b.join(), b.join()
	now := time.Unix(0, 0)
	for i := range 100 {
		if counts, _ := poison.failed(now, BatchInfo{}); !counts {
			t.Fatalf("poison failure %d not counted: %+v", i+1, b.State())
		}
		if i%10 == 0 {
			if counts, _ := flaky.failed(now, BatchInfo{}); !counts {
				t.Fatalf("flaky failure %d not counted: %+v", i+1, b.State())
			}
		} else if i%10 == 1 {
			flaky.succeeded(now, BatchInfo{})
		}
		for range 12 {
			healthy.succeeded(now, BatchInfo{})
		}
	}
	if s := b.State(); s.Outage {
		t.Fatalf("outage with successes refilling the budget: %+v", s)
	}
	// Without the successes, the two failing partitions run it out.
	for range 10 {
		poison.failed(now, BatchInfo{})
		flaky.failed(now, BatchInfo{})
	}
	if !b.State().Outage {
		t.Fatalf("no outage after 20 failures on two partitions: %+v", b.State())
	}
}

// During an outage, the waiting partitions probe one at a time, after the
// probe backoff, the one that has waited longest first; a failed probe
// goes to the back of the queue and the next waits longer; a success ends
// the outage and releases every waiter.
func TestBudgetProbes(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b, _ := NewBudget(BudgetConfig{ProbeBackoff: checkpoint.Capped(4*time.Second, checkpoint.Exponential(time.Second))})
		var log outageLog
		h := log.hooks()
		b.listen(h)
		ms := []*budgetMember{b.join(), b.join(), b.join()}
		begin := time.Now()
		for i := 0; !b.State().Outage; i++ {
			ms[i%3].failed(time.Now(), BatchInfo{})
		}
		type turn struct {
			who   int
			probe int
			at    time.Duration
		}
		turns := make(chan turn, 10)
		ctx := t.Context()
		wait := func(i int) {
			go func() {
				n, _, err := ms[i].await(ctx, systemClock{})
				if err != nil {
					t.Error(err)
				}
				turns <- turn{i, n, time.Since(begin)}
			}()
		}
		for i := range ms {
			wait(i)
			synctest.Wait() // queued in this order
		}
		got := <-turns
		if got != (turn{0, 1, time.Second}) {
			t.Fatalf("first turn %+v, want member 0's probe 1 after 1s", got)
		}
		synctest.Wait()
		select {
		case x := <-turns:
			t.Fatalf("a second turn while the probe is in flight: %+v", x)
		default:
		}
		// The probe fails: member 0 waits again, behind the others.
		ms[0].failed(time.Now(), BatchInfo{})
		wait(0)
		if got := <-turns; got != (turn{1, 2, 3 * time.Second}) {
			t.Fatalf("second turn %+v, want member 1's probe 2 at 3s (2s after the failed probe)", got)
		}
		ms[1].failed(time.Now(), BatchInfo{})
		wait(1)
		if got := <-turns; got != (turn{2, 3, 7 * time.Second}) {
			t.Fatalf("third turn %+v, want member 2's probe 3 at 7s", got)
		}
		// The probe's worker stops: the next member may probe at once.
		ms[2].leave()
		if got := <-turns; got != (turn{0, 4, 7 * time.Second}) {
			t.Fatalf("fourth turn %+v, want member 0's probe 4 at 7s", got)
		}
		if s := b.State(); s.Waiting != 1 || s.Probes != 4 {
			t.Fatalf("state %+v, want member 1 waiting after 4 probes", s)
		}
		ms[0].succeeded(time.Now(), BatchInfo{})
		if got := <-turns; got != (turn{1, 0, 7 * time.Second}) {
			t.Fatalf("after the success %+v, want member 1 released with no probe", got)
		}
		if len(log.ended) != 1 || log.ended[0].Probes != 4 || log.ended[0].Duration != 7*time.Second {
			t.Fatalf("OutageEnded %+v", log.ended)
		}
		// No outage: await returns at once.
		if n, _, err := ms[1].await(ctx, systemClock{}); n != 0 || err != nil {
			t.Fatalf("await with no outage: %d %v", n, err)
		}
	})
}

// A waiter whose context ends leaves the queue.
func TestBudgetAwaitCancelled(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b, _ := NewBudget(BudgetConfig{})
		p, q := b.join(), b.join()
		for !b.State().Outage {
			p.failed(time.Now(), BatchInfo{})
			q.failed(time.Now(), BatchInfo{})
		}
		ctx, cancel := context.WithTimeout(t.Context(), 500*time.Millisecond)
		defer cancel()
		if _, _, err := p.await(ctx, systemClock{}); err != context.DeadlineExceeded {
			t.Fatalf("await: %v, want the context's deadline", err)
		}
		if s := b.State(); s.Waiting != 0 {
			t.Fatalf("state %+v, want no waiter", s)
		}
	})
}

// A partition whose batch was given up no longer counts as failing: the
// poison batches of two partitions one after the other are not an outage.
func TestBudgetGivenUpIsNotFailing(t *testing.T) {
	b, _ := NewBudget(BudgetConfig{})
	p, q := b.join(), b.join()
	now := time.Unix(0, 0)
	for range 10 {
		p.failed(now, BatchInfo{})
	}
	p.resolved()
	for i := range 10 {
		if counts, _ := q.failed(now, BatchInfo{}); !counts {
			t.Fatalf("failure %d of the second poison batch not counted: %+v", i+1, b.State())
		}
	}
	if s := b.State(); s.Outage || s.Failing != 1 {
		t.Fatalf("state %+v, want one failing partition and no outage", s)
	}
}

// An outage hook may read the budget's state.
func TestBudgetHookReadsState(t *testing.T) {
	b, _ := NewBudget(BudgetConfig{})
	var seen []BudgetState
	h := &Hooks{
		OutageBegan: func(OutageEvent) { seen = append(seen, b.State()) },
		OutageEnded: func(OutageEvent) { seen = append(seen, b.State()) },
	}
	b.listen(h)
	p, q := b.join(), b.join()
	for !b.State().Outage {
		p.failed(time.Unix(0, 0), BatchInfo{})
		q.failed(time.Unix(0, 0), BatchInfo{})
	}
	q.succeeded(time.Unix(1, 0), BatchInfo{})
	if len(seen) != 2 || !seen[0].Outage || seen[1].Outage {
		t.Fatalf("states seen by the hooks %+v, want in an outage, then not", seen)
	}
}

// Each transition of the budget's state machine, as its doc lists them.
func TestBudgetTransitions(t *testing.T) {
	// outage returns a budget in an outage since now, with members p and
	// q failing and waiting, the next probe due at now+1s.
	outage := func(t *testing.T, now time.Time) (*Budget, *budgetMember, *budgetMember) {
		b, _ := NewBudget(BudgetConfig{})
		p, q := b.join(), b.join()
		for !b.State().Outage {
			p.failed(now, BatchInfo{})
			q.failed(now, BatchInfo{})
		}
		return b, p, q
	}
	// probing grants p the probe, at now+1s.
	probing := func(t *testing.T, b *Budget, p, q *budgetMember) {
		t.Helper()
		clk := fixedClock{b.State().Since.Add(time.Second)}
		ctx, cancel := context.WithCancel(t.Context())
		cancel()
		// q waits behind p: put p first in the queue.
		b.mu.Lock()
		p.queued, q.queued = true, true
		b.queue = append(b.queue, p, q)
		b.mu.Unlock()
		if n, _, err := p.await(ctx, clk); n != 1 || err != nil {
			t.Fatalf("probe granted: %d %v, want probe 1", n, err)
		}
	}
	now := time.Unix(1000, 0)
	t.Run("failure counted", func(t *testing.T) {
		b, _ := NewBudget(BudgetConfig{})
		p, q := b.join(), b.join()
		counts, began := p.failed(now, BatchInfo{})
		if s := b.State(); !counts || began || s.Tokens != 9 || s.Failing != 1 || s.Outage {
			t.Fatalf("%v %v %+v", counts, began, s)
		}
		for !b.State().Outage {
			counts, began = q.failed(now, BatchInfo{})
		}
		if s := b.State(); counts || !began || s.Tokens != 5 || s.Failing != 2 || !s.Since.Equal(now) {
			t.Fatalf("the failure that ran it out: counts %v, began %v, %+v", counts, began, s)
		}
		if !b.probeAt.Equal(now.Add(time.Second)) {
			t.Fatalf("first probe at %v, want now+1s", b.probeAt)
		}
	})
	t.Run("failure during outage", func(t *testing.T) {
		b, _, _ := outage(t, now)
		r := b.join()
		if counts, began := r.failed(now, BatchInfo{}); counts || began || b.State().Failing != 3 {
			t.Fatalf("counts %v began %v %+v", counts, began, b.State())
		}
	})
	t.Run("probe granted only when due and first", func(t *testing.T) {
		b, p, q := outage(t, now)
		ctx, cancel := context.WithCancel(t.Context())
		cancel()
		if n, _, _ := p.await(ctx, fixedClock{now}); n != 0 {
			t.Fatal("a probe before probeAt")
		}
		probing(t, b, p, q)
		if s := b.State(); s.Probes != 1 || b.probe != p || s.Waiting != 1 {
			t.Fatalf("%+v", s)
		}
		if n, _, _ := q.await(ctx, fixedClock{now.Add(time.Hour)}); n != 0 {
			t.Fatal("a second probe while one is in flight")
		}
	})
	t.Run("probe failed", func(t *testing.T) {
		b, p, q := outage(t, now)
		probing(t, b, p, q)
		at := now.Add(time.Second)
		p.failed(at, BatchInfo{})
		if b.probe != nil || !b.probeAt.Equal(at.Add(2*time.Second)) || !b.open {
			t.Fatalf("probe %v, next at %v, want none and +2s", b.probe, b.probeAt.Sub(at))
		}
	})
	t.Run("success ends the outage", func(t *testing.T) {
		b, p, q := outage(t, now)
		probing(t, b, p, q)
		e, ended := q.succeeded(now.Add(time.Minute), BatchInfo{})
		if s := b.State(); !ended || e.Duration != time.Minute || s.Outage || s.Tokens != 10 || s.Waiting != 0 || s.Failing != 1 {
			t.Fatalf("ended %v %+v, state %+v", ended, e, s)
		}
	})
	t.Run("RetryResult", func(t *testing.T) {
		b, p, q := outage(t, now)
		probing(t, b, p, q)
		at := now.Add(time.Second)
		p.requested(at)
		if s := b.State(); b.probe != nil || !b.probeAt.Equal(at.Add(2*time.Second)) || s.Failing != 1 || !s.Outage {
			t.Fatalf("probe %v next %v, %+v", b.probe, b.probeAt, s)
		}
	})
	t.Run("not retryable", func(t *testing.T) {
		b, p, q := outage(t, now)
		probing(t, b, p, q)
		at := now.Add(time.Second)
		p.neutral(at)
		if s := b.State(); b.probe != nil || !b.probeAt.Equal(at.Add(2*time.Second)) || s.Failing != 2 {
			t.Fatalf("probe %v next %v, %+v", b.probe, b.probeAt, s)
		}
	})
	t.Run("probe refused when due", func(t *testing.T) {
		b, p, q := outage(t, now)
		probing(t, b, p, q)
		before := b.probeAt
		p.dropProbe()
		if b.probe != nil || !b.probeAt.Equal(before) {
			t.Fatalf("probe %v, next at %v, want none and unchanged", b.probe, b.probeAt)
		}
		ctx, cancel := context.WithCancel(t.Context())
		cancel()
		if n, _, _ := q.await(ctx, fixedClock{before}); n != 2 {
			t.Fatalf("the next waiter's probe: %d, want 2 at once", n)
		}
	})
	t.Run("batch done", func(t *testing.T) {
		b, p, q := outage(t, now)
		probing(t, b, p, q)
		p.resolved()
		if s := b.State(); b.probe != nil || s.Failing != 1 || !s.Outage {
			t.Fatalf("probe %v, %+v", b.probe, s)
		}
	})
	t.Run("worker stops", func(t *testing.T) {
		b, p, q := outage(t, now)
		probing(t, b, p, q)
		p.leave()
		q.leave()
		if s := b.State(); b.probe != nil || s.Failing != 0 || s.Waiting != 0 {
			t.Fatalf("probe %v, %+v", b.probe, s)
		}
	})
}

// A probe delay of 0 is taken as MinProbeDelay: probes never run hot. A
// ProbeBackoff with no ceiling doubles on up to checkpoint.MaxBackoff.
func TestProbeDelays(t *testing.T) {
	b, _ := NewBudget(BudgetConfig{ProbeBackoff: checkpoint.Exponential(0)})
	for n := 1; n <= 5; n++ {
		if d := b.probeDelay(n); d != MinProbeDelay {
			t.Fatalf("probe %d after %v, want %v", n, d, MinProbeDelay)
		}
	}
	grow, _ := NewBudget(BudgetConfig{ProbeBackoff: checkpoint.Exponential(time.Second)})
	if d := grow.probeDelay(7); d != 64*time.Second {
		t.Fatalf("probe 7 of Exponential(1s) after %v, want 64s (no ceiling)", d)
	}
	if d := grow.probeDelay(100); d != checkpoint.MaxBackoff {
		t.Fatalf("probe 100 after %v, want %v", d, checkpoint.MaxBackoff)
	}
}

// fixedClock reads one instant; its timers never fire.
type fixedClock struct{ t time.Time }

func (c fixedClock) Now() time.Time { return c.t }
func (c fixedClock) NewTimer(time.Duration) (<-chan time.Time, func() bool) {
	return nil, func() bool { return false }
}
