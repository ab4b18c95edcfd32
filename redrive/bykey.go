package redrive

import (
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/redeliver-go/redeliver/checkpoint"
	"github.com/redeliver-go/redeliver/redrive/internal/rowcodec"
	"github.com/redeliver-go/redeliver/stream"
)

// ParkByKey is [Park] for a processor in [stream.ByKey] ordering that
// keeps each key's order through the re-drive. It returns one option,
// which a processor takes instead of stream.WithExhaustionAction(park):
//
//	park, err := redrive.ParkByKey(store, 5*time.Minute) // store: sqlitestore or pgstore
//	proc, err := stream.NewProcessor(handler, stream.WithOrdering(stream.ByKey), park)
//
// A record whose retries are spent is parked as with Park, and its entry
// locks its key: the entry's [Entry.OrderKey] is [OrderKey] of the
// record's topic, partition and ordering key. While a key is locked (it
// has an entry parked or retrying), each later record of the key is
// parked behind the entries before it instead of being handled (the
// handler is not called; the record is finished for the commit, and the
// Delivered hook reports it with the stream.ParkedBehind outcome, not as
// a success): a key that
// fails for hours holds back neither its partition nor the other keys,
// and never loses its order. A [Scheduler] re-drives a key's entries one
// at a time, in the order they were parked, each once the one before is
// done (completed) or timed out, not merely re-published; the key is
// released when its last entry is done. A record parked behind is due at
// once: it is re-driven as soon as the entries before it are done.
//
// The lock lives in the store, so every instance of the group sees it: a
// partition's next owner (after a rebalance or a restart) reads the
// partition's locked keys from the store when its claim starts, before it
// handles a record. Within a claim the processor keeps the partition's
// locked keys in memory, adds the locks its own parks make, and reads the
// set again every 30 seconds to drop the keys released; a record whose key
// is in the set is checked in the store ([KeyLocker.KeyLocked]) before it
// is parked behind, so a released key goes on at once. Only records of a
// locked key cost a store call. A record that a scheduler re-published
// (it carries [HeaderKey]) is the head of its key's entries: it is
// handled, never parked behind, and if it fails again it goes back to its
// entry, as with Park. When the store fails a record's check (or its park
// behind), the record waits and is tried again every 5 seconds, with a
// warning each time, until the store answers: a store that is down spends
// none of the record's retries, and no record is handled before its key
// is known not to be locked.
//
// ParkByKey takes Park's options. It returns an error for a nil store, a
// store that keeps no key locks (not a [KeyLocker]: sqlitestore and
// pgstore are), or an expiry under a microsecond; [stream.NewProcessor]
// refuses its option in an ordering other than ByKey, and beside a
// stream.WithExhaustionAction (which would replace its park, and records
// would no longer lock their keys).
func ParkByKey(store Store, expiry time.Duration, opts ...Option) (stream.Option, error) {
	if isNil(store) {
		return nil, errors.New("redrive: ParkByKey: nil store: open one with sqlitestore.Open or pgstore.Open")
	}
	kl, ok := store.(KeyLocker)
	if !ok {
		return nil, fmt.Errorf("redrive: ParkByKey: the store (%T) keeps no key locks (it is not a redrive.KeyLocker): use sqlitestore or pgstore", store)
	}
	if expiry < Resolution {
		return nil, fmt.Errorf("redrive: ParkByKey: expiry %v: want at least %v (stores keep times to the microsecond)", expiry, Resolution)
	}
	c, err := newConfig("ParkByKey", opts)
	if err != nil {
		return nil, err
	}
	l := &keyLocks{store: kl, c: c, expiry: ceil(expiry), refresh: lockRefresh, parts: map[partKey]*partLocks{}}
	return stream.Options(
		stream.WithKeyMiddleware("redrive.ParkByKey", l.middleware, parkAction(store, l.expiry, c, l)),
		stream.WithHooks(stream.Hooks{Claimed: l.claimed}),
	), nil
}

// lockRefresh is how often a partition's set of locked keys is read again
// from the store, to drop the keys released.
const lockRefresh = 30 * time.Second

