package engine

import (
	"math"
	"slices"
	"testing"
)

// The claim table against a map of the same operations: every lookup,
// count and walk agrees, for dense partitions, partitions added out of
// order, topics emptied and filled again, and partition numbers a broker
// should never send (negative, huge), which go to its map and cost no
// long slice.
func TestClaimTable(t *testing.T) {
	var (
		table claimTable
		want  = map[tp]*claim{}
	)
	check := func(step string) {
		t.Helper()
		if table.len() != len(want) {
			t.Fatalf("%s: len %d, want %d", step, table.len(), len(want))
		}
		for k, cl := range want {
			if got := table.get(k); got != cl {
				t.Fatalf("%s: get(%v) = %p, want %p", step, k, got, cl)
			}
		}
		var got, all []*claim
		for cl := range table.all() {
			got = append(got, cl)
		}
		for _, cl := range want {
			all = append(all, cl)
		}
		less := func(a, b *claim) int {
			if a.key.topic != b.key.topic {
				if a.key.topic < b.key.topic {
					return -1
				}
				return 1
			}
			return int(a.key.partition) - int(b.key.partition)
		}
		slices.SortFunc(got, less)
		slices.SortFunc(all, less)
		if !slices.Equal(got, all) {
			t.Fatalf("%s: all() walked %d claims, want %d", step, len(got), len(all))
		}
	}
	set := func(topic string, p int32) *claim {
		k := tp{topic, p}
		cl := &claim{key: k}
		table.set(k, cl)
		want[k] = cl
		return cl
	}
	remove := func(topic string, p int32) {
		t.Helper()
		k := tp{topic, p}
		if got := table.remove(k); got != want[k] {
			t.Fatalf("remove(%v) = %p, want %p", k, got, want[k])
		}
		delete(want, k)
	}

	check("empty")
	if table.get(tp{"a", 0}) != nil || table.remove(tp{"a", 3}) != nil {
		t.Fatal("an empty table has a claim")
	}
	for p := range int32(8) {
		set("a", 7-p) // the highest first
	}
	set("b", 2)
	check("dense")
	set("a", 3) // replaced: the count stays
	check("replaced")
	remove("a", 3)
	remove("a", 3) // twice: nothing the second time
	remove("b", 2)
	check("removed")
	if _, ok := table.topics["b"]; ok {
		t.Error("a topic left with no claim is still in the table")
	}
	for _, p := range []int32{-1, math.MaxInt32, maxDense, maxDense - 1} {
		set("c", p)
	}
	check("odd numbers")
	if tc := table.topics["c"]; tc == nil || len(tc.ps) != maxDense {
		t.Errorf("topic c's slice: %v partitions long, want %d (the highest dense number + 1)", tc, maxDense)
	}
	// Partitions set in order grow the slice by doubling, not once each.
	var inOrder claimTable
	grows := 0
	for p := range int32(1000) {
		before := inOrder.topics["d"]
		var c0 int
		if before != nil {
			c0 = cap(before.ps)
		}
		inOrder.set(tp{"d", p}, &claim{})
		if cap(inOrder.topics["d"].ps) != c0 {
			grows++
		}
	}
	if grows > 11 {
		t.Errorf("1,000 partitions set in order grew the slice %d times, want at most 11", grows)
	}
	remove("c", -1)
	remove("c", math.MaxInt32)
	check("odd numbers removed")
	for k := range want {
		remove(k.topic, k.partition)
	}
	check("emptied")
	set("a", 1)
	check("filled again")
}
