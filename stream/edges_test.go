package stream_test

import (
	"context"
	"errors"
	"fmt"
	"math"
	"strconv"
	"testing"
	"testing/synctest"
	"time"

	"github.com/redeliver-go/redeliver/checkpoint"
	"github.com/redeliver-go/redeliver/internal/retrystate"
	"github.com/redeliver-go/redeliver/stream"
	"github.com/redeliver-go/redeliver/stream/streamtest"
)

// A RetryResult with the largest count a handler can ask for is committed
// as metadata the next owner reads: its count goes on after a move
// instead of starting over.
func TestRetryResultOfTheLargestCountSurvivesAMove(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p := streamtest.NewPartition("t", 0, 5)
		p.AppendN(time.Now(), 5)
		h := stream.HandlerFunc(func(_ context.Context, b *stream.Batch) error {
			if b.Attempt.Retries < 2 {
				return stream.Retry(math.MaxInt, time.Hour)
			}
			return nil
		})
		revoke := stream.Hooks{Checkpointed: func(e stream.CheckpointEvent) {
			if e.Metadata != "" { // the state of retry 1, scheduled an hour ahead
				p.Revoke()
			}
		}}
		a := start(t, h, []*streamtest.Partition{p}, fixed(0, 0), stream.WithHooks(revoke))
		if err := <-a.done; err != nil {
			t.Fatal(err)
		}
		_, md := p.Committed()
		if _, err := retrystate.DecodeState(md); err != nil {
			t.Fatalf("committed %q, which the next owner cannot read: %v", md, err)
		}
		b := start(t, h, []*streamtest.Partition{p}, fixed(0, 0))
		b.waitAll()
		b.stop()
		ds := b.rec.Deliveries()
		if len(ds) == 0 || ds[0].Attempt.Retries != 1 || ds[0].Attempt.MaxRetries != math.MaxInt {
			t.Fatalf("next owner's deliveries %+v, want retry 1 of the RetryResult's %d", ds, math.MaxInt)
		}
	})
}

// An infinite policy that has retried 2^31 times and more still reads its
// count back.
func TestInfiniteCountPast2To31(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p := streamtest.NewPartition("t", 0, 5)
		p.AppendN(time.Now(), 5)
		const n = 1<<31 + 5
		p.SetCheckpoint(0, "rd1;o=0;r="+strconv.Itoa(n)+";f="+itoa(time.Now().UnixMilli())+";d=1000;s=1")
		hs := start(t, streamtest.Succeed, []*streamtest.Partition{p}, fixed(checkpoint.Infinite, time.Second))
		hs.waitAll()
		hs.stop()
		if ds := hs.rec.Deliveries(); len(ds) != 1 || ds[0].Attempt.Retries != n+1 {
			t.Fatalf("deliveries %+v, want retry %d", ds, n+1)
		}
	})
}

// retryRequestOf reads a result as the Processor does: a retry request alone, wrapped or joined with others is one;
// a failure beside it, Permanent and an invalid RetryResult are failures.
func TestRetryRequestOf(t *testing.T) {
	boom := errors.New("boom")
	rr := stream.Retry(2, time.Second)
	for _, tt := range []struct {
		name    string
		err     error
		request bool
		failure string // the failure to apply instead, when no request
	}{
		{"nil", nil, false, ""},
		{"a failure", boom, false, "boom"},
		{"a retry request", rr, true, ""},
		{"wrapped", fmt.Errorf("busy: %w", rr), true, ""},
		{"joined with another request", errors.Join(rr, stream.Retry(1, 0)), true, ""},
		{"at a record", stream.FailedAt(2, rr), true, ""},
		{"beside a failure", errors.Join(boom, rr), false, "boom\n" + rr.Error()},
		{"marked Permanent", checkpoint.Permanent(rr), false, rr.Error()},
		{"invalid", stream.Retry(-5, 0), false, "stream: invalid RetryResult: MaxRetries -5, want -1 (no limit) or more"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			got, failure := stream.RetryRequestOf(tt.err)
			if (got != nil) != tt.request {
				t.Fatalf("request %v, want %v", got, tt.request)
			}
			msg := ""
			if failure != nil {
				msg = failure.Error()
			}
			if msg != tt.failure {
				t.Fatalf("failure %q, want %q", msg, tt.failure)
			}
		})
	}
}
