package engine

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/redeliver-go/redeliver/adapters/internal/kafkaadapter"
	"github.com/redeliver-go/redeliver/internal/batching"
	"github.com/redeliver-go/redeliver/internal/lifecycle"
	"github.com/redeliver-go/redeliver/internal/park"
	"github.com/redeliver-go/redeliver/stream"
)

// pauseFull is why a claim's partition is paused in the client: its buffer
// is full and it is in a backoff, or it holds twice its limit while another
// partition starves.
const pauseFull uint8 = 1

// claim is one assignment of one partition: a [stream.Claim] fed by the poll
// loop through a buffer of polled records (batching.Buffer).
//
// The poll loop appends to the buffer (push); the worker takes batches from
// it (Fetch). franz-go advances a partition's fetch position only for
// records it hands to a poll, and all of those are appended here, so the
// buffer followed by the client's position is always the partition's stream
// in order, whatever pausing drops from the client's own buffers.
//
// A buffer is bounded: once it holds the configured bytes it is full until
// its worker has taken it down to half. While a partition is full the poll
// loop stops polling, so that the client stops fetching without dropping
// anything; but that stops every other partition too, so when another
// partition could take records the hold lasts at most holdMax, and then
// the full partition is paused in the client, which drops what the client
// had fetched for it. When another partition starves meanwhile (nothing
// buffered, more at the broker), the loop polls at once, and a partition
// that holds twice its limit is paused in the client. A full partition
// whose worker waits out a backoff is paused in the client at once, when
// another partition could take records (otherwise it holds the loop back,
// as any full partition, and nothing the client fetched is dropped).
//
// A backoff alone does not pause the partition in the client: its records
// go on being buffered, up to the same bound, so that they are there when
// the backoff ends. Pausing is kept for a full buffer because franz-go
// fetches from a broker one request at a time and a resumed partition is
// left out of the request in flight: when that request is a long poll (its
// partitions are all caught up), the resumed partition would wait up to the
// fetch max wait. So a partition resumed in the client fetches its next
// records in requests of its own, with no wait, until the client's fetches
// include it again (fetchAhead); those repeat the records, and push drops
// them.
type claim struct {
	g         *group
	key       tp
	committed int64
	metadata  string

	// Set by begin before the worker starts; started (beside the other
	// flags below, which keeps the struct smaller) is guarded by g.mu.
	c      *Consumer
	ctx    context.Context
	cancel context.CancelCauseFunc
	done   sync.WaitGroup // the worker, once started

	mu sync.Mutex
	// The records polled and not yet in a batch, made by begin; its limit
	// is the buffer bytes, as recordSize counts them, and the worker's
	// backoff (Pause) is its pause.
	buf *batching.Buffer[*kgo.Record]
	hwm int64 // the partition's high watermark in the last fetch; -1 unknown
	// The offsets of the records fetchAhead got, which the polls repeat;
	// aheadTo is -1 when the polls have nothing of fetchAhead's to repeat.
	aheadFrom, aheadTo int64
	pause              uint8    // why the partition is paused in the client
	dead               bool     // the worker ended: push drops, nothing pauses
	topicID            [16]byte // from the client's fetches, for fetchAhead

	// fetchAhead's state: ahead while it runs; polled once a poll handed
	// over the partition since it was resumed in the client.
	ahead   bool
	polled  bool
	started bool
	// offered: the worker's own, set when Park found records buffered,
	// so that the Fetch that follows need not look again.
	offered bool
	// owned is guarded by ownMu (see commits); it sits beside the flags
	// above, which keeps the struct smaller.
	owned bool
	// aheadWake wakes fetchAhead when the worker took records; made with
	// the first fetchAhead (most partitions never need one).
	aheadWake chan struct{}

	// The partition's commits, success commits coalesced; made by begin.
	// Its sends take ownMu, which guards owned: the revocation clears it
	// once its last commit is written.
	commits kafkaadapter.Coalescer
	ownMu   sync.Mutex

	// The group session the partition is known to be assigned to this
	// member in: the member ID and generation (member epoch under
	// KIP-848) when the claim was made, and again at the end of every
	// later session's assignment that kept it (group.assigned). A commit
	// is sent only under that session; see confirmedFor.
	confMu     sync.Mutex
	confMember string
	confGen    int32
	// The worker's own: the leader epoch of the last record of the last
	// batch (beside confGen, which keeps the struct smaller), and its
	// offset.
	lastEpoch int32
	lastOff   int64
	confSeq   uint64        // confirmations so far
	confWake  chan struct{} // closed at the next confirmation; nil until waited on

	// The worker's own: the memory of its batches, made for the first
	// records and let go while the partition is idle (see Fetch).
	mem *batchMem

	// resume is the parked worker's (see Park), guarded by mu: nil while
	// the worker runs.
	resume park.Resume
}

