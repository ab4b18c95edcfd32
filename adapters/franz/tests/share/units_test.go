package share_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/redeliver-go/redeliver/adapters/franz"
	"github.com/redeliver-go/redeliver/adapters/franz/share"
	"github.com/redeliver-go/redeliver/adapters/internal/kafkatest"
	"github.com/redeliver-go/redeliver/checkpoint"
	"github.com/redeliver-go/redeliver/stream"
)

// The share consumer on the engine's record units (issue 47): each test
// here failed with the share consumer's own retry engine (lane.go before
// the record units).

// logs captures log lines.
type logs struct {
	mu    sync.Mutex
	lines []logLine
}

type logLine struct {
	level slog.Level
	msg   string
	attrs map[string]string
}

func (l *logs) handler() slog.Handler { return &logHandler{l: l} }

func (l *logs) find(level slog.Level, msgPart string, attrs map[string]string) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
next:
	for _, ln := range l.lines {
		if ln.level != level || !strings.Contains(ln.msg, msgPart) {
			continue
		}
		for k, v := range attrs {
			if ln.attrs[k] != v {
				continue next
			}
		}
		return true
	}
	return false
}

func (l *logs) dump(t *testing.T) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, ln := range l.lines {
		t.Logf("%v %s %v", ln.level, ln.msg, ln.attrs)
	}
}

type logHandler struct {
	l     *logs
	attrs []slog.Attr
}

func (h *logHandler) Enabled(context.Context, slog.Level) bool { return true }
func (h *logHandler) Handle(_ context.Context, r slog.Record) error {
	m := map[string]string{}
	for _, a := range h.attrs {
		m[a.Key] = a.Value.String()
	}
	r.Attrs(func(a slog.Attr) bool { m[a.Key] = a.Value.String(); return true })
	h.l.mu.Lock()
	h.l.lines = append(h.l.lines, logLine{r.Level, r.Message, m})
	h.l.mu.Unlock()
	return nil
}
func (h *logHandler) WithAttrs(as []slog.Attr) slog.Handler {
	return &logHandler{l: h.l, attrs: append(append([]slog.Attr(nil), h.attrs...), as...)}
}
func (h *logHandler) WithGroup(string) slog.Handler { return h }

// counter counts deliveries per offset.
type counter struct {
	mu sync.Mutex
	n  map[int64]int
}

func (c *counter) add(off int64) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.n == nil {
		c.n = map[int64]int{}
	}
	c.n[off]++
	return c.n[off]
}

func (c *counter) get(off int64) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.n[off]
}

// Defect 1: under MaxRetries 0, a record given up by consumer A, whose
// dead letter keeps failing when A stops (and releases it), is not handed
// to consumer B's handler again: B gives it up at once, to its action.
func TestReacquiredGivenUpRecordIsNotDeliveredAgain(t *testing.T) {
	const topic, group = "orders", "g"
	addrs := cluster(t, topic, 1, 5*time.Second, 5)
	kafkatest.Produce(t, addrs, topic, 0, 0, 1)
	var calls counter
	var actA atomic.Int32
	procA, err := stream.NewProcessor(stream.PerRecord(func(ctx context.Context, r *stream.Record) error {
		calls.add(r.Offset)
		return errors.New("bad")
	}), stream.WithExhaustionAction(func(context.Context, *stream.Batch, *checkpoint.ExhaustedError) error {
		actA.Add(1)
		return errors.New("dead letter topic unreachable")
	}), stream.WithOperationBackoff(checkpoint.Fixed(20*time.Millisecond)))
	if err != nil {
		t.Fatal(err)
	}
	stop := run(t, addrs, group, topic, procA, share.WithLanes(1))
	waitFor(t, "A's action tried", func() bool { return actA.Load() > 0 })
	if err := stop(); err != nil {
		t.Fatal(err)
	}

	var given atomic.Pointer[checkpoint.ExhaustedError]
	procB, err := stream.NewProcessor(stream.PerRecord(func(ctx context.Context, r *stream.Record) error {
		calls.add(r.Offset)
		return nil
	}), stream.WithExhaustionAction(func(_ context.Context, _ *stream.Batch, xerr *checkpoint.ExhaustedError) error {
		given.Store(xerr)
		return nil
	}))
	if err != nil {
		t.Fatal(err)
	}
	run(t, addrs, group, topic, procB, share.WithLanes(1))
	waitFor(t, "B's action", func() bool { return given.Load() != nil })
	if n := calls.get(0); n != 1 {
		t.Errorf("the handler got offset 0 %d times, want once (by A only)", n)
	}
	if xerr := given.Load(); xerr.Reason != checkpoint.RetriesSpent {
		t.Errorf("B gave the record up with %v, want retries spent", xerr)
	}
}

