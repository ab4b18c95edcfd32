package streamtest_test

import (
	"context"
	"testing"
	"time"

	"github.com/redeliver-go/redeliver/stream"
	"github.com/redeliver-go/redeliver/stream/streamtest"
)

// The package's constructors and zero values, given nil and zero values,
// work or return errors; none panics.
func TestZeroAndNilValues(t *testing.T) {
	ctx, cancel := context.WithTimeout(t.Context(), 5*time.Second)
	defer cancel()
	var p streamtest.Partition
	p.Append(time.Time{}, "a")
	if p.End() != 1 {
		t.Fatal("Append to a zero Partition")
	}
	proc, err := stream.NewProcessor(streamtest.Succeed)
	if err != nil {
		t.Fatal(err)
	}
	rctx, rcancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- streamtest.Run(rctx, proc, &p) }()
	if err := p.WaitCommitted(ctx, 1); err != nil {
		t.Fatalf("a zero Partition: %v", err)
	}
	rcancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if err := streamtest.Run(ctx, nil, streamtest.NewPartition("t", 0, 0)); err == nil {
		t.Error("Run with a nil processor: nil")
	}
	if err := streamtest.Run(ctx, proc, nil); err == nil {
		t.Error("Run of a nil partition: nil")
	}
	np := streamtest.NewPartition("", 0, -5) // batches of one record
	np.AppendN(time.Time{}, 0)

	var c streamtest.Clock
	ch, stop := c.NewTimer(time.Second)
	c.Advance(time.Second)
	select {
	case <-ch:
	default:
		t.Error("a zero Clock's timer did not fire")
	}
	stop()
	if err := c.WaitTimers(ctx, 0); err != nil {
		t.Error(err)
	}

	var g streamtest.Generator
	select {
	case <-g.Done():
	default:
		t.Error("a zero Generator is not done")
	}
	_ = g.Commit(ctx, 0, "")
	g2 := streamtest.NewGenerator(0, 0, 0)
	_ = g2.Commit(ctx, 0, "")

	var r streamtest.Recorder
	if len(r.Deliveries()) != 0 || len(r.Of("t", 0)) != 0 {
		t.Error("a zero Recorder")
	}
	_ = streamtest.FailFirst(0, nil)(streamtest.Succeed)
	var h streamtest.History
	if rep := h.Check(nil); len(rep.Violations) != 0 {
		t.Errorf("a zero History: %v", rep.Violations)
	}
	if err := h.Publisher(nil).Publish(ctx, "dlq", nil); err != nil {
		t.Error(err)
	}
	_ = streamtest.DeadLetteredEvent(stream.Record{})
	var sh streamtest.ShareHistory
	_ = sh.Check(nil)
}
