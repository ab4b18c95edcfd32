package retrystate

import (
	"bytes"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/redeliver-go/redeliver/checkpoint"
)

var t0 = time.UnixMilli(1764300000000) // 2025-11-28

// equalState compares States as a window keeps them (times by instant).
func equalState(a, b State) bool {
	return a.FirstFailure.Equal(b.FirstFailure) && a.NextAt.Equal(b.NextAt) &&
		timeless(a) == timeless(b)
}

func timeless(s State) State {
	s.FirstFailure, s.NextAt = time.Time{}, time.Time{}
	return s
}

// checkRestore restores w's metadata and checks that the next owner sees
// what w holds: the same base, the same records finished up to the last
// one written, the same states.
func checkRestore(t *testing.T, w *Window) *Window {
	t.Helper()
	md := w.Encode()
	if len(md) != w.Size() || w.Size() > w.Bound() && w.Unfinished() > 0 || len(md) > w.MaxBytes() {
		t.Fatalf("size %d, Size %d, Bound %d, MaxBytes %d", len(md), w.Size(), w.Bound(), w.MaxBytes())
	}
	r, err := RestoreWindow(w.Base(), md, w.lim)
	if err != nil {
		t.Fatalf("restore %q at %d: %v", md, w.Base(), err)
	}
	if r.Base() != w.Base() {
		t.Fatalf("restored base %d, want %d", r.Base(), w.Base())
	}
	for i, o := range r.open {
		if i >= len(w.open) || w.open[i] != o {
			t.Fatalf("restored unfinished %v, want the ones of %v below %d", r.open, w.open, r.Next())
		}
	}
	// The offsets where anything changes: each unfinished record and its
	// neighbours, the ends, and some in between.
	check := []int64{w.Base(), w.Next() - 1, w.Next(), r.Next() - 1, r.Next()}
	for _, o := range append(append([]int64(nil), w.open...), r.open...) {
		check = append(check, o-1, o, o+1)
	}
	if span := max(w.Next(), r.Next()) - w.Base(); span > 0 {
		for i := range int64(20) {
			check = append(check, w.Base()+span*i/20)
		}
	}
	for _, o := range check {
		if o < w.Base() {
			continue
		}
		if o >= r.Next() {
			// Not written: in flight at the end of the window, or not
			// admitted.
			if o < w.Next() && w.Finished(o) {
				t.Fatalf("record %d finished, but not in the restored window (next %d)", o, r.Next())
			}
			continue
		}
		if r.Finished(o) != w.Finished(o) {
			t.Fatalf("record %d: restored finished %v, want %v (md %q)", o, r.Finished(o), w.Finished(o), md)
		}
		ws, wok := w.State(o)
		rs, rok := r.State(o)
		if wok != rok || !equalState(ws, rs) {
			t.Fatalf("record %d: restored state %+v (%v), want %+v (%v)", o, rs, rok, ws, wok)
		}
	}
	if again := r.Encode(); again != md {
		t.Fatalf("restored window encodes %q, want %q", again, md)
	}
	return r
}

// worst sets every unfinished record of w to the largest state it can
// hold, and checks that the metadata still fits.
func checkWorst(t *testing.T, w *Window, rng *rand.Rand) {
	t.Helper()
	c := w.clone()
	long := strings.Repeat("é", 600)
	for i, o := range c.open {
		// Every time as far from the first record's first failure, the
		// reference, as a window allows.
		far := t0.Add(time.Duration(maxTimeSpread-1) * time.Millisecond)
		s := State{Retries: maxWindowRetries, FirstFailure: far, NextAt: far, LastDelay: maxDuration, OutageTime: maxDuration, Started: true,
			Request: Request{MaxRetries: maxWindowRetries, Delay: maxDuration}, LastError: long, Records: maxWindowRetries,
			Alone: true, Halted: true}
		if i == 0 {
			s.FirstFailure = t0
		}
		var err error
		_, had := c.states[o]
		if i%2 == 0 || rng.IntN(2) == 0 {
			s.GivenUp = checkpoint.NotRetryable
			err = c.GiveUp(o, s)
		} else {
			err = c.Retry(o, s)
		}
		if errors.Is(err, ErrWindowFull) && c.lim.ReserveOnFailure && !had {
			continue // no room for a state it did not hold: it waits
		}
		if err != nil {
			t.Fatalf("the largest state of %d: %v", o, err)
		}
	}
	if c.Size() > c.MaxBytes() {
		t.Fatalf("every record failing at its largest: %d bytes, over %d (bound %d, %d unfinished)", c.Size(), c.MaxBytes(), c.Bound(), c.Unfinished())
	}
	if c.Size() > c.Bound() {
		t.Fatalf("size %d over the bound %d", c.Size(), c.Bound())
	}
	checkRestore(t, c)
}

