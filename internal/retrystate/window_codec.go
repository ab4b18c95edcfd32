package retrystate

import (
	"encoding/base64"
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"math/bits"
	"strings"
	"time"

	"github.com/redeliver-go/redeliver/checkpoint"
)

// The durable form of a window (see [Window]), written as a Kafka offset
// commit's metadata beside the committed offset, which is the window's
// base, its lowest unfinished offset:
//
//	rd2:<base64url, no padding, of the bytes below>
//
// All integers are varints (encoding/binary's Uvarint; "zz" marks a
// zig-zag signed Varint). Offsets are relative to the base, times to a
// reference time written once, so that the common window (a few records
// retrying, runs of finished records) takes a few bytes per record:
//
//	base          uvarint: the offset of the lowest unfinished record
//	flags         uvarint: bit 0 finished offsets as a bitmap (else as
//	              runs); bit 1 a reference time follows
//	ref           zz: the reference time, Unix milliseconds (bit 1)
//	finished      runs:   uvarint n, then n pairs of uvarints (gap, run)
//	                      from base+1: gap unfinished offsets, then run
//	                      finished ones (run >= 1, every gap but the
//	                      first >= 1)
//	              bitmap: uvarint n, then n bytes; bit i (LSB first) of
//	                      the bitmap marks base+1+i finished (last byte
//	                      not 0)
//	entries       uvarint n, then n records with a retry state, by offset:
//	  offset      uvarint: from the base for the first, from the previous
//	              entry's for the next (>= 1)
//	  flags       uvarint: bit 0 Started, 1 Alone, 2 Halted, 3 FirstFailure,
//	              4 NextAt, 5 LastDelay, 6 OutageTime, 7 Request, 8 Records,
//	              9 LastError follow; bits 10-12 GivenUp (a Reason, 0 none)
//	  retries     uvarint
//	  first       zz: FirstFailure - ref, ms (bit 3)
//	  next        zz: NextAt - ref, ms (bit 4)
//	  delay       uvarint ms (bit 5)
//	  outage      uvarint ms (bit 6)
//	  request     zz max retries (>= -1), uvarint delay ms (bit 7)
//	  records     uvarint (bit 8)
//	  error       uvarint length, then the bytes (bit 9)
//
// Each field keeps the unit and rounding of the single State's form (see
// [EncodeState]): times and durations in milliseconds, a Request's delay
// rounded up; the last error is cut at a rune's start to the window's
// limit with "…" at its end when it was longer. Every offset in
// [base, the highest offset written] that is neither finished nor an entry
// is unfinished with no retry state: a next owner delivers it afresh.
// Offsets after the highest one written are not in the window.
//
// Metadata in the single State's form (rd1, [DecodeState]) reads as a
// window with that State's record retrying at the base and nothing
// finished above it.
const windowVersion = "rd2:"

// Bit flags of a window and of its entries.
const (
	winBitmap  = 1 << 0
	winHasTime = 1 << 1

	entStarted  = 1 << 0
	entAlone    = 1 << 1
	entHalted   = 1 << 2
	entFirst    = 1 << 3
	entNext     = 1 << 4
	entDelay    = 1 << 5
	entOutage   = 1 << 6
	entRequest  = 1 << 7
	entRecords  = 1 << 8
	entError    = 1 << 9
	entReasonAt = 10 // GivenUp in bits 10-12
	entKnown    = 1<<13 - 1
)

// Limits of the fields a window holds: each has a fixed largest size, so
// that a [Window] knows the most bytes a record can ever take in it.
const (
	maxWindowRetries = 1<<35 - 1                                         // retries, a request's limit, records: 5 bytes
	maxTimeSpread    = 1<<40 - 1                                         // ms between a time and the reference, either way: 6 bytes zig-zag (34 years)
	maxEntryFixed    = 2 + 5 + 6 + 6 + 7 + 7 + 6 + 7 + 5                 // flags, retries, first, next, delay, outage, request, records (a Duration is under 2^44 ms: 7 bytes)
	maxHeaderFixed   = binary.MaxVarintLen64 + 1 + binary.MaxVarintLen64 // base, flags, ref
	// maxUnfinished is the most unfinished records a decoded window may
	// hold between its finished ones: a window that fits in any real
	// metadata limit holds far fewer (each takes tens of bytes).
	maxUnfinished = 1 << 16
)

// errorMark ends a last error cut to a window's limit.
const errorMark = "…"

var winEncoding = base64.RawURLEncoding

// offsetRange is the offsets First to Last, both included.
type offsetRange struct {
	First, Last int64
}

