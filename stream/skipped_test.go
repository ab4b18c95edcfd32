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
	"github.com/redeliver-go/redeliver/stream"
	"github.com/redeliver-go/redeliver/stream/streamtest"
)

// Records a claim skips (a Kafka client's transaction markers, and under
// read_committed an aborted transaction's records: streamtest's
// AppendSkipped) are committed past through the claim's Position
// (stream.Positioner): a log that ends with them is committed to its end,
// never one short of it; and never past a record withheld or retrying.

var orderings = []stream.Ordering{stream.ByPartition, stream.ByKey, stream.ByNone}

// runSkipping runs a processor of handler over p until the checkpoint
// reaches want (a minute of fake time at most), then stops it; it returns
// the values handled, in the order handled.
func runSkipping(t *testing.T, p *streamtest.Partition, want int64, handler func(*stream.Record) error, opts ...stream.Option) []string {
	t.Helper()
	var (
		mu  sync.Mutex
		got []string
	)
	opts = append([]stream.Option{stream.WithLogger(slog.New(slog.DiscardHandler))}, opts...)
	proc, err := stream.NewProcessor(stream.PerRecord(func(_ context.Context, r *stream.Record) error {
		if err := handler(r); err != nil {
			return err
		}
		mu.Lock()
		got = append(got, string(r.Value))
		mu.Unlock()
		return nil
	}), opts...)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() { done <- streamtest.Run(ctx, proc, p) }()
	wctx, wcancel := context.WithTimeout(t.Context(), time.Minute)
	werr := p.WaitCommitted(wctx, want)
	wcancel()
	cancel()
	if err := <-done; err != nil {
		t.Errorf("run: %v", err)
	}
	if werr != nil {
		t.Fatalf("committed %v, want %d (the log's end, past the skipped records): %v", commitsOf(p), want, werr)
	}
	mu.Lock()
	defer mu.Unlock()
	return got
}

func commitsOf(p *streamtest.Partition) []int64 {
	var out []int64
	for _, c := range p.Commits() {
		out = append(out, c.Next)
	}
	return out
}

// checkCommits fails unless the commits never move back and end at end.
func checkCommits(t *testing.T, p *streamtest.Partition, end int64) {
	t.Helper()
	cs := commitsOf(p)
	for i := 1; i < len(cs); i++ {
		if cs[i] < cs[i-1] {
			t.Errorf("commits %v move back", cs)
		}
	}
	if len(cs) == 0 || cs[len(cs)-1] != end || slices.Max(cs) != end {
		t.Errorf("commits %v, want the last at the log's end %d and none past it", cs, end)
	}
}

func TestTrailingSkippedRecordsCommittedPast(t *testing.T) {
	for _, o := range orderings {
		t.Run(o.String(), func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				// 10 records, then a committed transaction's marker.
				p := streamtest.NewPartition("t", 0, 4)
				p.AppendN(time.Now(), 10)
				p.AppendSkipped(1)
				got := runSkipping(t, p, 11, func(*stream.Record) error { return nil }, stream.WithOrdering(o))
				if len(got) != 10 {
					t.Errorf("handled %d records %q, want 10", len(got), got)
				}
				checkCommits(t, p, 11)
			})
		})
	}
}

func TestAbortedTransactionFetchedAloneCommittedPast(t *testing.T) {
	for _, o := range orderings {
		t.Run(o.String(), func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				// 5 records, then an aborted transaction of 5 and its
				// marker: the second and third fetches return nothing.
				p := streamtest.NewPartition("t", 0, 5)
				p.AppendN(time.Now(), 5)
				p.AppendSkipped(6)
				got := runSkipping(t, p, 11, func(*stream.Record) error { return nil }, stream.WithOrdering(o))
				if len(got) != 5 {
					t.Errorf("handled %d records %q, want 5", len(got), got)
				}
				checkCommits(t, p, 11)
			})
		})
	}
}

func TestSkippedRecordsFirstAndBetween(t *testing.T) {
	for _, o := range orderings {
		t.Run(o.String(), func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				// Nothing committed; the log begins with an aborted
				// transaction, has a marker between records, and
				// ends with two markers.
				p := streamtest.NewPartition("t", 0, 3)
				p.AppendSkipped(3)
				p.Append(time.Now(), "a", "b")
				p.AppendSkipped(1)
				p.Append(time.Now(), "c")
				p.AppendSkipped(2)
				got := runSkipping(t, p, 9, func(*stream.Record) error { return nil }, stream.WithOrdering(o))
				if slices.Sort(got); !slices.Equal(got, []string{"a", "b", "c"}) {
					t.Errorf("handled %q, want a, b, c", got)
				}
				checkCommits(t, p, 9)
			})
		})
	}
}

// A record that fails and waits for its retry holds the checkpoint at
// itself, whatever the claim skipped after it; once it succeeds the
// checkpoint moves past the skipped records.
func TestSkippedRecordsNeverCommittedPastARetry(t *testing.T) {
	for _, o := range orderings {
		t.Run(o.String(), func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				p := streamtest.NewPartition("t", 0, 10)
				p.AppendKeyed(time.Now(), "a", "b", "c")
				p.AppendSkipped(1)
				failed := false
				var atRetry int64 = -2
				got := runSkipping(t, p, 4, func(r *stream.Record) error {
					if r.Offset != 1 {
						return nil
					}
					if !failed {
						failed = true
						return errors.New("fails once")
					}
					atRetry, _ = p.Committed()
					return nil
				}, stream.WithOrdering(o), stream.WithPolicy(checkpoint.Policy{MaxRetries: 3, Backoff: checkpoint.Fixed(time.Second)}))
				if atRetry < 0 || atRetry > 1 {
					t.Errorf("committed %d when the failed record 1 was retried, want at most 1", atRetry)
				}
				for _, c := range p.Commits() {
					if c.Next > 1 && c.Metadata != "" {
						t.Errorf("commit %d with retry state %q: past the retrying record 1", c.Next, c.Metadata)
					}
				}
				if len(got) != 3 {
					t.Errorf("handled %q", got)
				}
				checkCommits(t, p, 4)
			})
		})
	}
}
