package redrivetest

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/redeliver-go/redeliver/redrive"
	"github.com/redeliver-go/redeliver/stream"
)

// MemStore is a [redrive.Store] in memory, for tests of code that parks,
// completes or lists entries without a database. It keeps the whole
// contract (idempotent parking, compare-and-set changes, due order,
// exclusive claims) and runs the conformance suite, but nothing survives
// the process. Use redrive/sqlitestore or redrive/pgstore in production.
//
// The zero MemStore is an empty store, as is [NewMemStore]'s.
type MemStore struct {
	mu       sync.Mutex
	claim    chan struct{} // holds a token through a claim, as the stores hold their locks
	entries  map[string]*redrive.Entry
	byID     map[int64]*redrive.Entry
	reparked map[int64]int // the highest re-drive number counted in Reparks
	nextID   int64
}

// NewMemStore returns an empty MemStore.
func NewMemStore() *MemStore { return &MemStore{} }

// init makes the maps of a zero MemStore; s.mu is held.
func (s *MemStore) init() {
	if s.entries == nil {
		s.entries, s.byID, s.reparked = map[string]*redrive.Entry{}, map[int64]*redrive.Entry{}, map[int64]int{}
		s.claim = make(chan struct{}, 1)
	}
}

// lockClaims waits until no claim runs and keeps others from starting,
// or returns ctx's error; unlockClaims ends it.
func (s *MemStore) lockClaims(ctx context.Context) error {
	if ctx == nil {
		return errors.New("redrivetest: nil context")
	}
	s.mu.Lock()
	s.init()
	ch := s.claim
	s.mu.Unlock()
	select {
	case ch <- struct{}{}:
		return nil
	case <-ctx.Done():
		return fmt.Errorf("redrivetest: waiting for a claim to end: %w", context.Cause(ctx))
	}
}

func (s *MemStore) unlockClaims() { <-s.claim }

// copyEntry returns e with its own copies of the message's slices.
func copyEntry(e redrive.Entry) redrive.Entry {
	m := &e.Message
	m.Key, m.Value = slices.Clone(m.Key), slices.Clone(m.Value)
	if m.Headers != nil {
		hs := make([]stream.Header, len(m.Headers))
		for i, h := range m.Headers {
			hs[i] = stream.Header{Key: h.Key, Value: slices.Clone(h.Value)}
		}
		m.Headers = hs
	}
	return e
}

