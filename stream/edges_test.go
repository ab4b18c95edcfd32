package stream_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
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

// A handler that reslices its batch's records, or sets them to nil, does
// not change what the engine commits or delivers again: every delivery
// gets the batch whole, a retry the same records, and the checkpoint
// reaches the end.
func TestHandlerThatClearsItsRecords(t *testing.T) {
	for _, fails := range []string{"never", "error", "panic"} {
		t.Run(fails, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				var firsts []int64
				h := stream.HandlerFunc(func(_ context.Context, b *stream.Batch) error {
					if len(b.Records) != 5 {
						t.Errorf("delivery %d: %d records, want 5", len(firsts)+1, len(b.Records))
					}
					firsts = append(firsts, b.FirstOffset())
					retry := b.Attempt.Retries == 0 && b.FirstOffset() == 5
					b.Records = b.Records[:0]
					switch {
					case retry && fails == "error":
						b.Records = nil
						return errors.New("down")
					case retry && fails == "panic":
						panic("down")
					}
					return nil
				})
				proc, err := stream.NewProcessor(h, stream.WithInMemoryState(),
					stream.WithLogger(slog.New(slog.DiscardHandler)),
					stream.WithPolicy(checkpoint.Policy{MaxRetries: 3, Backoff: checkpoint.Fixed(time.Second)}))
				if err != nil {
					t.Fatal(err)
				}
				ctx, cancel := context.WithCancel(t.Context())
				defer cancel()
				g := streamtest.NewGenerator(3, 5, 1)
				go func() { <-g.Done(); cancel() }()
				if err := proc.Process(ctx, g); !errors.Is(err, context.Canceled) {
					t.Fatalf("Process: %v", err)
				}
				want := []int64{0, 5, 10}
				if fails != "never" {
					want = []int64{0, 5, 5, 10}
				}
				if fmt.Sprint(firsts) != fmt.Sprint(want) {
					t.Errorf("deliveries began at %v, want %v", firsts, want)
				}
				if last, _ := g.Committed(); last != 15 {
					t.Errorf("committed %d, want 15", last)
				}
			})
		})
	}
}