// windowState is what a window's metadata holds.
type windowState struct {
	base     int64
	done     []offsetRange // finished offsets above base, ascending, disjoint, not adjacent
	retrying []State       // by Offset, ascending, each >= base and not done
}

// appendUvarint and appendVarint are binary's, named for reading.
func appendUvarint(b []byte, v uint64) []byte { return binary.AppendUvarint(b, v) }
func appendVarint(b []byte, v int64) []byte   { return binary.AppendVarint(b, v) }

// uvarintLen is the length of v as a uvarint.
func uvarintLen(v uint64) int { return (bits.Len64(v|1) + 6) / 7 }

// encodeWindowBytes returns the bytes of w before base64; w is valid (a
// Window's own, or one decodeWindow returned).
func encodeWindowBytes(w windowState) []byte {
	b := make([]byte, 0, 64)
	b = appendUvarint(b, uint64(w.base))
	var ref int64
	hasRef := false
	for _, s := range w.retrying {
		for _, t := range [2]time.Time{s.FirstFailure, s.NextAt} {
			if t.IsZero() {
				continue
			}
			if ms := t.UnixMilli(); !hasRef || ms < ref {
				ref, hasRef = ms, true
			}
		}
	}
	runs := appendRuns(nil, w)
	bitmap := appendBitmap(nil, w)
	flags := uint64(0)
	if bitmap != nil && len(bitmap) < len(runs) {
		flags |= winBitmap
		runs = bitmap
	}
	if hasRef {
		flags |= winHasTime
	}
	b = appendUvarint(b, flags)
	if hasRef {
		b = appendVarint(b, ref)
	}
	b = append(b, runs...)
	b = appendUvarint(b, uint64(len(w.retrying)))
	prev := w.base
	for _, s := range w.retrying {
		b = appendUvarint(b, uint64(s.Offset-prev))
		prev = s.Offset
		f := uint64(s.GivenUp) << entReasonAt
		set := func(bit uint64, on bool) {
			if on {
				f |= bit
			}
		}
		set(entStarted, s.Started)
		set(entAlone, s.Alone)
		set(entHalted, s.Halted)
		set(entFirst, !s.FirstFailure.IsZero())
		set(entNext, !s.NextAt.IsZero())
		set(entDelay, s.LastDelay != 0)
		set(entOutage, s.OutageTime != 0)
		set(entRequest, s.Request != (Request{}))
		set(entRecords, s.Records != 0)
		set(entError, s.LastError != "")
		b = appendUvarint(b, f)
		b = appendUvarint(b, uint64(s.Retries))
		if !s.FirstFailure.IsZero() {
			b = appendVarint(b, s.FirstFailure.UnixMilli()-ref)
		}
		if !s.NextAt.IsZero() {
			b = appendVarint(b, s.NextAt.UnixMilli()-ref)
		}
		if s.LastDelay != 0 {
			b = appendUvarint(b, uint64(s.LastDelay.Milliseconds()))
		}
		if s.OutageTime != 0 {
			b = appendUvarint(b, uint64(s.OutageTime.Milliseconds()))
		}
		if s.Request != (Request{}) {
			b = appendVarint(b, int64(s.Request.MaxRetries))
			b = appendUvarint(b, uint64(requestMillis(s.Request.Delay)))
		}
		if s.Records != 0 {
			b = appendUvarint(b, uint64(s.Records))
		}
		if s.LastError != "" {
			b = appendUvarint(b, uint64(len(s.LastError)))
			b = append(b, s.LastError...)
		}
	}
	return b
}

// appendRuns appends w's finished offsets as runs.
func appendRuns(b []byte, w windowState) []byte {
	b = appendUvarint(b, uint64(len(w.done)))
	at := w.base + 1
	for _, r := range w.done {
		b = appendUvarint(b, uint64(r.First-at))
		b = appendUvarint(b, uint64(r.Last-r.First+1))
		at = r.Last + 1
	}
	return b
}

// appendBitmap appends w's finished offsets as a bitmap; a large one when
// the runs are far apart, which the caller then does not take (it is
// built only when it could be shorter).
func appendBitmap(b []byte, w windowState) []byte {
	if len(w.done) == 0 {
		return appendUvarint(b, 0)
	}
	span := w.done[len(w.done)-1].Last - w.base // bits
	if span > int64(16*len(w.done))*binary.MaxVarintLen64 {
		return nil // longer than the runs for sure: never chosen
	}
	n := int((span + 7) / 8)
	b = appendUvarint(b, uint64(n))
	start := len(b)
	b = append(b, make([]byte, n)...)
	for _, r := range w.done {
		// Bits lo to hi: whole bytes at once between the partial ones.
		lo, hi := r.First-w.base-1, r.Last-w.base-1
		for ; lo <= hi && lo%8 != 0; lo++ {
			b[start+int(lo/8)] |= 1 << (lo % 8)
		}
		for ; lo+7 <= hi; lo += 8 {
			b[start+int(lo/8)] = 0xff
		}
		for ; lo <= hi; lo++ {
			b[start+int(lo/8)] |= 1 << (lo % 8)
		}
	}
	return b
}

