// Package batching is the batching loop of the Kafka adapters' claims (the
// franz-go and the kafka-go adapters): a partition's records fetched ahead
// of its worker wait in a [Buffer], and the worker takes them in batches
// of at most a maximum of records, within a maximum wait, never across a
// rewind of the partition; the buffer is bounded, and the fetch side
// waits, or pauses the partition, while it is full or while the worker
// waits out a backoff.
package batching

import (
	"context"
	"sync"
	"time"
)

// Config is what a [Buffer] needs to know of its records and its bound.
type Config[R any] struct {
	// Offset returns a record's offset in its partition.
	Offset func(*R) int64
	// Size returns what a record counts against Limit; nil counts each
	// record 1.
	Size func(*R) int
	// Limit bounds the buffer: it is full once its records' sizes add up
	// to Limit, and stays full until the worker has taken it down to
	// Limit/2.
	Limit int
	// Watch, when not nil, is told as the buffer becomes full and as it
	// stops being full (drained to Limit/2, or dropped), with the owner's
	// lock held.
	Watch Watcher
	// Reuse keeps the slices of spent pushes (up to two, of at most 65536
	// records each), emptied, for the fetch side to fill again ([Buffer.Slice]).
	Reuse bool
	// Ctx, when not nil, is a context whose end the owner always reports
	// with [Buffer.Interrupt] (after cancelling it, or after its parent
	// ended). Next given it waits on the buffer alone, without the
	// context's done channel: a context makes that channel when first
	// asked for it, and a select waiting on it holds one more place, so
	// an idle partition's wait holds less memory. Next given any other
	// context waits on that context too.
	Ctx context.Context
}

// Watcher is told as a [Buffer] becomes full and as it stops being full.
// An interface, not two functions, so that an owner that is a pointer
// makes no closures (two allocations per partition).
type Watcher interface {
	BufferFull()
	BufferDrained()
}

// maxSpare is the largest slice kept for reuse.
const maxSpare = 1 << 16

// Buffer is one partition's records fetched ahead of its worker. The
// fetch side appends what each fetch brought ([Buffer.Push]); the worker
// takes batches ([Buffer.Next]). Its invariant: the records buffered,
// followed by those the fetch side has not pushed yet, are the partition's
// records in the order they are read; a batch holds consecutive buffered
// records, at most the maximum, and never spans a rewind (a record whose
// offset is not above the offset of the record pushed before it: the
// partition was read again from an earlier offset), which begins a batch
// of its own.
//
// A Buffer is guarded by its owner's lock, given to [New]: every method
// but Next and WaitRoom is called with the lock held; Next and WaitRoom
// take it, and release it while they wait.
type Buffer[R any] struct {
	mu  *sync.Mutex
	cfg Config[R]

	// The records buffered: made when records first come, and let go
	// with Rest while none are (an idle partition keeps only what is
	// below).
	*queue[R]

	last   int64 // the offset of the last record pushed; -1 before any
	skip   int64 // the offset past the records skipped after the last pushed (Skip); -1 for none
	told   int64 // the skip a Next returned no records for
	full   bool
	paused bool
	// waiting: the worker waits on wake; roomWaiting: the fetch side
	// waits on room. Beside the flags above, which keeps the struct
	// smaller.
	waiting     bool
	roomWaiting bool

	wake chan struct{} // made by the first Next that waits; let go by Rest
	room chan struct{} // made by the first WaitRoom that waits
}

// queue is a Buffer's records, and the slices it keeps for reuse.
type queue[R any] struct {
	chunks [][]R // what each push brought; chunks[0][head:] and the rest are buffered
	head   int
	n      int   // records buffered
	size   int   // their sizes, as Config.Size counts them
	pushed int64 // records pushed since the queue was made, and taken: a record's sequence number
	taken  int64
	cuts   []int64 // the sequence numbers of buffered records that begin a rewind
	spare  [][]R
}