// Defect 1: two clean restarts, each during a delivery, under MaxRetries 1
// give no third delivery: the third consumer gives the record up.
func TestCleanRestartsKeepTheRetryBound(t *testing.T) {
	const topic, group = "orders", "g"
	addrs := cluster(t, topic, 1, 5*time.Second, 5)
	kafkatest.Produce(t, addrs, topic, 0, 0, 1)
	var calls counter
	entered := make(chan struct{}, 4)
	handler := stream.PerRecord(func(ctx context.Context, r *stream.Record) error {
		calls.add(r.Offset)
		entered <- struct{}{}
		<-ctx.Done() // in the handler at shutdown
		return ctx.Err()
	})
	var given atomic.Int32
	newProc := func() *stream.Processor {
		p, err := stream.NewProcessor(handler, stream.WithPolicy(checkpoint.Policy{MaxRetries: 1, Backoff: checkpoint.Fixed(10 * time.Millisecond)}),
			stream.WithExhaustionAction(func(context.Context, *stream.Batch, *checkpoint.ExhaustedError) error {
				given.Add(1)
				return nil
			}))
		if err != nil {
			t.Fatal(err)
		}
		return p
	}
	for i := range 2 {
		stop := run(t, addrs, group, topic, newProc(), share.WithLanes(1), share.WithDrain(shortDrain))
		select {
		case <-entered:
		case <-time.After(wait):
			t.Fatalf("restart %d: the handler never got the record", i)
		}
		if err := stop(); err != nil {
			t.Fatal(err)
		}
	}
	run(t, addrs, group, topic, newProc(), share.WithLanes(1))
	waitFor(t, "the record given up", func() bool { return given.Load() > 0 })
	if n := calls.get(0); n != 2 {
		t.Errorf("the handler got the record %d times, want 2 under MaxRetries 1", n)
	}
}

// Defect 1, the other side: a record released because its RetryResult's
// delay is longer than the maximum hold comes back with a higher delivery
// count; that release spends no retry of the policy (MaxRetries 0 here):
// the record is delivered again, as the RetryResult asked.
func TestReleaseForALongRetryResultIsNotAFailure(t *testing.T) {
	const topic, group = "orders", "g"
	addrs := cluster(t, topic, 1, 5*time.Second, 5)
	kafkatest.Produce(t, addrs, topic, 0, 0, 1)
	var calls counter
	var retries sync.Map
	var given atomic.Int32
	proc, err := stream.NewProcessor(stream.PerRecord(func(ctx context.Context, r *stream.Record) error {
		if calls.add(r.Offset) == 1 {
			return &stream.RetryResult{MaxRetries: 2, Delay: time.Second}
		}
		return nil
	}), stream.WithHooks(stream.Hooks{Delivered: func(e stream.DeliveredEvent) {
		retries.Store(e.Attempt.Retries, true)
	}}), stream.WithExhaustionAction(func(context.Context, *stream.Batch, *checkpoint.ExhaustedError) error {
		given.Add(1)
		return nil
	}))
	if err != nil {
		t.Fatal(err)
	}
	run(t, addrs, group, topic, proc, share.WithLanes(1), share.WithMaxHold(10*time.Millisecond))
	waitFor(t, "the second delivery", func() bool { return calls.get(0) >= 2 })
	time.Sleep(200 * time.Millisecond) //nolint:forbidigo // would it be given up?
	if given.Load() != 0 {
		t.Errorf("the record was given up after a release for its RetryResult")
	}
	if _, ok := retries.Load(1); !ok {
		t.Errorf("the second delivery was not Retry 1")
	}
}

// Defect 2: at shutdown, a record given up whose action keeps failing, at
// the broker's last delivery, is not archived in silence: an Error line
// names it.
func TestShutdownAtTheLastDeliveryIsLogged(t *testing.T) {
	const topic, group = "orders", "g"
	addrs := cluster(t, topic, 1, 5*time.Second, 2)
	kafkatest.Produce(t, addrs, topic, 0, 0, 1)
	var tried atomic.Int32
	failing := func(context.Context, *stream.Batch, *checkpoint.ExhaustedError) error {
		tried.Add(1)
		return errors.New("dead letter topic unreachable")
	}
	newProc := func() *stream.Processor {
		p, err := stream.NewProcessor(stream.PerRecord(func(context.Context, *stream.Record) error { return errors.New("bad") }),
			stream.WithExhaustionAction(failing), stream.WithOperationBackoff(checkpoint.Fixed(20*time.Millisecond)),
			stream.WithPolicy(checkpoint.Policy{MaxRetries: 5, Backoff: checkpoint.Fixed(time.Millisecond)}))
		if err != nil {
			t.Fatal(err)
		}
		return p
	}
	// A: delivery 1, given up after its retries, the action failing.
	stop := run(t, addrs, group, topic, newProc(), share.WithLanes(1))
	waitFor(t, "A's action tried", func() bool { return tried.Load() > 0 })
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	// B: delivery 2, the limit.
	tried.Store(0)
	var l logs
	stop = run(t, addrs, group, topic, newProc(), share.WithLanes(1), share.WithLogger(slog.New(l.handler())))
	waitFor(t, "B's action tried", func() bool { return tried.Load() > 0 })
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	if !l.find(slog.LevelError, "archives it", map[string]string{"offset": "0", "topic": topic}) {
		l.dump(t)
		t.Error("no Error line names the record released at shutdown at its last delivery")
	}
}

