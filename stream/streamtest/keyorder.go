package streamtest

import (
	"context"
	"fmt"

	"github.com/redeliver-go/redeliver/checkpoint"
	"github.com/redeliver-go/redeliver/internal/retrystate"
	"github.com/redeliver-go/redeliver/stream"
)

// Middleware returns a middleware that records, as a Started event of
// member, every handler call as it begins: [History.CheckKeys] needs to
// know when each one began, not only when it returned. Put it innermost
// (last in stream.Chain), next to the handler.
func (h *History) Middleware(member string) stream.Middleware {
	return func(next stream.Handler) stream.Handler {
		return stream.HandlerFunc(func(ctx context.Context, b *stream.Batch) error {
			h.add(Event{Kind: Started, Member: member, Topic: b.Topic, Partition: b.Partition,
				First: b.FirstOffset(), Last: b.LastOffset(), Retry: b.Attempt.Retries, MaxRetries: b.Attempt.MaxRetries})
			return next.Handle(ctx, b)
		})
	}
}

// CheckKeys verifies a history of consumers that keep order per key
// (records of one key one at a time, in offset order; records of
// different keys at once), for partitions whose records run from offset 0
// to len(keys[tp]) (exclusive), keys[tp][o] being the key of the record
// at o (records without a key share the key ""). The history needs the
// Started events of [History.Middleware] besides the hooks' events. It
// checks, over every member:
//
//   - per-key order: no delivery of a record begins before every earlier
//     record of its key is finished (handled, or given up) and none of
//     them is being delivered; and none begins while a later record of its
//     key is being delivered;
//   - the per-record bound: a delivery is never told a retry number past
//     the limit of the policy in force, and no record fails more than
//     that limit (the largest its deliveries reported) plus one times,
//     plus one for each time its partition was claimed again while it was
//     unfinished (a move may lose a first failure not yet committed);
//     with MemoryOnly, a move starts the count over. The failures that
//     count against a record are as in [History.Check]: a failure that
//     names it, a failure of a whole batch that holds it, a retry of it
//     cut short; not a failure during an outage (Event.Uncounted). A
//     give-up starts the count over (a resume of a stopped partition
//     delivers the record again);
//   - a finish that was committed is final: a record below a committed
//     offset, or marked finished in a committed window
//     (the engine restores the window), was handled or resolved by its
//     exhaustion action before that commit, and is never delivered
//     again; except, as in [History.Check], when a new owner starts
//     after a claim that was never released (a crash: the commits its
//     adapter had coalesced are gone), or one released with its last
//     commit unwritten (an Unwritten event names it): then what that
//     owner's claim read (its Claimed event's offset and metadata) is
//     final;
//   - no record lost: every record was handled, or given up and its
//     exhaustion action succeeded.
//
// Handled means as in [History.Check]: the handler returned nil or a
// RetryResult for the record's batch, or the records before a
// BatchError's index.
func (h *History) CheckKeys(keys map[TopicPartition][]string) Report {
	type flight struct {
		member string
		tp     TopicPartition
		first  int64
	}
	type rec struct {
		done       bool // handled, or given up
		resolved   bool // handled, or its exhaustion action succeeded
		final      bool // a commit said it was finished
		deliveries int  // deliveries begun
		counted    int  // failed deliveries counted against it since its last give-up
		limit      int  // the largest limit of the policy its deliveries reported since; -1 for none yet
		infinite   bool // a delivery since reported no limit
		moves      int  // claims of its partition while it was unfinished, since its last give-up
		started    bool // delivered at least once
	}
	// key is what the checker knows of one key of a partition.
	type key struct {
		offsets  []int64       // its records, ascending
		low      int           // offsets[:low] are done
		inFlight map[int64]int // its records being delivered
	}
	type part struct {
		recs  []rec
		keys  map[string]*key
		final int64     // records below are final
		owner *claimKey // the latest claim of the partition; nil once released
		// released is the claim released last, until the next claim.
		released *claimKey
	}
	var r Report
	bad := func(format string, args ...any) { r.Violations = append(r.Violations, fmt.Sprintf(format, args...)) }
	bound := func(tp TopicPartition, o int64, x *rec) {
		if x.limit < 0 || x.infinite {
			return
		}
		allowed := x.limit + 1 + x.moves
		if h.MemoryOnly {
			allowed = (x.limit + 1) * (x.moves + 1) // a move starts the count over
		}
		if x.counted > allowed {
			bad("%s/%d: record %d failed %s, but its policy allows %s (%d retries, %d moves while it was unfinished)",
				tp.Topic, tp.Partition, o, count(x.counted, "time", "times"), count(allowed, "failed delivery", "failed deliveries"), x.limit, x.moves)
		}
	}
	parts := map[TopicPartition]*part{}
	for tp, ks := range keys {
		p := &part{recs: make([]rec, len(ks)), keys: map[string]*key{}}
		for o, k := range ks {
			p.recs[o].limit = -1
			x := p.keys[k]
			if x == nil {
				x = &key{inFlight: map[int64]int{}}
				p.keys[k] = x
			}
			x.offsets = append(x.offsets, int64(o))
		}
		parts[tp] = p
	}
	// live counts, per member and batch, the deliveries begun and not
	// returned.
	live := map[flight]int{}
	events, skip := h.checked()
	unwritten := unwrittenClaims(events)
	for i, e := range events {
		tp := TopicPartition{e.Topic, e.Partition}
		p, ok := parts[tp]
		if !ok || skip[i] {
			continue
		}
		rs, ks := p.recs, keys[tp]
		where := fmt.Sprintf("event %d: %s %s %s/%d", i, e.Member, e.Kind, e.Topic, e.Partition)
		inRange := func(first, last int64) bool {
			if first < 0 || last >= int64(len(rs)) || first > last {
				bad("%s: offsets %d-%d out of the partition's range [0, %d)", where, first, last, len(rs))
				return false
			}
			return true
		}
		switch e.Kind {
		case Claimed:
			unclean := p.owner == nil && p.released != nil &&
				unwritten[tp][*p.released]
			if p.owner != nil || unclean {
				// The claim before was never released (its process was
				// killed, or its session expired), or was released with
				// its last commit unwritten (an Unwritten event names
				// it): the commits its adapter coalesced and did not
				// write are gone, and the records they said were
				// finished may be delivered again. Final stays what this
				// claim read: below its offset, and what its window says.
				start := max(e.Offset, 0)
				w, err := retrystate.RestoreWindow(start, e.Metadata, checkpoint.WindowLimits{MaxBytes: 1 << 20})
				for o := start; o < int64(len(rs)); o++ {
					if rs[o].final && (err != nil || o >= w.Next() || !w.Finished(o)) {
						rs[o].final = false
					}
				}
				p.final = min(p.final, start)
			}
			p.owner, p.released = &claimKey{e.Member, e.Claim}, nil
			for o := p.final; o < int64(len(rs)); o++ {
				if !rs[o].final && rs[o].started {
					rs[o].moves++
				}
			}
		case Started:
			r.Deliveries++
			if !inRange(e.First, e.Last) {
				continue
			}
			live[flight{e.Member, tp, e.First}]++
			if e.MaxRetries >= 0 && e.Retry > e.MaxRetries {
				bad("%s: delivery of %d-%d as retry %d, past the limit of %d", where, e.First, e.Last, e.Retry, e.MaxRetries)
			}
			for o := e.First; o <= e.Last; o++ {
				x := &rs[o]
				if x.final {
					bad("%s: record %d delivered again, but a commit said it was finished", where, o)
				}
				// Every earlier record of its key finished, and none of
				// them nor of the later ones being delivered (records of
				// the key in this same delivery aside).
				k := p.keys[ks[o]]
				for k.low < len(k.offsets) && rs[k.offsets[k.low]].done {
					k.low++
				}
				if k.low < len(k.offsets) && k.offsets[k.low] < e.First {
					bad("%s: record %d (key %q) delivered before the earlier record %d of its key was finished", where, o, ks[o], k.offsets[k.low])
				}
				for q := range k.inFlight {
					switch {
					case q >= e.First && q <= e.Last:
					case q < o:
						bad("%s: record %d (key %q) delivered while the earlier record %d of its key is being delivered", where, o, ks[o], q)
					default:
						bad("%s: record %d (key %q) delivered while the later record %d of its key is being delivered", where, o, ks[o], q)
					}
				}
				x.deliveries++
				x.started = true
				x.limit = max(x.limit, e.MaxRetries)
				x.infinite = x.infinite || e.MaxRetries < 0
			}
			for o := e.First; o <= e.Last; o++ {
				p.keys[ks[o]].inFlight[o]++
			}
		case Delivered:
			if e.Outcome == stream.Cancelled {
				r.Interrupted++
			}
			if !inRange(e.First, e.Last) {
				continue
			}
			if e.Outcome == stream.ParkedBehind {
				// Not delivered to the handler (History.Middleware saw no
				// start): parked behind its key's parked records by a key
				// middleware, in the re-drive store. Finished here.
				for o := e.First; o <= e.Last; o++ {
					rs[o].done, rs[o].resolved = true, true
				}
				continue
			}
			f := flight{e.Member, tp, e.First}
			if live[f] == 0 {
				bad("%s: %d-%d returned, but no delivery of it began (is History.Middleware in the chain?)", where, e.First, e.Last)
				continue
			}
			live[f]--
			for o := e.First; o <= e.Last; o++ {
				k := p.keys[ks[o]]
				if k.inFlight[o]--; k.inFlight[o] == 0 {
					delete(k.inFlight, o)
				}
			}
			for o := e.First; o < e.First+int64(e.Handled) && o <= e.Last; o++ {
				rs[o].done, rs[o].resolved = true, true
			}
			// The failures that count against a record, as Check counts
			// them: a failure that names it (the records after it in the
			// batch then begin counts of their own, and after a partial
			// success so does it), every record of a whole-batch failure,
			// and a retry cut short (it was committed as started).
			target := e.First + int64(e.Index)
			switch {
			case e.Outcome == stream.Failed || e.Outcome == stream.RetryRequested:
				first, last := e.First, e.Last
				if e.Named || e.Index > 0 {
					first, last = target, target
					for o := target + 1; o <= e.Last; o++ {
						rs[o].counted, rs[o].limit, rs[o].infinite = 0, -1, false
					}
					if e.Index > 0 {
						rs[target].counted = 0
					}
				}
				if e.Uncounted {
					break
				}
				for o := first; o <= last; o++ {
					rs[o].counted++
				}
			case e.Outcome == stream.Cancelled && e.Retry > 0:
				rs[e.First].counted++
			}
		case GivenUp:
			if !inRange(e.First, e.Last) {
				continue
			}
			for o := e.First; o <= e.Last; o++ {
				x := &rs[o]
				x.done = true
				// Checked now: a resume of a stopped partition delivers
				// the record again with a fresh count.
				bound(tp, o, x)
				x.counted, x.moves, x.limit, x.infinite = 0, 0, -1, false
			}
		case ActionTried:
			if e.Error != "" || !inRange(e.First, e.Last) {
				continue
			}
			for o := e.First; o <= e.Last; o++ {
				rs[o].resolved = true
			}
		case Released:
			if p.owner != nil && *p.owner == (claimKey{e.Member, e.Claim}) {
				p.owner, p.released = nil, &claimKey{e.Member, e.Claim}
			}
		case Committed:
			final := func(o int64) {
				if !rs[o].resolved && !rs[o].final {
					bad("%s: commit of %d says record %d is finished, but it was neither handled nor resolved by its exhaustion action", where, e.Offset, o)
				}
				rs[o].final = true
			}
			for ; p.final < min(e.Offset, int64(len(rs))); p.final++ {
				final(p.final)
			}
			w, err := retrystate.RestoreWindow(max(e.Offset, 0), e.Metadata, checkpoint.WindowLimits{MaxBytes: 1 << 20})
			if err != nil {
				bad("%s: commit of %d with metadata %q that does not read: %v", where, e.Offset, e.Metadata, err)
				continue
			}
			for o := max(e.Offset, 0); o < min(w.Next(), int64(len(rs))); o++ {
				if w.Finished(o) {
					final(o)
				}
			}
		}
	}
	total := 0
	for tp, p := range parts {
		r.Records += int64(len(p.recs))
		for o, x := range p.recs {
			total += x.deliveries
			r.MaxDeliveries = max(r.MaxDeliveries, x.deliveries)
			if !x.resolved {
				r.Lost++
				if r.Lost <= 10 {
					bad("%s/%d: record %d lost: never handled nor resolved by the exhaustion action", tp.Topic, tp.Partition, o)
				}
			}
			bound(tp, int64(o), &x)
		}
	}
	if r.Records > 0 {
		r.MeanPerRecord = float64(total) / float64(r.Records)
	}
	return r
}
