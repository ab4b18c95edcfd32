package batching

import (
	"context"
	"errors"
	"slices"
	"sync"
	"testing"
	"testing/synctest"
	"time"
	"unsafe"
)

type rec struct {
	off  int64
	size int
	data *int // something the buffer must let go of
}

func recs(from, to int64) []rec {
	var rs []rec
	for o := from; o <= to; o++ {
		rs = append(rs, rec{off: o, size: 1, data: new(int)})
	}
	return rs
}

type fixture struct {
	mu        sync.Mutex
	b         *Buffer[rec]
	full      int // BufferFull calls
	drained   int // BufferDrained calls
	partsSeen [][]rec
}

func (f *fixture) BufferFull()    { f.full++ }
func (f *fixture) BufferDrained() { f.drained++ }

func newFixture(limit int, sized, reuse bool) *fixture {
	f := &fixture{}
	cfg := Config[rec]{Offset: func(r *rec) int64 { return r.off }, Limit: limit, Reuse: reuse,
		Watch: f}
	if sized {
		cfg.Size = func(r *rec) int { return r.size }
	}
	f.b = New(&f.mu, cfg)
	return f
}

func (f *fixture) push(rs []rec) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.b.Push(rs)
}

// next takes a batch and returns its offsets.
func (f *fixture) next(t *testing.T, ctx context.Context, maxBatch int, maxWait time.Duration) ([]int64, error) {
	t.Helper()
	var offs []int64
	err := f.b.Next(ctx, maxBatch, maxWait, func(part []rec) {
		f.partsSeen = append(f.partsSeen, part)
		for _, r := range part {
			if r.data == nil {
				t.Errorf("record %d handed out cleared", r.off)
			}
			offs = append(offs, r.off)
		}
	})
	return offs, err
}

func (f *fixture) locked(fn func()) {
	f.mu.Lock()
	defer f.mu.Unlock()
	fn()
}

// Batches of at most maxBatch buffered records, in order, taken at once
// when maxWait is 0, across the pushes' parts.
func TestBatchesOfAtMostMaxBatch(t *testing.T) {
	f := newFixture(1000, false, false)
	f.push(recs(0, 2))
	f.push(recs(3, 9))
	var got [][]int64
	for range 3 {
		offs, err := f.next(t, context.Background(), 4, 0)
		if err != nil {
			t.Fatal(err)
		}
		got = append(got, offs)
	}
	want := [][]int64{{0, 1, 2, 3}, {4, 5, 6, 7}, {8, 9}}
	if !slices.EqualFunc(got, want, slices.Equal) {
		t.Fatalf("batches %v, want %v", got, want)
	}
	if len(f.partsSeen) != 4 {
		t.Errorf("%d parts, want 4 (the first batch spans two pushes)", len(f.partsSeen))
	}
	for _, p := range f.partsSeen {
		for _, r := range p {
			if r.data != nil {
				t.Fatalf("record %+v still held by the buffer after it was taken", r)
			}
		}
	}
	f.locked(func() {
		if n := f.b.Len(); n != 0 {
			t.Errorf("Len %d after every record was taken", n)
		}
	})
}

// A batch waits up to maxWait from when its first record was there, and
// no longer; a full batch does not wait.
func TestMaxWait(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newFixture(1000, false, false)
		start := time.Now()
		go func() {
			time.Sleep(100 * time.Millisecond)
			f.push(recs(0, 0))
			time.Sleep(300 * time.Millisecond)
			f.push(recs(1, 2))
		}()
		offs, err := f.next(t, context.Background(), 10, time.Second)
		if err != nil {
			t.Fatal(err)
		}
		if took := time.Since(start); took != 1100*time.Millisecond || !slices.Equal(offs, []int64{0, 1, 2}) {
			t.Fatalf("batch %v after %v, want 0-2 after 1.1s (the first record at 100ms, then the maximum wait)", offs, took)
		}

		start = time.Now()
		go func() {
			time.Sleep(100 * time.Millisecond)
			f.push(recs(3, 5))
			time.Sleep(100 * time.Millisecond)
			f.push(recs(6, 20))
		}()
		offs, err = f.next(t, context.Background(), 10, time.Second)
		if err != nil {
			t.Fatal(err)
		}
		if took := time.Since(start); took != 200*time.Millisecond || !slices.Equal(offs, []int64{3, 4, 5, 6, 7, 8, 9, 10, 11, 12}) {
			t.Fatalf("batch %v after %v, want 3-12 at once once 10 records are there (200ms)", offs, took)
		}
	})
}

