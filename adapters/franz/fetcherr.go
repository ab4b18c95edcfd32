package franz

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
)

// How the poll loop deals with the fetch errors franz-go reports (it
// retries the others itself): each is logged at Warn when it first comes
// for a partition, then at most once per errLogEvery with how often it
// came meanwhile; a poll that brought errors and no record waits a backoff
// before the next (franz-go fetches again only once a poll took the
// previous answer, so this paces its requests too); and an error that
// lasts permanentAfter on a partition, with no successful fetch of it in
// between, ends Run with that error. UNKNOWN_TOPIC_ID ends Run at once:
// franz-go reports it only once it has decided that the topic was deleted,
// or deleted and created again, and it never consumes the topic again under
// its old ID.
var (
	errLogEvery    = 30 * time.Second
	permanentAfter = time.Minute
)

const (
	pollBackoffMin = 10 * time.Millisecond
	pollBackoffMax = 500 * time.Millisecond
)

// fetchErr is the state of one partition's failing fetches.
type fetchErr struct {
	err     error
	since   time.Time // when this error began
	logged  time.Time // when it was last logged
	repeats int       // since it was last logged
}

// fetchErrs tracks the fetch errors of every partition. The poll loop
// writes it; Health reads it.
type fetchErrs struct {
	log *slog.Logger

	mu    sync.Mutex
	parts map[tp]*fetchErr
	fails int // polls in a row with errors and no record, for the backoff
}

// seen notes a poll's results: its errors, and the partitions it fetched
// without error (which clears theirs). It returns the error that ends Run,
// if one is permanent, and how long to wait before the next poll.
func (f *fetchErrs) seen(fs kgo.Fetches, now time.Time) (fatal error, wait time.Duration) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.parts == nil {
		f.parts = make(map[tp]*fetchErr)
	}
	errs := 0
	fs.EachPartition(func(p kgo.FetchTopicPartition) {
		key := tp{p.Topic, p.Partition}
		if p.Err == nil {
			if e := f.parts[key]; e != nil {
				f.log.Info("redeliver: fetching the partition works again", "topic", key.topic, "partition", key.partition,
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
			f.log.Warn("redeliver: fetch error", "topic", key.topic, "partition", key.partition, "error", err)
			return
		}
		errs++
		e := f.parts[key]
		if e == nil || e.err.Error() != err.Error() {
			e = &fetchErr{err: err, since: now, logged: now}
			f.parts[key] = e
			f.log.Warn("redeliver: fetch error", "topic", key.topic, "partition", key.partition, "error", err)
		} else if now.Sub(e.logged) >= errLogEvery {
			f.log.Warn("redeliver: fetch error goes on", "topic", key.topic, "partition", key.partition, "error", err,
				"since", e.since, "repeats", e.repeats)
			e.logged, e.repeats = now, 0
		} else {
			e.repeats++
		}
		if fatal != nil {
			return
		}
		switch {
		case errors.Is(err, kerr.UnknownTopicID):
			fatal = fmt.Errorf("franz: topic %q was deleted, or deleted and created again: franz-go does not consume it again under the ID it had (fetching partition %d: %w); restart the consumer to consume the topic as it is now",
				key.topic, key.partition, err)
		case now.Sub(e.since) >= permanentAfter:
			fatal = fmt.Errorf("franz: fetching %s/%d has failed for %v with the same error, which franz-go does not retry: %w",
				key.topic, key.partition, now.Sub(e.since).Round(time.Second), err)
		}
	})
	switch {
	case errs == 0 || fs.NumRecords() > 0:
		f.fails = 0
	default:
		f.fails++
		wait = min(pollBackoffMin<<min(f.fails-1, 10), pollBackoffMax)
	}
	return fatal, wait
}

// problems returns the partitions' fetch errors, for Health.
func (f *fetchErrs) problems(now time.Time) []error {
	f.mu.Lock()
	defer f.mu.Unlock()
	var out []error
	for key, e := range f.parts {
		out = append(out, fmt.Errorf("fetching %s/%d fails since %v ago: %w", key.topic, key.partition, now.Sub(e.since).Round(time.Second), e.err))
	}
	return out
}
