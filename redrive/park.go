package redrive

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/redeliver-go/redeliver/checkpoint"
	"github.com/redeliver-go/redeliver/stream"
)

// Park returns a [stream.ExhaustionAction] that parks a given-up batch
// instead of blocking its partition or dropping it: each record becomes an
// entry in [ParkedState], keyed "topic/partition/offset", with the batch's
// last error, due for a re-drive after expiry. The checkpoint moves on as
// soon as the store has the entries; parking a record again (after a crash
// or a rebalance) leaves the first entry as it is. A store error is
// returned, so the engine keeps the checkpoint and tries again.
//
// It takes [WithClock]; other options are ignored. It returns an error for
// a nil store or an expiry of 0 or less.
func Park(store Store, expiry time.Duration, opts ...Option) (stream.ExhaustionAction, error) {
	if store == nil {
		return nil, errors.New("redrive: nil store")
	}
	if expiry <= 0 {
		return nil, fmt.Errorf("redrive: expiry %v: want more than 0", expiry)
	}
	c := newConfig(opts)
	return func(ctx context.Context, b *stream.Batch, xerr *checkpoint.ExhaustedError) error {
		now := c.clock.Now().Truncate(time.Microsecond)
		last := ""
		if xerr != nil {
			last = xerr.Error()
		}
		entries := make([]Entry, len(b.Records))
		for i, r := range b.Records {
			entries[i] = Entry{
				Key:       RecordKey(r.Topic, r.Partition, r.Offset),
				Base:      ParkedState,
				Status:    Parked,
				StateTime: now,
				Created:   now,
				Expiry:    expiry,
				DueAt:     now.Add(expiry),
				LastError: last,
				Message:   r,
			}
		}
		if _, err := store.Park(ctx, entries); err != nil {
			return fmt.Errorf("park %d records: %w", len(entries), err)
		}
		return nil
	}, nil
}

// RecordKey is the key the [Park] action gives the entry of a record:
// "topic/partition/offset".
func RecordKey(topic string, partition int32, offset int64) string {
	return topic + "/" + strconv.FormatInt(int64(partition), 10) + "/" + strconv.FormatInt(offset, 10)
}

// Awaiting describes a record an application parks while it waits for an
// outside answer, as a NONCE_PUBLISHED state waits for a device.
type Awaiting struct {
	// Key names the entry, uniquely: the answer will name it to complete
	// it, and parking the same key twice keeps the first entry.
	Key string
	// State is the application's state name, e.g. "NONCE_PUBLISHED"; the
	// entry shows as State, State_RETRY, State_DONE or State_TIMEOUT.
	State string
	// Expiry is how long to wait for the answer before the record is
	// re-driven.
	Expiry time.Duration
	// Record is the message to re-drive: typically the one being handled.
	Record stream.Record
	// At is when the wait starts; zero means now.
	At time.Time
}

// Await parks a record in the application's own state until [Complete]
// names its key, and returns the entry as stored. It reports whether it
// inserted the entry: false when the key was parked already, in which case
// the existing entry is returned unchanged.
func Await(ctx context.Context, store Store, a Awaiting) (Entry, bool, error) {
	switch {
	case store == nil:
		return Entry{}, false, errors.New("redrive: nil store")
	case a.Key == "":
		return Entry{}, false, errors.New("redrive: await: empty key")
	case a.State == "":
		return Entry{}, false, fmt.Errorf("redrive: await %q: empty state name", a.Key)
	case a.Expiry <= 0:
		return Entry{}, false, fmt.Errorf("redrive: await %q: expiry %v: want more than 0", a.Key, a.Expiry)
	}
	at := a.At
	if at.IsZero() {
		at = time.Now()
	}
	at = at.Truncate(time.Microsecond)
	e := Entry{Key: a.Key, Base: a.State, Status: Parked, StateTime: at, Created: at,
		Expiry: a.Expiry, DueAt: at.Add(a.Expiry), Message: a.Record}
	n, err := store.Park(ctx, []Entry{e})
	if err != nil {
		return Entry{}, false, fmt.Errorf("redrive: await %q: %w", a.Key, err)
	}
	got, err := store.Get(ctx, a.Key)
	if err != nil {
		return Entry{}, false, fmt.Errorf("redrive: await %q: %w", a.Key, err)
	}
	return got, n == 1, nil
}

// Complete marks the entry called key done, now: the answer came. See
// [Store.Complete] for the errors.
func Complete(ctx context.Context, store Store, key string) (Entry, error) {
	return store.Complete(ctx, key, time.Now().Truncate(time.Microsecond))
}

// CompleteOnSuccess returns middleware for the consumer of the retry topic:
// when the handler succeeds on a batch, every record of it that carries
// [HeaderKey] completes its entry. With a [stream.BatchError] the records
// before the failed one are completed. Records without the header pass
// through untouched; an entry already done, timed out or gone is left as it
// is. A store error fails the batch, so it is delivered again and the
// completion is tried again.
//
// It takes [WithClock] and [WithLogger]; other options are ignored.
func CompleteOnSuccess(store Store, opts ...Option) stream.Middleware {
	c := newConfig(opts)
	return func(next stream.Handler) stream.Handler {
		return stream.HandlerFunc(func(ctx context.Context, b *stream.Batch) error {
			herr := next.Handle(ctx, b)
			done := len(b.Records)
			if herr != nil {
				var be *stream.BatchError
				if !errors.As(herr, &be) || be.Index <= 0 || be.Index >= len(b.Records) {
					return herr
				}
				done = be.Index
			}
			now := c.clock.Now().Truncate(time.Microsecond)
			for _, r := range b.Records[:done] {
				key, ok := headerValue(r.Headers, HeaderKey)
				if !ok {
					continue
				}
				e, err := store.Complete(ctx, key, now)
				switch {
				case err == nil:
					c.logger.Debug("redrive: entry completed", "key", key, "state", e.State())
				case errors.Is(err, ErrNotPending), errors.Is(err, ErrNotFound):
					c.logger.Info("redrive: re-driven record handled, entry not pending", "key", key, "error", err)
				default:
					return fmt.Errorf("redrive: complete %q: %w", key, err)
				}
			}
			return herr
		})
	}
}

func headerValue(hs []stream.Header, key string) (string, bool) {
	for i := len(hs) - 1; i >= 0; i-- {
		if hs[i].Key == key {
			return string(hs[i].Value), true
		}
	}
	return "", false
}
