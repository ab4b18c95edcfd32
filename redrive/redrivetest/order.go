package redrivetest

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/redeliver-go/redeliver/redrive"
)

// The cases of key order (redrive.Entry.OrderKey, redrive.KeyLocker,
// redrive.ParkByKey).

// keyed returns entry(key, due) with order key ok.
func keyed(key, ok string, due time.Time) redrive.Entry {
	e := entry(key, due)
	e.OrderKey = ok
	return e
}

// claimKeys claims what is due at now and returns the claimed keys; fn
// gives the changes.
func claimKeys(t *testing.T, s redrive.Store, now time.Time, fn func(redrive.Entry) *redrive.Change) []string {
	t.Helper()
	var got []string
	_, _, err := s.Claim(ctxFor(t), now, 100, func(_ context.Context, due []redrive.Entry) []redrive.Change {
		var cs []redrive.Change
		for _, e := range due {
			got = append(got, e.Key)
			if fn != nil {
				if c := fn(e); c != nil {
					cs = append(cs, *c)
				}
			}
		}
		return cs
	})
	if err != nil {
		t.Fatalf("Claim: %v", err)
	}
	slices.Sort(got)
	return got
}

func testOrderKeyKept(t *testing.T, s redrive.Store) {
	want := keyed("a", "onboarding/device-é", t0.Add(time.Minute))
	mustPark(t, s, want, entry("b", t0))
	if d := diff(mustGet(t, s, "a"), want); d != "" {
		t.Fatalf("entry with an order key read back: %s", d)
	}
	if got := mustGet(t, s, "b"); got.OrderKey != "" {
		t.Fatalf("entry without an order key read back with %q", got.OrderKey)
	}
	es, err := s.List(ctxFor(t), redrive.Filter{})
	if err != nil || len(es) != 2 || es[0].OrderKey != want.OrderKey {
		t.Fatalf("List = %+v, %v: want the order key kept", es, err)
	}
}

// testClaimKeepsKeyOrder: a key's entries are claimed one at a time, in
// the order they were parked, each once the one before is done or timed
// out (not merely re-driven); other keys and entries without an order
// key are claimed as before.
func testClaimKeepsKeyOrder(t *testing.T, s redrive.Store) {
	now := t0.Add(time.Hour)
	// k3 is due first, yet k1 (parked first) holds it back.
	mustPark(t, s,
		keyed("k1", "orders/K", t0.Add(2*time.Minute)),
		keyed("k2", "orders/K", t0.Add(time.Minute)),
		keyed("k3", "orders/K", t0),
		keyed("l1", "orders/L", t0),
		entry("x", t0), entry("y", t0),
	)
	retry := func(e redrive.Entry) *redrive.Change {
		if e.Key != "k1" && e.Key != "k2" {
			return nil
		}
		return &redrive.Change{ID: e.ID, Status: e.Status, Version: e.Version, To: redrive.Retrying,
			StateTime: now, DueAt: now.Add(time.Minute), Redrives: e.Redrives + 1}
	}
	if got := claimKeys(t, s, now, retry); !slices.Equal(got, []string{"k1", "l1", "x", "y"}) {
		t.Fatalf("first claim took %v: want k1, l1, x, y (k2 and k3 wait behind k1)", got)
	}
	// k1 re-driven (retrying) still holds its key.
	if got := claimKeys(t, s, now.Add(2*time.Minute), nil); !slices.Equal(got, []string{"k1", "l1", "x", "y"}) {
		t.Fatalf("claim with k1 retrying took %v: want k1 again and the others, never k2 or k3", got)
	}
	if _, err := s.Complete(ctxFor(t), "k1", now.Add(3*time.Minute)); err != nil {
		t.Fatal(err)
	}
	if got := claimKeys(t, s, now.Add(3*time.Minute), retry); !slices.Equal(got, []string{"k2", "l1", "x", "y"}) {
		t.Fatalf("claim after k1 was done took %v: want k2 (not k3) and the others", got)
	}
	// k2 times out: k3 is next.
	timeout := func(e redrive.Entry) *redrive.Change {
		if e.Key != "k2" {
			return nil
		}
		return &redrive.Change{ID: e.ID, Status: e.Status, Version: e.Version, To: redrive.TimedOut,
			StateTime: now.Add(5 * time.Minute), Redrives: e.Redrives, LastError: "timed out"}
	}
	if got := claimKeys(t, s, now.Add(5*time.Minute), timeout); !slices.Equal(got, []string{"k2", "l1", "x", "y"}) {
		t.Fatalf("claim with k2 retrying took %v: want k2, l1, x, y", got)
	}
	if got := claimKeys(t, s, now.Add(5*time.Minute), nil); !slices.Equal(got, []string{"k3", "l1", "x", "y"}) {
		t.Fatalf("claim after k2 timed out took %v: want k3 and the others", got)
	}
}

// testKeyLocks: LockedKeys and KeyLocked name the order keys with a
// pending entry, by the partition of its record.
func testKeyLocks(t *testing.T, s redrive.Store) {
	kl, ok := s.(redrive.KeyLocker)
	if !ok {
		t.Skipf("%T is not a redrive.KeyLocker: redrive.ParkByKey refuses it", s)
	}
	ctx := ctxFor(t)
	other := keyed("p4", "onboarding/M", t0)
	other.Message.Partition = 4
	mustPark(t, s, keyed("a1", "onboarding/K", t0), keyed("a2", "onboarding/K", t0), keyed("b1", "onboarding/L", t0), entry("c", t0), other)
	got, err := kl.LockedKeys(ctx, "onboarding", 3)
	slices.Sort(got)
	if err != nil || !slices.Equal(got, []string{"onboarding/K", "onboarding/L"}) {
		t.Fatalf("LockedKeys(onboarding, 3) = %v, %v: want onboarding/K and onboarding/L, once each", got, err)
	}
	if got, err := kl.LockedKeys(ctx, "onboarding", 4); err != nil || !slices.Equal(got, []string{"onboarding/M"}) {
		t.Fatalf("LockedKeys(onboarding, 4) = %v, %v", got, err)
	}
	if got, err := kl.LockedKeys(ctx, "other", 3); err != nil || len(got) != 0 {
		t.Fatalf("LockedKeys(other, 3) = %v, %v: want none", got, err)
	}
	for key, want := range map[string]bool{"onboarding/K": true, "onboarding/L": true, "onboarding/N": false, "": false} {
		if got, err := kl.KeyLocked(ctx, key); err != nil || got != want {
			t.Errorf("KeyLocked(%q) = %v, %v; want %v", key, got, err, want)
		}
	}
	for _, k := range []string{"a1", "b1"} {
		if _, err := s.Complete(ctx, k, t0); err != nil {
			t.Fatal(err)
		}
	}
	if locked, err := kl.KeyLocked(ctx, "onboarding/K"); err != nil || !locked {
		t.Fatalf("KeyLocked(onboarding/K) with a2 pending = %v, %v", locked, err)
	}
	if locked, err := kl.KeyLocked(ctx, "onboarding/L"); err != nil || locked {
		t.Fatalf("KeyLocked(onboarding/L) once its entry is done = %v, %v: want released", locked, err)
	}
	if _, err := s.Complete(ctx, "a2", t0); err != nil {
		t.Fatal(err)
	}
	if got, err := kl.LockedKeys(ctx, "onboarding", 3); err != nil || len(got) != 0 {
		t.Fatalf("LockedKeys once every entry is done = %v, %v: want none", got, err)
	}
}