// A batch never spans a rewind: the records before it are a batch at once
// (without waiting maxWait), and the rewind begins the next, whether it
// comes in a push of its own or inside one.
func TestNeverAcrossARewind(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newFixture(1000, false, false)
		f.push(recs(0, 4))
		f.push(append(recs(2, 3), recs(0, 1)...)) // rewinds at 2, then at 0
		f.push(recs(2, 2))
		start := time.Now()
		var got [][]int64
		for i := range 3 {
			offs, err := f.next(t, context.Background(), 100, time.Hour)
			if err != nil {
				t.Fatal(err)
			}
			got = append(got, offs)
			// The first two end at a rewind; the last waits for more.
			if want := map[bool]time.Duration{true: time.Hour, false: 0}[i == 2]; time.Since(start) != want {
				t.Errorf("batch %d came after %v, want %v", i, time.Since(start), want)
			}
		}
		want := [][]int64{{0, 1, 2, 3, 4}, {2, 3}, {0, 1, 2}}
		if !slices.EqualFunc(got, want, slices.Equal) {
			t.Fatalf("batches %v, want %v", got, want)
		}
		f.locked(func() {
			if last := f.b.Last(); last != 2 {
				t.Errorf("Last %d, want 2", last)
			}
		})
	})
}

// Next returns the cause of its context's end, and a later push does not
// wait for it.
func TestNextEndsWithItsContext(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newFixture(1000, false, false)
		cause := errors.New("revoked")
		ctx, cancel := context.WithCancelCause(context.Background())
		go func() {
			time.Sleep(time.Second)
			cancel(cause)
		}()
		if _, err := f.next(t, ctx, 10, 0); !errors.Is(err, cause) {
			t.Fatalf("Next: %v, want the context's cause", err)
		}
		f.push(recs(0, 1))
		if offs, err := f.next(t, context.Background(), 10, 0); err != nil || len(offs) != 2 {
			t.Fatalf("after: %v %v", offs, err)
		}
	})
}

// doneCounter is a context that counts the calls of its Done.
type doneCounter struct {
	context.Context
	calls int
}

func (c *doneCounter) Done() <-chan struct{} {
	c.calls++
	return c.Context.Done()
}

// Next given Config.Ctx waits on the buffer alone, never asking the
// context for its done channel (which a context makes when first asked,
// and which an idle partition need not keep): its end comes with
// Interrupt. It ends at once when the context ended before it waits; any
// other context is waited on as before.
func TestNextOnTheOwnersContextWaitsOnTheBufferAlone(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		cause := errors.New("revoked")
		inner, cancel := context.WithCancelCause(context.Background())
		ctx := &doneCounter{Context: inner}
		f := &fixture{}
		f.b = New(&f.mu, Config[rec]{Offset: func(r *rec) int64 { return r.off }, Limit: 1000, Ctx: ctx})

		// Records pushed while it waits end the wait, as ever.
		go func() {
			time.Sleep(time.Second)
			f.push(recs(0, 1))
		}()
		if offs, err := f.next(t, ctx, 10, 0); err != nil || len(offs) != 2 {
			t.Fatalf("Next: %v %v, want the 2 records pushed", offs, err)
		}
		// The context's end, with Interrupt, ends it.
		go func() {
			time.Sleep(time.Second)
			cancel(cause)
			f.locked(f.b.Interrupt)
		}()
		if _, err := f.next(t, ctx, 10, 0); !errors.Is(err, cause) {
			t.Fatalf("Next: %v, want the context's cause", err)
		}
		// Ended before it waits: at once, Interrupt or not.
		if _, err := f.next(t, ctx, 10, 0); !errors.Is(err, cause) {
			t.Fatalf("Next after the end: %v, want the context's cause", err)
		}
		if ctx.calls != 0 {
			t.Errorf("Next asked the owner's context for its done channel %d times, want none", ctx.calls)
		}

		// Another context is waited on: its end needs no Interrupt.
		other, cancelOther := context.WithCancelCause(context.Background())
		go func() {
			time.Sleep(time.Second)
			cancelOther(cause)
		}()
		if _, err := f.next(t, other, 10, 0); !errors.Is(err, cause) {
			t.Fatalf("Next on another context: %v, want its cause", err)
		}
	})
}

