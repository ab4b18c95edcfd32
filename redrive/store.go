package redrive

import (
	"context"
	"errors"
	"time"
)

// Store keeps parked entries. Two implementations ship in modules of their
// own, so that a program builds only the driver it uses: pgstore
// (PostgreSQL through pgx, for several scheduler instances) and sqlitestore
// (an embedded SQLite file, for one instance and for examples). Both pass
// the conformance suite in [github.com/redeliver-go/redeliver/redrive/redrivetest].
//
// A Store must be safe for concurrent use. Every change it makes to an
// existing entry is a compare-and-set on the status (and, for a sweep, the
// version) it expects: a sweep that read an entry never overwrites one that
// was completed meanwhile. Every wait (for a lock, a connection, a claim)
// ends when the caller's context does.
//
// A Store keeps what it is given byte for byte: errors and header keys may
// hold any bytes (a NUL, invalid UTF-8), and an empty key, value or header
// value stays empty, not absent (nil), as nil stays nil. Times are kept to
// the microsecond.
type Store interface {
	// Park inserts the entries whose key is not in the store yet, all in
	// one transaction, and returns how many it inserted; the others are
	// left as they are. It sets nothing but ID and Version (1): the caller
	// fills in the status, times and message.
	Park(ctx context.Context, entries []Entry) (inserted int, err error)

	// Get returns the entry called key, or an error matching [ErrNotFound].
	Get(ctx context.Context, key string) (Entry, error)

	// Complete moves the entry called key from parked or retrying to done
	// at time at, and returns it. It waits for a claim that holds the
	// entry (so a completion never lands between a re-drive's publish and
	// its mark), and gives up when ctx ends. For an entry already done or timed out it
	// changes nothing and returns the entry with an error matching
	// [ErrNotPending]; for a missing one, an error matching [ErrNotFound].
	Complete(ctx context.Context, key string, at time.Time) (Entry, error)

	// Repark records on the entry called key that the record of its
	// re-drive number failed again and was given up by its consumer: the
	// [Park] action hands such a record back to its entry instead of
	// parking it anew. The entry keeps its status, times and re-drives,
	// takes lastError, and counts the failure in [Entry.Reparks] once per
	// number: handing the same re-drive back again (after a redelivery)
	// changes the error only. It reports whether it counted. For an entry
	// done or timed out it changes nothing and returns the entry with an
	// error matching [ErrNotPending]; for a missing one, an error matching
	// [ErrNotFound]. Like Complete, it waits for a claim that holds the
	// entry, and gives up when ctx ends.
	Repark(ctx context.Context, key string, number int, lastError string) (e Entry, counted bool, err error)

	// Claim claims up to limit pending entries due at now (DueAt <= now),
	// earliest first, so that no other Claim on the same store gets them
	// while fn runs. It never claims an entry while an entry of the same
	// [Entry.OrderKey] ("" excepted) with a lower ID is pending (parked or
	// retrying): a key's entries are re-driven one at a time, in order; fn returns the changes to make, and Claim applies each
	// as a compare-and-set on the status and version it names. It returns
	// the number of entries claimed and the changes applied. When it
	// returns an error, no change was applied. fn is not called when
	// nothing is due.
	Claim(ctx context.Context, now time.Time, limit int, fn func(context.Context, []Entry) []Change) (claimed int, applied []Change, err error)

	// Requeue makes the entry called key due at time at, parked again:
	// the next sweep from at on re-drives it. It is what an operator does
	// for an entry that waits too long (parked or retrying) or was timed
	// out: an entry timed out by the retry timeout gets one more re-drive,
	// and times out again if nothing completes it within its expiry, since
	// the retry timeout counts from its creation, which Requeue keeps, as
	// it keeps the number of re-drives and the last error. It returns the
	// entry as changed. For a done entry it changes nothing and returns the
	// entry with an error matching [ErrNotPending]; for a missing one, an
	// error matching [ErrNotFound].
	Requeue(ctx context.Context, key string, at time.Time) (Entry, error)

	// List returns entries by ascending ID, as the filter selects.
	List(ctx context.Context, f Filter) ([]Entry, error)
}

// KeyLocker is a [Store] that keeps the key locks of [ParkByKey]: the
// order keys that have a pending entry. Both stores that ship implement
// it, and pass the conformance suite's cases of it.
type KeyLocker interface {
	Store
	// LockedKeys returns the order keys (see [Entry.OrderKey]) that have a
	// pending entry (parked or retrying) whose record came from topic and
	// partition, each once, in no particular order.
	LockedKeys(ctx context.Context, topic string, partition int32) ([]string, error)
	// KeyLocked reports whether the order key has a pending entry.
	KeyLocked(ctx context.Context, orderKey string) (bool, error)
}

// Filter selects the entries [Store.List] returns.
type Filter struct {
	// Status selects entries in this status; 0 selects all.
	Status Status
	// Topic selects entries whose record came from this topic; "" selects
	// all.
	Topic string
	// AfterID selects entries whose ID is greater, for paging.
	AfterID int64
	// Limit caps the number of entries; 0 means 1000.
	Limit int
}

// DefaultListLimit is the number of entries [Store.List] returns when
// [Filter.Limit] is 0.
const DefaultListLimit = 1000

// ErrNotFound is matched by the error a [Store] returns for a key it does
// not hold.
var ErrNotFound = errors.New("redrive: no such entry")

// ErrNotPending is matched by the error [Store.Complete] returns for an
// entry already done or timed out, and [Store.Requeue] for a done one.
var ErrNotPending = errors.New("redrive: entry is not pending")
