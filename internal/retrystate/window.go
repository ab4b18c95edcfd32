package retrystate

import (
	"errors"
	"fmt"
	"math"
	"slices"
	"time"

	"github.com/redeliver-go/redeliver/checkpoint"
)

// resolveLimits returns l with its defaults filled in, or an error that
// says what is wrong with it.
func resolveLimits(l checkpoint.WindowLimits) (checkpoint.WindowLimits, error) {
	if l.MaxBytes == 0 {
		l.MaxBytes = checkpoint.DefaultMaxMetadataBytes
	}
	switch {
	case l.MaxErrorBytes == 0:
		l.MaxErrorBytes = checkpoint.DefaultMaxErrorBytes
	case l.MaxErrorBytes == -1:
		l.MaxErrorBytes = 0
	case l.MaxErrorBytes < 0 || l.MaxErrorBytes > 1024:
		return l, fmt.Errorf("checkpoint: window MaxErrorBytes %d: want -1 (none), 0 (the default, %d) or 1 to 1024", l.MaxErrorBytes, checkpoint.DefaultMaxErrorBytes)
	}
	if l.MaxBytes < 0 {
		return l, fmt.Errorf("checkpoint: window MaxBytes %d: want 0 (the default, %d) or more", l.MaxBytes, checkpoint.DefaultMaxMetadataBytes)
	}
	return l, nil
}

// ErrWindowFull is returned by [Window.Admit] for a record that the window
// cannot take: if every record it holds unfinished then failed, with the
// longest error it keeps, its metadata could be longer than its
// MaxBytes. Finish or give up records, then admit again.
var ErrWindowFull = errors.New("checkpoint: window full")

// Window tracks the records of one partition that a key-ordered consumer
// has taken in, in offset order, and writes what a commit must say of
// them: the commit's offset is the window's base, its lowest unfinished
// record, and its metadata (see [Window.Encode]) which records above the
// base are finished and the retry state of each record still retrying or
// given up with its exhaustion action not done. A restart or a next owner
// reads it back with [RestoreWindow]: it skips exactly the finished
// records and continues each retrying record's count.
//
// The window never writes more than its MaxBytes, and never drops
// anything to fit: [Window.Admit] refuses a record whose admission could
// make the metadata too long, counting for every record it holds
// unfinished the most its state can ever take (a failure with the longest
// error kept, and every field at its largest), so that whatever becomes of
// the records it holds, every later Encode fits.
//
// A record is admitted (in flight), then finished ([Window.Finish]:
// handled, or given up and its exhaustion action done), or given a retry
// state ([Window.Retry], [Window.GiveUp]) that it keeps until it is
// finished. Offsets that were never admitted below the highest admitted
// (absent from the partition: compacted, or transaction markers) count as
// finished. A Window is not safe for concurrent use.
type Window struct {
	lim    checkpoint.WindowLimits
	base   int64   // the lowest unfinished offset; next when none is
	next   int64   // the offset after the highest admitted
	open   []int64 // unfinished offsets, ascending
	states map[int64]State
	size   int    // the encoded length; -1 when the window changed since md
	md     string // the last Encode's metadata, while size is not -1
}

// NewWindow returns an empty window whose first record is at offset
// start (the committed offset).
func NewWindow(start int64, lim checkpoint.WindowLimits) (*Window, error) {
	if start < 0 {
		return nil, fmt.Errorf("checkpoint: window at offset %d: want 0 or more", start)
	}
	l, err := resolveLimits(lim)
	if err != nil {
		return nil, err
	}
	w := &Window{lim: l, base: start, next: start, states: map[int64]State{}, size: -1}
	if b := w.bound(1, 1, start+1); b > l.MaxBytes {
		return nil, fmt.Errorf("checkpoint: window MaxBytes %d is too small for one record, which may take %d bytes (keep fewer error bytes, or allow more)", l.MaxBytes, b)
	}
	return w, nil
}

