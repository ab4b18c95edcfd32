package engine

import (
	"context"
	"sync"
	"time"

	"github.com/redeliver-go/redeliver/stream"
)

// tp names a partition.
type tp struct {
	topic     string
	partition int32
}

// claim is one partition of one generation: a [stream.Claim] fed by a pump
// goroutine that fetches the partition into a buffer.
//
// kafka-go has no pause. A claim pauses by not fetching: the pump stops
// while the claim is paused or its buffer is full, and records fetched
// before stay in the buffer, in order, for the next Fetch. The buffer is
// dropped only with the claim.
//
// The buffer is a queue of fetch answers, each kept as the slice the
// fetcher read it into; a spent slice goes back to the fetcher for a later
// answer, so records are copied once, into the batch.
type claim struct {
	g         *generation
	key       tp
	committed int64
	metadata  string

	ctx    context.Context
	cancel context.CancelCauseFunc
	f      fetcher
	pumped chan struct{} // closed when the pump has returned

	mu          sync.Mutex
	chunks      [][]record // fetch answers; chunks[0][head:] and the rest are not yet in a batch
	head        int
	buffered    int        // records not yet in a batch
	spare       [][]record // spent answers' slices, emptied, for the fetcher to reuse
	paused      bool
	waiting     bool // the worker waits on wake
	pumpWaiting bool // the pump waits on more
	wake        chan struct{}
	more        chan struct{}

	lastOff   int64 // the offset of the last record of the last batch; -1 before any
	lastEpoch int32 // and its leader epoch

	// The worker's own.
	out  []stream.Record
	hdrs []stream.Header
}

func newClaim(g *generation, key tp, committed int64, metadata string, runCtx context.Context) *claim {
	ctx, cancel := context.WithCancelCause(runCtx)
	c := g.c
	return &claim{
		g: g, key: key, committed: committed, metadata: metadata,
		ctx: ctx, cancel: cancel, pumped: make(chan struct{}),
		wake: make(chan struct{}, 1), more: make(chan struct{}, 1), lastOff: -1, lastEpoch: -1,
		f: fetcher{
			dialer: c.dialer, brokers: c.brokers, topic: key.topic, partition: int(key.partition),
			fetch: c.fetch, start: c.start, log: c.log,
		},
	}
}

// highWater is how many buffered records stop the pump until the worker
// takes some.
func (cl *claim) highWater() int { return max(4*cl.g.c.cfg.MaxBatch, 2048) }

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
	err = proc.Process(cl.ctx, cl)
	ended = cl.ctx.Err() != nil
	cl.cancel(err)
	<-cl.pumped
	stop()
	cl.f.close()
	cl.mu.Lock()
	cl.chunks, cl.spare, cl.head, cl.buffered = nil, nil, 0, 0
	cl.mu.Unlock()
	return ended, err
}

// waitRoom waits until the pump may fetch: the claim is not paused and its
// buffer is below the high water mark. It returns false when the claim
// ends first.
func (cl *claim) waitRoom() bool {
	cl.mu.Lock()
	for cl.paused || cl.buffered >= cl.highWater() {
		cl.pumpWaiting = true
		cl.mu.Unlock()
		select {
		case <-cl.more:
		case <-cl.ctx.Done():
			return false
		}
		cl.mu.Lock()
	}
	cl.mu.Unlock()
	return cl.ctx.Err() == nil
}

// push appends a fetch answer to the buffer and wakes a waiting worker.
// kafka-go never repeats a record: an answer that starts at or before the
// last record buffered is a rewind (the fetcher reset its position to the
// partition's start after the log was replaced or truncated, and logged
// what it reads again). It is buffered like any other, and Fetch starts a
// new batch with it. The buffer keeps msgs: the caller gives it up.
func (cl *claim) push(msgs []record) {
	cl.mu.Lock()
	defer cl.mu.Unlock()
	if len(msgs) == 0 {
		cl.spareLocked(msgs)
		return
	}
	cl.chunks = append(cl.chunks, msgs)
	cl.buffered += len(msgs)
	if cl.waiting {
		cl.waiting = false
		cl.signal(cl.wake)
	}
}

// maxSpare is the largest slice of a spent fetch answer kept for reuse.
const maxSpare = 1 << 16

// spareLocked keeps a spent answer's slice for the fetcher; cl.mu is held.
func (cl *claim) spareLocked(msgs []record) {
	clear(msgs)
	if len(cl.spare) < 2 && cap(msgs) <= maxSpare {
		cl.spare = append(cl.spare, msgs[:0])
	}
}

// slice returns an empty slice for the fetcher to read an answer into.
func (cl *claim) slice() []record {
	cl.mu.Lock()
	defer cl.mu.Unlock()
	if n := len(cl.spare); n > 0 {
		s := cl.spare[n-1]
		cl.spare = cl.spare[:n-1]
		return s
	}
	return nil
}

// signal wakes whoever waits on ch, without blocking.
func (cl *claim) signal(ch chan struct{}) {
	select {
	case ch <- struct{}{}:
	default:
	}
}

// Topic returns the partition's topic.
func (cl *claim) Topic() string { return cl.key.topic }