func (w *Window) clone() *Window {
	c := *w
	c.open = append([]int64(nil), w.open...)
	c.states = map[int64]State{}
	for k, v := range w.states {
		c.states[k] = v
	}
	return &c
}

// TestWindowRandomOperations drives windows with random sequences of
// admissions, finishes, failures and give-ups, and after each checks that
// the metadata round-trips, never exceeds the limit, and would still fit
// if every record held then failed at its largest.
// encodeAnew encodes w's metadata without the one Encode keeps.
func encodeAnew(w *Window) string {
	c := *w
	c.size = -1
	return c.Encode()
}

func TestWindowRandomOperations(t *testing.T) {
	// Seeds from 300 on reserve room for a state on failure only. Under
	// the race detector, 40 of each kind: one goroutine, nothing for it
	// to find, ten times slower.
	var seeds []uint64
	for seed := range uint64(600) {
		if !raceEnabled || seed%300 < 40 {
			seeds = append(seeds, seed)
		}
	}
	for _, seed := range seeds {
		t.Run(fmt.Sprint(seed), func(t *testing.T) {
			rng := rand.New(rand.NewPCG(seed, 49))
			lim := checkpoint.WindowLimits{MaxBytes: []int{0, 512, 1024, 2048}[seed%4], MaxErrorBytes: []int{0, -1, 16, 200}[seed/4%4], ReserveOnFailure: seed >= 300}
			start := int64(rng.IntN(1000))
			if seed%7 == 0 {
				start = math.MaxInt64 / 2
			}
			w, err := NewWindow(start, lim)
			if err != nil {
				t.Fatal(err)
			}
			full := 0
			for step := range 400 {
				switch op := rng.IntN(10); {
				case op < 4:
					o := w.Next() + int64(rng.IntN(3)*rng.IntN(3)) // some absent offsets
					if rng.IntN(20) == 0 {
						o += int64(rng.IntN(100000))
					}
					err := w.Admit(o)
					if errors.Is(err, ErrWindowFull) {
						full++
						if w.Fits(o) {
							t.Fatalf("step %d: full, but Fits", step)
						}
					} else if err != nil {
						t.Fatalf("step %d: admit %d: %v", step, o, err)
					}
				case w.Unfinished() == 0:
				case op < 7:
					o := w.open[rng.IntN(len(w.open))]
					if rng.IntN(3) > 0 {
						o = w.open[0] // the base most often: the window moves on
					}
					if err := w.Finish(o); err != nil {
						t.Fatalf("step %d: finish %d: %v", step, o, err)
					}
				default:
					o := w.open[rng.IntN(len(w.open))]
					s := State{Retries: rng.IntN(5) + 1, FirstFailure: t0.Add(time.Duration(rng.IntN(1e6)) * time.Millisecond),
						LastDelay: time.Duration(rng.IntN(1e9)), LastError: strings.Repeat("x", rng.IntN(300))}
					if rng.IntN(2) == 0 {
						s.NextAt = s.FirstFailure.Add(time.Duration(rng.IntN(1e6)) * time.Microsecond)
					} else {
						s.Started = true
					}
					if rng.IntN(5) == 0 {
						s.Request = Request{MaxRetries: rng.IntN(4) - 1, Delay: time.Duration(rng.IntN(1e10))}
					}
					_, had := w.states[o]
					if rng.IntN(4) == 0 {
						s.GivenUp, s.Started = checkpoint.Reason(rng.IntN(4)+1), true
						err = w.GiveUp(o, s)
					} else {
						err = w.Retry(o, s)
					}
					if errors.Is(err, ErrWindowFull) && lim.ReserveOnFailure && !had {
						full++
						if w.FitsState(o) {
							t.Fatalf("step %d: no room for a state, but FitsState", step)
						}
						break
					}
					if err != nil {
						t.Fatalf("step %d: state of %d: %v", step, o, err)
					}
					got, _ := w.State(o)
					if max := w.lim.MaxErrorBytes; len(got.LastError) > max {
						t.Fatalf("last error of %d bytes kept, over %d", len(got.LastError), max)
					}
				}
				if w.Bound() > w.MaxBytes() {
					t.Fatalf("step %d: bound %d over %d", step, w.Bound(), w.MaxBytes())
				}
				// Encode's metadata, kept from the step before when the
				// window did not change, is what encoding it anew gives.
				if got, want := w.Encode(), encodeAnew(w); got != want {
					t.Fatalf("step %d: Encode gives %q, encoding anew %q", step, got, want)
				}
				checkRestore(t, w)
				if step%20 == 0 {
					checkWorst(t, w, rng)
				}
			}
			if seed == 0 {
				t.Logf("admissions refused: %d", full)
			}
		})
	}
}

