package stream_test

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/redeliver-go/redeliver/checkpoint"
	"github.com/redeliver-go/redeliver/stream"
	"github.com/redeliver-go/redeliver/stream/streamtest"
)

// A handler that is nil in any form is refused with an error that names
// it; so is a nil option or a nil value inside one. Nothing panics.
func TestNewProcessorRefusesNilAndZeroValues(t *testing.T) {
	ok := streamtest.Succeed
	var nilFunc stream.HandlerFunc
	var nilPtr *ptrHandler
	var nilOpt stream.Option
	for _, tc := range []struct {
		name string
		h    stream.Handler
		opts []stream.Option
		want string
	}{
		{"nil Handler", nil, nil, "nil handler"},
		{"nil HandlerFunc", nilFunc, nil, "nil handler (a nil stream.HandlerFunc)"},
		{"PerRecord(nil)", stream.PerRecord(nil), nil, "nil handler"},
		{"nil pointer", nilPtr, nil, "nil handler (a nil *stream_test.ptrHandler)"},
		{"Chain(nil)", stream.Chain(nil, (&streamtest.Recorder{}).Middleware()), nil, "nil handler"},
		{"a nil option", ok, []stream.Option{nil}, "option 1 is nil"},
		{"a nil option interface", ok, []stream.Option{stream.WithPolicy(checkpoint.Policy{}), nilOpt}, "option 2 is nil"},
		{"WithClock(nil)", ok, []stream.Option{stream.WithClock(nil)}, "WithClock(nil)"},
		{"WithClock of a nil pointer", ok, []stream.Option{stream.WithClock((*streamtest.Clock)(nil))}, "WithClock(nil)"},
		{"WithRand(nil)", ok, []stream.Option{stream.WithRand(nil)}, "WithRand(nil)"},
		{"WithOperationBackoff(nil)", ok, []stream.Option{stream.WithOperationBackoff(nil)}, "WithOperationBackoff(nil)"},
		{"a zero Budget", ok, []stream.Option{stream.WithOutageBudget(&stream.Budget{})}, "not made by NewBudget"},
		{"WithExhaustionAction(nil)", ok, []stream.Option{stream.WithExhaustionAction(nil)}, "WithExhaustionAction(nil): give an action"},
		{"a bad policy", ok, []stream.Option{stream.WithPolicy(checkpoint.Policy{MaxRetries: -2})}, "MaxRetries is -2"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p, err := stream.NewProcessor(tc.h, tc.opts...)
			if err == nil || p != nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("NewProcessor: %v, %v; want an error with %q", p, err, tc.want)
			}
		})
	}
	// Nil values that mean "the default" are accepted.
	for _, opt := range []stream.Option{stream.WithLogger(nil), stream.WithHooks(stream.Hooks{}),
		stream.WithOutageBudget(nil), stream.WithRand(func() checkpoint.Rand { return nil }), stream.WithPolicy(checkpoint.Policy{})} {
		if _, err := stream.NewProcessor(ok, opt); err != nil {
			t.Errorf("NewProcessor with a default-meaning option: %v", err)
		}
	}
}

type ptrHandler struct{}

func (*ptrHandler) Handle(context.Context, *stream.Batch) error { return nil }