// requestMillis is a Request's delay in milliseconds, rounded up (as in
// the single State's form: a delay never becomes shorter, nor 0), up to
// the largest Duration's.
func requestMillis(d time.Duration) int64 {
	ms := d.Milliseconds()
	if d > time.Duration(ms)*time.Millisecond && ms < int64(maxDuration/time.Millisecond) {
		ms++
	}
	return ms
}

// ErrWindowTooLarge is what [RestoreWindow] returns (wrapped) for metadata
// longer than its limit: the broker would not have stored it, so it is
// not a commit's.
var ErrWindowTooLarge = errors.New("checkpoint: window metadata over the size limit")

// decodeWindow reads window metadata committed with the offset
// committed: rd2 windows, and rd1 single States (a window with that State's
// record retrying at the base). Empty metadata is an empty window at
// committed. Metadata longer than maxBytes (when above 0) returns an error
// wrapping [ErrWindowTooLarge]; another tool's, [ErrForeignMetadata];
// damaged or inconsistent redeliver metadata, an error that says what is
// wrong, and so does a window whose base is not committed (it belongs to
// another checkpoint).
func decodeWindow(md string, committed int64, maxBytes int) (windowState, error) {
	w := windowState{base: committed}
	if maxBytes > 0 && len(md) > maxBytes {
		return w, fmt.Errorf("%w: %d bytes, over the limit of %d", ErrWindowTooLarge, len(md), maxBytes)
	}
	switch {
	case md == "":
		return w, nil
	case strings.HasPrefix(md, metadataVersion):
		s, err := DecodeState(md)
		if err != nil {
			return w, err
		}
		if s == (State{}) {
			return w, nil
		}
		if s.Offset >= 0 && s.Offset != committed {
			return w, fmt.Errorf("checkpoint: metadata %q names the record at %d, but the checkpoint is at %d", md, s.Offset, committed)
		}
		if err := checkWindowState(s); err != nil {
			return w, fmt.Errorf("checkpoint: metadata %q: its state does not fit in a window: %w", md, err)
		}
		s.Offset = committed
		w.retrying = []State{s}
		return w, nil
	case !strings.HasPrefix(md, windowVersion):
		return w, ErrForeignMetadata
	}
	quoted := md
	if len(quoted) > 64 {
		quoted = quoted[:61] + "..."
	}
	damaged := func(format string, args ...any) (windowState, error) {
		return windowState{base: committed}, fmt.Errorf("checkpoint: window metadata %q: "+format, append([]any{quoted}, args...)...)
	}
	raw, err := winEncoding.DecodeString(md[len(windowVersion):])
	if err != nil {
		return damaged("not base64: %v", err)
	}
	r := reader{b: raw}
	base := r.offset("base")
	if r.err == nil && base != committed {
		return damaged("its base is %d, but the checkpoint is at %d", base, committed)
	}
	w.base = base
	flags := r.uvarint("flags")
	if flags&^(winBitmap|winHasTime) != 0 && r.err == nil {
		return damaged("unknown window flags %#x", flags)
	}
	var ref int64
	if flags&winHasTime != 0 {
		ref = r.varint("reference time")
	}
	unfinished := 0
	if flags&winBitmap != 0 {
		n := r.uvarint("bitmap length")
		bm := r.bytes(n, "bitmap")
		if len(bm) > 0 && bm[len(bm)-1] == 0 && r.err == nil {
			return damaged("bitmap ends with a zero byte")
		}
		for i := 0; i < 8*len(bm); {
			if bm[i/8]&(1<<(i%8)) == 0 {
				i++
				continue
			}
			j := i
			for j+1 < 8*len(bm) && bm[(j+1)/8]&(1<<((j+1)%8)) != 0 {
				j++
			}
			if base > math.MaxInt64-2-int64(j) {
				return damaged("offsets past the largest")
			}
			first := base + 1 + int64(i)
			if len(w.done) > 0 {
				unfinished += int(first - w.done[len(w.done)-1].Last - 1)
			} else {
				unfinished += i
			}
			w.done = append(w.done, offsetRange{first, base + 1 + int64(j)})
			i = j + 1
		}
	} else {
		n := r.uvarint("run count")
		if n > uint64(len(raw)) && r.err == nil {
			return damaged("%d runs in %d bytes", n, len(raw))
		}
		at := base + 1
		for i := uint64(0); i < n && r.err == nil; i++ {
			gap := r.uvarint("gap")
			run := r.uvarint("run")
			if r.err != nil {
				break
			}
			if run == 0 || (i > 0 && gap == 0) {
				return damaged("run %d: a gap of %d then a run of %d (want runs of 1 or more, apart)", i, gap, run)
			}
			if gap > maxUnfinished {
				return damaged("run %d: %d unfinished records before it, more than %d", i, gap, maxUnfinished)
			}
			if run > math.MaxInt64 || at > math.MaxInt64-int64(gap) || at+int64(gap) > math.MaxInt64-int64(run) {
				return damaged("run %d: offsets past the largest", i)
			}
			unfinished += int(gap)
			first := at + int64(gap)
			w.done = append(w.done, offsetRange{first, first + int64(run) - 1})
			at = first + int64(run)
		}
	}
	if unfinished > maxUnfinished {
		return damaged("%d unfinished records between finished ones, more than %d", unfinished, maxUnfinished)
	}
	n := r.uvarint("entry count")
	if n > uint64(len(raw)) && r.err == nil {
		return damaged("%d entries in %d bytes", n, len(raw))
	}
	prev := base
	di := 0
	for i := uint64(0); i < n && r.err == nil; i++ {
		var s State
		d := r.uvarint("entry offset")
		if i > 0 && d == 0 && r.err == nil {
			return damaged("entry %d: at the offset of the one before", i)
		}
		if d > uint64(math.MaxInt64-prev) && r.err == nil {
			return damaged("entry %d: offset past the largest", i)
		}
		s.Offset = prev + int64(d)
		prev = s.Offset
		for di < len(w.done) && w.done[di].Last < s.Offset {
			di++
		}
		if di < len(w.done) && w.done[di].First <= s.Offset && r.err == nil {
			return damaged("entry %d: record %d is both finished and retrying", i, s.Offset)
		}
		f := r.uvarint("entry flags")
		if f&^entKnown != 0 && r.err == nil {
			return damaged("entry %d: unknown flags %#x", i, f)
		}
		reason := checkpoint.Reason(f >> entReasonAt)
		if reason > checkpoint.NotRetryable && r.err == nil {
			return damaged("entry %d: given up for reason %d, want one from %d to %d", i, reason, checkpoint.RetriesSpent, checkpoint.NotRetryable)
		}
		s.GivenUp = reason
		s.Started, s.Alone, s.Halted = f&entStarted != 0, f&entAlone != 0, f&entHalted != 0
		s.Retries = r.count("retries")
		if f&entFirst != 0 {
			s.FirstFailure = r.time(ref, "first failure")
		}
		if f&entNext != 0 {
			s.NextAt = r.time(ref, "next retry")
		}
		if f&entDelay != 0 {
			s.LastDelay = r.duration("last delay", false)
		}
		if f&entOutage != 0 {
			s.OutageTime = r.duration("outage time", false)
		}
		if f&entRequest != 0 {
			m := r.varint("request limit")
			if (m < checkpoint.Infinite || m > maxWindowRetries) && r.err == nil {
				return damaged("entry %d: a request's limit of %d retries, want -1 to %d", i, m, maxWindowRetries)
			}
			s.Request = Request{MaxRetries: int(m), Delay: r.duration("request delay", true)}
			if s.Request == (Request{}) && r.err == nil {
				return damaged("entry %d: a request of 0 retries 0 apart is none", i)
			}
		}
		if f&entRecords != 0 {
			s.Records = r.count("records")
		}
		if f&entError != 0 {
			l := r.uvarint("error length")
			e := r.bytes(l, "error")
			if len(e) == 0 && r.err == nil {
				return damaged("entry %d: an empty last error marked present", i)
			}
			s.LastError = string(e)
		}
		if r.err == nil && s == (State{Offset: s.Offset}) {
			return damaged("entry %d: record %d holds no retry state", i, s.Offset)
		}
		w.retrying = append(w.retrying, s)
	}
	if r.err != nil {
		return damaged("%v", r.err)
	}
	if len(r.b) != 0 {
		return damaged("%d bytes after the last entry", len(r.b))
	}
	// The records a next owner delivers afresh (every offset up to the
	// last written that is not finished), and the spread of the times.
	last := base
	finished := int64(0)
	for _, d := range w.done {
		last = d.Last
		finished += d.Last - d.First + 1
	}
	lo, hi := int64(math.MaxInt64), int64(math.MinInt64)
	for _, s := range w.retrying {
		last = max(last, s.Offset)
		for _, t := range [2]time.Time{s.FirstFailure, s.NextAt} {
			if !t.IsZero() {
				lo, hi = min(lo, t.UnixMilli()), max(hi, t.UnixMilli())
			}
		}
	}
	if open := last - base - finished; open >= maxUnfinished { // +1, the base: no overflow at the largest offset
		return damaged("%d unfinished records or more, more than %d", open, maxUnfinished)
	}
	if lo <= hi && hi-lo > maxTimeSpread {
		return damaged("times %d ms apart, more than %d", hi-lo, int64(maxTimeSpread))
	}
	return w, nil
}