func TestWindowBasics(t *testing.T) {
	w, err := NewWindow(100, checkpoint.WindowLimits{})
	if err != nil {
		t.Fatal(err)
	}
	if w.Encode() != "" || w.Base() != 100 {
		t.Fatalf("empty window: %q at %d", w.Encode(), w.Base())
	}
	for o := int64(100); o < 110; o++ {
		if err := w.Admit(o); err != nil {
			t.Fatal(err)
		}
	}
	if err := w.Admit(math.MaxInt64); err == nil || errors.Is(err, ErrWindowFull) {
		t.Fatalf("admit the largest offset: %v", err)
	}
	if err := w.Admit(105); err == nil || errors.Is(err, ErrWindowFull) {
		t.Fatalf("admit out of order: %v", err)
	}
	for _, o := range []int64{101, 102, 104, 109} {
		if err := w.Finish(o); err != nil {
			t.Fatal(err)
		}
	}
	if err := w.Finish(104); err == nil || !strings.Contains(err.Error(), "finished") {
		t.Fatalf("finish twice: %v", err)
	}
	if err := w.Finish(200); err == nil || !strings.Contains(err.Error(), "not admitted") {
		t.Fatalf("finish unknown: %v", err)
	}
	s := State{Retries: 2, FirstFailure: t0, NextAt: t0.Add(1500 * time.Millisecond), LastDelay: time.Second, LastError: "boom"}
	if err := w.Retry(100, s); err != nil {
		t.Fatal(err)
	}
	if err := w.GiveUp(103, State{Retries: 3, GivenUp: checkpoint.RetriesSpent, Started: true, FirstFailure: t0, LastError: "bad"}); err != nil {
		t.Fatal(err)
	}
	if err := w.Retry(103, State{GivenUp: checkpoint.RetriesSpent}); err == nil {
		t.Fatal("Retry of a given-up state")
	}
	if err := w.GiveUp(103, State{Retries: 1}); err == nil {
		t.Fatal("GiveUp of a state not given up")
	}
	md := w.Encode()
	if !strings.HasPrefix(md, "rd2:") {
		t.Fatalf("metadata %q", md)
	}
	r := checkRestore(t, w)
	// 101, 102, 104 and 109 finished; 100 and 103 hold states; the rest
	// comes again, fresh.
	for o, want := range map[int64]bool{100: false, 101: true, 102: true, 103: false, 104: true, 105: false, 108: false, 109: true} {
		if r.Finished(o) != want {
			t.Errorf("restored: record %d finished %v, want %v", o, !want, want)
		}
	}
	if got, _ := r.State(100); got.Retries != 2 || !got.NextAt.Equal(s.NextAt) || got.LastError != "boom" {
		t.Errorf("restored state of 100: %+v", got)
	}
	if err := w.Finish(100); err != nil {
		t.Fatal(err)
	}
	if w.Base() != 103 {
		t.Errorf("base %d after finishing 100, want 103", w.Base())
	}
	for _, o := range []int64{103, 105, 106, 107, 108} {
		_ = w.Finish(o)
	}
	if w.Base() != 110 || w.Encode() != "" {
		t.Errorf("all finished: base %d, metadata %q; want 110 and none", w.Base(), w.Encode())
	}
}

func TestWindowErrorCut(t *testing.T) {
	w, _ := NewWindow(0, checkpoint.WindowLimits{MaxErrorBytes: 10})
	_ = w.Admit(0)
	if err := w.Retry(0, State{Retries: 1, LastError: "ééééééééé"}); err != nil {
		t.Fatal(err)
	}
	got, _ := w.State(0)
	if got.LastError != "ééé…" { // 6 bytes of é, then the 3-byte mark: 9, never half a rune
		t.Errorf("cut error %q", got.LastError)
	}
	w, _ = NewWindow(0, checkpoint.WindowLimits{MaxErrorBytes: -1})
	_ = w.Admit(0)
	_ = w.Retry(0, State{Retries: 1, LastError: "boom"})
	if got, _ := w.State(0); got.LastError != "" {
		t.Errorf("MaxErrorBytes -1 keeps %q", got.LastError)
	}
}