// The zero Processor, a nil claim and a nil context give errors, not
// panics; so do the exported constructors of the package with nil and
// zero values.
func TestZeroValuesOfStream(t *testing.T) {
	var zero stream.Processor
	if err := zero.Process(context.Background(), streamtest.NewPartition("t", 0, 1)); err == nil {
		t.Error("Process on a zero Processor: nil")
	}
	if zero.Logger() == nil || len(zero.Stopped()) != 0 || zero.Skip(context.Background(), "t", 0) == nil || zero.Resume(context.Background(), "t", 0) == nil {
		t.Error("a zero Processor's Logger, Stopped, Skip or Resume")
	}
	var nilProc *stream.Processor
	if err := nilProc.Process(context.Background(), streamtest.NewPartition("t", 0, 1)); err == nil {
		t.Error("Process on a nil Processor: nil")
	}
	if len(nilProc.Stopped()) != 0 || nilProc.Skip(context.Background(), "t", 0) == nil || nilProc.Resume(context.Background(), "t", 0) == nil {
		t.Error("a nil Processor's Stopped, Skip or Resume")
	}
	proc, err := stream.NewProcessor(streamtest.Succeed)
	if err != nil {
		t.Fatal(err)
	}
	//lint:ignore SA1012 the point of the check
	if err := proc.Skip(nil, "t", 0); err == nil || !strings.Contains(err.Error(), "nil context") { //nolint:staticcheck
		t.Errorf("Skip with a nil context: %v", err)
	}
	if err := proc.Process(context.Background(), nil); err == nil {
		t.Error("Process of a nil claim: nil")
	}
	var nilPart *streamtest.Partition
	if err := proc.Process(context.Background(), nilPart); err == nil {
		t.Error("Process of a nil *Partition: nil")
	}
	//lint:ignore SA1012 the point of the check
	if err := proc.Process(nil, streamtest.NewPartition("t", 0, 1)); err == nil { //nolint:staticcheck
		t.Error("Process with a nil context: nil")
	}
	if _, err := stream.DeadLetter(nil, "dlq"); err == nil {
		t.Error("DeadLetter(nil, ...): nil")
	}
	if _, err := stream.DeadLetter((*memPublisher)(nil), "dlq"); err == nil {
		t.Error("DeadLetter of a nil pointer: nil")
	}
	if _, err := stream.DeadLetter(&memPublisher{}, ""); err == nil {
		t.Error("DeadLetter with no topic: nil")
	}
	for _, cfg := range []stream.BudgetConfig{{MaxTokens: -1}, {TokenRatio: -1}, {MinPartitions: 1}} {
		if _, err := stream.NewBudget(cfg); err == nil {
			t.Errorf("NewBudget(%+v): nil", cfg)
		}
	}
	var b stream.Budget
	if s := b.State(); s.Outage {
		t.Errorf("a zero Budget's state %+v", s)
	}
	if checkpoint.Permanent(nil) != nil || stream.Chain(nil) != nil {
		t.Error("Permanent(nil) or Chain(nil) is not nil")
	}
	if h := stream.Chain(streamtest.Succeed, nil); h == nil {
		t.Error("Chain with a nil middleware")
	}
	if stream.IsStop(nil) {
		t.Error("IsStop(nil)")
	}
	_ = stream.MergeHooks()
	_ = stream.MergeHooks(stream.Hooks{}, stream.Hooks{})
}

// The accessors of a batch with no records, of a nil Batch, of a nil
// Processor and of a nil Budget (what WithOutageBudget(nil) gives: no
// budget) answer instead of panicking: a handler's unit test that calls
// FirstOffset on a Batch it built empty, or a status read of a processor
// or budget a program never made.
func TestAccessorsOfEmptyAndNilValues(t *testing.T) {
	var empty stream.Batch
	var nilBatch *stream.Batch
	for name, got := range map[string]int64{
		"empty FirstOffset": empty.FirstOffset(), "empty LastOffset": empty.LastOffset(),
		"nil FirstOffset": nilBatch.FirstOffset(), "nil LastOffset": nilBatch.LastOffset(),
	} {
		if got != -1 {
			t.Errorf("a batch with no records: %s = %d, want -1", name, got)
		}
	}
	one := stream.Batch{Records: []stream.Record{{Offset: 7}, {Offset: 9}}}
	if one.FirstOffset() != 7 || one.LastOffset() != 9 {
		t.Errorf("FirstOffset, LastOffset = %d, %d, want 7, 9", one.FirstOffset(), one.LastOffset())
	}
	var nilProc *stream.Processor
	if p := nilProc.Policy(); p.MaxRetries != 0 || p.Backoff != nil {
		t.Errorf("a nil Processor's Policy = %+v, want the zero Policy", p)
	}
	if nilProc.Clock() == nil || nilProc.OutageBudget() != nil {
		t.Errorf("a nil Processor's Clock, OutageBudget = %v, %v, want the system clock and nil", nilProc.Clock(), nilProc.OutageBudget())
	}
	var zeroProc stream.Processor
	if zeroProc.Clock() == nil {
		t.Error("a zero Processor's Clock is nil; want the system clock")
	}
	var nilBudget *stream.Budget
	if s := nilBudget.State(); s.Outage || s.Tokens != 0 {
		t.Errorf("a nil Budget's State = %+v, want zero", s)
	}
	if c := nilBudget.Config(); c.MaxTokens != 0 {
		t.Errorf("a nil Budget's Config = %+v, want zero", c)
	}
}