// RestoreWindow returns the window that metadata md, committed with the
// offset committed, describes, for a next owner. Metadata in the single
// State's form ([EncodeState]) reads as that State's record retrying at
// the base. Empty metadata is an empty window at committed; metadata of
// another tool, damaged metadata, metadata longer than lim's MaxBytes, or
// a window of another checkpoint return an empty window at committed and
// an error that says so, for the caller to log: the records above the
// checkpoint are then delivered again, and none is lost.
//
// A State from the single State's form keeps its Records and Alone: a
// whole batch's count, for the driver to apply to the records it names.
//
// A restored window may hold more than lim lets it admit (a previous
// owner's limits were larger): it admits nothing until enough is finished.
func RestoreWindow(committed int64, md string, lim checkpoint.WindowLimits) (*Window, error) {
	w, err := NewWindow(committed, lim)
	if err != nil {
		return nil, err
	}
	ws, err := decodeWindow(md, committed, w.lim.MaxBytes)
	if err != nil {
		return w, err
	}
	last := committed - 1
	if n := len(ws.done); n > 0 {
		last = ws.done[n-1].Last
	}
	if n := len(ws.retrying); n > 0 {
		last = max(last, ws.retrying[n-1].Offset)
	}
	at := committed
	for _, r := range ws.done {
		for o := at; o < r.First; o++ {
			w.open = append(w.open, o)
		}
		at = r.Last + 1
	}
	for o := at; o <= last; o++ {
		w.open = append(w.open, o)
	}
	for _, s := range ws.retrying {
		s.LastError = cutError(s.LastError, w.lim.MaxErrorBytes)
		if s == (State{Offset: s.Offset}) {
			continue
		}
		w.states[s.Offset] = s
	}
	w.next = last + 1
	return w, nil
}

// Base returns the offset to commit: the lowest unfinished record's, or
// the next to admit when every record admitted is finished.
func (w *Window) Base() int64 { return w.base }

// Next returns the lowest offset the window can admit.
func (w *Window) Next() int64 { return w.next }

// Unfinished returns how many records the window holds unfinished.
func (w *Window) Unfinished() int { return len(w.open) }

// MaxBytes returns the most bytes the window's metadata may take.
func (w *Window) MaxBytes() int { return w.lim.MaxBytes }

// Finished reports whether the record at offset is done: below the base,
// or admitted (or absent) and finished. Offsets from Next on are not.
func (w *Window) Finished(offset int64) bool {
	if offset < w.base {
		return true
	}
	if offset >= w.next {
		return false
	}
	_, open := slices.BinarySearch(w.open, offset)
	return !open
}

// State returns the retry state of the unfinished record at offset, and
// whether it has one.
func (w *Window) State(offset int64) (State, bool) {
	s, ok := w.states[offset]
	return s, ok
}

// Fits reports whether [Window.Admit] would take the record at offset
// (at or after Next).
func (w *Window) Fits(offset int64) bool {
	return offset >= w.next && w.bound(len(w.open)+1, w.reserved(1), offset+1) <= w.lim.MaxBytes
}

// reserved is how many records reserve room for a state once add more are
// admitted: every unfinished record, or with ReserveOnFailure those
// holding a state and one more, so that an admission always leaves room
// for one record to fail.
func (w *Window) reserved(add int) int {
	if w.lim.ReserveOnFailure {
		return len(w.states) + min(add, 1)
	}
	return len(w.open) + add
}

// FitsState reports whether the unfinished record at offset can be given
// a retry state now: always, unless the window reserves on failure and
// the record's state could make the metadata too long.
func (w *Window) FitsState(offset int64) bool {
	if _, ok := w.states[offset]; ok || !w.lim.ReserveOnFailure {
		return true
	}
	return w.bound(len(w.open), len(w.states)+1, w.next) <= w.lim.MaxBytes
}

// Admit takes in the record at offset, which must be at or after Next
// (the offsets between are absent, and count as finished). It returns
// [ErrWindowFull], admitting nothing, when the record could make the
// metadata longer than MaxBytes.
func (w *Window) Admit(offset int64) error {
	if offset < w.next {
		return fmt.Errorf("checkpoint: window admits record %d, but it is at %d: records come in offset order", offset, w.next)
	}
	if offset == math.MaxInt64 {
		return fmt.Errorf("checkpoint: window admits record %d: the largest offset has no next", offset)
	}
	if !w.Fits(offset) {
		return fmt.Errorf("%w: record %d would need up to %d bytes, more than %d (%d records unfinished from %d)",
			ErrWindowFull, offset, w.bound(len(w.open)+1, w.reserved(1), offset+1), w.lim.MaxBytes, len(w.open), w.base)
	}
	if len(w.open) == 0 {
		w.base = offset
	}
	w.open = append(w.open, offset)
	w.next = offset + 1
	w.size = -1
	return nil
}