func TestWindowLimits(t *testing.T) {
	for _, lim := range []checkpoint.WindowLimits{{MaxBytes: -1}, {MaxErrorBytes: -2}, {MaxErrorBytes: 5000}, {MaxBytes: 100}} {
		if _, err := NewWindow(0, lim); err == nil {
			t.Errorf("%+v: no error", lim)
		}
	}
	if _, err := NewWindow(-1, checkpoint.WindowLimits{}); err == nil {
		t.Error("negative start: no error")
	}
	// Admission stops exactly where the bound would pass the limit.
	w, _ := NewWindow(0, checkpoint.WindowLimits{})
	n := int64(0)
	for ; w.Admit(n) == nil; n++ {
	}
	if err := w.Admit(n); !errors.Is(err, ErrWindowFull) {
		t.Fatalf("admit past the limit: %v", err)
	}
	if w.Bound() > 4096 || w.bound(w.Unfinished()+1, w.Unfinished()+1, n+1) <= 4096 {
		t.Fatalf("bound %d with %d; %d with one more", w.Bound(), w.Unfinished(), w.bound(w.Unfinished()+1, w.Unfinished()+1, n+1))
	}
	_ = w.Finish(0)
	if err := w.Admit(n); err != nil {
		t.Fatalf("admit after a finish: %v", err)
	}
	t.Logf("in flight at once with the defaults: %d", w.Unfinished())
}

func TestWindowStateLimits(t *testing.T) {
	w, _ := NewWindow(0, checkpoint.WindowLimits{})
	_ = w.Admit(0)
	_ = w.Admit(1)
	for _, s := range []State{
		{Retries: -1}, {Retries: maxWindowRetries + 1}, {Retries: 1, LastDelay: -1}, {Retries: 1, Records: -1},
		{Retries: 1, Request: Request{MaxRetries: -2}}, {Retries: 1, GivenUp: 9},
	} {
		if err := w.Retry(0, s); err == nil && s.GivenUp == 0 {
			t.Errorf("%+v: no error", s)
		}
	}
	_ = w.Retry(0, State{Retries: 1, FirstFailure: t0})
	if err := w.Retry(1, State{Retries: 1, FirstFailure: t0.Add(time.Duration(maxTimeSpread+1) * time.Millisecond)}); err == nil {
		t.Error("times too far apart: no error")
	}
}

// TestDecodeWindowRefuses feeds the decoder foreign, old, oversized and
// damaged metadata: each gives a clear error, and a restore an empty
// window at the checkpoint.
func TestDecodeWindowRefuses(t *testing.T) {
	good, _ := NewWindow(10, checkpoint.WindowLimits{})
	_ = good.Admit(10)
	_ = good.Admit(11)
	_ = good.Admit(12)
	_ = good.Finish(11)
	_ = good.Retry(10, State{Retries: 1, FirstFailure: t0, LastError: "x"})
	md := good.Encode()
	raw, _ := winEncoding.DecodeString(md[4:])
	enc := func(b []byte) string { return windowVersion + winEncoding.EncodeToString(b) }
	u := func(vs ...uint64) []byte {
		var b []byte
		for _, v := range vs {
			b = appendUvarint(b, v)
		}
		return b
	}
	// The largest offset, from the base 0: a next owner would deliver
	// every offset up to it afresh.
	if _, err := decodeWindow(enc(u(0, 0, 0, 1, math.MaxInt64, 0, 1)), 0, 0); err == nil || !strings.Contains(err.Error(), "unfinished records") {
		t.Errorf("a window to the largest offset: %v", err)
	}
	for _, c := range []struct {
		md, want string
		is       error
	}{
		{"foreign", "", ErrForeignMetadata},
		{"rd3:xx", "", ErrForeignMetadata},
		{"rd2:" + strings.Repeat("A", 5000), "over the limit", ErrWindowTooLarge},
		{"rd2:!!", "not base64", nil},
		{enc(raw[:len(raw)-1]), "", nil},
		{enc(append(raw, 0)), "bytes after the last entry", nil},
		{enc([]byte{11, 0, 0, 0}), "base is 11, but the checkpoint is at 10", nil},
		{enc([]byte{10, 4, 0, 0}), "unknown window flags", nil},
		{enc([]byte{10, 0, 1, 0, 0, 0}), "want runs of 1 or more", nil},
		{enc([]byte{10, 0, 2, 0, 1, 0, 1, 0}), "want runs of 1 or more", nil},
		{enc([]byte{10, 1, 1, 0, 0}), "bitmap ends with a zero byte", nil},
		{enc([]byte{10, 0, 1, 0, 1, 1, 1, 0, 1}), "both finished and retrying", nil},
		{enc([]byte{10, 0, 0, 2, 0, 0, 1, 0, 0, 1}), "at the offset of the one before", nil},
		{enc([]byte{10, 0, 0, 1, 0, 0, 0}), "holds no retry state", nil},
		{enc(u(10, 0, 0, 1, 0, 5<<10, 1)), "given up for reason", nil},
		{enc(u(10, 0, 0, 1, 0, 1<<13, 1)), "unknown flags", nil},
		{enc(u(10, 0, 1, 1<<17, 1, 0)), "unfinished records", nil},
		{enc(u(10, 0, 0, 1, 1<<40, 0, 1)), "unfinished records", nil},
		{enc(u(10, 0, 1, 0, math.MaxInt64-5, 0)), "past the largest", nil},
		{enc(u(10, 0, 0, 1, 0, 0, 1<<36)), "more than", nil},
		{enc(append(u(10, 2), append(appendVarint(nil, 0), u(0, 2, 0, entFirst, 1)...)...)), "", nil},
		{"rd1;o=9;r=2", "names the record at 9", nil},
		{"rd1;r=x", "want a non-negative integer", nil},
		{"rd1;r=1;c=100000000000", "does not fit in a window: records", nil},
		{"rd1;r=1;f=1;n=9000000000000000", "next retry", nil},
	} {
		_, err := decodeWindow(c.md, 10, 4096)
		if err == nil || c.is != nil && !errors.Is(err, c.is) || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%q: %v; want %q %v", c.md, err, c.want, c.is)
		}
		w, err2 := RestoreWindow(10, c.md, checkpoint.WindowLimits{})
		if err2 == nil || w == nil || w.Base() != 10 || w.Next() != 10 || w.Encode() != "" {
			t.Errorf("%q: restore %+v, %v", c.md, w, err2)
		}
	}
}

