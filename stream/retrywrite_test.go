package stream_test

import (
	"context"
	"errors"
	"log/slog"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/redeliver-go/redeliver/stream"
)

// slowClaim is a partition of 5 records whose every commit takes latency
// to be written.
type slowClaim struct {
	latency time.Duration
	mu      sync.Mutex
	fetched bool
	mds     []string // the commits' metadata
}

func (c *slowClaim) Topic() string              { return "t" }
func (c *slowClaim) Partition() int32           { return 0 }
func (c *slowClaim) Committed() (int64, string) { return -1, "" }
func (c *slowClaim) Pause()                     {}
func (c *slowClaim) Resume()                    {}

func (c *slowClaim) Fetch(ctx context.Context) ([]stream.Record, error) {
	c.mu.Lock()
	first := !c.fetched
	c.fetched = true
	c.mu.Unlock()
	if !first {
		<-ctx.Done()
		return nil, ctx.Err()
	}
	recs := make([]stream.Record, 5)
	for i := range recs {
		recs[i] = stream.Record{Topic: "t", Offset: int64(i), Timestamp: time.Now()}
	}
	return recs, nil
}

func (c *slowClaim) Commit(_ context.Context, _ int64, metadata string) error {
	time.Sleep(c.latency)
	c.mu.Lock()
	c.mds = append(c.mds, metadata)
	c.mu.Unlock()
	return nil
}

// A failed batch's retry state is written while its backoff runs: the
// retry is delivered at the later of the backoff's end and that write's,
// plus the started mark written after it, never after the backoff and
// both writes one after the other.
func TestRetryStateWrittenDuringTheBackoff(t *testing.T) {
	const backoff = 10 * time.Millisecond
	for _, c := range []struct {
		name    string
		latency time.Duration
		want    time.Duration // from the failure to the retry's delivery
	}{
		{"commit shorter than the backoff", 4 * time.Millisecond, backoff + 4*time.Millisecond},
		{"commit longer than the backoff", 15 * time.Millisecond, 2 * 15 * time.Millisecond},
	} {
		t.Run(c.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				claim := &slowClaim{latency: c.latency}
				var (
					mu  sync.Mutex
					at  []time.Time // of the deliveries
					end = make(chan struct{})
				)
				h := stream.HandlerFunc(func(_ context.Context, b *stream.Batch) error {
					mu.Lock()
					defer mu.Unlock()
					at = append(at, time.Now())
					if b.Attempt.Retries == 0 {
						return errors.New("fails once")
					}
					close(end)
					return nil
				})
				proc, err := stream.NewProcessor(h, fixed(3, backoff), stream.WithLogger(slog.New(slog.DiscardHandler)))
				if err != nil {
					t.Fatal(err)
				}
				ctx, cancel := context.WithCancel(t.Context())
				done := make(chan error, 1)
				go func() { done <- proc.Process(ctx, claim) }()
				<-end
				cancel()
				<-done
				mu.Lock()
				defer mu.Unlock()
				if len(at) != 2 {
					t.Fatalf("%d deliveries, want 2", len(at))
				}
				if got := at[1].Sub(at[0]); got != c.want {
					t.Fatalf("the retry was delivered %v after the failure, want %v (backoff %v, commits of %v)", got, c.want, backoff, c.latency)
				}
				claim.mu.Lock()
				defer claim.mu.Unlock()
				if len(claim.mds) < 2 || claim.mds[0] == "" || claim.mds[1] == "" {
					t.Fatalf("commits' metadata %q, want the retry state, then the started mark", claim.mds)
				}
			})
		})
	}
}
