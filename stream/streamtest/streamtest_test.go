package streamtest_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/redeliver-go/redeliver/stream"
	"github.com/redeliver-go/redeliver/stream/streamtest"
)

func TestPartitionFetchCommitRevoke(t *testing.T) {
	ctx, cancel := context.WithTimeout(t.Context(), 5*time.Second)
	defer cancel()
	p := streamtest.NewPartition("t", 3, 4)
	if end := p.AppendN(time.Time{}, 6); end != 6 {
		t.Fatalf("AppendN returned %d", end)
	}
	// Not owned: Fetch and Commit refuse, saying how to give it an owner,
	// also to a Processor's Process called on it directly.
	if _, err := p.Fetch(ctx); !errors.Is(err, stream.ErrRevoked) || !strings.Contains(err.Error(), "process it with streamtest.Run") {
		t.Fatalf("fetch of an unowned partition: %v", err)
	}
	if err := p.Commit(ctx, 0, ""); !errors.Is(err, stream.ErrRevoked) || !strings.Contains(err.Error(), "process it with streamtest.Run") {
		t.Fatalf("commit to an unowned partition: %v", err)
	}
	direct, err := stream.NewProcessor(stream.HandlerFunc(func(context.Context, *stream.Batch) error { return nil }))
	if err != nil {
		t.Fatal(err)
	}
	if err := direct.Process(ctx, p); !strings.Contains(err.Error(), "process it with streamtest.Run") {
		t.Fatalf("Process on a partition Run did not give: %v", err)
	}
	got := make(chan []stream.Record, 2)
	proc, err := stream.NewProcessor(stream.HandlerFunc(func(_ context.Context, b *stream.Batch) error {
		got <- append([]stream.Record(nil), b.Records...)
		return nil
	}))
	if err != nil {
		t.Fatal(err)
	}
	rctx, rcancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- streamtest.Run(rctx, proc, p) }()
	if err := p.WaitCommitted(ctx, 6); err != nil {
		t.Fatal(err)
	}
	b1, b2 := <-got, <-got
	if len(b1) != 4 || len(b2) != 2 || b1[0].Offset != 0 || b2[0].Offset != 4 || string(b2[1].Value) != "5" || b2[1].Partition != 3 {
		t.Fatalf("batches %v %v", b1, b2)
	}
	p.Revoke()
	if err := <-done; err != nil {
		t.Fatalf("Run after revoke: %v", err)
	}
	rcancel()
	if err := p.Commit(ctx, 6, ""); err != stream.ErrRevoked {
		t.Fatalf("commit after revoke: %v, want stream.ErrRevoked", err)
	}
	// WaitCommitted honours its context.
	short, scancel := context.WithTimeout(ctx, 10*time.Millisecond)
	defer scancel()
	if err := p.WaitCommitted(short, 7); err == nil {
		t.Fatal("WaitCommitted for an offset never committed returned nil")
	}
}

func TestClockFiresDueTimersOnly(t *testing.T) {
	start := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	c := streamtest.NewClock(start)
	a, _ := c.NewTimer(time.Second)
	b, stopB := c.NewTimer(3 * time.Second)
	z, _ := c.NewTimer(0)
	select {
	case <-z:
	default:
		t.Fatal("zero timer did not fire at once")
	}
	if c.Timers() != 2 {
		t.Fatalf("%d timers pending", c.Timers())
	}
	c.Advance(2 * time.Second)
	select {
	case at := <-a:
		if !at.Equal(start.Add(2 * time.Second)) {
			t.Fatalf("fired at %v", at)
		}
	default:
		t.Fatal("due timer did not fire")
	}
	select {
	case <-b:
		t.Fatal("timer fired early")
	default:
	}
	if !stopB() || c.Timers() != 0 {
		t.Fatal("stop did not remove the timer")
	}
	c.Advance(time.Hour)
	select {
	case <-b:
		t.Fatal("stopped timer fired")
	default:
	}
}

func TestFailFirst(t *testing.T) {
	h := streamtest.FailFirst(2, nil)(streamtest.Succeed)
	b := &stream.Batch{Records: make([]stream.Record, 1)}
	for retry, want := range []bool{true, true, false} {
		b.Attempt.Retries = retry
		if err := h.Handle(context.Background(), b); (err != nil) != want || (err != nil && !errors.Is(err, streamtest.ErrInjected)) {
			t.Fatalf("retry %d: %v", retry, err)
		}
	}
}