// TestDecodeWindowFromSingleState: a checkpoint written by the batch
// engine (rd1) reads as a window with its record retrying at the base.
func TestDecodeWindowFromSingleState(t *testing.T) {
	s := State{Offset: 40, Retries: 3, FirstFailure: t0, NextAt: t0.Add(5 * time.Second), LastDelay: 5 * time.Second, LastError: "timeout"}
	for _, md := range []string{EncodeState(s), "rd1;r=3;f=1764300000000;d=5000;n=1764300005000;e=timeout"} {
		w, err := RestoreWindow(40, md, checkpoint.WindowLimits{})
		if err != nil {
			t.Fatalf("%q: %v", md, err)
		}
		got, ok := w.State(40)
		if !ok || !equalState(got, s) || w.Base() != 40 || w.Next() != 41 || w.Finished(40) {
			t.Fatalf("%q: %+v %v, base %d next %d", md, got, ok, w.Base(), w.Next())
		}
	}
	if w, err := RestoreWindow(40, "", checkpoint.WindowLimits{}); err != nil || w.Base() != 40 || w.Unfinished() != 0 {
		t.Fatalf("empty: %+v %v", w, err)
	}
	if w, err := RestoreWindow(40, "rd1;o=40", checkpoint.WindowLimits{}); err != nil || w.Unfinished() != 0 {
		t.Fatalf("rd1 with no retry state: %+v %v", w, err)
	}
}

// FuzzDecodeWindow: the decoder never panics, never allocates beyond its
// input's worth, what it reads encodes back to metadata that reads the
// same, and within the bound a Window reserves for its records.
func FuzzDecodeWindow(f *testing.F) {
	w, _ := NewWindow(7, checkpoint.WindowLimits{})
	for o := int64(7); o < 40; o++ {
		_ = w.Admit(o)
	}
	for o := int64(8); o < 40; o += 3 {
		_ = w.Finish(o)
	}
	_ = w.Retry(7, State{Retries: 2, FirstFailure: t0, NextAt: t0.Add(time.Second), LastDelay: time.Second, LastError: "e;=%",
		Request: Request{MaxRetries: -1, Delay: 3}, OutageTime: time.Minute, Records: 2, Alone: true})
	_ = w.GiveUp(10, State{Retries: 5, GivenUp: checkpoint.RecordTooOld, Started: true, Halted: true})
	f.Add(w.Encode(), int64(7))
	f.Add("", int64(0))
	f.Add("rd1;o=3;r=1", int64(3))
	f.Add("rd2:", int64(0))
	f.Add("rd2:BwE", int64(7))
	f.Add(windowVersion+winEncoding.EncodeToString([]byte{7, 1, 2, 0xff, 1, 0}), int64(7))
	f.Fuzz(func(t *testing.T, md string, committed int64) {
		if committed < 0 {
			committed = -committed
			if committed < 0 {
				committed = 0
			}
		}
		ws, err := decodeWindow(md, committed, 1<<20)
		if err != nil {
			if strings.TrimSpace(err.Error()) == "" {
				t.Fatal("an empty error")
			}
			return
		}
		if ws.base != committed {
			t.Fatalf("base %d, committed %d", ws.base, committed)
		}
		w, err := RestoreWindow(committed, md, checkpoint.WindowLimits{MaxBytes: 1 << 20, MaxErrorBytes: 1024})
		if err != nil {
			t.Fatalf("decoded, but not restored: %v", err)
		}
		again := w.Encode()
		if w.Size() > w.Bound() {
			t.Fatalf("%q: %d bytes, over the bound %d of its %d unfinished records", md, w.Size(), w.Bound(), w.Unfinished())
		}
		w2, err := RestoreWindow(committed, again, checkpoint.WindowLimits{MaxBytes: 1 << 20, MaxErrorBytes: 1024})
		if err != nil {
			t.Fatalf("%q -> %q: %v", md, again, err)
		}
		if w2.Encode() != again {
			t.Fatalf("%q -> %q -> %q", md, again, w2.Encode())
		}
	})
}