// Defect 3: StopPartition in share mode: the Stopped hook fires,
// Processor.Stopped lists the record (its offset, Record set), and Skip
// and ResumeRecord reach it.
func TestStopPartitionHoldsARecordVisibly(t *testing.T) {
	const topic, group = "orders", "g"
	addrs := cluster(t, topic, 1, 5*time.Second, 5)
	kafkatest.Produce(t, addrs, topic, 0, 0, 3)
	var calls counter
	stopped := make(chan stream.StoppedEvent, 4)
	proc, err := stream.NewProcessor(stream.PerRecord(func(ctx context.Context, r *stream.Record) error {
		if calls.add(r.Offset) == 1 && r.Offset != 1 {
			return errors.New("bad")
		}
		return nil
	}), stream.WithExhaustionAction(stream.StopPartition), stream.WithHooks(stream.Hooks{Stopped: func(e stream.StoppedEvent) { stopped <- e }}))
	if err != nil {
		t.Fatal(err)
	}
	var events sync.Map
	run(t, addrs, group, topic, proc, share.WithLanes(1), share.WithEvents(func(e share.Event) {
		if e.Kind == share.Rejected || e.Kind == share.Accepted {
			events.Store(e.Offset, e.Kind)
		}
	}))
	for range 2 {
		select {
		case <-stopped:
		case <-time.After(wait):
			t.Fatal("the Stopped hook never fired")
		}
	}
	sp := proc.Stopped()
	if len(sp) != 2 || !sp[0].Record || sp[0].FirstOffset != 0 || sp[1].FirstOffset != 2 {
		t.Fatalf("Stopped() = %+v, want the records at offsets 0 and 2", sp)
	}
	ctx := context.Background()
	if err := proc.Skip(ctx, topic, 0); err == nil || !strings.Contains(err.Error(), "ResumeRecord") {
		t.Errorf("Skip of a partition with two records held: %v, want an error naming ResumeRecord", err)
	}
	if err := proc.SkipRecord(ctx, topic, 0, 0); err != nil {
		t.Fatalf("SkipRecord: %v", err)
	}
	if err := proc.Resume(ctx, topic, 0); err != nil { // the only one left: offset 2
		t.Fatalf("Resume: %v", err)
	}
	waitFor(t, "offset 0 rejected and 2 accepted", func() bool {
		k0, _ := events.Load(int64(0))
		k2, _ := events.Load(int64(2))
		return k0 == share.Rejected && k2 == share.Accepted
	})
	if n := calls.get(2); n != 2 {
		t.Errorf("offset 2 delivered %d times, want 2 (resumed)", n)
	}
}

// Defect 4: ActionTried fires for a record given up; at shutdown, a
// record in a handler call is reported Delivered (cancelled) and
// Abandoned.
func TestShareHooks(t *testing.T) {
	const topic, group = "orders", "g"
	addrs := cluster(t, topic, 1, 5*time.Second, 5)
	kafkatest.Produce(t, addrs, topic, 0, 0, 2)
	var tried, abandoned, cancelled atomic.Int32
	entered := make(chan struct{}, 2)
	proc, err := stream.NewProcessor(stream.PerRecord(func(ctx context.Context, r *stream.Record) error {
		if r.Offset == 0 {
			return errors.New("bad")
		}
		entered <- struct{}{}
		<-ctx.Done()
		return ctx.Err()
	}), stream.WithHooks(stream.Hooks{
		ActionTried: func(stream.ActionEvent) { tried.Add(1) },
		Abandoned: func(e stream.AbandonedEvent) {
			if e.FirstOffset == 1 {
				abandoned.Add(1)
			}
		},
		Delivered: func(e stream.DeliveredEvent) {
			if e.Outcome == stream.Cancelled && e.FirstOffset == 1 {
				cancelled.Add(1)
			}
		},
	}))
	if err != nil {
		t.Fatal(err)
	}
	stop := run(t, addrs, group, topic, proc, share.WithLanes(1), share.WithDrain(shortDrain))
	<-entered
	waitFor(t, "ActionTried", func() bool { return tried.Load() > 0 })
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	if abandoned.Load() != 1 || cancelled.Load() != 1 {
		t.Errorf("at shutdown: %d Abandoned, %d Delivered cancelled for offset 1, want 1 each", abandoned.Load(), cancelled.Load())
	}
}