// records returns the buffer's queue, made if it has none.
func (b *Buffer[R]) records() *queue[R] {
	if b.queue == nil {
		b.queue = new(queue[R])
	}
	return b.queue
}

// New returns an empty buffer guarded by mu.
func New[R any](mu *sync.Mutex, cfg Config[R]) *Buffer[R] {
	return &Buffer[R]{mu: mu, cfg: cfg, last: -1, skip: -1, told: -1}
}

func (b *Buffer[R]) sizeOf(r *R) int {
	if b.cfg.Size == nil {
		return 1
	}
	return b.cfg.Size(r)
}

// Push appends recs, in order, and wakes a worker waiting for them. The
// buffer keeps recs: the caller gives it up. A record at or before the one
// pushed before it begins a rewind.
func (b *Buffer[R]) Push(recs []R) {
	if len(recs) == 0 {
		b.spareSlice(recs)
		return
	}
	b.records()
	for i := range recs {
		r := &recs[i]
		off := b.cfg.Offset(r)
		if off <= b.last {
			b.cuts = append(b.cuts, b.pushed+int64(i))
		}
		b.last = off
		if b.cfg.Size != nil {
			b.size += b.cfg.Size(r)
		}
	}
	if b.cfg.Size == nil {
		b.size += len(recs)
	}
	b.skip = -1 // past it, or a rewind
	b.chunks = append(b.chunks, recs)
	b.n += len(recs)
	b.pushed += int64(len(recs))
	if !b.full && b.size >= b.cfg.Limit {
		b.full = true
		if b.cfg.Watch != nil {
			b.cfg.Watch.BufferFull()
		}
	}
	if b.waiting {
		b.waiting = false
		signal(b.wake)
	}
}

// Skip notes that the fetch side read the partition up to offset to
// (excluded) past the last record it pushed, and skipped the records
// between: a Kafka client's transaction markers, and under read_committed
// the records of aborted transactions. It wakes a worker waiting in Next
// when nothing is buffered. An offset not past the last record pushed, or
// the last skip, is ignored.
func (b *Buffer[R]) Skip(to int64) {
	if to <= b.last+1 || to <= b.skip {
		return
	}
	b.skip = to
	if b.waiting && b.Len() == 0 {
		b.waiting = false
		signal(b.wake)
	}
}

// Interrupt wakes Next, if it waits, so that it checks its context again:
// the owner calls it when Config.Ctx has ended.
func (b *Buffer[R]) Interrupt() { signal(b.wake) }

// Position returns the offset past the records skipped (Skip) after the
// last record pushed, when every record pushed has been taken; -1
// otherwise (none skipped, or records buffered): a claim's
// stream.Positioner.
func (b *Buffer[R]) Position() int64 {
	if b.Len() == 0 && b.skip > b.last+1 {
		return b.skip
	}
	return -1
}