// batchMem is the memory a claim's batches are made in, reused from one
// batch to the next while records keep coming. A full batch's record array
// goes back to the consumer's pool when the partition goes idle, for the
// next partition with a full batch (see letGoMem).
type batchMem struct {
	taken []*kgo.Record // the records Next handed over
	out   []stream.Record
	hdrs  []stream.Header
}

func newClaim(g *group, key tp, committed int64, metadata string) *claim {
	return &claim{
		g: g, key: key, committed: committed, metadata: metadata,
		lastOff: -1, hwm: -1, aheadTo: -1,
		owned: true, confGen: -1,
	}
}

// confirm records that the partition is assigned to member in generation
// gen, and wakes a commit waiting for it.
func (cl *claim) confirm(member string, gen int32) {
	cl.confMu.Lock()
	cl.confMember, cl.confGen = member, gen
	cl.confSeq++
	if cl.confWake != nil {
		close(cl.confWake)
		cl.confWake = nil
	}
	cl.confMu.Unlock()
}

// confirmations returns how many confirmations the claim has had.
func (cl *claim) confirmations() uint64 {
	cl.confMu.Lock()
	defer cl.confMu.Unlock()
	return cl.confSeq
}

// confirmedAfter returns a channel closed once the claim has had more than
// seq confirmations (closed already if it has).
func (cl *claim) confirmedAfter(seq uint64) <-chan struct{} {
	cl.confMu.Lock()
	defer cl.confMu.Unlock()
	if cl.confSeq != seq {
		return closedChan
	}
	if cl.confWake == nil {
		cl.confWake = make(chan struct{})
	}
	return cl.confWake
}

// closedChan is a closed channel.
var closedChan = func() chan struct{} { ch := make(chan struct{}); close(ch); return ch }()

// confirmedFor reports whether a commit made by member in generation gen
// may carry the claim's partition: the claim was confirmed in that very
// session. Under KIP-848 (kip848) the member epoch also moves on without
// any change of assignment, and the broker hands a new epoch only once the
// member has acknowledged every revocation (which ends its claims first),
// so a later epoch of the same member is accepted too and becomes the
// claim's own.
//
// Under the classic protocol a new generation is stored as soon as the
// member's SyncGroup returns, before the partitions it lost are revoked:
// a commit sent then would carry the new generation for a partition that
// is no longer this member's, which the broker accepts (it checks the
// member and generation, not the assignment). After the session expired
// and the member joined again under a new member ID, that partition is
// another member's already, and such a commit moves its checkpoint back.
func (cl *claim) confirmedFor(member string, gen int32, kip848 bool) bool {
	cl.confMu.Lock()
	defer cl.confMu.Unlock()
	if member != cl.confMember {
		return false
	}
	if gen == cl.confGen {
		return true
	}
	if kip848 && gen > cl.confGen {
		cl.confGen = gen
		return true
	}
	return false
}

// revokedIn reports whether a revocation's last commit may go out as
// member in generation gen: a later generation of the member the claim
// was confirmed as (not another member ID: the session expired, and the
// partition may be another's already).
//
// Under the classic protocol's cooperative rebalancing a member keeps
// reporting the partitions it owns in every JoinGroup until it has
// revoked them, and the assignor gives a partition a member reports to
// that member or to no member in that generation, never to another. A
// partition is revoked once the member has a new generation's
// assignment, which can be several generations after the claim was
// confirmed: a rebalance that began again before the member's SyncGroup
// answered (REBALANCE_IN_PROGRESS) moves the generation on without any
// assignment, and a shutdown ends the claims in whatever generation the
// member is in. Until the revocation has run (its last commit included)
// the member does not join the next generation, so no generation of the
// same member after the claim's confirmation gives the partition to
// another member before its last commit has been answered.
func (cl *claim) revokedIn(member string, gen int32) bool {
	cl.confMu.Lock()
	defer cl.confMu.Unlock()
	return member == cl.confMember && gen > cl.confGen
}