// Partition returns the partition's number.
func (cl *claim) Partition() int32 { return cl.key.partition }

// Committed returns the offset and metadata committed when the generation
// began, as the consumer fetched them before it started reading.
func (cl *claim) Committed() (int64, string) { return cl.committed, cl.metadata }

// Fetch returns the next batch: at most the maximum batch size of buffered
// records, once the batch is full, the maximum wait has passed since records
// were first there, or at once when the maximum wait is 0.
func (cl *claim) Fetch(ctx context.Context) ([]stream.Record, error) {
	var (
		maxBatch = cl.g.c.cfg.MaxBatch
		maxWait  = cl.g.c.cfg.MaxWait
		timer    *time.Timer
		timeout  <-chan time.Time
		waited   bool
	)
	defer func() {
		if timer != nil {
			timer.Stop()
		}
	}()
	for {
		cl.mu.Lock()
		n := cl.buffered
		// A batch ends before a rewind: it is complete once the rewind is
		// buffered.
		k := cl.runLocked(min(n, maxBatch))
		if k < min(n, maxBatch) || n >= maxBatch || n > 0 && (maxWait == 0 || waited) {
			out := cl.takeLocked(k)
			cl.mu.Unlock()
			return out, nil
		}
		cl.waiting = true
		cl.mu.Unlock()
		if n > 0 && timer == nil {
			timer = time.NewTimer(maxWait)
			timeout = timer.C
		}
		select {
		case <-cl.wake:
		case <-timeout:
			waited = true
		case <-ctx.Done():
			cl.mu.Lock()
			cl.waiting = false
			cl.mu.Unlock()
			return nil, context.Cause(ctx)
		}
	}
}

// runLocked returns how many of the next n buffered records follow one
// another in offset order: the records before the first rewind (see push);
// cl.mu is held.
func (cl *claim) runLocked(n int) int {
	prev, k, head := int64(-1), 0, cl.head
	for _, chunk := range cl.chunks {
		for _, m := range chunk[head:] {
			if k == n {
				return n
			}
			if k > 0 && m.offset <= prev {
				return k
			}
			prev = m.offset
			k++
		}
		head = 0
	}
	return k
}

// takeLocked turns the next n buffered records into the batch's records,
// reusing the previous batch's memory (the Processor gave it up by calling
// Fetch), and lets a waiting pump go on; cl.mu is held.
func (cl *claim) takeLocked(n int) []stream.Record {
	out, hdrs := cl.out[:0], cl.hdrs[:0]
	for len(out) < n {
		chunk := cl.chunks[0]
		k := min(n-len(out), len(chunk)-cl.head)
		for i := range chunk[cl.head : cl.head+k] {
			m := &chunk[cl.head+i]
			var hs []stream.Header
			if len(m.headers) > 0 {
				h0 := len(hdrs)
				for _, h := range m.headers {
					hdrs = append(hdrs, stream.Header{Key: h.Key, Value: h.Value})
				}
				hs = hdrs[h0:len(hdrs):len(hdrs)]
			}
			out = append(out, stream.Record{
				Topic: cl.key.topic, Partition: cl.key.partition, Offset: m.offset,
				Key: m.key, Value: m.value, Headers: hs, Timestamp: m.time,
			})
			cl.lastOff, cl.lastEpoch = m.offset, m.epoch
		}
		clear(chunk[cl.head : cl.head+k]) // the batch holds the keys and values now
		cl.head += k
		if cl.head == len(chunk) {
			cl.chunks[0] = nil
			cl.chunks = cl.chunks[1:]
			cl.head = 0
			cl.spareLocked(chunk)
		}
	}
	if len(cl.chunks) == 0 {
		cl.chunks = cl.chunks[:0:0]
	}
	cl.buffered -= n
	cl.out, cl.hdrs = out, hdrs
	cl.wakePumpLocked()
	return out
}

// wakePumpLocked lets a waiting pump check again whether it may go on; cl.mu
// is held.
func (cl *claim) wakePumpLocked() {
	if cl.pumpWaiting && !cl.paused && cl.buffered < cl.highWater() {
		cl.pumpWaiting = false
		cl.signal(cl.more)
	}
}

// Pause stops the pump while the Processor waits out a backoff: nothing
// more is fetched for the partition (a fetch in progress completes).
// Records already fetched stay buffered.
func (cl *claim) Pause() {
	cl.mu.Lock()
	cl.paused = true
	cl.mu.Unlock()
}

// Resume undoes Pause.
func (cl *claim) Resume() {
	cl.mu.Lock()
	cl.paused = false
	cl.wakePumpLocked()
	cl.mu.Unlock()
}

// Commit commits next with metadata for the partition through the group
// generation and waits for the coordinator's answer. It returns
// [stream.ErrRevoked] once the claim is ending or its generation has ended.
// A commit that was sent is not cancelled by the generation's end, which
// waits for it (up to the commit timeout) rather than leave its outcome
// unknown; a shutdown waits for it at most 250ms, then cuts it short.
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
	return cl.g.commit(cl, next, epoch, metadata)
}

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
