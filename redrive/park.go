package redrive

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"reflect"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/redeliver-go/redeliver/checkpoint"
	"github.com/redeliver-go/redeliver/redrive/internal/rowcodec"
	"github.com/redeliver-go/redeliver/stream"
)

// Park returns a [stream.ExhaustionAction] that parks a given-up batch
// instead of blocking its partition or dropping it: each record becomes an
// entry in [ParkedState], keyed "topic/partition/offset", with the batch's
// last error, due for a re-drive after expiry. The checkpoint moves on as
// soon as the store has the entries; parking a record again (after a crash
// or a rebalance) leaves the first entry as it is. A store error is
// returned, so the engine keeps the checkpoint and tries again; so is a
// store that does not answer within 30 seconds (a database that stopped
// replying), which would otherwise hold the partition without a word.
//
// A record that a [Scheduler] re-published (it carries [HeaderKey] and
// [HeaderNumber]) and that failed again is never parked as a new entry: it
// is handed back to its entry ([Store.Repark]), which keeps its status,
// takes the error and counts the failure in [Entry.Reparks]; the scheduler
// then re-drives it again when it is due, or times it out. So however the
// consumers are wired (a retry topic, or the record's own topic as a host
// does by default), one poison record is one entry, published at most
// the maximum number of re-drives, and reported once. A record whose
// entry is not in the store (a store other than the scheduler's) becomes
// an entry of its own, under the key it carries, with its original topic,
// partition and offset. A record that carries the headers but whose key or
// value is not its entry's record (a record a consumer derived from a
// re-driven one, with the headers copied) is not that entry's: it is
// parked as any other record, without the copied headers.
//
// In stream.ByKey ordering, Park does not keep a key's order: the key's
// later records are handled before its parked record is re-driven, and
// the action says so once at Warn. [ParkByKey] keeps the order.
//
// It takes [WithClock], [WithLogger] and [WithHooks] (Reparked); other
// options are ignored. It returns an error for a nil store or an expiry
// under a microsecond ([Resolution]); an expiry that is not a whole
// number of microseconds is rounded up.
func Park(store Store, expiry time.Duration, opts ...Option) (stream.ExhaustionAction, error) {
	if isNil(store) {
		return nil, errors.New("redrive: Park: nil store: open one with sqlitestore.Open or pgstore.Open")
	}
	if expiry < Resolution {
		return nil, fmt.Errorf("redrive: Park: expiry %v: want at least %v (stores keep times to the microsecond)", expiry, Resolution)
	}
	c, err := newConfig("Park", opts)
	if err != nil {
		return nil, err
	}
	return parkAction(store, ceil(expiry), c, nil), nil
}