// Next waits for the next batch and hands it to take, in one or more
// consecutive parts, with the lock held: at most maxBatch records, once
// that many are buffered, or a rewind ends the batch, or maxWait has
// passed since records were first there (at once when maxWait is 0). The
// parts are the buffer's memory: take copies what it keeps, and the buffer
// clears them afterwards. Next returns the cause of ctx when ctx ends
// first. With nothing buffered, it returns without calling take when the
// fetch side skipped records (Skip) since it last did: the worker reads
// the new Position.
func (b *Buffer[R]) Next(ctx context.Context, maxBatch int, maxWait time.Duration, take func(part []R)) error {
	var (
		timer   *time.Timer
		timeout <-chan time.Time
		waited  bool
	)
	defer func() {
		if timer != nil {
			timer.Stop()
		}
	}()
	for {
		b.mu.Lock()
		b.records()
		k := min(b.n, maxBatch)
		cut := false
		for len(b.cuts) > 0 && b.cuts[0] <= b.taken {
			b.cuts = b.cuts[1:] // a rewind that begins the batch
		}
		if len(b.cuts) > 0 && b.cuts[0]-b.taken < int64(k) {
			k, cut = int(b.cuts[0]-b.taken), true // the batch ends before the rewind
		}
		if cut || b.n >= maxBatch || b.n > 0 && (maxWait == 0 || waited) {
			b.takeLocked(k, take)
			if b.n == 0 {
				b.told = max(b.told, b.skip) // the worker reads Position after this batch
			}
			b.mu.Unlock()
			return nil
		}
		if b.n == 0 && b.skip > b.last+1 && b.skip > b.told {
			b.told = b.skip
			b.mu.Unlock()
			return nil
		}
		var done <-chan struct{}
		if ctx != b.cfg.Ctx {
			done = ctx.Done()
		} else if ctx.Err() != nil {
			// Checked with the lock held: an end after it comes with an
			// Interrupt, which wakes the wait below.
			b.waiting = false
			b.mu.Unlock()
			return context.Cause(ctx)
		}
		b.waiting = true
		if b.wake == nil {
			b.wake = make(chan struct{}, 1)
		}
		n, wake := b.n, b.wake
		b.mu.Unlock()
		if n > 0 && timer == nil {
			timer = time.NewTimer(maxWait)
			timeout = timer.C
		}
		select {
		case <-wake:
		case <-timeout:
			waited = true
		case <-done:
			b.mu.Lock()
			b.waiting = false
			b.mu.Unlock()
			return context.Cause(ctx)
		}
	}
}

// takeLocked hands the next k records to take and removes them.
func (b *Buffer[R]) takeLocked(k int, take func([]R)) {
	for k > 0 {
		chunk := b.chunks[0]
		part := chunk[b.head:min(len(chunk), b.head+k)]
		take(part)
		if b.cfg.Size != nil {
			for i := range part {
				b.size -= b.cfg.Size(&part[i])
			}
		} else {
			b.size -= len(part)
		}
		clear(part) // let go of what the records hold
		b.head += len(part)
		b.n -= len(part)
		b.taken += int64(len(part))
		k -= len(part)
		if b.head == len(chunk) {
			b.chunks[0] = nil
			b.chunks = b.chunks[1:]
			b.head = 0
			b.spareSlice(chunk)
		}
	}
	if len(b.chunks) == 0 {
		b.chunks = b.chunks[:0:0] // the slice's array does not grow for ever
	}
	if b.full && b.size <= b.cfg.Limit/2 {
		b.drainedLocked()
	}
}

func (b *Buffer[R]) drainedLocked() {
	b.full = false
	if b.cfg.Watch != nil {
		b.cfg.Watch.BufferDrained()
	}
	b.wakeRoomLocked()
}

// spareSlice keeps a spent push's slice for the fetch side, when the
// buffer reuses them.
func (b *Buffer[R]) spareSlice(s []R) {
	if b.cfg.Reuse && b.queue != nil && len(b.spare) < 2 && cap(s) <= maxSpare {
		clear(s)
		b.spare = append(b.spare, s[:0])
	}
}

// Slice returns an empty slice for the fetch side to read its next records
// into: a spent push's, when the buffer reuses them, or nil.
func (b *Buffer[R]) Slice() []R {
	if b.queue == nil {
		return nil
	}
	if n := len(b.spare); n > 0 {
		s := b.spare[n-1]
		b.spare = b.spare[:n-1]
		return s
	}
	return nil
}

// Rest lets go of what Next waits with, and of the queue while no record
// is buffered (its memory, and the slices kept for reuse): the worker does
// not call Next again before records are there, or the buffer's owner
// wakes it otherwise (a claim whose worker parked while the buffer is
// empty).
func (b *Buffer[R]) Rest() {
	b.waiting, b.wake = false, nil
	if b.Len() == 0 {
		b.queue = nil // no record is buffered: every rewind it noted is behind
	}
}