// Defect 5: an outage budget, which share mode cannot apply, is refused
// by New with the reason.
func TestOutageBudgetRefused(t *testing.T) {
	b, err := stream.NewBudget(stream.BudgetConfig{})
	if err != nil {
		t.Fatal(err)
	}
	proc, err := stream.NewProcessor(stream.PerRecord(func(context.Context, *stream.Record) error { return nil }), stream.WithOutageBudget(b))
	if err != nil {
		t.Fatal(err)
	}
	_, err = share.New(proc, share.WithKgoOptions(kgo.SeedBrokers("127.0.0.1:1"), kgo.ShareGroup("g"), kgo.ConsumeTopics("t")))
	if err == nil || !strings.Contains(err.Error(), "outage budget") {
		t.Fatalf("New with an outage budget: %v, want an error about the budget", err)
	}
}

// Defect 7: a dead letter written has its log line, on the consumer's
// logger; defect 8: a give-up at the broker's delivery limit says so.
func TestDeadLetterLoggedAndDeliveryLimitReason(t *testing.T) {
	const topic, group, dlq = "orders", "g", "orders.dlq"
	addrs := cluster(t, topic, 1, 5*time.Second, 2, kfake.SeedTopics(1, dlq))
	pubcl, err := kgo.NewClient(kgo.SeedBrokers(addrs...))
	if err != nil {
		t.Fatal(err)
	}
	defer pubcl.Close()
	fp, err := franz.NewPublisher(pubcl)
	if err != nil {
		t.Fatal(err)
	}
	kafkatest.Produce(t, addrs, topic, 0, 0, 1)
	var given atomic.Pointer[checkpoint.ExhaustedError]
	proc, err := stream.NewProcessor(stream.PerRecord(func(context.Context, *stream.Record) error { return errors.New("timeout") }),
		stream.WithPolicy(checkpoint.Policy{MaxRetries: 5, Backoff: checkpoint.Fixed(time.Minute)}),
		stream.WithExhaustionAction(mustDeadLetter(fp, dlq)),
		stream.WithHooks(stream.Hooks{Exhausted: func(e stream.ExhaustedEvent) { given.Store(e.Err) }}))
	if err != nil {
		t.Fatal(err)
	}
	var l logs
	// A retry a minute away is not held (max hold 10ms): released, and at
	// the second delivery (the limit, 2) given up.
	run(t, addrs, group, topic, proc, share.WithLanes(1), share.WithMaxHold(10*time.Millisecond), share.WithLogger(slog.New(l.handler())))
	consumeAll(t, addrs, dlq, 1)
	waitFor(t, "the dead letter's log line", func() bool {
		return l.find(slog.LevelInfo, "dead-lettered", map[string]string{"offset": "0", "dead_letter_topic": dlq})
	})
	xerr := given.Load()
	if xerr == nil || xerr.Reason != checkpoint.DeliveryLimitReached || !strings.Contains(xerr.Error(), "delivery count limit") {
		t.Errorf("given up with %v, want the broker's delivery limit as the reason", xerr)
	}
}

// After a cancel (a shutdown), the per-record handler is not called for
// the records of the call that are left.
func TestNoCallsAfterCancel(t *testing.T) {
	const topic, group = "orders", "g"
	addrs := cluster(t, topic, 1, 5*time.Second, 5)
	kafkatest.Produce(t, addrs, topic, 0, 0, 3)
	entered := make(chan struct{}, 1)
	var late atomic.Int32
	proc, err := stream.NewProcessor(stream.PerRecord(func(ctx context.Context, r *stream.Record) error {
		if ctx.Err() != nil {
			late.Add(1)
			return ctx.Err()
		}
		if r.Offset == 0 {
			entered <- struct{}{}
			<-ctx.Done()
			return ctx.Err()
		}
		return nil
	}))
	if err != nil {
		t.Fatal(err)
	}
	stop := run(t, addrs, group, topic, proc, share.WithLanes(1), share.WithDrain(shortDrain))
	<-entered
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	if n := late.Load(); n != 0 {
		t.Errorf("the handler was called %d times with its context done, want 0", n)
	}
}

var _ = fmt.Sprint