// parkAction is the action of [Park], and with locks that of [ParkByKey]:
// in ByKey ordering, its entries get their record's order key, which
// locks the key, and the lock is added to locks.
func parkAction(store Store, expiry time.Duration, c config, locks *keyLocks) stream.ExhaustionAction {
	var keyWarned atomic.Bool
	return func(ctx context.Context, b *stream.Batch, xerr *checkpoint.ExhaustedError) error {
		if b == nil {
			return errors.New("redrive: park: nil batch")
		}
		if _, keyed := stream.OrderKey(ctx); keyed && locks == nil && !keyWarned.Swap(true) {
			// Plain Park in key ordering: said once per action.
			c.logger.Warn("redrive: Park in key ordering: the key's later records are handled before its parked record is re-driven, so the key's order is not kept; redrive.ParkByKey keeps it",
				"topic", b.Topic, "partition", b.Partition)
		}
		now := c.clock.Now().Truncate(Resolution)
		last := ""
		if xerr != nil {
			last = xerr.Error()
		}
		entries := make([]Entry, 0, len(b.Records))
		for _, r := range b.Records {
			e := Entry{
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
			key, number, ok := redriven(r)
			if ok {
				switch handed, other, err := repark(ctx, store, c, key, number, last, r); {
				case err != nil:
					return err
				case handed:
					continue
				case other:
					e.Message = plain(r)
				default:
					e.Key, e.Message = key, original(r)
				}
			}
			if key, ok := stream.OrderKey(ctx); ok && locks != nil {
				e.OrderKey = OrderKey(e.Message.Topic, e.Message.Partition, key)
			}
			entries = append(entries, e)
		}
		if len(entries) == 0 {
			return nil
		}
		bctx, said, cancel := bound(ctx)
		defer cancel()
		if locks != nil {
			// The lock is known to the partition's set before the key's
			// next record is delivered (it waits for this action).
			return locks.park(bctx, b.Topic, b.Partition, entries, said)
		}
		if _, err := store.Park(bctx, entries); err != nil {
			return fmt.Errorf("park %d records: %w", len(entries), said(err))
		}
		return nil
	}
}

// storeTimeout bounds each store call of the [Park] action and of
// [CompleteOnSuccess]. They run under the engine's context, which has no
// deadline: a database that stops answering (it holds the connection and
// never replies) so gives an error, which the engine logs and tries again
// after its backoff, instead of holding the partition without a word.
const storeTimeout = 30 * time.Second

// bound returns ctx bounded by storeTimeout, and a function that says so
// in an error the bound caused.
func bound(ctx context.Context) (context.Context, func(error) error, context.CancelFunc) {
	bctx, cancel := context.WithTimeout(ctx, storeTimeout)
	return bctx, func(err error) error {
		if err != nil && ctx.Err() == nil && bctx.Err() != nil {
			return fmt.Errorf("the re-drive store did not answer within %v: %w", storeTimeout, err)
		}
		return err
	}, cancel
}

// repark hands a re-driven record r that failed again back to its entry,
// and reports whether it did. It reports other when the entry's record is
// not r (a record that carries headers copied from a re-driven one, such
// as one a consumer derived from it): r is a record of its own. Neither
// when the entry is not in the store.
func repark(ctx context.Context, store Store, c config, key string, number int, last string, r stream.Record) (handed, other bool, err error) {
	bctx, said, cancel := bound(ctx)
	cur, err := store.Get(bctx, key)
	err = said(err)
	cancel()
	switch {
	case errors.Is(err, ErrNotFound):
		c.logger.Warn("redrive: a re-driven record failed again and its entry is not in this store; parked as an entry of its own", "key", key, "number", number)
		return false, false, nil
	case err != nil:
		return false, false, fmt.Errorf("park: read entry %q of a re-driven record: %w", key, err)
	case !bytes.Equal(cur.Message.Key, r.Key) || !bytes.Equal(cur.Message.Value, r.Value):
		c.logger.Warn("redrive: a record carries the re-drive headers of an entry whose record it is not (headers copied from a re-driven record?); parked as a record of its own",
			"topic", r.Topic, "partition", r.Partition, "offset", r.Offset, "key", key)
		return false, true, nil
	}
	msg := fmt.Sprintf("re-drive %d failed again: %s", number, last)
	bctx, said, cancel = bound(ctx)
	defer cancel()
	e, counted, err := store.Repark(bctx, key, number, msg)
	err = said(err)
	switch {
	case err == nil:
		c.logger.Info("redrive: a re-driven record failed again; handed back to its entry", "key", key, "number", number,
			"state", e.State(), "reparks", e.Reparks, "error", last)
		if counted {
			c.each(func(h Hooks) {
				if h.Reparked != nil {
					h.Reparked(EntryEvent{Entry: e})
				}
			})
		}
		return true, false, nil
	case errors.Is(err, ErrNotPending):
		c.logger.Info("redrive: a re-driven record failed again after its entry ended; nothing parked", "key", key, "number", number,
			"state", e.State(), "error", last)
		return true, false, nil
	case errors.Is(err, ErrNotFound):
		c.logger.Warn("redrive: a re-driven record failed again and its entry is not in this store; parked as an entry of its own", "key", key, "number", number)
		return false, false, nil
	}
	return false, false, fmt.Errorf("park: hand re-drive %d back to entry %q: %w", number, key, err)
}

// redriven returns the entry key and re-drive number a re-published
// record carries, and whether it carries them. A key that a store cannot
// keep as text is not one the scheduler wrote: such a record is parked as
// any other.
func redriven(r stream.Record) (string, int, bool) {
	key, ok := headerValue(r.Headers, HeaderKey)
	if !ok || key == "" || !rowcodec.Text(key) {
		return "", 0, false
	}
	num, _ := headerValue(r.Headers, HeaderNumber)
	n, _ := strconv.Atoi(num)
	return key, max(n, 0), true
}

// original returns the record a re-published record r stands for: r
// without the re-drive headers, at the topic, partition and offset they
// name.
func original(r stream.Record) stream.Record {
	e := Entry{Message: r}
	r.Topic, r.Partition, r.Offset = e.Origin()
	return plain(r)
}

// plain returns r without the headers a re-drive sets.
func plain(r stream.Record) stream.Record {
	hs := make([]stream.Header, 0, len(r.Headers))
	for _, h := range r.Headers {
		if !redriveHeader(h.Key) {
			hs = append(hs, h)
		}
	}
	if len(hs) == 0 {
		hs = nil
	}
	r.Headers = hs
	return r
}

// isNil reports whether v is nil or a nil pointer in an interface.
func isNil(v any) bool {
	if v == nil {
		return true
	}
	rv := reflect.ValueOf(v)
	switch rv.Kind() {
	case reflect.Pointer, reflect.Map, reflect.Slice, reflect.Func, reflect.Chan, reflect.Interface:
		return rv.IsNil()
	}
	return false
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
//
// The key and the state must be text a store keeps as it is (valid UTF-8
// without a NUL), and the expiry at least a microsecond ([Resolution]); an
// expiry that is not a whole number of microseconds is rounded up.
func Await(ctx context.Context, store Store, a Awaiting) (Entry, bool, error) {
	switch {
	case ctx == nil:
		return Entry{}, false, errors.New("redrive: Await: nil context")
	case isNil(store):
		return Entry{}, false, errors.New("redrive: Await: nil store: open one with sqlitestore.Open or pgstore.Open")
	case a.Key == "":
		return Entry{}, false, errors.New("redrive: await: empty key")
	case !rowcodec.Text(a.Key):
		return Entry{}, false, fmt.Errorf("redrive: await %q: the key is not text (invalid UTF-8 or a NUL): encode it, as hex or base64", a.Key)
	case a.State == "":
		return Entry{}, false, fmt.Errorf("redrive: await %q: empty state name", a.Key)
	case !rowcodec.Text(a.State):
		return Entry{}, false, fmt.Errorf("redrive: await %q: state name %q is not text (invalid UTF-8 or a NUL)", a.Key, a.State)
	case a.Expiry < Resolution:
		return Entry{}, false, fmt.Errorf("redrive: await %q: expiry %v: want at least %v (stores keep times to the microsecond)", a.Key, a.Expiry, Resolution)
	}
	at := a.At
	if at.IsZero() {
		at = time.Now()
	}
	at = at.Truncate(Resolution)
	expiry := ceil(a.Expiry)
	e := Entry{Key: a.Key, Base: a.State, Status: Parked, StateTime: at, Created: at,
		Expiry: expiry, DueAt: at.Add(expiry), Message: a.Record}
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
	switch {
	case ctx == nil:
		return Entry{}, errors.New("redrive: Complete: nil context")
	case isNil(store):
		return Entry{}, errors.New("redrive: Complete: nil store: open one with sqlitestore.Open or pgstore.Open")
	}
	return store.Complete(ctx, key, time.Now().Truncate(Resolution))
}

// CompleteOnSuccess returns middleware for the consumer of the retry topic:
// when the handler succeeds on a batch, every record of it that carries
// [HeaderKey] completes its entry. With a [stream.BatchError] the records
// before the failed one are completed. Records without the header pass
// through untouched; an entry already done, timed out or gone is left as it
// is. A store error fails the batch, so it is delivered again and the
// completion is tried again; so does a store that does not answer within
// 30 seconds.
//
// It takes [WithClock] and [WithLogger]; other options are ignored. With a
// nil store, every batch that holds a re-driven record fails with an error
// that says so (a completion is never dropped in silence), and the others
// pass through.
func CompleteOnSuccess(store Store, opts ...Option) stream.Middleware {
	c, cerr := newConfig("CompleteOnSuccess", opts)
	return func(next stream.Handler) stream.Handler {
		return stream.HandlerFunc(func(ctx context.Context, b *stream.Batch) error {
			if cerr != nil {
				return cerr // a wiring mistake: every batch says so
			}
			if isNil(store) {
				for _, r := range b.Records {
					if _, ok := headerValue(r.Headers, HeaderKey); ok {
						return errors.New("redrive: CompleteOnSuccess has a nil store: a re-driven record cannot complete its entry; give it the scheduler's store")
					}
				}
				return next.Handle(ctx, b)
			}
			herr := next.Handle(ctx, b)
			done := len(b.Records)
			if herr != nil {
				var be *stream.BatchError
				if !errors.As(herr, &be) || be.Index <= 0 || be.Index >= len(b.Records) {
					return herr
				}
				done = be.Index
			}
			now := c.clock.Now().Truncate(Resolution)
			for _, r := range b.Records[:done] {
				key, ok := headerValue(r.Headers, HeaderKey)
				if !ok {
					continue
				}
				bctx, said, cancel := bound(ctx)
				e, err := store.Complete(bctx, key, now)
				err = said(err)
				cancel()
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