// Finish marks the record at offset finished: handled, or given up with
// its exhaustion action done. Its retry state goes; the base moves up when
// it was the lowest unfinished.
func (w *Window) Finish(offset int64) error {
	i, ok := slices.BinarySearch(w.open, offset)
	if !ok {
		return w.notOpen("finishes", offset)
	}
	switch {
	case len(w.open) == 1:
		w.open = w.open[:0]
	case i == 0:
		w.open = w.open[1:] // the base, most often: nothing to move
	default:
		w.open = slices.Delete(w.open, i, i+1)
	}
	delete(w.states, offset)
	if len(w.open) > 0 {
		w.base = w.open[0]
	} else {
		w.base = w.next
	}
	w.size = -1
	return nil
}

// Retry sets the retry state of the unfinished record at offset: after a
// failure (scheduled) and before its retry is delivered (started), as a
// [Machine] gives them. s.Offset is set to offset; times and durations are
// kept to the millisecond and the last error to MaxErrorBytes, as a next
// owner reads them ([Window.State] returns what was kept). A State with no
// retry state clears the record's (a fresh count). A State given up
// belongs to [Window.GiveUp].
func (w *Window) Retry(offset int64, s State) error {
	if s.GivenUp != 0 {
		return fmt.Errorf("checkpoint: window: Retry of record %d with a state given up (%v): use GiveUp", offset, s.GivenUp)
	}
	return w.set("retries", offset, s)
}

// GiveUp sets the state of the unfinished record at offset given up, its
// exhaustion action not done (s.GivenUp set, as [Machine.GivenUpState]
// gives it): a next owner gives it up again at once. [Window.Finish] it
// once its action succeeded.
func (w *Window) GiveUp(offset int64, s State) error {
	if s.GivenUp == 0 {
		return fmt.Errorf("checkpoint: window: GiveUp of record %d with a state not given up", offset)
	}
	return w.set("gives up", offset, s)
}

func (w *Window) set(verb string, offset int64, s State) error {
	if _, ok := slices.BinarySearch(w.open, offset); !ok {
		return w.notOpen(verb, offset)
	}
	s.Offset = offset
	s, err := w.keep(s)
	if err != nil {
		return fmt.Errorf("checkpoint: window %s record %d: %w", verb, offset, err)
	}
	if s != (State{Offset: offset}) && !w.FitsState(offset) {
		return fmt.Errorf("%w: record %d's state could need up to %d bytes, more than %d (%d records unfinished from %d, %d holding a state)",
			ErrWindowFull, offset, w.bound(len(w.open), len(w.states)+1, w.next), w.lim.MaxBytes, len(w.open), w.base, len(w.states))
	}
	if s == (State{Offset: offset}) {
		delete(w.states, offset)
	} else {
		w.states[offset] = s
	}
	w.size = -1
	return nil
}

// keep returns s as the window keeps it, or why it cannot.
func (w *Window) keep(s State) (State, error) {
	if err := checkWindowState(s); err != nil {
		return s, err
	}
	ms := func(t time.Time) time.Time {
		if t.IsZero() {
			return t
		}
		return time.UnixMilli(t.UnixMilli())
	}
	s.FirstFailure, s.NextAt = ms(s.FirstFailure), ms(s.NextAt)
	s.LastDelay = millis(s.LastDelay.Milliseconds())
	s.OutageTime = millis(s.OutageTime.Milliseconds())
	if s.Request != (Request{}) {
		s.Request.Delay = millis(requestMillis(s.Request.Delay))
	}
	s.LastError = cutError(s.LastError, w.lim.MaxErrorBytes)
	// Every time in the window within maxTimeSpread of every other.
	lo, hi, seen := int64(0), int64(0), false
	see := func(t time.Time) {
		if t.IsZero() {
			return
		}
		m := t.UnixMilli()
		if !seen {
			lo, hi, seen = m, m, true
		}
		lo, hi = min(lo, m), max(hi, m)
	}
	see(s.FirstFailure)
	see(s.NextAt)
	for o, x := range w.states {
		if o != s.Offset {
			see(x.FirstFailure)
			see(x.NextAt)
		}
	}
	if seen && (hi-lo > maxTimeSpread || hi-lo < 0) {
		return s, fmt.Errorf("times %v apart in one window, more than %v", time.Duration(hi-lo)*time.Millisecond, time.Duration(maxTimeSpread)*time.Millisecond)
	}
	return s, nil
}