// begin prepares the claim for its worker; g.mu is held.
func (cl *claim) begin(ctx context.Context, cancel context.CancelCauseFunc, c *Consumer) {
	cl.c, cl.ctx, cl.cancel, cl.started = c, ctx, cancel, true
	cl.done.Add(1)
	cl.buf = batching.New(&cl.mu, batching.Config[*kgo.Record]{
		Offset: func(r **kgo.Record) int64 { return (*r).Offset },
		Size:   func(r **kgo.Record) int { return recordSize(*r) },
		Limit:  c.cfg.BufferBytes,
		// The worker's Fetch waits on the buffer alone: revoke, which
		// every end of the claim's context goes through (g.stop ends
		// every claim once Run's context ends), interrupts it.
		Ctx:   ctx,
		Watch: cl,
	})
	cl.commits = kafkaadapter.Coalescer{
		Interval: c.cfg.CommitInterval, Records: c.cfg.CommitRecords,
		Claim: cl,
		Quiet: func(err error) bool { return errors.Is(err, errUnconfirmed) }, // a session changing: tried again quietly
		Log:   c.log, Topic: cl.key.topic, Partition: cl.key.partition,
	}
	cl.commits.Start(cl.committed, cl.metadata)
}

// BufferFull counts the claim's buffer full (batching.Watcher).
func (cl *claim) BufferFull() { cl.g.nfull.Add(1) }

// BufferDrained resumes a partition paused for a full buffer once it has
// drained (batching.Watcher).
func (cl *claim) BufferDrained() {
	cl.g.nfull.Add(-1)
	cl.setPauseLocked(pauseFull, false)
	cl.g.notify()
}

// revoke cancels the claim's context with cause, so that Commit refuses
// from now on, waits for a commit in flight, and writes the coalesced
// success commit not written yet, if any (see SendCommit).
func (cl *claim) revoke(cause error) {
	if cl.started {
		cl.cancel(cause)
		cl.mu.Lock()
		cl.buf.Interrupt()
		cl.wakeLocked() // a parked worker ends, and releases the claim
		cl.mu.Unlock()
	}
	cl.commits.Final()
	cl.ownMu.Lock()
	cl.owned = false
	cl.ownMu.Unlock()
}

// work runs fn, the worker (the Processor's Process, or a parked worker's
// resume), on one of the consumer's runners (park.Runners: a goroutine of
// its own unless many workers wake at once; under key ordering always a
// goroutine of its own); the caller holds a g.wg count
// for it (startLocked), which a parked worker keeps. When fn parks the
// worker the runner goes on to another and the claim goes on: it holds the
// worker's resume (Park), and runs it here again once records arrive or
// the claim ends. When fn returns anything else the worker has ended: a
// worker that failed (the claim not ended) fails the consumer, and the
// claim is finished.
func (cl *claim) work(fn park.Resume) {
	g := cl.g
	run := func() {
		lifecycle.Inside(func() {
			err := fn() // the worker's context carries the group (start)
			if err == park.ErrParked {
				return
			}
			defer g.wg.Done()
			defer cl.finish()
			defer g.workers.remove(cl)
			if cl.ctx.Err() == nil {
				err = fmt.Errorf("franz: worker of %s/%d stopped: %w", cl.key.topic, cl.key.partition, err)
				cl.c.log.Error("redeliver: worker failed", "topic", cl.key.topic, "partition", cl.key.partition, "error", err)
				g.fail(err)
			}
		})
	}
	if g.c.pooled {
		g.c.runners.Go(run)
	} else {
		go run() // a key-ordered worker: it never parks
	}
}

var (
	_ park.Claim   = (*claim)(nil)
	_ park.Blocker = (*claim)(nil)
)

// Block and Unblock bracket the worker's wait for its backoff or an
// outage (park.Blocker): its runner lets another partition's worker run
// meanwhile. A key-ordered worker, on a goroutine of its own, does not.
func (cl *claim) Block() {
	if cl.c.pooled {
		cl.c.runners.Block()
	}
}

// Unblock: see Block.
func (cl *claim) Unblock() {
	if cl.c.pooled {
		cl.c.runners.Unblock()
	}
}