// A handler that returns FailedAt(i, nil) fails that record with an error
// that says so, instead of a nil last error.
func TestFailedAtNilError(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p := streamtest.NewPartition("orders", 0, 5)
		p.AppendN(time.Now(), 3)
		var given givenUp
		proc, err := stream.NewProcessor(stream.HandlerFunc(func(context.Context, *stream.Batch) error { return stream.FailedAt(1, nil) }),
			stream.WithExhaustionAction(given.action))
		if err != nil {
			t.Fatal(err)
		}
		if !runParts(t, proc, time.Hour, p) || len(given.errs) == 0 || given.errs[0].Last == nil ||
			!strings.Contains(given.errs[0].Last.Error(), "FailedAt(1, nil)") {
			t.Fatalf("given up %v, want record 1 with an error naming FailedAt(1, nil)", given.got)
		}
	})
}

// With no policy and no logger, a failed batch is given up loudly: an
// Error line through slog.Default() (read when it is logged, so a default
// set after NewProcessor is heard) and the Exhausted hook; Info lines are
// not sent. It was given up in silence.
func TestNoPolicyGivesUpLoudly(t *testing.T) {
	var buf bytes.Buffer
	var mu sync.Mutex
	prev := slog.Default()
	defer slog.SetDefault(prev)
	synctest.Test(t, func(t *testing.T) {
		p := streamtest.NewPartition("orders", 0, 5)
		p.AppendN(time.Now(), 3)
		var exhausted []stream.ExhaustedEvent
		proc, err := stream.NewProcessor(stream.HandlerFunc(func(context.Context, *stream.Batch) error { return errors.New("db down") }),
			stream.WithHooks(stream.Hooks{Exhausted: func(e stream.ExhaustedEvent) { exhausted = append(exhausted, e) }}))
		if err != nil {
			t.Fatal(err)
		}
		slog.SetDefault(slog.New(slog.NewTextHandler(&lockedWriter{mu: &mu, w: &buf}, &slog.HandlerOptions{Level: slog.LevelDebug})))
		if !runParts(t, proc, time.Hour, p) {
			t.Fatal("not done")
		}
		mu.Lock()
		out := buf.String()
		mu.Unlock()
		if len(exhausted) != 1 || !strings.Contains(out, "level=ERROR") || !strings.Contains(out, "batch given up") ||
			!strings.Contains(out, "db down") || !strings.Contains(out, "topic=orders") || strings.Contains(out, "level=INFO") {
			t.Fatalf("Exhausted events %d, default logger got:\n%s\nwant one give-up at Error level with its topic and error, nothing below Warn", len(exhausted), out)
		}
	})
}

// Processor.DeadLetter reads the publisher and topic of DeadLetter's
// actions, and no other action's, which it never runs.
func TestProcessorDeadLetter(t *testing.T) {
	h := stream.HandlerFunc(func(context.Context, *stream.Batch) error { return nil })
	proc := func(a stream.ExhaustionAction) *stream.Processor {
		t.Helper()
		var opts []stream.Option
		if a != nil {
			opts = append(opts, stream.WithExhaustionAction(a))
		}
		p, err := stream.NewProcessor(h, opts...)
		if err != nil {
			t.Fatal(err)
		}
		return p
	}
	pub := &memPublisher{}
	dl, err := stream.DeadLetter(pub, "orders.dlq")
	if err != nil {
		t.Fatal(err)
	}
	if got, topic, ok := proc(dl).DeadLetter(); !ok || got != pub || topic != "orders.dlq" {
		t.Fatalf("DeadLetter of a processor with DeadLetter(pub, orders.dlq) = %v %q %v", got, topic, ok)
	}
	ran := false
	own := func(context.Context, *stream.Batch, *checkpoint.ExhaustedError) error { ran = true; return nil }
	wrapped := func(ctx context.Context, b *stream.Batch, x *checkpoint.ExhaustedError) error { return dl(ctx, b, x) }
	for _, a := range []stream.ExhaustionAction{nil, own, wrapped, stream.StopPartition} {
		if _, _, ok := proc(a).DeadLetter(); ok || ran {
			t.Fatalf("DeadLetter of a processor with another action: ok %v, ran %v", ok, ran)
		}
	}
	var nilProc *stream.Processor
	if _, _, ok := nilProc.DeadLetter(); ok {
		t.Fatal("a nil Processor has a dead-letter action")
	}
	if pub.calls != 0 {
		t.Fatalf("the publisher was called %d times", pub.calls)
	}
}