// OrderKey is the order key ([Entry.OrderKey]) of a record of topic and
// partition whose ordering key (its Key, or what stream.WithKeyFunc gave)
// is key: "topic/partition/key". A key that is not text (invalid UTF-8 or
// a NUL) or that starts with "~" is written as "~" and its unpadded
// URL-safe base64, so that every order key is text a store keeps.
func OrderKey(topic string, partition int32, key string) string {
	k := key
	if !rowcodec.Text(key) || strings.HasPrefix(key, "~") {
		k = "~" + base64.RawURLEncoding.EncodeToString([]byte(key))
	}
	return topic + "/" + strconv.FormatInt(int64(partition), 10) + "/" + k
}

// keyLocks is the state of one ParkByKey: the locked keys of each
// partition its processor handles.
type keyLocks struct {
	store   KeyLocker
	c       config
	expiry  time.Duration
	refresh time.Duration

	mu    sync.RWMutex
	parts map[partKey]*partLocks
}

type partKey struct {
	topic     string
	partition int32
}

// partLocks is a partition's set of locked keys. A record's check takes
// mu for reading only; no store call is made under mu, so a park or a
// load never holds up the checks of the partition's other records. One
// load at a time runs (under loadMu), and the locks this processor's
// parks add while it reads the store are added to what it read (during):
// a lock is never lost by a load that read the store before it.
type partLocks struct {
	loadMu sync.Mutex
	mu     sync.RWMutex
	keys   map[string]struct{}
	loaded time.Time           // zero: to be read from the store
	during map[string]struct{} // non-nil while a load reads the store
	claims uint64              // claims started: a load read before one is stale
}

