package stream_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/redeliver-go/redeliver/checkpoint"
	"github.com/redeliver-go/redeliver/internal/retrystate"
	"github.com/redeliver-go/redeliver/stream"
)

// endingClaim is a claim of one partition holding three records, whose
// claim ends (its context is cancelled, as an adapter does when the
// partition is revoked or its lease lost) at a chosen point: as its first
// Fetch returns, or as the commit that marks a retry started returns.
type endingClaim struct {
	cancel    context.CancelFunc
	onFetch   bool // end as the first Fetch returns
	onStarted bool // end as a started retry is committed

	mu      sync.Mutex
	fetched bool
}

func (c *endingClaim) Topic() string              { return "t" }
func (c *endingClaim) Partition() int32           { return 0 }
func (c *endingClaim) Committed() (int64, string) { return -1, "" }
func (c *endingClaim) Pause()                     {}
func (c *endingClaim) Resume()                    {}

func (c *endingClaim) Fetch(ctx context.Context) ([]stream.Record, error) {
	c.mu.Lock()
	first := !c.fetched
	c.fetched = true
	c.mu.Unlock()
	if !first {
		<-ctx.Done()
		return nil, ctx.Err()
	}
	if c.onFetch {
		c.cancel()
	}
	return []stream.Record{{Topic: "t", Offset: 0}, {Topic: "t", Offset: 1}, {Topic: "t", Offset: 2}}, nil
}

func (c *endingClaim) Commit(_ context.Context, _ int64, md string) error {
	if s, err := retrystate.DecodeState(md); c.onStarted && err == nil && s.Started {
		c.cancel()
	}
	return nil
}

// The handler is not called for a claim that has ended: not for a batch
// whose claim ended as it was fetched, nor for a retry whose claim ended
// once the retry was marked started. The adapter ended the claim because
// another consumer owns the partition now; that one delivers the batch.
func TestNoDeliveryOnEndedClaim(t *testing.T) {
	for _, tc := range []struct {
		name               string
		onFetch, onStarted bool
		want               int // handler calls
	}{
		{"ended as fetched", true, false, 0},
		{"ended as its retry started", false, true, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				var calls int
				var abandoned []stream.AbandonedEvent
				proc, err := stream.NewProcessor(stream.HandlerFunc(func(ctx context.Context, b *stream.Batch) error {
					calls++
					if ctx.Err() != nil {
						t.Errorf("handler called with its context done (%v), retry %d", ctx.Err(), b.Attempt.Retries)
					}
					return errors.New("downstream unavailable")
				}), stream.WithPolicy(checkpoint.Policy{MaxRetries: 3, Backoff: checkpoint.Fixed(time.Second)}),
					stream.WithHooks(stream.Hooks{Abandoned: func(e stream.AbandonedEvent) { abandoned = append(abandoned, e) }}))
				if err != nil {
					t.Fatal(err)
				}
				ctx, cancel := context.WithCancel(context.Background())
				defer cancel()
				c := &endingClaim{cancel: cancel, onFetch: tc.onFetch, onStarted: tc.onStarted}
				if err := proc.Process(ctx, c); !errors.Is(err, context.Canceled) {
					t.Errorf("Process = %v, want context.Canceled", err)
				}
				if calls != tc.want {
					t.Errorf("handler called %d times, want %d", calls, tc.want)
				}
				if len(abandoned) != 1 || abandoned[0].FirstOffset != 0 {
					t.Errorf("abandoned %+v, want the batch at 0 once", abandoned)
				}
			})
		})
	}
}
