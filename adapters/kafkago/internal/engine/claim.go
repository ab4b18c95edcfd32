package engine

import (
	"context"
	"sync"
	"time"

	"github.com/redeliver-go/redeliver/adapters/internal/kafkaadapter"
	"github.com/redeliver-go/redeliver/internal/actionctx"
	"github.com/redeliver-go/redeliver/internal/batching"
	"github.com/redeliver-go/redeliver/stream"
)

// tp names a partition.
type tp struct {
	topic     string
	partition int32
}

// claim is one partition of one generation: a [stream.Claim] fed by a pump
// goroutine that fetches the partition into a buffer (batching.Buffer).
//
// kafka-go has no pause. A claim pauses by not fetching: the pump stops
// while the worker waits out a backoff or the buffer is full (until the
// worker has taken it down to half), and records fetched before stay in
// the buffer, in order, for the next Fetch. The buffer is dropped only with
// the claim.
//
// The buffer holds fetch answers, each kept as the slice the fetcher read
// it into; a spent slice goes back to the fetcher for a later answer, so
// records are copied once, into the batch.
type claim struct {
	g         *generation
	key       tp
	committed int64
	metadata  string

	ctx    context.Context
	cancel context.CancelCauseFunc
	f      fetcher
	pumped chan struct{} // closed when the pump has returned

	mu  sync.Mutex
	buf *batching.Buffer[record] // guarded by mu

	end int64 // the partition's end in the last fetch answer; -1 before any (guarded by mu)

	lastOff   int64 // the offset of the last record of the last batch; -1 before any
	lastEpoch int32 // and its leader epoch

	// The worker's own.
	out  []stream.Record
	hdrs []stream.Header

	commits kafkaadapter.Coalescer // the partition's commits, success commits coalesced
	runCtx  context.Context        // Run's: a claim that ends while it has not was revoked
}

func newClaim(g *generation, key tp, committed int64, metadata string, runCtx context.Context) *claim {
	ctx, cancel := context.WithCancelCause(runCtx)
	c := g.c
	cl := &claim{
		g: g, key: key, committed: committed, metadata: metadata,
		ctx: ctx, cancel: cancel, runCtx: runCtx, pumped: make(chan struct{}), end: -1, lastOff: -1, lastEpoch: -1,
		f: fetcher{
			dialer: c.dialer, brokers: c.brokers, topic: key.topic, partition: int(key.partition),
			fetch: c.fetch, start: c.start, log: c.log,
		},
	}
	cl.buf = batching.New(&cl.mu, batching.Config[record]{
		Offset: func(r *record) int64 { return r.offset },
		Limit:  highWater(c.cfg.MaxBatch),
		Reuse:  true,
	})
	cl.commits = kafkaadapter.Coalescer{
		Interval: c.cfg.CommitInterval, Records: c.cfg.CommitRecords,
		Claim: cl,
		Log:   c.log, Topic: key.topic, Partition: key.partition,
	}
	cl.commits.Start(committed, metadata)
	return cl
}

// SendCommit writes one of the claim's commits for its Coalescer
// (kafkaadapter.Sender) through its generation (group.commit).
func (cl *claim) SendCommit(next int64, epoch int32, metadata string, kind kafkaadapter.SendKind) error {
	return cl.g.commit(cl, next, epoch, metadata, kind == kafkaadapter.SendFinal)
}

// Ended reports whether the claim is ending (kafkaadapter.Sender).
func (cl *claim) Ended() bool { return cl.ctx.Err() != nil }

// Background runs a background flush on a goroutine of its own
// (kafkaadapter.Sender).
func (cl *claim) Background(fn func()) { go fn() }

// Revoked is what Commit returns once the claim has ended
// (kafkaadapter.Sender).
func (cl *claim) Revoked() error { return stream.ErrRevoked }

// highWater is how many buffered records stop the pump until the worker
// has taken them down to half.
func highWater(maxBatch int) int { return max(4*maxBatch, 2048) }