// reader reads varints from b, keeping the first error.
type reader struct {
	b   []byte
	err error
}

func (r *reader) fail(what, why string) {
	if r.err == nil {
		r.err = fmt.Errorf("%s: %s", what, why)
	}
}

func (r *reader) uvarint(what string) uint64 {
	if r.err != nil {
		return 0
	}
	v, n := binary.Uvarint(r.b)
	if n <= 0 {
		r.fail(what, "truncated or overlong varint")
		return 0
	}
	r.b = r.b[n:]
	return v
}

func (r *reader) varint(what string) int64 {
	if r.err != nil {
		return 0
	}
	v, n := binary.Varint(r.b)
	if n <= 0 {
		r.fail(what, "truncated or overlong varint")
		return 0
	}
	r.b = r.b[n:]
	return v
}

func (r *reader) bytes(n uint64, what string) []byte {
	if r.err != nil {
		return nil
	}
	if n > uint64(len(r.b)) {
		r.fail(what, fmt.Sprintf("%d bytes, %d left", n, len(r.b)))
		return nil
	}
	out := r.b[:n]
	r.b = r.b[n:]
	return out
}

func (r *reader) offset(what string) int64 {
	v := r.uvarint(what)
	if v > math.MaxInt64 {
		r.fail(what, "past the largest offset")
		return 0
	}
	return int64(v)
}

