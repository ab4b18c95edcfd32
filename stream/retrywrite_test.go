package stream_test

import (
	"context"
	"errors"
	"log/slog"
	"slices"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/redeliver-go/redeliver/checkpoint"
	"github.com/redeliver-go/redeliver/internal/retrystate"
	"github.com/redeliver-go/redeliver/stream"
	"github.com/redeliver-go/redeliver/stream/streamtest"
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

// retryGaps runs a processor with backoff over claim, whose batch fails
// its first fails deliveries, inside a synctest bubble, and returns the
// time from each delivery to the next.
func retryGaps(t *testing.T, claim stream.Claim, backoff time.Duration, fails int) []time.Duration {
	t.Helper()
	var (
		mu  sync.Mutex
		at  []time.Time // of the deliveries
		end = make(chan struct{})
	)
	h := stream.HandlerFunc(func(_ context.Context, b *stream.Batch) error {
		mu.Lock()
		defer mu.Unlock()
		at = append(at, time.Now())
		if b.Attempt.Retries < fails {
			return errors.New("fails")
		}
		close(end)
		return nil
	})
	proc, err := stream.NewProcessor(h, fixed(fails+2, backoff), stream.WithLogger(slog.New(slog.DiscardHandler)))
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
	var gaps []time.Duration
	for i := 1; i < len(at); i++ {
		gaps = append(gaps, at[i].Sub(at[i-1]))
	}
	return gaps
}

// A failed batch's retry state is written while its backoff runs, and
// its started mark is sent ahead of the retry's due time by what that write
// took and a millisecond of timer slack (at most 10ms): the retry is
// delivered at the backoff's end when the writes fit in it, never after the
// backoff and both writes one after the other, and the mark is never sent
// more than 10ms before the retry is due.
func TestRetryStateWrittenDuringTheBackoff(t *testing.T) {
	for _, c := range []struct {
		name             string
		backoff, latency time.Duration
		want             time.Duration // from the failure to the retry's delivery
	}{
		{"both writes fit in the backoff", 10 * time.Millisecond, 4 * time.Millisecond, 10 * time.Millisecond},
		{"commit longer than the backoff", 10 * time.Millisecond, 15 * time.Millisecond, 2 * 15 * time.Millisecond},
		// A backoff over 10ms: the mark is written once it is over.
		{"a long backoff's mark after it", 100 * time.Millisecond, 50 * time.Millisecond, 150 * time.Millisecond},
		// The state lands at 8ms; the mark is sent at 1ms, 9ms before
		// the retry is due, and lands at 16ms: the lead is never more
		// than 10ms.
		{"the mark's lead is bounded", 10 * time.Millisecond, 8 * time.Millisecond, 16 * time.Millisecond},
	} {
		backoff := c.backoff
		t.Run(c.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				claim := &slowClaim{latency: c.latency}
				gaps := retryGaps(t, claim, backoff, 1)
				if len(gaps) != 1 {
					t.Fatalf("%d deliveries, want 2", len(gaps)+1)
				}
				if got := gaps[0]; got != c.want {
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

// movedClaim is slowClaim's partition with a latency per commit (the last
// for every commit after) and the last commit kept for a next owner.
type movedClaim struct {
	slowClaim
	latencies []time.Duration
	next      int64
	md        string
}

func (c *movedClaim) Committed() (int64, string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.next, c.md
}

func (c *movedClaim) Commit(_ context.Context, next int64, metadata string) error {
	c.mu.Lock()
	d := c.latencies[min(len(c.mds), len(c.latencies)-1)]
	c.mu.Unlock()
	time.Sleep(d)
	c.mu.Lock()
	c.mds = append(c.mds, metadata)
	c.next, c.md = next, metadata
	c.mu.Unlock()
	return nil
}

// Once a write's time is known, a backoff too short for the retry state
// and the started mark one after the other (with the mark's lead: the
// write's time and a millisecond) gets the mark alone, written at once:
// with 6ms commits and a 10ms backoff, the first retry (the time not known
// yet) comes 12ms after its failure (the state lands at 6ms, the mark, sent
// at once, at 12ms), the second 10ms after its failure, the mark alone
// written in its backoff. The third waits 10ms too.
func TestShortBackoffWritesTheMarkAlone(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		claim := &slowClaim{latency: 6 * time.Millisecond}
		got := retryGaps(t, claim, 10*time.Millisecond, 3)
		want := []time.Duration{12 * time.Millisecond, 10 * time.Millisecond, 10 * time.Millisecond}
		if !slices.Equal(got, want) {
			t.Fatalf("retries delivered %v after their failures, want %v", got, want)
		}
		claim.mu.Lock()
		defer claim.mu.Unlock()
		// The state and the mark of the first retry, the marks alone of
		// the next two; the success's commit (coalesced or not) after.
		if len(claim.mds) < 4 {
			t.Fatalf("commits' metadata %q, want 4 retry states before the success", claim.mds)
		}
	})
}

// A move after a started mark landed and before its retry was due (the
// mark is sent ahead by what the retry state took to write and a
// millisecond) counts the retry, which is not delivered: the next owner
// gives the batch up one delivery early, never late. Here the state takes
// 4ms and the mark 2ms with a 10ms backoff: the mark is sent at 5ms and
// lands at 7ms, and the partition moves at 8ms. With one retry allowed, the next owner gives
// the batch up without delivering it: one delivery in all, not three.
func TestMoveAfterTheMarkLandedCountsTheRetry(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		claim := &movedClaim{latencies: []time.Duration{4 * time.Millisecond, 2 * time.Millisecond}, next: -1}
		var f alwaysFails
		h, hooks := stream.HandlerFunc(f.handle), f.hooks()
		first, err := stream.NewProcessor(h, fixed(1, 10*time.Millisecond), hooks, stream.WithLogger(slog.New(slog.DiscardHandler)))
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithCancel(t.Context())
		done := make(chan error, 1)
		go func() { done <- first.Process(ctx, claim) }()
		time.Sleep(8 * time.Millisecond)
		cancel()
		<-done
		claim.mu.Lock()
		mds := append([]string(nil), claim.mds...)
		claim.mu.Unlock()
		if len(mds) != 2 {
			t.Fatalf("commits %q before the move, want the retry state and the started mark", mds)
		}

		// The next owner: the same partition, from what was committed.
		claim.mu.Lock()
		claim.fetched = false
		claim.mu.Unlock()
		next, err := stream.NewProcessor(h, fixed(1, 10*time.Millisecond), hooks, stream.WithLogger(slog.New(slog.DiscardHandler)))
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel = context.WithCancel(t.Context())
		defer cancel()
		go func() { done <- next.Process(ctx, claim) }()
		for !f.gaveUp() {
			time.Sleep(time.Millisecond)
		}
		cancel()
		<-done
		f.checkCounted(t)
	})
}

// alwaysFails is a handler whose every delivery fails, and an Exhausted hook
// that keeps the retries each give-up reports.
type alwaysFails struct {
	mu         sync.Mutex
	deliveries int
	exhausted  []int
}

func (f *alwaysFails) handle(context.Context, *stream.Batch) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.deliveries++
	return errors.New("fails")
}