// The buffer is full at its limit, as the records' sizes count, until it
// has been taken down to half; the fetch side's WaitRoom waits while it is
// full or paused.
func TestLimitPauseAndRoom(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newFixture(20, true, false)
		big := recs(0, 9)
		for i := range big {
			big[i].size = 2
		}
		f.push(big) // 20: full
		f.locked(func() {
			if !f.b.Full() || f.full != 1 || f.b.Size() != 20 {
				t.Fatalf("full %v (BufferFull %d), size %d after 20 of 20", f.b.Full(), f.full, f.b.Size())
			}
		})
		room := make(chan bool, 1)
		go func() { room <- f.b.WaitRoom(context.Background()) }()
		synctest.Wait()
		select {
		case <-room:
			t.Fatal("WaitRoom returned while the buffer was full")
		default:
		}
		if _, err := f.next(t, context.Background(), 4, 0); err != nil { // 12 left: still full
			t.Fatal(err)
		}
		synctest.Wait()
		select {
		case <-room:
			t.Fatal("WaitRoom returned above half the limit")
		default:
		}
		if _, err := f.next(t, context.Background(), 1, 0); err != nil { // 10 left: half
			t.Fatal(err)
		}
		synctest.Wait()
		select {
		case ok := <-room:
			if !ok {
				t.Fatal("WaitRoom: false")
			}
		default:
			t.Fatal("WaitRoom still waits once the buffer is down to half")
		}
		f.locked(func() {
			if f.b.Full() || f.drained != 1 {
				t.Fatalf("full %v, BufferDrained %d at half the limit", f.b.Full(), f.drained)
			}
			f.b.Pause()
		})
		go func() { room <- f.b.WaitRoom(context.Background()) }()
		synctest.Wait()
		select {
		case <-room:
			t.Fatal("WaitRoom returned while paused")
		default:
		}
		f.locked(f.b.Resume)
		synctest.Wait()
		select {
		case <-room:
		default:
			t.Fatal("WaitRoom still waits after Resume")
		}
		f.locked(f.b.Pause)
		ctx, cancel := context.WithCancel(context.Background())
		go func() { room <- f.b.WaitRoom(ctx) }()
		synctest.Wait()
		cancel()
		if ok := <-room; ok {
			t.Fatal("WaitRoom reported room after its context ended")
		}
	})
}

// Drop empties the buffer and drains it; pushes go on after it.
func TestDrop(t *testing.T) {
	f := newFixture(5, false, false)
	f.push(recs(0, 9))
	f.locked(func() {
		f.b.Drop()
		if f.b.Len() != 0 || f.b.Size() != 0 || f.b.Full() || f.full != 1 || f.drained != 1 {
			t.Fatalf("after Drop: len %d size %d full %v, BufferFull %d BufferDrained %d", f.b.Len(), f.b.Size(), f.b.Full(), f.full, f.drained)
		}
	})
	f.push(recs(10, 11))
	if offs, err := f.next(t, context.Background(), 10, 0); err != nil || !slices.Equal(offs, []int64{10, 11}) {
		t.Fatalf("after Drop: %v %v", offs, err)
	}
}

// With Reuse, a spent push's slice comes back emptied for the next fetch;
// without, nothing is kept.
func TestReuse(t *testing.T) {
	for _, reuse := range []bool{true, false} {
		f := newFixture(1000, false, reuse)
		rs := recs(0, 3)
		f.push(rs)
		if _, err := f.next(t, context.Background(), 10, 0); err != nil {
			t.Fatal(err)
		}
		f.locked(func() {
			s := f.b.Slice()
			switch {
			case reuse && (len(s) != 0 || cap(s) != cap(rs) || &s[:1][0] != &rs[0]):
				t.Errorf("Slice with Reuse: len %d cap %d, want the spent push's slice, empty", len(s), cap(s))
			case !reuse && s != nil:
				t.Errorf("Slice without Reuse: %v, want nil", s)
			}
		})
	}
}