func (r *reader) count(what string) int {
	v := r.uvarint(what)
	if v > maxWindowRetries {
		r.fail(what, fmt.Sprintf("%d, more than %d", v, maxWindowRetries))
		return 0
	}
	return int(v)
}

func (r *reader) time(ref int64, what string) time.Time {
	d := r.varint(what)
	if d < -maxTimeSpread || d > maxTimeSpread {
		r.fail(what, fmt.Sprintf("%d ms from the reference, more than %d", d, int64(maxTimeSpread)))
		return time.Time{}
	}
	if (d > 0 && ref > math.MaxInt64-d) || (d < 0 && ref < math.MinInt64-d) {
		r.fail(what, "out of range")
		return time.Time{}
	}
	t := time.UnixMilli(ref + d)
	if t.IsZero() {
		r.fail(what, "the zero time written as a time")
	}
	return t
}

func (r *reader) duration(what string, zero bool) time.Duration {
	v := r.uvarint(what)
	if v > uint64(maxDuration/time.Millisecond) {
		r.fail(what, fmt.Sprintf("%d ms, longer than the largest duration", v))
		return 0
	}
	d := millis(int64(v))
	if d == 0 && !zero && r.err == nil {
		r.fail(what, "0 written as present")
	}
	return d
}

// cutError returns e cut to at most n bytes at a rune's start, with
// errorMark at its end when it was longer; "" when n is too small for the
// mark.
func cutError(e string, n int) string {
	if len(e) <= n {
		return e
	}
	if n < len(errorMark) {
		return ""
	}
	return truncate(e, n-len(errorMark)) + errorMark
}

// CommitStates returns the retry states that a commit's metadata holds:
// the states of an rd2 window's records retrying or given up, or an rd1
// single State (its Offset the committed offset), by offset, ascending;
// none for empty metadata. Another tool's metadata returns
// [ErrForeignMetadata], damaged metadata an error that says what is
// wrong. A committer reads it to tell a commit that only moves past
// records (finished, the others as they were) from one that records what
// a crash must not lose: a failure, a retry started, a give-up.
func CommitStates(md string, committed int64) ([]State, error) {
	if md == "" {
		return nil, nil
	}
	ws, err := decodeWindow(md, committed, 0)
	if err != nil {
		return nil, err
	}
	return ws.retrying, nil
}