// TestWindowBoundIsTight fills a window whose worst case the bound
// describes nearly exactly (records unfinished one in two, so that
// finished ones lie between them) and fails every record at its largest:
// the metadata fits, and within a few bytes of the limit, so that a
// bound reserving less per record would not.
func TestWindowBoundIsTight(t *testing.T) {
	for _, lim := range []checkpoint.WindowLimits{{}, {MaxErrorBytes: -1}, {MaxBytes: 1024, MaxErrorBytes: 16}, {MaxBytes: 65536}} {
		w, err := NewWindow(0, lim)
		if err != nil {
			t.Fatal(err)
		}
		for o := int64(0); w.Admit(o) == nil; o += 2 {
		}
		checkWorst(t, w, rand.New(rand.NewPCG(1, 2)))
		c := w.clone()
		far := t0.Add(time.Duration(maxTimeSpread-1) * time.Millisecond)
		for i, o := range c.open {
			s := State{Retries: maxWindowRetries, FirstFailure: far, NextAt: far, LastDelay: maxDuration, OutageTime: maxDuration,
				Started: true, Request: Request{MaxRetries: maxWindowRetries, Delay: maxDuration}, LastError: strings.Repeat("x", 2000),
				Records: maxWindowRetries, Alone: true, Halted: true, GivenUp: checkpoint.NotRetryable}
			if i == 0 {
				s.FirstFailure = t0
			}
			if err := c.GiveUp(o, s); err != nil {
				t.Fatal(err)
			}
		}
		slack := c.MaxBytes() - c.Size()
		t.Logf("limits %+v: %d records unfinished, %d bytes at their largest, %d under the limit", lim, c.Unfinished(), c.Size(), slack)
		// Under the limit by less than one more record's reserve, and the
		// room reserved for offsets between records further apart than
		// these (a varint's byte per record).
		more := w.bound(w.Unfinished()+1, w.Unfinished()+1, w.Next()+2) - w.Bound()
		apart := 2 * w.Unfinished() * (uvarintLen(uint64(w.Next()-w.Base())) - 1)
		if slack < 0 || slack > more+apart+8 {
			t.Errorf("limits %+v: %d bytes at the largest, %d under the limit of %d: the bound is not tight", lim, c.Size(), slack, c.MaxBytes())
		}
	}
}

