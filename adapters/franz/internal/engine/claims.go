package engine

import "iter"

// maxDense is the partition number from which a claim is kept in the
// table's map instead of its topic's slice: a topic's partitions are
// numbered from 0, and a number this high (or below 0) comes from a
// broker that is wrong, whose claim must not cost a slice that long.
const maxDense = 1 << 16

// claimTable is the group's claims by partition. A topic's claims are in
// a slice indexed by partition number, 8 bytes a partition where a
// map[tp]*claim took about 80 (an idle partition's share of the heap,
// issue 50), and a lookup indexes it instead of hashing the topic's name;
// a partition numbered outside [0, maxDense) is kept in a map. The zero
// claimTable is empty; it is guarded by the group's lock.
type claimTable struct {
	topics map[string]*topicClaims
	odd    map[tp]*claim
	n      int
}

// topicClaims is a topic's claims, by partition number, and how many.
type topicClaims struct {
	ps []*claim
	n  int
}

// get returns the partition's claim, or nil.
func (t *claimTable) get(k tp) *claim {
	if k.partition < 0 || k.partition >= maxDense {
		return t.odd[k]
	}
	tc := t.topics[k.topic]
	if tc == nil || int(k.partition) >= len(tc.ps) {
		return nil
	}
	return tc.ps[k.partition]
}

// set makes cl, not nil, the partition's claim, in place of any other.
func (t *claimTable) set(k tp, cl *claim) {
	if k.partition < 0 || k.partition >= maxDense {
		if t.odd == nil {
			t.odd = make(map[tp]*claim)
		}
		if t.odd[k] == nil {
			t.n++
		}
		t.odd[k] = cl
		return
	}
	if t.topics == nil {
		t.topics = make(map[string]*topicClaims)
	}
	tc := t.topics[k.topic]
	if tc == nil {
		tc = new(topicClaims)
		t.topics[k.topic] = tc
	}
	if n := int(k.partition) + 1; n > len(tc.ps) {
		// Doubled as it grows: partitions are most often assigned in
		// order, and growing by one each time would copy the slice
		// once per partition. What lies past the length is never set.
		if n > cap(tc.ps) {
			grown := make([]*claim, len(tc.ps), max(n, 2*cap(tc.ps)))
			copy(grown, tc.ps)
			tc.ps = grown
		}
		tc.ps = tc.ps[:n]
	}
	if tc.ps[k.partition] == nil {
		tc.n++
		t.n++
	}
	tc.ps[k.partition] = cl
}

// remove takes the partition's claim out of the table and returns it, or
// nil when it had none. A topic left with no claim is let go.
func (t *claimTable) remove(k tp) *claim {
	if k.partition < 0 || k.partition >= maxDense {
		cl := t.odd[k]
		if cl != nil {
			delete(t.odd, k)
			t.n--
		}
		return cl
	}
	tc := t.topics[k.topic]
	if tc == nil || int(k.partition) >= len(tc.ps) || tc.ps[k.partition] == nil {
		return nil
	}
	cl := tc.ps[k.partition]
	tc.ps[k.partition] = nil
	tc.n--
	t.n--
	if tc.n == 0 {
		delete(t.topics, k.topic)
	}
	return cl
}

// len returns how many partitions have a claim.
func (t *claimTable) len() int { return t.n }

// all yields every claim; the table must not change meanwhile.
func (t *claimTable) all() iter.Seq[*claim] {
	return func(yield func(*claim) bool) {
		for _, tc := range t.topics {
			for _, cl := range tc.ps {
				if cl != nil && !yield(cl) {
					return
				}
			}
		}
		for _, cl := range t.odd {
			if !yield(cl) {
				return
			}
		}
	}
}