// Park takes the worker's resume when nothing is buffered and the claim
// has not ended (park.Claim): the worker's goroutine ends, and the
// partition keeps neither it nor the worker's state while idle. push and
// revoke run resume (wakeLocked), under cl.mu as this check is, so that
// neither records nor the claim's end are missed. The batches' memory is
// let go, as Fetch does for an idle partition.
func (cl *claim) Park(resume park.Resume) bool {
	cl.mu.Lock()
	defer cl.mu.Unlock()
	if cl.buf.Ready() {
		cl.offered = true
		return false
	}
	if cl.ctx.Err() != nil {
		return false
	}
	cl.resume = resume
	cl.letGoMem()
	cl.buf.Rest()
	return true
}

// wakeLocked runs the parked worker's resume, if the worker is parked;
// cl.mu is held.
func (cl *claim) wakeLocked() {
	if fn := cl.resume; fn != nil {
		cl.resume = nil
		cl.work(fn)
	}
}

// wait waits for the claim's worker, if it was started.
func (cl *claim) wait() {
	if cl.started {
		cl.done.Wait()
	}
}

// finish runs when the worker has returned: the buffer is dropped and the
// partition resumed in the client, so that a later assignment of it starts
// unpaused.
func (cl *claim) finish() {
	cl.mu.Lock()
	cl.dead = true
	cl.setPauseLocked(cl.pause, false)
	cl.buf.Drop()
	cl.mu.Unlock()
	cl.g.notify()
	cl.done.Done()
}

// recordSize is what a buffered record counts against the buffer limit: its
// key and value, and an allowance for the rest.
func recordSize(r *kgo.Record) int { return len(r.Key) + len(r.Value) + 256 }

// push appends fetched records and notes the partition's high watermark.
// from is the offset fetchAhead fetched them from, or -1 for records of a
// poll.
//
// A poll repeats the records fetchAhead got (offsets aheadFrom to aheadTo):
// those repeats are dropped. Any other polled record at or before the last
// one appended is a rewind of the partition: its topic was deleted and
// created again, or its log truncated, and the client went back to an
// earlier offset. It is appended, after a warning, and the buffer starts a
// new batch with it: the records of the log as it is now are all
// delivered, never filtered. Records of fetchAhead that do not follow the
// last one appended (a rewind came in between) are dropped: the polls
// bring them.
func (cl *claim) push(recs []*kgo.Record, hwm int64, from int64) {
	cl.mu.Lock()
	defer cl.mu.Unlock()
	if cl.dead {
		return
	}
	// Transaction markers (the client keeps them: KeepControlRecords)
	// are never handed over: they move the claim's Position past them,
	// and past an aborted transaction's records before them, which
	// read_committed drops (stream.Positioner).
	var skip int64 = -1
	for _, r := range recs {
		if r.Attrs.IsControl() {
			skip = max(skip, r.Offset+1)
		}
	}
	if skip >= 0 {
		recs = slices.DeleteFunc(slices.Clone(recs), func(r *kgo.Record) bool { return r.Attrs.IsControl() })
	}
	last := cl.buf.Last()
	polled := from < 0
	if polled {
		cl.polled = true
	} else if from > last+1 {
		return
	}
	cl.hwm = max(cl.hwm, hwm)
	var (
		kept    []*kgo.Record // the records appended, once one was dropped
		dropped bool
	)
	for i, r := range recs {
		keep := true
		switch {
		case r.Offset > last:
			if polled && r.Offset > cl.aheadTo {
				cl.aheadTo = -1 // the polls have gone past what fetchAhead got
			}
		case !polled:
			keep = false // a poll got it first
		case cl.aheadTo >= 0 && cl.aheadFrom <= r.Offset && r.Offset <= cl.aheadTo:
			keep = false // a repeat of what fetchAhead got
		default:
			cl.c.log.Warn("redeliver: partition rewound: the client reads it again from an earlier offset (the topic was deleted and created again, or its log truncated); its records are delivered from there",
				"topic", cl.key.topic, "partition", cl.key.partition, "offset", r.Offset, "after", last, "high_watermark", hwm)
			cl.aheadTo = -1
			cl.hwm = hwm
		}
		if !keep {
			if !dropped {
				dropped, kept = true, append(make([]*kgo.Record, 0, len(recs)-1), recs[:i]...)
			}
			continue
		}
		if !polled {
			if cl.aheadTo < 0 {
				cl.aheadFrom = r.Offset
			}
			cl.aheadTo = r.Offset
		}
		if dropped {
			kept = append(kept, r)
		}
		last = r.Offset
	}
	if !dropped {
		kept = recs
	}
	cl.buf.Push(kept)
	if skip >= 0 {
		cl.buf.Skip(skip) // ignored when not past the records pushed
	}
	if cl.resume != nil && cl.buf.Ready() {
		cl.wakeLocked()
	}
}