// TestWindowSizes measures the metadata of typical windows, for
// docs/KEYS.md (go test -v -run TestWindowSizes ./checkpoint).
func TestWindowSizes(t *testing.T) {
	if raceEnabled {
		t.Skip("the figures of docs/KEYS.md take minutes under the race detector and have nothing for it: go test -run TestWindowSizes -v ./checkpoint")
	}
	typical := func(o int64, i int) State {
		first := t0.Add(time.Duration(i) * 7919 * time.Millisecond)
		return State{Offset: o, Retries: 3, FirstFailure: first, NextAt: first.Add(8 * time.Second), LastDelay: 4 * time.Second,
			LastError: "context deadline exceeded"}
	}
	// build admits n records from 1000 and finishes all but those in
	// retrying (which get a typical state) and those in flight.
	build := func(n int64, retrying, inFlight []int64) *Window {
		w, err := NewWindow(1000, checkpoint.WindowLimits{MaxBytes: 1 << 20})
		if err != nil {
			t.Fatal(err)
		}
		keep := map[int64]bool{}
		for _, o := range append(append([]int64(nil), retrying...), inFlight...) {
			keep[1000+o] = true
		}
		for o := int64(1000); o < 1000+n; o++ {
			if err := w.Admit(o); err != nil {
				t.Fatal(err)
			}
			if !keep[o] {
				if err := w.Finish(o); err != nil {
					t.Fatal(err)
				}
			}
		}
		for i, o := range retrying {
			if err := w.Retry(1000+o, typical(1000+o, i)); err != nil {
				t.Fatal(err)
			}
		}
		checkRestore(t, w)
		return w
	}
	v1 := EncodeState(typical(1000, 0))
	t.Logf("one typical retry state alone, rd1 (today's form): %d bytes: %s", len(v1), v1)
	for _, n := range []int64{1, 11, 101, 1001, 100001, 10000001} {
		w := build(n, []int64{0}, nil)
		t.Logf("1 retrying at the base + %d finished after it: %d bytes", n-1, w.Size())
	}
	spread := func(k int, n int64, rng *rand.Rand) []int64 {
		set := map[int64]bool{0: true}
		for len(set) < k {
			set[1+rng.Int64N(n-1)] = true
		}
		var out []int64
		for o := range set {
			out = append(out, o)
		}
		slicesSort(out)
		return out
	}
	rng := rand.New(rand.NewPCG(49, 1))
	for _, c := range []struct {
		k int
		n int64
	}{{10, 1000}, {10, 100000}, {25, 1000}, {100, 1000}, {100, 10000}} {
		w := build(c.n, spread(c.k, c.n, rng), nil)
		t.Logf("%d retrying (the base one of them) among %d records, the rest finished: %d bytes", c.k, c.n, w.Size())
	}
	// The most retrying records that fit in 4096 bytes, at random among
	// finished ones (the encoding alone, not the admission reserve).
	for _, every := range []int64{10, 100, 1000} {
		lo, hi := 1, 4096
		for lo < hi {
			k := (lo + hi + 1) / 2
			w := build(int64(k)*every, spread(k, int64(k)*every, rand.New(rand.NewPCG(uint64(k), 2))), nil)
			if w.Size() <= checkpoint.DefaultMaxMetadataBytes {
				lo = k
			} else {
				hi = k - 1
			}
		}
		t.Logf("one record in %d retrying at random, typical states: %d retrying (a window of %d records) fit in %d bytes",
			every, lo, int64(lo)*every, checkpoint.DefaultMaxMetadataBytes)
	}
	// Admission: how many unfinished records a window holds at once.
	for _, lim := range []checkpoint.WindowLimits{{}, {MaxErrorBytes: 16}, {MaxErrorBytes: -1}, {MaxBytes: 1024}, {MaxBytes: 1 << 16}} {
		w, err := NewWindow(1000, lim)
		if err != nil {
			t.Fatal(err)
		}
		for o := int64(1000); w.Admit(o) == nil; o++ {
		}
		t.Logf("limits %+v: at most %d records unfinished at once (each reserves %d bytes)", lim, w.Unfinished(),
			w.bound(w.Unfinished()+1, w.Unfinished()+1, w.Next()+1)-w.Bound())
	}
}

func slicesSort(s []int64) {
	for i := 1; i < len(s); i++ {
		for j := i; j > 0 && s[j] < s[j-1]; j-- {
			s[j], s[j-1] = s[j-1], s[j]
		}
	}
}

// TestWindowReserveOnFailure: a window that reserves room for a state
// only once a record holds one admits hundreds of records at once, and
// refuses a state (ErrWindowFull) rather than pass its MaxBytes.
func TestWindowReserveOnFailure(t *testing.T) {
	for _, span := range []int64{1, 1000, 100000} {
		w, err := NewWindow(0, checkpoint.WindowLimits{ReserveOnFailure: true})
		if err != nil {
			t.Fatal(err)
		}
		// One record held at the base, then records spread over span.
		if err := w.Admit(0); err != nil {
			t.Fatal(err)
		}
		for o := int64(1); o < span; o++ {
			if err := w.Admit(o); err != nil {
				t.Fatal(err)
			}
			if err := w.Finish(o); err != nil {
				t.Fatal(err)
			}
		}
		n := 1
		for o := span; ; o++ {
			if err := w.Admit(o); errors.Is(err, ErrWindowFull) {
				break
			} else if err != nil {
				t.Fatal(err)
			}
			n++
		}
		states := 0
		s := State{Retries: 3, FirstFailure: t0, NextAt: t0.Add(8 * time.Second), LastDelay: 4 * time.Second, LastError: "context deadline exceeded"}
		for _, o := range slices.Clone(w.open) {
			if err := w.Retry(o, s); errors.Is(err, ErrWindowFull) {
				if w.FitsState(o) {
					t.Fatal("full, but FitsState")
				}
				break
			} else if err != nil {
				t.Fatal(err)
			}
			states++
		}
		if w.Size() > w.MaxBytes() || w.Bound() > w.MaxBytes() {
			t.Fatalf("size %d, bound %d, over %d", w.Size(), w.Bound(), w.MaxBytes())
		}
		t.Logf("4096 bytes, finished span %d behind the base: %d records unfinished at once, %d of them with a state (%d bytes now)", span, n, states, w.Size())
		if n < 256 {
			t.Errorf("only %d records admitted at once", n)
		}
	}
}