// Ready reports whether Next would return without waiting for the fetch
// side: records are buffered, or the fetch side skipped records since Next
// last returned for a skip.
func (b *Buffer[R]) Ready() bool {
	return b.Len() > 0 || b.skip > b.last+1 && b.skip > b.told
}

// Len returns how many records are buffered.
func (b *Buffer[R]) Len() int {
	if b.queue == nil {
		return 0
	}
	return b.n
}

// ReadTo returns the offset the fetch side has read the partition to:
// past the last record pushed, or past the records it skipped after it;
// 0 when nothing was pushed or skipped.
func (b *Buffer[R]) ReadTo() int64 { return max(b.last+1, b.skip) }

// Size returns what the buffered records count against the limit.
func (b *Buffer[R]) Size() int {
	if b.queue == nil {
		return 0
	}
	return b.size
}

// Last returns the offset of the last record pushed, or -1.
func (b *Buffer[R]) Last() int64 { return b.last }

// Full reports whether the buffer is full: it reached its limit and has
// not been taken down to half since.
func (b *Buffer[R]) Full() bool { return b.full }

// Pause notes that the worker waits out a backoff: the fetch side's
// WaitRoom waits until Resume. The slices kept for reuse are let go: the
// fetch side fills none before Resume, and a withheld batch should not
// keep them for as long as it waits.
func (b *Buffer[R]) Pause() {
	b.paused = true
	if b.queue != nil {
		b.spare = nil
	}
}

// Resume undoes Pause.
func (b *Buffer[R]) Resume() {
	b.paused = false
	b.wakeRoomLocked()
}

// Paused reports whether the worker waits out a backoff.
func (b *Buffer[R]) Paused() bool { return b.paused }

func (b *Buffer[R]) wakeRoomLocked() {
	if b.roomWaiting && !b.paused && !b.full {
		b.roomWaiting = false
		signal(b.room)
	}
}

// WaitRoom waits until the fetch side may fetch more: the buffer is not
// full and not paused. It reports false when ctx ends first.
func (b *Buffer[R]) WaitRoom(ctx context.Context) bool {
	b.mu.Lock()
	for b.paused || b.full {
		b.roomWaiting = true
		if b.room == nil {
			b.room = make(chan struct{}, 1)
		}
		room := b.room
		b.mu.Unlock()
		select {
		case <-room:
		case <-ctx.Done():
			return false
		}
		b.mu.Lock()
	}
	b.mu.Unlock()
	return ctx.Err() == nil
}

// Drop empties the buffer, as when its partition's claim ends; a full
// buffer is drained.
func (b *Buffer[R]) Drop() {
	if b.queue != nil {
		for i := range b.chunks {
			clear(b.chunks[i])
		}
		b.queue = nil
	}
	if b.full {
		b.drainedLocked()
	}
}

// signal wakes whoever waits on ch, without blocking.
func signal(ch chan struct{}) {
	select {
	case ch <- struct{}{}:
	default:
	}
}

// Extend lengthens s by n elements, and returns it with the index of the
// first of them, which the caller sets (in an array s had, they may hold
// what was there before). When s's array is too small, the new one has
// exactly the length needed, not the room append would leave: a batch
// withheld for its retries keeps this memory for as long as it waits.
func Extend[S ~[]E, E any](s S, n int) (S, int) {
	base := len(s)
	if base+n > cap(s) {
		s = append(make(S, 0, base+n), s...)
	}
	return s[:base+n], base
}

// ClearTail clears what prev held past the end of next when next lives in
// prev's array (a batch that reuses the previous one's): left there, the
// previous batch's records would keep the memory their keys and values
// point into (a whole fetch response each) for as long as the array is
// reused. It returns next.
func ClearTail[S ~[]E, E any](prev, next S) S {
	if len(prev) > len(next) && cap(next) > 0 && cap(prev) == cap(next) &&
		&prev[:cap(prev)][cap(prev)-1] == &next[:cap(next)][cap(next)-1] {
		clear(prev[len(next):])
	}
	return next
}