// Park inserts the entries whose key is new; see [redrive.Store.Park].
func (s *MemStore) Park(ctx context.Context, entries []redrive.Entry) (int, error) {
	if err := ctxErr(ctx); err != nil {
		return 0, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.init()
	n := 0
	for _, e := range entries {
		if _, ok := s.entries[e.Key]; ok {
			continue
		}
		s.nextID++
		c := copyEntry(e)
		c.ID, c.Version = s.nextID, 1
		s.entries[c.Key], s.byID[c.ID] = &c, &c
		n++
	}
	return n, nil
}

// Get returns the entry called key; see [redrive.Store.Get].
func (s *MemStore) Get(ctx context.Context, key string) (redrive.Entry, error) {
	if err := ctxErr(ctx); err != nil {
		return redrive.Entry{}, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.init()
	e, ok := s.entries[key]
	if !ok {
		return redrive.Entry{}, fmt.Errorf("%w: %q", redrive.ErrNotFound, key)
	}
	return copyEntry(*e), nil
}

// Complete moves the entry called key to done; see
// [redrive.Store.Complete]. It waits for a claim in progress.
func (s *MemStore) Complete(ctx context.Context, key string, at time.Time) (redrive.Entry, error) {
	if err := s.lockClaims(ctx); err != nil {
		return redrive.Entry{}, err
	}
	defer s.unlockClaims()
	return s.change(ctx, key, func(e *redrive.Entry) error {
		if !e.Status.Pending() {
			return fmt.Errorf("%w: %q is %s", redrive.ErrNotPending, key, e.State())
		}
		e.Status, e.StateTime, e.DueAt = redrive.Done, at, time.Time{}
		return nil
	})
}

// Requeue makes the entry called key parked and due at at; see
// [redrive.Store.Requeue]. It waits for a claim in progress.
func (s *MemStore) Requeue(ctx context.Context, key string, at time.Time) (redrive.Entry, error) {
	if err := s.lockClaims(ctx); err != nil {
		return redrive.Entry{}, err
	}
	defer s.unlockClaims()
	return s.change(ctx, key, func(e *redrive.Entry) error {
		if e.Status == redrive.Done {
			return fmt.Errorf("%w: %q is %s: a done entry is not re-driven", redrive.ErrNotPending, key, e.State())
		}
		e.Status, e.StateTime, e.DueAt = redrive.Parked, at, at
		return nil
	})
}

// Repark hands a re-driven record's failure back to the entry called key;
// see [redrive.Store.Repark]. It waits for a claim in progress.
func (s *MemStore) Repark(ctx context.Context, key string, number int, lastError string) (redrive.Entry, bool, error) {
	if err := s.lockClaims(ctx); err != nil {
		return redrive.Entry{}, false, err
	}
	defer s.unlockClaims()
	counted := false
	e, err := s.change(ctx, key, func(e *redrive.Entry) error {
		if !e.Status.Pending() {
			return fmt.Errorf("%w: %q is %s", redrive.ErrNotPending, key, e.State())
		}
		e.LastError = lastError
		if number > s.reparked[e.ID] {
			s.reparked[e.ID] = number
			e.Reparks++
			counted = true
		}
		return nil
	})
	return e, counted, err
}

// ctxErr is ctx's error, or one for a nil ctx.
func ctxErr(ctx context.Context) error {
	if ctx == nil {
		return errors.New("redrivetest: nil context")
	}
	return ctx.Err()
}

// change applies fn to the entry called key and counts a version when fn
// changed it.
func (s *MemStore) change(ctx context.Context, key string, fn func(*redrive.Entry) error) (redrive.Entry, error) {
	if err := ctxErr(ctx); err != nil {
		return redrive.Entry{}, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.init()
	e, ok := s.entries[key]
	if !ok {
		return redrive.Entry{}, fmt.Errorf("%w: %q", redrive.ErrNotFound, key)
	}
	if err := fn(e); err != nil {
		return copyEntry(*e), err
	}
	e.Version++
	return copyEntry(*e), nil
}

// Claim claims due entries; see [redrive.Store.Claim]. Claims are
// exclusive within this MemStore: one runs at a time.
func (s *MemStore) Claim(ctx context.Context, now time.Time, limit int, fn func(context.Context, []redrive.Entry) []redrive.Change) (int, []redrive.Change, error) {
	if err := ctxErr(ctx); err != nil {
		return 0, nil, err
	}
	if fn == nil {
		return 0, nil, errors.New("redrivetest: Claim: nil function")
	}
	if err := s.lockClaims(ctx); err != nil {
		return 0, nil, err
	}
	defer s.unlockClaims()
	s.mu.Lock()
	var due []redrive.Entry
	for _, e := range s.byID {
		if e.Status.Pending() && !e.DueAt.IsZero() && !e.DueAt.After(now) && !s.heldBack(e) {
			due = append(due, copyEntry(*e))
		}
	}
	s.mu.Unlock()
	slices.SortFunc(due, func(a, b redrive.Entry) int {
		if c := a.DueAt.Compare(b.DueAt); c != 0 {
			return c
		}
		return int(a.ID - b.ID)
	})
	if limit > 0 && len(due) > limit {
		due = due[:limit]
	}
	if len(due) == 0 {
		return 0, nil, nil
	}
	changes := fn(ctx, due)
	s.mu.Lock()
	defer s.mu.Unlock()
	var applied []redrive.Change
	for _, c := range changes {
		e, ok := s.byID[c.ID]
		if !ok || e.Status != c.Status || e.Version != c.Version {
			continue
		}
		e.Status, e.StateTime, e.DueAt, e.Redrives, e.LastError = c.To, c.StateTime, c.DueAt, c.Redrives, c.LastError
		e.Version++
		applied = append(applied, c)
	}
	return len(due), applied, nil
}

// List returns entries by ascending ID; see [redrive.Store.List].
func (s *MemStore) List(ctx context.Context, f redrive.Filter) ([]redrive.Entry, error) {
	if err := ctxErr(ctx); err != nil {
		return nil, err
	}
	limit := f.Limit
	if limit <= 0 {
		limit = redrive.DefaultListLimit
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.init()
	ids := make([]int64, 0, len(s.byID))
	for id, e := range s.byID {
		if id > f.AfterID && (f.Status == 0 || e.Status == f.Status) && (f.Topic == "" || e.Message.Topic == f.Topic) {
			ids = append(ids, id)
		}
	}
	slices.Sort(ids)
	if len(ids) > limit {
		ids = ids[:limit]
	}
	out := make([]redrive.Entry, len(ids))
	for i, id := range ids {
		out[i] = copyEntry(*s.byID[id])
	}
	return out, nil
}

// heldBack reports whether a pending entry of e's order key with a lower
// ID holds e back. s.mu is held.
func (s *MemStore) heldBack(e *redrive.Entry) bool {
	if e.OrderKey == "" {
		return false
	}
	for _, b := range s.byID {
		if b.OrderKey == e.OrderKey && b.ID < e.ID && b.Status.Pending() {
			return true
		}
	}
	return false
}

// LockedKeys returns the order keys with a pending entry of a record of
// topic and partition; see [redrive.KeyLocker].
func (s *MemStore) LockedKeys(ctx context.Context, topic string, partition int32) ([]string, error) {
	if err := ctxErr(ctx); err != nil {
		return nil, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	seen := map[string]bool{}
	var out []string
	for _, e := range s.byID {
		if e.OrderKey != "" && e.Status.Pending() && e.Message.Topic == topic && e.Message.Partition == partition && !seen[e.OrderKey] {
			seen[e.OrderKey] = true
			out = append(out, e.OrderKey)
		}
	}
	return out, nil
}

// KeyLocked reports whether the order key has a pending entry; see
// [redrive.KeyLocker].
func (s *MemStore) KeyLocked(ctx context.Context, orderKey string) (bool, error) {
	if err := ctxErr(ctx); err != nil {
		return false, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, e := range s.byID {
		if orderKey != "" && e.OrderKey == orderKey && e.Status.Pending() {
			return true, nil
		}
	}
	return false, nil
}

var _ redrive.KeyLocker = (*MemStore)(nil)