func (f *alwaysFails) hooks() stream.Option {
	return stream.WithHooks(stream.Hooks{Exhausted: func(e stream.ExhaustedEvent) {
		f.mu.Lock()
		defer f.mu.Unlock()
		f.exhausted = append(f.exhausted, e.Err.Retries)
	}})
}

func (f *alwaysFails) gaveUp() bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	return len(f.exhausted) > 0
}

// checkCounted fails t unless the unit was delivered once and given up
// once, as after its one retry: the retry counted by its mark.
func (f *alwaysFails) checkCounted(t *testing.T) {
	t.Helper()
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.deliveries != 1 || len(f.exhausted) != 1 || f.exhausted[0] != 1 {
		t.Fatalf("%d deliveries, given up after %v retries; want 1 delivery, given up as after 1 retry (the retry counted by its mark)", f.deliveries, f.exhausted)
	}
}

// keyedRetryGaps runs a keyed processor (ordering o) with backoff over one
// record whose commits take latency, inside a synctest bubble; the record
// fails its first fails deliveries. It returns the time from each delivery
// to the next and how many commits were written between them.
func keyedRetryGaps(t *testing.T, o stream.Ordering, backoff, latency time.Duration, fails int) (gaps []time.Duration, commits []int) {
	t.Helper()
	var h streamtest.History
	p := streamtest.NewPartition("t", 0, 10)
	p.AppendKeyed(time.Now(), "k")
	p.SetCommitLatency(latency)
	var (
		mu  sync.Mutex
		at  []time.Time // of the deliveries
		n   []int       // commits written before each delivery
		end = make(chan struct{})
	)
	handler := stream.HandlerFunc(func(_ context.Context, b *stream.Batch) error {
		mu.Lock()
		defer mu.Unlock()
		at = append(at, time.Now())
		n = append(n, len(p.Commits()))
		if b.Attempt.Retries < fails {
			return errors.New("fails")
		}
		close(end)
		return nil
	})
	_, stop := keyedRun(t, &h, "a", p, handler, stream.WithOrdering(o), fixed(fails+2, backoff),
		stream.WithLogger(slog.New(slog.DiscardHandler)))
	<-end
	stop()
	mu.Lock()
	defer mu.Unlock()
	for i := 1; i < len(at); i++ {
		gaps = append(gaps, at[i].Sub(at[i-1]))
		commits = append(commits, n[i]-n[i-1])
	}
	return gaps, commits
}