// run runs proc over the claim until it ends. It returns whether the claim
// had been ended from outside (the generation's end or shutdown) when
// Process returned, and Process's error.
func (cl *claim) run(proc *stream.Processor) (ended bool, err error) {
	start := cl.committed
	if start < 0 {
		start = cl.g.c.start
	}
	stop := context.AfterFunc(cl.ctx, cl.f.close) // ends a fetch in progress at once
	go func() {
		defer close(cl.pumped)
		cl.fetchLoop(start)
	}()
	// The group names the dead letters' __dlq.errors.group header.
	err = proc.Process(actionctx.WithSource(cl.ctx, actionctx.Source{Group: cl.g.gen.GroupID}), cl)
	ended = cl.ctx.Err() != nil
	cl.cancel(err)
	<-cl.pumped
	stop()
	cl.f.close()
	cl.mu.Lock()
	cl.buf.Drop()
	cl.mu.Unlock()
	return ended, err
}

// push appends a fetch answer to the buffer and wakes a waiting worker.
// kafka-go never repeats a record: an answer that starts at or before the
// last record buffered is a rewind (the fetcher reset its position to the
// partition's start after the log was replaced or truncated, and logged
// what it reads again). It is buffered like any other, and Fetch starts a
// new batch with it. The buffer keeps msgs: the caller gives it up.
func (cl *claim) push(msgs []record) {
	cl.mu.Lock()
	cl.buf.Push(msgs)
	cl.mu.Unlock()
}

// skip notes that the fetcher read the partition up to next, past control
// batches (transaction markers) and, under kafka.ReadCommitted, aborted
// records after the last record pushed: the claim's Position moves there
// (ignored when next is not past the last record pushed).
func (cl *claim) skip(next int64) {
	cl.mu.Lock()
	cl.buf.Skip(next)
	cl.mu.Unlock()
}

// Position returns the offset past the transaction markers (and aborted
// records) read after the last record Fetch returned, when nothing is
// buffered; -1 otherwise ([stream.Positioner]).
func (cl *claim) Position() int64 {
	cl.mu.Lock()
	defer cl.mu.Unlock()
	return cl.buf.Position()
}

// slice returns an empty slice for the fetcher to read an answer into.
func (cl *claim) slice() []record {
	cl.mu.Lock()
	defer cl.mu.Unlock()
	return cl.buf.Slice()
}

// Topic returns the partition's topic.
func (cl *claim) Topic() string { return cl.key.topic }

// Partition returns the partition's number.
func (cl *claim) Partition() int32 { return cl.key.partition }

// Committed returns the offset and metadata committed when the generation
// began, as the consumer fetched them before it started reading.
func (cl *claim) Committed() (int64, string) { return cl.committed, cl.metadata }

// idle reports whether nothing is buffered.
func (cl *claim) idle() bool {
	cl.mu.Lock()
	defer cl.mu.Unlock()
	return cl.buf.Len() == 0
}

// Fetch returns the next batch: at most the maximum batch size of buffered
// records, once the batch is full, the maximum wait has passed since records
// were first there, or at once when the maximum wait is 0; never across a
// rewind. It returns no records when the fetcher read transaction markers
// or aborted records only (see Position).
func (cl *claim) Fetch(ctx context.Context) ([]stream.Record, error) {
	// The Processor gave the last batch up by calling Fetch: when nothing
	// is buffered, so that the worker is about to wait, let go of its
	// records, so that an idle partition keeps none of them (otherwise the
	// next batch overwrites them).
	if cl.idle() {
		clear(cl.out)
		clear(cl.hdrs)
	}
	out, hdrs := cl.out[:0], cl.hdrs[:0]
	err := cl.buf.Next(ctx, cl.g.c.cfg.MaxBatch, cl.g.c.cfg.MaxWait, func(part []record) {
		// Every field written in place, not a Record built aside and
		// copied in (the copy's loads stall behind the stores that
		// built it).
		var base int
		out, base = batching.Extend(out, len(part))
		for i := range part {
			m, o := &part[i], &out[base+i]
			o.Headers = nil
			if len(m.headers) > 0 {
				h0 := len(hdrs)
				for _, h := range m.headers {
					hdrs = append(hdrs, stream.Header{Key: h.Key, Value: h.Value})
				}
				o.Headers = hdrs[h0:len(hdrs):len(hdrs)]
			}
			o.Topic, o.Partition, o.Offset = cl.key.topic, cl.key.partition, m.offset
			o.Key, o.Value, o.Timestamp = m.key, m.value, m.time
			cl.lastOff, cl.lastEpoch = m.offset, m.epoch
		}
	})
	if err != nil {
		return nil, err
	}
	cl.out, cl.hdrs = batching.ClearTail(cl.out, out), batching.ClearTail(cl.hdrs, hdrs)
	return out, nil
}

