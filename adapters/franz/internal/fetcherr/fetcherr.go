// Package fetcherr is how the franz-go consumers (package franz and its
// share consumer) deal with the fetch errors franz-go reports (it retries
// the others itself): each is logged at Warn when it first comes for a
// partition, then at most once per errLogEvery with how often it came
// meanwhile; a poll that brought errors and no record waits a backoff
// before the next (franz-go fetches again only once a poll took the
// previous answer, so this paces its requests too); and an error that
// lasts permanentAfter on a partition, with no successful fetch of it in
// between, ends Run with that error. UNKNOWN_TOPIC_ID ends Run at once:
// franz-go reports it only once it has decided that the topic was deleted,
// or deleted and created again, and it never consumes the topic again under
// its old ID.
package fetcherr

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
)

var (
	errLogEvery    = 30 * time.Second
	permanentAfter = time.Minute
)

// staleAfter is how long an error may go unreported before it is taken to
// be over: a share group's fetches report a partition only when it has
// records or an error, so a partition whose error stopped may never be
// reported as fetched again.
const staleAfter = 10 * time.Second

const (
	backoffMin = 10 * time.Millisecond
	backoffMax = 500 * time.Millisecond
)

// SetPermanentAfter sets how long a fetch error may last before it ends
// Run, for tests, and returns a function that restores it. Call it while
// no consumer runs.
func SetPermanentAfter(d time.Duration) (restore func()) {
	saved := permanentAfter
	permanentAfter = d
	return func() { permanentAfter = saved }
}

type tp struct {
	topic     string
	partition int32
}

// state is the state of one partition's failing fetches.
type state struct {
	err     error
	since   time.Time // when this error began
	seen    time.Time // when it was last reported
	logged  time.Time // when it was last logged
	repeats int       // since it was last logged
}

// Tracker tracks the fetch errors of every partition a consumer fetches,
// from every poll loop of the consumer. Its zero value is ready to use;
// set Log and Pkg first. It is safe for concurrent use.
type Tracker struct {
	Log *slog.Logger
	Pkg string // prefixes the errors it makes: "franz", "share"

	mu    sync.Mutex
	parts map[tp]*state
}

// Seen notes a poll's results: its errors, and the partitions it fetched
// without error (which clears theirs). It returns the error that ends Run,
// if one is permanent, and whether the poll brought errors and no record,
// for the poll loop's [Backoff].
func (f *Tracker) Seen(fs kgo.Fetches, now time.Time) (fatal error, failed bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.parts == nil {
		f.parts = make(map[tp]*state)
	}
	errs := 0
	fs.EachPartition(func(p kgo.FetchTopicPartition) {
		key := tp{p.Topic, p.Partition}
		if p.Err == nil {
			if e := f.parts[key]; e != nil {
				f.Log.Info("redeliver: fetching the partition works again", "topic", key.topic, "partition", key.partition,
					"error_was", e.err, "for", now.Sub(e.since).Round(time.Millisecond))
				delete(f.parts, key)
			}
			return
		}
		err := p.Err
		if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) || errors.Is(err, kgo.ErrClientClosed) {
			return
		}
		var loss *kgo.ErrDataLoss
		if errors.As(err, &loss) {
			// Records follow from where the client reset; the claim logs
			// a rewind.
			f.Log.Warn("redeliver: fetch error", "topic", key.topic, "partition", key.partition, "error", err)
			return
		}
		errs++
		e := f.parts[key]
		if e == nil || e.err.Error() != err.Error() || now.Sub(e.seen) >= staleAfter {
			e = &state{err: err, since: now, logged: now}
			f.parts[key] = e
			f.Log.Warn("redeliver: fetch error", "topic", key.topic, "partition", key.partition, "error", err)
		} else if now.Sub(e.logged) >= errLogEvery {
			f.Log.Warn("redeliver: fetch error goes on", "topic", key.topic, "partition", key.partition, "error", err,
				"since", e.since, "repeats", e.repeats)
			e.logged, e.repeats = now, 0
		} else {
			e.repeats++
		}
		e.seen = now
		if fatal != nil {
			return
		}
		switch {
		case errors.Is(err, kerr.UnknownTopicID):
			fatal = fmt.Errorf("%s: topic %q was deleted, or deleted and created again: franz-go does not consume it again under the ID it had (fetching partition %d: %w); restart the consumer to consume the topic as it is now",
				f.Pkg, key.topic, key.partition, err)
		case now.Sub(e.since) >= permanentAfter:
			fatal = fmt.Errorf("%s: fetching %s/%d has failed for %v with the same error, which franz-go does not retry: %w",
				f.Pkg, key.topic, key.partition, now.Sub(e.since).Round(time.Second), err)
		}
	})
	return fatal, errs > 0 && fs.NumRecords() == 0
}

// Problems returns the partitions' fetch errors, for Health, in the order
// of their topics and partitions.
func (f *Tracker) Problems(now time.Time) []error {
	f.mu.Lock()
	defer f.mu.Unlock()
	keys := make([]tp, 0, len(f.parts))
	for key, e := range f.parts {
		if now.Sub(e.seen) < staleAfter {
			keys = append(keys, key)
		}
	}
	slices.SortFunc(keys, func(a, b tp) int {
		if c := strings.Compare(a.topic, b.topic); c != 0 {
			return c
		}
		return int(a.partition - b.partition)
	})
	out := make([]error, 0, len(keys))
	for _, key := range keys {
		e := f.parts[key]
		out = append(out, fmt.Errorf("%s: fetching %s/%d fails since %v ago: %w", f.Pkg, key.topic, key.partition, now.Sub(e.since).Round(time.Second), e.err))
	}
	return out
}

// Backoff is how long a poll loop waits after polls that brought errors
// and no record: 10ms, doubling up to 500ms, until a poll does not. Each
// poll loop has its own. Its zero value is ready to use.
type Backoff struct{ fails int }

// Next returns how long to wait before the next poll, given whether the
// last one failed (see [Tracker.Seen]).
func (b *Backoff) Next(failed bool) time.Duration {
	if !failed {
		b.fails = 0
		return 0
	}
	b.fails++
	return min(backoffMin<<min(b.fails-1, 10), backoffMax)
}

// Wait waits d, or until ctx is done.
func Wait(ctx context.Context, d time.Duration) {
	if d <= 0 {
		return
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
	case <-ctx.Done():
	}
}