// Records the fetch side skipped (Skip: transaction markers, aborted
// records) set the Position once everything pushed before them is taken,
// and wake a Next waiting on an empty buffer, which returns no records.
func TestSkipAndPosition(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newFixture(100, false, false)
		f.push(recs(0, 2))
		f.locked(func() { f.b.Skip(4) })
		f.locked(func() {
			if p := f.b.Position(); p != -1 {
				t.Errorf("Position %d with records buffered, want -1", p)
			}
		})
		if offs, err := f.next(t, t.Context(), 10, 0); err != nil || !slices.Equal(offs, []int64{0, 1, 2}) {
			t.Fatalf("next: %v %v", offs, err)
		}
		f.locked(func() {
			if p := f.b.Position(); p != 4 {
				t.Errorf("Position %d, want 4 (past the skipped 3)", p)
			}
		})
		// The skip was there with the batch: the next Next waits.
		ctx, cancel := context.WithTimeout(t.Context(), time.Second)
		if offs, err := f.next(t, ctx, 10, 0); !errors.Is(err, context.DeadlineExceeded) {
			t.Errorf("next after the skip was read: %v %v, want the context's end", offs, err)
		}
		cancel()
		// A skip while Next waits on an empty buffer ends it, with no records.
		done := make(chan []int64)
		go func() {
			offs, err := f.next(t, t.Context(), 10, 0)
			if err != nil {
				t.Error(err)
			}
			done <- offs
		}()
		synctest.Wait()
		f.locked(func() { f.b.Skip(3) }) // not past the last skip: ignored
		f.locked(func() { f.b.Skip(7) })
		if offs := <-done; len(offs) != 0 {
			t.Errorf("next after a skip: %v, want no records", offs)
		}
		f.locked(func() {
			if p := f.b.Position(); p != 7 {
				t.Errorf("Position %d, want 7", p)
			}
		})
		// Records pushed after a skip: the position is theirs.
		f.push(recs(7, 8))
		f.locked(func() { f.b.Skip(8) }) // not past the last record: ignored
		if offs, err := f.next(t, t.Context(), 10, 0); err != nil || !slices.Equal(offs, []int64{7, 8}) {
			t.Fatalf("next: %v %v", offs, err)
		}
		f.locked(func() {
			if p := f.b.Position(); p != -1 {
				t.Errorf("Position %d after records past the skip, want -1", p)
			}
		})
	})
}

// Rest with nothing buffered lets go of the queue (its arrays and the
// slices kept for reuse): an idle buffer holds none. What it must
// remember goes on: a record at or before the last one pushed before Rest
// still begins a rewind, and a skip read before Rest is not reported
// again. Rest with records buffered keeps them.
func TestRestLetsGoOfTheQueue(t *testing.T) {
	f := newFixture(1000, true, true)
	f.push(recs(0, 3))
	f.locked(func() {
		f.b.Rest()
		if f.b.queue == nil || f.b.Len() != 4 || f.b.Size() != 4 {
			t.Fatalf("Rest with 4 records buffered: queue %p, len %d, size %d, want them kept", f.b.queue, f.b.Len(), f.b.Size())
		}
	})
	if offs, err := f.next(t, context.Background(), 10, 0); err != nil || !slices.Equal(offs, []int64{0, 1, 2, 3}) {
		t.Fatalf("next: %v %v", offs, err)
	}
	f.locked(func() { f.b.Skip(6) })
	if offs, err := f.next(t, context.Background(), 10, 0); err != nil || len(offs) != 0 {
		t.Fatalf("next after a skip: %v %v, want no records", offs, err)
	}
	f.locked(func() {
		f.b.Rest()
		if f.b.queue != nil {
			t.Fatalf("Rest with nothing buffered kept the queue: %+v", *f.b.queue)
		}
		if s := f.b.Slice(); s != nil {
			t.Errorf("Slice after Rest: a slice of cap %d, want none kept", cap(s))
		}
		if f.b.Len() != 0 || f.b.Size() != 0 || f.b.Ready() || f.b.Position() != 6 || f.b.Last() != 3 || f.b.ReadTo() != 6 {
			t.Errorf("after Rest: len %d size %d ready %v position %d last %d readTo %d, want 0 0 false 6 3 6",
				f.b.Len(), f.b.Size(), f.b.Ready(), f.b.Position(), f.b.Last(), f.b.ReadTo())
		}
		f.b.Pause()
		f.b.Resume()
	})
	// The partition is read again from offset 2: a rewind, a batch of its
	// own, though the queue that saw 0 to 3 is gone.
	f.push(recs(2, 3))
	f.push(recs(2, 4))
	var got [][]int64
	for range 2 {
		offs, err := f.next(t, context.Background(), 10, 0)
		if err != nil {
			t.Fatal(err)
		}
		got = append(got, offs)
	}
	if want := [][]int64{{2, 3}, {2, 3, 4}}; !slices.EqualFunc(got, want, slices.Equal) {
		t.Errorf("batches after Rest %v, want %v", got, want)
	}
	f.locked(func() {
		f.b.Rest()
		f.b.Drop()
		if f.b.queue != nil || f.full != 0 || f.drained != 0 {
			t.Errorf("Drop after Rest: queue %p, BufferFull %d, BufferDrained %d", f.b.queue, f.full, f.drained)
		}
	})
}