// In key ordering (ByKey, ByNone) a record's retry is written as a
// partition's batch's is: after a short backoff its started mark is sent
// ahead of the retry's due time by what the last retry-state commit took
// and a millisecond, and once that time is known a backoff too short for
// the state and the mark one after the other gets the mark alone, with the
// failure: the retry comes at its due time, not a commit after it, and
// each such retry writes one commit. A backoff over 10ms still writes its
// mark once it is over.
func TestKeyedRetryComesWhenDue(t *testing.T) {
	for _, c := range []struct {
		name             string
		backoff, latency time.Duration
		fails            int
		gaps             []time.Duration // from each failure to its retry's delivery
		commits          []int           // commits written between them
	}{
		// The first retry: the state lands at 6ms, the mark, sent at
		// once (its lead, 7ms, is past), at 12ms. The next two: the mark
		// alone, sent with the failure, lands at 6ms; the retry waits
		// for its due time. Before, 16ms each, two commits each.
		{"one write per short retry", 10 * time.Millisecond, 6 * time.Millisecond, 3,
			[]time.Duration{12 * time.Millisecond, 10 * time.Millisecond, 10 * time.Millisecond}, []int{2, 1, 1}},
		// The state lands at 4ms, the mark is sent at 5ms and lands at
		// 9ms: the retry at 10ms (14ms before).
		{"the mark sent ahead", 10 * time.Millisecond, 4 * time.Millisecond, 1,
			[]time.Duration{10 * time.Millisecond}, []int{2}},
		// A backoff over 10ms: the mark is written once it is over.
		{"a long backoff's mark after it", 100 * time.Millisecond, 50 * time.Millisecond, 1,
			[]time.Duration{150 * time.Millisecond}, []int{2}},
	} {
		for _, o := range []stream.Ordering{stream.ByKey, stream.ByNone} {
			t.Run(c.name+"/"+o.String(), func(t *testing.T) {
				synctest.Test(t, func(t *testing.T) {
					gaps, commits := keyedRetryGaps(t, o, c.backoff, c.latency, c.fails)
					if !slices.Equal(gaps, c.gaps) || !slices.Equal(commits, c.commits) {
						t.Fatalf("retries delivered %v after their failures with %v commits between, want %v and %v (backoff %v, commits of %v)",
							gaps, commits, c.gaps, c.commits, c.backoff, c.latency)
					}
				})
			})
		}
	}
}