// setPauseLocked sets or clears pause reasons and pauses or resumes the
// partition in the client when that changes whether it is paused; cl.mu is
// held.
func (cl *claim) setPauseLocked(reasons uint8, on bool) {
	was := cl.pause != 0
	if on {
		if cl.dead {
			return
		}
		cl.pause |= reasons
	} else {
		cl.pause &^= reasons
	}
	if now := cl.pause != 0; now != was {
		m := map[string][]int32{cl.key.topic: {cl.key.partition}}
		if now {
			cl.g.cl.PauseFetchPartitions(m)
			return
		}
		cl.g.cl.ResumeFetchPartitions(m)
		cl.polled = false
		if !cl.dead && !cl.ahead && cl.buf.Last() >= 0 {
			// The worker's goroutine (Fetch, through the buffer's
			// BufferDrained) holds g.wg here.
			cl.ahead = true
			if cl.aheadWake == nil {
				cl.aheadWake = make(chan struct{}, 1)
			}
			cl.g.wg.Add(1)
			go cl.fetchAhead()
		}
	}
}

// Topic returns the partition's topic.
func (cl *claim) Topic() string { return cl.key.topic }

// Partition returns the partition's number.
func (cl *claim) Partition() int32 { return cl.key.partition }

// Committed returns the offset and metadata committed when the partition was
// assigned, as franz-go fetched them before it started fetching records.
func (cl *claim) Committed() (int64, string) { return cl.committed, cl.metadata }

// Position returns the offset past the transaction markers (and the aborted
// records before them) read after the last record Fetch returned, when
// nothing is buffered; -1 otherwise ([stream.Positioner]).
func (cl *claim) Position() int64 {
	cl.mu.Lock()
	defer cl.mu.Unlock()
	return cl.buf.Position()
}

// idle reports whether nothing is buffered.
func (cl *claim) idle() bool {
	cl.mu.Lock()
	defer cl.mu.Unlock()
	return cl.buf.Len() == 0
}

// Fetch returns the next batch: at most the maximum batch size of buffered
// records, once the batch is full, the maximum wait has passed since records
// were first there, or at once when the maximum wait is 0; never across a
// rewind. It returns no records when the client read transaction markers
// only (see Position).
func (cl *claim) Fetch(ctx context.Context) ([]stream.Record, error) {
	// The Processor gave up the previous batch: when nothing is buffered,
	// so that the worker is about to wait, let go of the batches' memory,
	// so that an idle partition keeps neither the fetch buffers its last
	// records point into nor arrays sized to its last batch (the
	// Processor lets go of the batch too). A partition with records
	// buffered reuses it.
	if !cl.offered && cl.idle() {
		cl.letGoMem()
	}
	cl.offered = false
	err := cl.buf.Next(ctx, cl.c.cfg.MaxBatch, cl.c.cfg.MaxWait, func(part []*kgo.Record) {
		if cl.mem == nil {
			cl.mem = new(batchMem)
		}
		cl.mem.taken = append(cl.mem.taken, part...)
	})
	if err != nil {
		return nil, err
	}
	cl.mu.Lock()
	if cl.ahead {
		select {
		case cl.aheadWake <- struct{}{}:
		default:
		}
	}
	if cl.buf.Size() == 0 && cl.g.nfull.Load() > 0 {
		cl.g.notify() // this partition starves while another is full
	}
	cl.mu.Unlock()
	if cl.mem == nil || len(cl.mem.taken) == 0 {
		return nil, nil
	}
	return cl.convert(), nil
}