// TestBufferSize: every assigned partition holds a Buffer for as long as
// it is assigned, idle or not; at 128 bytes it sits in the runtime's
// 128-byte size class, and a field more costs every partition 16 bytes
// (docs/BENCHMARKS.md, the heap per idle partition). On 64-bit platforms.
func TestBufferSize(t *testing.T) {
	if unsafe.Sizeof(uintptr(0)) != 8 {
		t.Skip("sizes are for 64-bit platforms")
	}
	if n := unsafe.Sizeof(Buffer[rec]{}); n > 128 {
		t.Fatalf("a Buffer is %d bytes, over the 128-byte size class: put what only buffered records need in its queue", n)
	}
}

// ClearTail clears the previous batch's records past the next one's end
// when the next batch reuses its array, and touches no other array.
func TestClearTail(t *testing.T) {
	prev := recs(0, 4)
	next := append(prev[:0], recs(10, 11)...)
	if got := ClearTail(prev, next); len(got) != 2 || got[0].off != 10 || got[1].off != 11 {
		t.Fatalf("ClearTail returned %v, want the next batch", got)
	}
	for i, r := range prev[2:] {
		if r != (rec{}) {
			t.Errorf("record %d of the longer batch, past the shorter one's end, kept: %+v", 2+i, r)
		}
	}

	// A next batch in another array of the same capacity leaves the
	// previous one's alone (another batch may still read it).
	prev = recs(0, 4)
	other := make([]rec, 2, cap(prev))
	ClearTail(prev, other)
	if prev[4].data == nil {
		t.Error("a previous batch in another array was cleared")
	}

	// A longer or as long next batch clears nothing; nil and empty ones
	// are no trouble.
	prev = recs(0, 1)
	ClearTail(prev, append(prev[:0], recs(5, 6)...))
	ClearTail[[]rec](nil, nil)
	ClearTail(recs(0, 1), nil)
	ClearTail(nil, recs(0, 1))
	ClearTail(prev[:0], prev[:0])
}

// Extend keeps what s holds, lengthens it in place while its array has
// room, and otherwise moves it to an array of exactly the length needed.
func TestExtend(t *testing.T) {
	s := make([]int, 2, 5)
	s[0], s[1] = 7, 8
	array := &s[:cap(s)][0]
	s, base := Extend(s, 3)
	if base != 2 || len(s) != 5 || cap(s) != 5 || &s[0] != array || s[0] != 7 || s[1] != 8 {
		t.Fatalf("Extend within the room: base %d, %v (len %d, cap %d), same array %v", base, s, len(s), cap(s), &s[0] == array)
	}
	s, base = Extend(s, 4)
	if base != 5 || len(s) != 9 || cap(s) != 9 || &s[0] == array || s[0] != 7 || s[1] != 8 {
		t.Fatalf("Extend past the room: base %d, %v (len %d, cap %d), want a new array of exactly 9", base, s, len(s), cap(s))
	}
	var none []int
	if none, base = Extend(none, 0); none != nil || base != 0 {
		t.Fatalf("Extend(nil, 0) = %v, %d, want nil, 0", none, base)
	}
	if got, base := Extend(none, 1); len(got) != 1 || cap(got) != 1 || base != 0 {
		t.Fatalf("Extend(nil, 1) = %v (cap %d), %d", got, cap(got), base)
	}
}