// TestWindowStatesWithReserveOnFailure measures, for a window that
// reserves on failure (the keyed driver's), how many of its records in
// flight can hold a typical retry state at once, by how many are in
// flight and how far the partition moved on behind the lowest.
func TestWindowStatesWithReserveOnFailure(t *testing.T) {
	s := State{Retries: 3, FirstFailure: t0, NextAt: t0.Add(8 * time.Second), LastDelay: 4 * time.Second, LastError: "context deadline exceeded"}
	for _, maxBytes := range []int{4096, 1024} {
		for _, u := range []int{16, 64, 256} {
			for _, behind := range []int64{0, 100000} {
				w, err := NewWindow(0, checkpoint.WindowLimits{ReserveOnFailure: true, MaxBytes: maxBytes})
				if err != nil {
					t.Fatal(err)
				}
				// The lowest in flight, records finished behind it up to
				// behind, then the rest in flight one in two.
				if err := w.Admit(0); err != nil {
					t.Fatal(err)
				}
				o := int64(1)
				for ; o < behind; o++ {
					if err := w.Admit(o); err != nil {
						t.Fatal(err)
					}
					if err := w.Finish(o); err != nil {
						t.Fatal(err)
					}
				}
				admitted := 1
				for admitted < u {
					if err := w.Admit(o); errors.Is(err, ErrWindowFull) {
						break
					} else if err != nil {
						t.Fatal(err)
					}
					if err := w.Admit(o + 1); errors.Is(err, ErrWindowFull) {
						break
					} else if err != nil {
						t.Fatal(err)
					}
					if err := w.Finish(o + 1); err != nil {
						t.Fatal(err)
					}
					o += 2
					admitted++
				}
				states := 0
				for _, off := range slices.Clone(w.open) {
					if err := w.Retry(off, s); errors.Is(err, ErrWindowFull) {
						break
					} else if err != nil {
						t.Fatal(err)
					}
					states++
				}
				if w.Size() > maxBytes {
					t.Fatalf("size %d over %d", w.Size(), maxBytes)
				}
				t.Logf("%d bytes, %d records in flight wanted, %d behind: %d admitted, %d of them retrying at once (%d bytes)", maxBytes, u, behind, admitted, states, w.Size())
				if maxBytes == 4096 && (admitted != u || states < 10) {
					t.Errorf("%d admitted, %d states", admitted, states)
				}
			}
		}
	}
}

// appendBitmap sets whole bytes at once between a run's partial ones: the
// same bitmap as setting each run's bits one by one, for runs that start
// and end anywhere in a byte.
func TestAppendBitmapRuns(t *testing.T) {
	rnd := rand.New(rand.NewPCG(1, 2))
	for range 2000 {
		w := windowState{base: rnd.Int64N(1000)}
		at := w.base + 1
		for range rnd.IntN(6) {
			first := at + rnd.Int64N(20)
			last := first + rnd.Int64N(40)
			w.done = append(w.done, offsetRange{first, last})
			at = last + 2
		}
		got := appendBitmap(nil, w)
		if got == nil {
			continue // not a bitmap the encoder would take
		}
		var want []byte
		if len(w.done) == 0 {
			want = appendUvarint(nil, 0)
		} else {
			n := int((w.done[len(w.done)-1].Last - w.base + 7) / 8)
			want = appendUvarint(nil, uint64(n))
			bits := make([]byte, n)
			for _, r := range w.done {
				for o := r.First; o <= r.Last; o++ {
					i := o - w.base - 1
					bits[i/8] |= 1 << (i % 8)
				}
			}
			want = append(want, bits...)
		}
		if !bytes.Equal(got, want) {
			t.Fatalf("base %d, runs %v: bitmap %x, want %x", w.base, w.done, got, want)
		}
	}
}
