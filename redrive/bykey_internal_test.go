package redrive

import (
	"context"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/redeliver-go/redeliver/stream"
)

// lockedStore is a KeyLocker whose locked keys are fixed, counting its
// calls.
type lockedStore struct {
	KeyLocker
	keys          []string
	loads, checks int
	onLoad        func() // runs after a load read the keys, before it returns them
}

func (s *lockedStore) LockedKeys(context.Context, string, int32) ([]string, error) {
	s.loads++
	out := slices.Clone(s.keys)
	if s.onLoad != nil {
		s.onLoad()
	}
	return out, nil
}

func (s *lockedStore) Park(_ context.Context, es []Entry) (int, error) {
	for _, e := range es {
		s.keys = append(s.keys, e.OrderKey)
	}
	return len(es), nil
}

func (s *lockedStore) KeyLocked(_ context.Context, k string) (bool, error) {
	s.checks++
	for _, x := range s.keys {
		if x == k {
			return true, nil
		}
	}
	return false, nil
}

// BenchmarkLockCheck is the check ParkByKey makes for a record whose key
// is not locked, with 1,000 keys of its partition locked: the record's
// order key and a look in the partition's set, no store call.
func BenchmarkLockCheck(b *testing.B) {
	s := &lockedStore{}
	for i := range 1000 {
		s.keys = append(s.keys, OrderKey("orders", 0, "locked-"+strconv.Itoa(i)))
	}
	c, err := newConfig("bench", nil)
	if err != nil {
		b.Fatal(err)
	}
	l := &keyLocks{store: s, c: c, expiry: time.Minute, refresh: lockRefresh, parts: map[partKey]*partLocks{}}
	keys := make([]string, 1000)
	for i := range keys {
		keys[i] = "customer-" + strconv.Itoa(i)
	}
	ctx := context.Background()
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		locked, err := l.locked(ctx, "orders", 0, OrderKey("orders", 0, keys[i%len(keys)]))
		if err != nil || locked {
			b.Fatal(locked, err)
		}
	}
	b.StopTimer()
	if s.checks != 0 || s.loads != 1 {
		b.Fatalf("%d store checks and %d loads for keys not locked: want none and one", s.checks, s.loads)
	}
}

// TestLockSetRefresh: the set is read once per claim and per refresh
// interval; a key in the set is checked in the store, and dropped once
// released; a claim forgets the set.
func TestLockSetRefresh(t *testing.T) {
	s := &lockedStore{keys: []string{"orders/0/K"}}
	clock := &fixedClock{t: time.Unix(1000, 0)}
	c, err := newConfig("test", []Option{WithClock(clock)})
	if err != nil {
		t.Fatal(err)
	}
	l := &keyLocks{store: s, c: c, expiry: time.Minute, refresh: lockRefresh, parts: map[partKey]*partLocks{}}
	ctx := t.Context()
	check := func(key string, want bool, loads, checks int) {
		t.Helper()
		got, err := l.locked(ctx, "orders", 0, key)
		if err != nil || got != want || s.loads != loads || s.checks != checks {
			t.Fatalf("locked(%s) = %v, %v after %d loads, %d checks; want %v after %d, %d", key, got, err, s.loads, s.checks, want, loads, checks)
		}
	}
	check("orders/0/A", false, 1, 0)
	check("orders/0/K", true, 1, 1)
	s.keys = nil // released in the store
	check("orders/0/K", false, 1, 2)
	check("orders/0/K", false, 1, 2) // dropped from the set: no store call
	s.keys = []string{"orders/0/L"}  // locked by another instance
	check("orders/0/L", false, 1, 2) // not seen until the refresh (a claim starts one at once)
	clock.t = clock.t.Add(lockRefresh)
	check("orders/0/L", true, 2, 3)
	s.keys = []string{"orders/0/M"}
	l.claimed(streamClaim("orders", 0))
	check("orders/0/M", true, 3, 4)

	// A park of this processor that lands while a load reads the store
	// (the read predates it) is kept.
	s.onLoad = func() {
		if err := l.park(ctx, "orders", 0, []Entry{{OrderKey: "orders/0/P"}}, func(err error) error { return err }); err != nil {
			t.Fatal(err)
		}
	}
	l.claimed(streamClaim("orders", 0))
	check("orders/0/A", false, 4, 4)
	s.onLoad = nil
	check("orders/0/P", true, 4, 5)
}

type fixedClock struct{ t time.Time }

func (c *fixedClock) Now() time.Time { return c.t }

func (c *fixedClock) NewTimer(time.Duration) (<-chan time.Time, func() bool) {
	return make(chan time.Time), func() bool { return true }
}

func streamClaim(topic string, partition int32) stream.ClaimEvent {
	return stream.ClaimEvent{Topic: topic, Partition: partition}
}