// convert turns the records taken (cl.mem.taken) into the batch's
// records, reusing the previous batch's memory (the Processor gave it up by
// calling Fetch).
func (cl *claim) convert() []stream.Record {
	m := cl.mem
	out, hdrs := m.out[:0], m.hdrs[:0]
	// Grown to the batch's size exactly, not as append grows: a withheld
	// batch keeps this memory for as long as it waits.
	if cap(out) < len(m.taken) {
		out = cl.c.recordArray(len(m.taken))
	}
	nh := 0
	for _, r := range m.taken {
		nh += len(r.Headers)
	}
	if cap(hdrs) < nh {
		hdrs = make([]stream.Header, 0, nh)
	}
	// Every field written in place, not a Record built aside and copied
	// in: the copy's loads, straight after the stores that built it,
	// stalled, and nearly doubled the conversion's time.
	out = out[:len(m.taken)]
	for i, r := range m.taken {
		o := &out[i]
		o.Headers = nil
		if len(r.Headers) > 0 {
			h0 := len(hdrs)
			hdrs = hdrs[:h0+len(r.Headers)]
			for j := range r.Headers {
				h := &hdrs[h0+j]
				h.Key, h.Value = r.Headers[j].Key, r.Headers[j].Value
			}
			o.Headers = hdrs[h0:len(hdrs):len(hdrs)]
		}
		o.Topic, o.Partition, o.Offset = r.Topic, r.Partition, r.Offset
		o.Key, o.Value, o.Timestamp = r.Key, r.Value, r.Timestamp
	}
	last := m.taken[len(m.taken)-1]
	cl.lastOff, cl.lastEpoch = last.Offset, last.LeaderEpoch
	clear(m.taken)
	m.taken = m.taken[:0]
	m.out, m.hdrs = batching.ClearTail(m.out, out), batching.ClearTail(m.hdrs, hdrs)
	return out
}

// letGoMem lets go of the batches' memory, once the Processor gave up the
// last batch (Fetch was called again, or the worker parks) and the
// partition is idle: it keeps neither the fetch buffers its last records
// point into nor arrays sized to its last batch. A full batch's array,
// cleared, goes back to the consumer's pool: at many partitions a poll
// wakes hundreds of them at once, each for a batch or two, and without
// the pool each would make an array of its own (64 KB at the default 500
// records) for the garbage collector to take back.
func (cl *claim) letGoMem() {
	m := cl.mem
	cl.mem = nil
	if m == nil || cap(m.out) != cl.c.cfg.MaxBatch {
		return
	}
	// convert keeps the elements past len(m.out) cleared.
	clear(m.out)
	p := new([]stream.Record)
	*p = m.out[:0]
	cl.c.fullBatches.Put(p)
}

// starvingLocked reports whether the claim has nothing buffered though the
// partition has more records than it got; cl.mu is held. A partition whose
// high watermark is not known yet counts as starving.
func (cl *claim) starvingLocked() bool {
	next := max(cl.buf.Last()+1, cl.buf.Position()) // past trailing markers
	return !cl.buf.Full() && cl.pause == 0 && !cl.buf.Paused() && cl.buf.Size() == 0 && (cl.hwm < 0 || next < cl.hwm)
}

// Pause notes that the Processor waits out a backoff. The partition stays in
// the client's fetches: its records are buffered up to the buffer's bound,
// and a full buffer pauses it in the client (see claim).
func (cl *claim) Pause() {
	cl.mu.Lock()
	cl.buf.Pause()
	cl.mu.Unlock()
	if cl.g.nfull.Load() > 0 {
		cl.g.notify() // a full claim in a backoff is paused in the client at once, when another could take records
	}
}

// Resume undoes Pause.
func (cl *claim) Resume() {
	cl.mu.Lock()
	cl.buf.Resume()
	starving := cl.g.nfull.Load() > 0 && cl.starvingLocked()
	cl.mu.Unlock()
	if starving {
		cl.g.notify()
	}
}

// Commit commits next with metadata for the partition. It returns
// [stream.ErrRevoked] once the claim is ending (its context is done:
// revocation, loss or shutdown).
//
// A success commit (no metadata) that follows one without a retry state
// is coalesced when the consumer's commit window is set: Commit notes it
// and returns, and it is written in the background, one request in flight
// per partition, once the window's records or interval have passed since
// the last commit sent or the partition has nothing more buffered, and at
// the latest when the claim ends (revoke) (kafkaadapter.Coalescer). Any
// other commit supersedes the coalesced one and is written before Commit
// returns; when it is not written, the coalesced one is kept for the
// revocation (or the next commit) to write.
//
// A commit that was sent is not cancelled by a revocation, which waits for
// it (up to the commit timeout) rather than leave its outcome unknown; a
// shutdown waits for it at most 250ms, then cuts it short (not the
// revocation's last commit: see committer.send).
//
// A commit is sent only under the group session the claim was confirmed
// in (see confirmedFor). When the client has moved on to a new session
// whose assignment the consumer has not yet seen through, the commit waits
// for it: the claim is confirmed in the new session (the partition was
// kept) and the commit is sent again, or it ends (the partition was lost)
// and Commit returns [stream.ErrRevoked].
func (cl *claim) Commit(_ context.Context, next int64, metadata string) error {
	epoch := int32(-1)
	if next == cl.lastOff+1 {
		epoch = cl.lastEpoch
	}
	return cl.commits.Commit(next, epoch, metadata)
}