// In key ordering, a move after a record's started mark landed and before
// its retry was due counts the retry, which is not delivered: the next
// owner gives the record up one delivery early, never late. With 4ms
// commits and a 10ms backoff: the first commit (the record taken in) lands
// at 4ms, the record fails at 4ms, its state lands at 8ms, the mark is
// sent at 9ms (5ms ahead of the retry due at 14ms) and lands at 13ms; the
// partition moves at 13.5ms. With one retry allowed, the next owner gives
// the record up without delivering it: one delivery in all, not two.
func TestKeyedMoveAfterTheMarkLandedCountsTheRetry(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var h streamtest.History
		p := streamtest.NewPartition("t", 0, 10)
		p.AppendKeyed(time.Now(), "k")
		p.SetCommitLatency(4 * time.Millisecond)
		var f alwaysFails
		handler := stream.HandlerFunc(f.handle)
		opts := []stream.Option{fixed(1, 10*time.Millisecond), stream.WithLogger(slog.New(slog.DiscardHandler)), f.hooks()}
		_, stop := keyedRun(t, &h, "a", p, handler, opts...)
		time.Sleep(13500 * time.Microsecond)
		stop()
		next, md := p.Committed()
		w, err := retrystate.RestoreWindow(next, md, checkpoint.WindowLimits{})
		if err != nil {
			t.Fatalf("committed %d %q: %v", next, md, err)
		}
		if s, ok := w.State(0); !ok || !s.Started || s.Retries != 1 {
			t.Errorf("record 0's state before the move %+v (kept %v), want its retry 1 marked started", s, ok)
		}

		_, stop = keyedRun(t, &h, "b", p, handler, opts...)
		waitCommitted(t, p, 1)
		stop()
		f.checkCounted(t)
	})
}

// partClaim is slowClaim's partition under a number of its own.
type partClaim struct {
	slowClaim
	p int32
}

func (c *partClaim) Partition() int32 { return c.p }

// A failure that comes while another partition's retry state is being
// written, before any write of the processor was timed, knows that a write
// takes at least the time since that one began: with 6ms commits and 1ms
// backoffs, partition 0 fails at once and writes its retry state, then its
// started mark (no write timed, none in flight); partition 1 fails 2ms
// later, while that state is in flight for 2ms, and writes its mark alone.
// At 1,000 partitions, every batch of a poll that failed before the first
// write returned wrote both.
func TestFailureDuringAWriteInFlightWritesTheMarkAlone(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		claims := []*partClaim{{slowClaim: slowClaim{latency: 6 * time.Millisecond}, p: 0}, {slowClaim: slowClaim{latency: 6 * time.Millisecond}, p: 1}}
		var wg sync.WaitGroup
		wg.Add(len(claims))
		h := stream.HandlerFunc(func(_ context.Context, b *stream.Batch) error {
			if b.Attempt.Retries > 0 {
				wg.Done()
				return nil
			}
			if b.Partition == 1 {
				time.Sleep(2 * time.Millisecond)
			}
			return errors.New("fails")
		})
		proc, err := stream.NewProcessor(h, fixed(3, time.Millisecond), stream.WithLogger(slog.New(slog.DiscardHandler)))
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithCancel(t.Context())
		done := make(chan error, len(claims))
		for _, c := range claims {
			go func() { done <- proc.Process(ctx, c) }()
		}
		wg.Wait()
		synctest.Wait()
		cancel()
		for range claims {
			<-done
		}
		for i, want := range []int{2, 1} {
			c := claims[i]
			c.mu.Lock()
			var before []string // the retry's writes, before the success's commit
			for _, md := range c.mds {
				if md == "" {
					break
				}
				before = append(before, md)
			}
			c.mu.Unlock()
			if len(before) != want {
				t.Errorf("partition %d: %d writes before its retry (%q), want %d", c.p, len(before), before, want)
			}
		}
	})
}