// checkWindowState says why a window cannot hold s, if it cannot: each
// field within the size the window reserves for it.
func checkWindowState(s State) error {
	switch {
	case s.Retries < 0 || s.Retries > maxWindowRetries:
		return fmt.Errorf("retries %d: want 0 to %d", s.Retries, maxWindowRetries)
	case s.Records < 0 || s.Records > maxWindowRetries:
		return fmt.Errorf("records %d: want 0 to %d", s.Records, maxWindowRetries)
	case s.LastDelay < 0 || s.OutageTime < 0 || s.Request.Delay < 0:
		return errors.New("a negative duration")
	case s.Request.MaxRetries < checkpoint.Infinite || s.Request.MaxRetries > maxWindowRetries:
		return fmt.Errorf("a request of %d retries: want -1 to %d", s.Request.MaxRetries, maxWindowRetries)
	case s.GivenUp > checkpoint.NotRetryable:
		return fmt.Errorf("given up for reason %d: want %d to %d", s.GivenUp, checkpoint.RetriesSpent, checkpoint.NotRetryable)
	}
	if !s.FirstFailure.IsZero() && !s.NextAt.IsZero() {
		if d := s.NextAt.UnixMilli() - s.FirstFailure.UnixMilli(); d > maxTimeSpread || d < -maxTimeSpread {
			return fmt.Errorf("its first failure and next retry %d ms apart, more than %d", d, int64(maxTimeSpread))
		}
	}
	return nil
}

func (w *Window) notOpen(verb string, offset int64) error {
	switch {
	case offset >= w.next:
		return fmt.Errorf("checkpoint: window %s record %d, which it has not admitted (next %d)", verb, offset, w.next)
	default:
		return fmt.Errorf("checkpoint: window %s record %d, which is finished", verb, offset)
	}
}

// state returns what the window's metadata holds.
func (w *Window) state() windowState {
	ws := windowState{base: w.base}
	if len(w.open) == 0 {
		return ws
	}
	// Finished: every offset above the base and below next that is not
	// open, up to next-1 (records in flight at the end are not written).
	at := w.base + 1
	for _, o := range w.open[1:] {
		if o > at {
			ws.done = append(ws.done, offsetRange{at, o - 1})
		}
		at = o + 1
	}
	if at < w.next {
		ws.done = append(ws.done, offsetRange{at, w.next - 1})
	}
	if len(w.states) == 0 {
		return ws // the common window: nothing retrying
	}
	for _, o := range w.open {
		if s, ok := w.states[o]; ok {
			ws.retrying = append(ws.retrying, s)
		}
	}
	return ws
}

// Encode returns the window's metadata: empty when no record above the
// base is finished and none holds a retry state (the commit's offset then
// says it all), else versioned
// ASCII of [Window.Size] bytes, never more than MaxBytes.
//
// A window that has not changed since the last Encode returns the same
// metadata without encoding it again: a partition's driver asks at every
// turn, and most turns change nothing.
func (w *Window) Encode() string {
	if w.size >= 0 {
		return w.md
	}
	ws := w.state()
	md := ""
	if len(ws.done) > 0 || len(ws.retrying) > 0 {
		md = windowVersion + winEncoding.EncodeToString(encodeWindowBytes(ws))
	}
	w.md, w.size = md, len(md)
	return md
}

// Size returns the length of [Window.Encode]'s metadata.
func (w *Window) Size() int {
	if w.size < 0 {
		w.Encode()
	}
	return w.size
}

// Bound returns the most bytes the window's metadata can take, whatever
// becomes of the records it holds, without admitting more: what
// [Window.Admit] compares with MaxBytes. Size is never above it.
func (w *Window) Bound() int { return w.bound(len(w.open), w.reserved(0), w.next) }

// bound is the most bytes the metadata of a window holding u unfinished
// records below next (its base at w.base or above), r of them with a
// state, can take.
func (w *Window) bound(u, r int, next int64) int {
	if u == 0 {
		return 0
	}
	span := uint64(next - w.base) // every relative offset is below it
	header := uvarintLen(uint64(next)) + 1 + 10
	// At most u runs of finished offsets (one unfinished record at least
	// before each but the first), or a bitmap of span bits.
	runs := uvarintLen(uint64(u)+1) + (u+1)*2*uvarintLen(span)
	bm := (span + 7) / 8
	bitmap := uint64(uvarintLen(bm)) + bm
	finished := runs
	if bitmap < uint64(runs) {
		finished = int(bitmap)
	}
	entry := uvarintLen(span) + maxEntryFixed
	if e := w.lim.MaxErrorBytes; e > 0 {
		entry += uvarintLen(uint64(e)) + e
	}
	n := header + finished + uvarintLen(uint64(r)) + r*entry
	return len(windowVersion) + winEncoding.EncodedLen(n)
}