// SendCommit sends one of the claim's commits for its Coalescer
// (kafkaadapter.Sender): a commit Commit writes is refused once the claim
// is ending; a background flush is not (the revocation, which waits for
// it, writes what it put back); the revocation's own last commit may go
// out under a later generation of the member (see revokedIn).
func (cl *claim) SendCommit(next int64, epoch int32, metadata string, kind kafkaadapter.SendKind) error {
	at := kgo.EpochOffset{Epoch: epoch, Offset: next}
	cl.ownMu.Lock()
	defer cl.ownMu.Unlock()
	if kind == kafkaadapter.SendFinal {
		// Under the classic protocol's cooperative rebalancing, a
		// partition is revoked once the member's new generation is
		// known, and given to no member in that generation: its last
		// commit may go out under that generation, or any later one of
		// the same member (see revokedIn).
		if !cl.owned || !cl.started {
			return stream.ErrRevoked
		}
		return cl.c.commit.commitAs(cl, at, metadata, true)
	}
	// The worker (or a background flush, which runs on the runners too:
	// Background) waits for the answer: its runner lets another worker
	// run meanwhile (park.Runners.BlockBrief), so that many partitions'
	// commits are in flight together, as with a goroutine per partition,
	// up to the runners' brief limit. A flush is not refused once the
	// claim is ending.
	if cl.c.pooled {
		cl.c.runners.BlockBrief()
		defer cl.c.runners.UnblockBrief()
	}
	return cl.send(at, metadata, kind == kafkaadapter.SendSync && cl.ctx != nil)
}

// send commits at with metadata and waits for the answer; cl.ownMu is
// held. refuse makes it refuse once the claim is ending (a background
// flush passes false). A commit sent under a session the claim is not
// confirmed in waits for the claim's next confirmation and is sent again.
// The claim's context's done channel is asked for only then: a context
// makes it when first asked, and an idle partition's claim need not keep
// one.
func (cl *claim) send(at kgo.EpochOffset, metadata string, refuse bool) error {
	for {
		if !cl.owned || refuse && cl.ctx.Err() != nil {
			return stream.ErrRevoked
		}
		seq := cl.confirmations()
		err := cl.c.commit.commit(cl, at, metadata)
		if !errors.Is(err, errUnconfirmed) {
			return err
		}
		if !refuse {
			return err // a flush: tried again at the interval
		}
		select {
		case <-cl.confirmedAfter(seq):
		case <-cl.ctx.Done():
		}
	}
}

// CaughtUp (kafkaadapter.Sender) reports whether the claim has nothing
// more to deliver: nothing buffered, and the partition read to its high
// watermark as the last fetch gave it (or that not known). The pending
// commit is then written now. A buffer emptied while the client holds
// records fetched ahead is not caught up: the commit waits for the
// window, or the coalesced commits would be one per batch.
func (cl *claim) CaughtUp() bool {
	cl.mu.Lock()
	defer cl.mu.Unlock()
	return cl.buf == nil || cl.buf.Size() == 0 && (cl.hwm < 0 || cl.buf.ReadTo() >= cl.hwm)
}

// Ended reports whether the claim is ending (kafkaadapter.Sender).
func (cl *claim) Ended() bool { return cl.ctx.Err() != nil }

// Background runs a background flush (kafkaadapter.Sender) on the
// consumer's runners, as the workers run, so that many partitions'
// flushes at once do not start a goroutine each; the flush steps aside
// while it waits for the broker's answer (SendCommit). A key-ordered
// consumer's claims, whose workers keep goroutines of their own, start
// one.
func (cl *claim) Background(fn func()) {
	if cl.c.pooled {
		cl.c.runners.Go(fn)
		return
	}
	go fn()
}

// Revoked is what Commit returns once the claim has ended
// (kafkaadapter.Sender).
func (cl *claim) Revoked() error { return stream.ErrRevoked }