func (l *keyLocks) part(topic string, partition int32) *partLocks {
	k := partKey{topic, partition}
	l.mu.RLock()
	p := l.parts[k]
	l.mu.RUnlock()
	if p != nil {
		return p
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	p = l.parts[k]
	if p == nil {
		p = &partLocks{}
		l.parts[k] = p
	}
	return p
}

// claimed forgets a partition's set when a claim of it starts: a next
// owner may have locked keys meanwhile, so the set is read again.
func (l *keyLocks) claimed(ev stream.ClaimEvent) {
	p := l.part(ev.Topic, ev.Partition)
	p.mu.Lock()
	p.keys, p.loaded = nil, time.Time{}
	p.claims++
	p.mu.Unlock()
}

// locked reports whether the order key okey, of a record of topic and
// partition, is locked.
func (l *keyLocks) locked(ctx context.Context, topic string, partition int32, okey string) (bool, error) {
	p := l.part(topic, partition)
	now := l.c.clock.Now()
	p.mu.RLock()
	_, in := p.keys[okey]
	fresh := !p.loaded.IsZero() && now.Sub(p.loaded) < l.refresh
	p.mu.RUnlock()
	if !fresh {
		var err error
		if in, err = l.load(ctx, p, topic, partition, okey); err != nil {
			return false, err
		}
	}
	if !in {
		return false, nil
	}
	bctx, said, cancel := bound(ctx)
	defer cancel()
	locked, err := l.store.KeyLocked(bctx, okey)
	if err != nil {
		return false, fmt.Errorf("is key %q locked: %w", okey, said(err))
	}
	if !locked {
		p.mu.Lock()
		delete(p.keys, okey)
		p.mu.Unlock()
	}
	return locked, nil
}

// load reads the partition's set from the store when it is due (once a
// claim starts, then every refresh), and reports whether okey is in it.
func (l *keyLocks) load(ctx context.Context, p *partLocks, topic string, partition int32, okey string) (bool, error) {
	p.loadMu.Lock()
	defer p.loadMu.Unlock()
	now := l.c.clock.Now()
	p.mu.Lock()
	if !p.loaded.IsZero() && now.Sub(p.loaded) < l.refresh {
		// Loaded by the record that held loadMu before.
		_, in := p.keys[okey]
		p.mu.Unlock()
		return in, nil
	}
	p.during = map[string]struct{}{}
	claims := p.claims
	p.mu.Unlock()
	bctx, said, cancel := bound(ctx)
	keys, err := l.store.LockedKeys(bctx, topic, partition)
	err = said(err)
	cancel()
	p.mu.Lock()
	defer p.mu.Unlock()
	during := p.during
	p.during = nil
	if err != nil {
		for k := range during {
			if p.keys != nil {
				p.keys[k] = struct{}{}
			}
		}
		return false, fmt.Errorf("read the locked keys of %s/%d: %w", topic, partition, err)
	}
	p.keys = make(map[string]struct{}, len(keys)+len(during))
	for _, k := range keys {
		p.keys[k] = struct{}{}
	}
	for k := range during {
		p.keys[k] = struct{}{}
	}
	if p.claims == claims {
		p.loaded = now
	} // else a claim started during the read: the next record reads again
	if len(keys) > 0 {
		l.c.logger.Info("redrive: keys locked by parked records", "topic", topic, "partition", partition, "keys", len(keys))
	}
	_, in := p.keys[okey]
	return in, nil
}

// park parks entries and adds their locks to the set of topic and
// partition.
func (l *keyLocks) park(ctx context.Context, topic string, partition int32, entries []Entry, said func(error) error) error {
	if _, err := l.store.Park(ctx, entries); err != nil {
		return fmt.Errorf("park %d records: %w", len(entries), said(err))
	}
	p := l.part(topic, partition)
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, e := range entries {
		if e.OrderKey == "" {
			continue
		}
		if p.keys != nil {
			p.keys[e.OrderKey] = struct{}{}
		}
		if p.during != nil {
			p.during[e.OrderKey] = struct{}{}
		}
	}
	return nil
}

// middleware parks a record of a locked key behind its key's entries
// instead of handing it to the handler.
func (l *keyLocks) middleware(next stream.Handler) stream.Handler {
	return stream.HandlerFunc(func(ctx context.Context, b *stream.Batch) error {
		key, ok := stream.OrderKey(ctx)
		if !ok || b == nil || len(b.Records) != 1 {
			return next.Handle(ctx, b)
		}
		r := b.Records[0]
		if _, _, re := redriven(r); re {
			return next.Handle(ctx, b) // the head of its key's entries
		}
		okey := OrderKey(r.Topic, r.Partition, key)
		locked, err := l.locked(ctx, b.Topic, b.Partition, okey)
		if err != nil {
			return l.storeFailed(ctx, r, "tell whether its key is locked", err)
		}
		if !locked {
			return next.Handle(ctx, b)
		}
		now := l.c.clock.Now().Truncate(Resolution)
		e := Entry{
			Key: RecordKey(r.Topic, r.Partition, r.Offset), Base: ParkedState, Status: Parked,
			StateTime: now, Created: now, Expiry: l.expiry, DueAt: now,
			LastError: "parked behind the parked records of its key " + okey,
			Message:   r, OrderKey: okey,
		}
		bctx, said, cancel := bound(ctx)
		defer cancel()
		if err := l.park(bctx, b.Topic, b.Partition, []Entry{e}, said); err != nil {
			return l.storeFailed(ctx, r, "park it behind its key", err)
		}
		l.c.logger.Info("redrive: record parked behind the parked records of its key", "topic", r.Topic, "partition", r.Partition,
			"offset", r.Offset, "key", okey)
		stream.MarkParkedBehind(ctx) // reported as ParkedBehind, not as a success
		return nil
	})
}

// storeRetry is how long a record waits before its key is looked up
// again when the store failed.
const storeRetry = 5 * time.Second

// storeFailed logs a store failure of the check of record r and asks the
// processor to deliver r again after storeRetry, for as long as it takes:
// a store that fails is not the record's failure, so it spends none of
// the record's retries, and the record is neither given up nor handled
// before its key is known not to be locked.
func (l *keyLocks) storeFailed(ctx context.Context, r stream.Record, what string, err error) error {
	if ctx.Err() == nil {
		l.c.logger.Warn("redrive: ParkByKey: the re-drive store failed; the record waits and is tried again", "topic", r.Topic,
			"partition", r.Partition, "offset", r.Offset, "doing", what, "retry_in", storeRetry, "error", err)
	}
	return stream.Retry(checkpoint.Infinite, storeRetry)
}