// Pause stops the pump while the Processor waits out a backoff: nothing
// more is fetched for the partition (a fetch in progress completes).
// Records already fetched stay buffered.
func (cl *claim) Pause() {
	cl.mu.Lock()
	cl.buf.Pause()
	cl.mu.Unlock()
}

// Resume undoes Pause.
func (cl *claim) Resume() {
	cl.mu.Lock()
	cl.buf.Resume()
	cl.mu.Unlock()
}

// Commit commits next with metadata for the partition through the group
// generation. It returns [stream.ErrRevoked] once the claim is ending or
// its generation has ended.
//
// A success commit (no metadata) that follows one without a retry state
// is coalesced when the consumer's commit window is set: Commit notes it
// and returns, and it is written in the background, one request in flight
// per partition, once the window's records or interval have passed since
// the last commit sent or the partition has nothing more buffered, and at
// the latest when the claim ends (final) (kafkaadapter.Coalescer). Any
// other commit supersedes the coalesced one and is written before Commit
// returns: a commit that was sent is not cancelled by the generation's
// end, which waits for it (up to the commit timeout) rather than leave its
// outcome unknown; a shutdown waits for it at most 250ms, then cuts it
// short.
//
// The commit carries the leader epoch of the record before next when that
// record ended the last batch (a batch handled), and -1 (unknown)
// otherwise (a withheld batch's retry state, a partial success), as Kafka's
// Java consumer and franz-go do: a later consumer of the group checks the
// epoch against the log to detect truncation, and a wrong epoch makes it
// read committed records again.
func (cl *claim) Commit(_ context.Context, next int64, metadata string) error {
	epoch := int32(-1)
	cl.mu.Lock()
	if next == cl.lastOff+1 {
		epoch = cl.lastEpoch
	}
	cl.mu.Unlock()
	return cl.commits.Commit(next, epoch, metadata)
}

// setEnd notes the partition's end as the last fetch answer gave it.
func (cl *claim) setEnd(end int64) {
	cl.mu.Lock()
	cl.end = end
	cl.mu.Unlock()
}

// CaughtUp (kafkaadapter.Sender) reports whether the claim has nothing
// more to deliver: nothing buffered, and the partition read to its end as
// the last fetch answer gave it (or that not known). The pending commit is
// then written now. A buffer emptied while the partition has more to fetch
// is not caught up: the commit waits for the window, or the coalesced
// commits would be one per batch.
func (cl *claim) CaughtUp() bool {
	cl.mu.Lock()
	defer cl.mu.Unlock()
	return cl.buf.Size() == 0 && (cl.end < 0 || cl.buf.ReadTo() >= cl.end)
}

// final writes the coalesced commit not written yet, if any, once the
// claim's worker has returned and before the generation is given up; a
// flush in flight is waited for first. Nothing is coalesced afterwards.
func (cl *claim) final() { cl.commits.Final() }

// sleep waits d or until ctx is done; it reports whether d passed.
func sleep(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	}
}
