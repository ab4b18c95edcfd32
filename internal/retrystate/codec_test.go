package retrystate_test

import (
	"errors"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/redeliver-go/redeliver/checkpoint"
	"github.com/redeliver-go/redeliver/internal/retrystate"
)

func TestStateRoundTrip(t *testing.T) {
	for _, s := range []retrystate.State{
		{},
		{Retries: 3, FirstFailure: time.UnixMilli(1732262400000)},
		{Retries: 1<<31 - 1, FirstFailure: time.UnixMilli(1<<62 - 1), LastDelay: 1_000_000 * time.Hour, NextAt: time.UnixMilli(1 << 50)},
	} {
		md := retrystate.EncodeState(s)
		if len(md) >= 1024 {
			t.Fatalf("metadata %d bytes", len(md))
		}
		got, err := retrystate.DecodeState(md)
		if err != nil {
			t.Fatalf("%q: %v", md, err)
		}
		if got.Retries != s.Retries || !got.FirstFailure.Equal(s.FirstFailure) || got.LastDelay != s.LastDelay || !got.NextAt.Equal(s.NextAt) {
			t.Fatalf("%q decoded to %+v, want %+v", md, got, s)
		}
	}
	if md := retrystate.EncodeState(retrystate.State{Offset: 40, Retries: 3, FirstFailure: time.UnixMilli(1732262400000)}); md != "rd1;o=40;r=3;f=1732262400000" {
		t.Fatalf("encoding %q", md)
	}
}

func TestDecodeStateForeignAndDamaged(t *testing.T) {
	for _, md := range []string{"{\"app\":1}", "rd10;r=3", "rd", "hello"} {
		if _, err := retrystate.DecodeState(md); !errors.Is(err, retrystate.ErrForeignMetadata) {
			t.Errorf("%q: %v, want ErrForeignMetadata", md, err)
		}
	}
	for _, md := range []string{"rd1;r=x", "rd1;r=-1", "rd1;r", "rd1;f=99999999999999999999", "rd1;r=9223372036854775808", "rd1;o=-1;r=1", "rd1;o", "rd1;w=x"} {
		_, err := retrystate.DecodeState(md)
		if err == nil || errors.Is(err, retrystate.ErrForeignMetadata) || !strings.Contains(err.Error(), "checkpoint: metadata") {
			t.Errorf("%q: %v, want a damage error", md, err)
		}
	}
	s, err := retrystate.DecodeState("rd1;r=2;zz=9;x=1")
	if err != nil || s.Retries != 2 {
		t.Fatalf("unknown fields: %+v %v", s, err)
	}
	for _, md := range []string{"rd1;c=-1", "rd1;c=x", "rd1;c", "rd1;s=2", "rd1;s=x", "rd1;rr=3", "rd1;rr=-2:5", "rd1;rr=a:5", "rd1;rr=1:-5", "rd1;rr", "rd1;s", "rd1;n"} {
		_, err := retrystate.DecodeState(md)
		if err == nil || errors.Is(err, retrystate.ErrForeignMetadata) || !strings.Contains(err.Error(), "checkpoint: metadata") {
			t.Errorf("%q: %v, want a damage error", md, err)
		}
	}
}

// Fields this version does not know are skipped, whatever they look like:
// one-letter keys with any value, fields without a value, empty fields
// (issue 10, defect 10: the first two were taken for damage).
func TestDecodeStateSkipsUnknownFields(t *testing.T) {
	want := retrystate.State{Offset: -1, Retries: 2, FirstFailure: time.UnixMilli(1732262400000), LastDelay: 5 * time.Second}
	for _, md := range []string{
		"rd1;r=2;z=abc;f=1732262400000;d=5000",
		"rd1;r=2;z;f=1732262400000;d=5000",
		"rd1;r=2;f=1732262400000;zz;d=5000;q=-1",
		"rd1;r=2;f=1732262400000;d=5000;;;y=1:2:3;v=",
		"rd1;k;r=2;f=1732262400000;d=5000;future=a=b",
	} {
		got, err := retrystate.DecodeState(md)
		if err != nil || got != want {
			t.Errorf("%q: %+v, %v; want %+v", md, got, err, want)
		}
	}
}

// A started retry and a handler's own request survive the round trip; what
// an rd1 reader of the previous version wrote still reads.
func TestStateRoundTripStartedAndRequest(t *testing.T) {
	for _, tc := range []struct {
		s  retrystate.State
		md string
	}{
		{retrystate.State{Offset: 12, Retries: 3, FirstFailure: time.UnixMilli(1732262400000), LastDelay: 5 * time.Second, Started: true},
			"rd1;o=12;r=3;f=1732262400000;d=5000;s=1"},
		{retrystate.State{Retries: 1, FirstFailure: time.UnixMilli(1), LastDelay: 2 * time.Second, NextAt: time.UnixMilli(2001),
			Request: retrystate.Request{MaxRetries: 5, Delay: 2 * time.Second}},
			"rd1;o=0;r=1;f=1;d=2000;n=2001;rr=5:2000"},
		{retrystate.State{Offset: -1, Retries: 7, Started: true, Request: retrystate.Request{MaxRetries: checkpoint.Infinite}},
			"rd1;r=7;s=1;rr=-1:0"},
		{retrystate.State{Offset: 1 << 62, Retries: 2, OutageTime: 90 * time.Second},
			"rd1;o=4611686018427387904;r=2;w=90000"},
		{retrystate.State{Offset: 7, Retries: 2, FirstFailure: time.UnixMilli(1), Started: true, GivenUp: checkpoint.RetriesSpent, LastError: "x", Records: 1},
			"rd1;o=7;r=2;f=1;s=1;x=1;c=1;e=x"},
	} {
		if md := retrystate.EncodeState(tc.s); md != tc.md {
			t.Errorf("EncodeState(%+v) = %q, want %q", tc.s, md, tc.md)
		}
		got, err := retrystate.DecodeState(tc.md)
		if err != nil || got != tc.s {
			t.Errorf("DecodeState(%q) = %+v, %v; want %+v", tc.md, got, err, tc.s)
		}
	}
	// A delay below a millisecond is rounded up, never down to nothing.
	md := retrystate.EncodeState(retrystate.State{Retries: 1, Request: retrystate.Request{MaxRetries: 2, Delay: 1500 * time.Microsecond}})
	if md != "rd1;o=0;r=1;rr=2:2" {
		t.Errorf("sub-millisecond request delay encoded as %q", md)
	}
	longest := retrystate.State{Offset: math.MaxInt64, Retries: math.MaxInt, FirstFailure: time.UnixMilli(1<<62 - 1), LastDelay: 1<<63 - 1, NextAt: time.UnixMilli(1<<62 - 1),
		OutageTime: 1<<63 - 1, Started: true, Request: retrystate.Request{MaxRetries: math.MaxInt, Delay: 1<<63 - 1},
		GivenUp: checkpoint.NotRetryable, LastError: strings.Repeat("%", 500), Records: math.MaxInt, Alone: true, Halted: true}
	if md := retrystate.EncodeState(longest); len(md) >= 600 {
		t.Errorf("longest encoding %q is %d bytes", md, len(md))
	}
	// What the previous rd1 writer wrote.
	got, err := retrystate.DecodeState("rd1;r=3;f=1732262400000;d=5000;n=1732262405000")
	if err != nil || got.Retries != 3 || got.Started || got.Request != (retrystate.Request{}) || !got.NextAt.Equal(time.UnixMilli(1732262405000)) {
		t.Errorf("previous format: %+v, %v", got, err)
	}
}

func FuzzDecodeState(f *testing.F) {
	for _, s := range []string{"", "rd1;r=3;f=1732262400000", "rd1;r=1;d=5000;n=1", "rd1;;", "rd1;r=", "other", "rd1;r=2;s=1;rr=-1:5", "rd1;x;y=z"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, md string) {
		s, err := retrystate.DecodeState(md)
		if err != nil {
			return
		}
		again, err := retrystate.DecodeState(retrystate.EncodeState(s))
		if err != nil || again != s && !(again.FirstFailure.Equal(s.FirstFailure) && again.NextAt.Equal(s.NextAt) && again.Retries == s.Retries &&
			again.LastDelay == s.LastDelay && again.Started == s.Started && again.Request == s.Request && again.Offset == s.Offset &&
			again.OutageTime == s.OutageTime) {
			t.Fatalf("%q -> %+v -> %+v (%v)", md, s, again, err)
		}
	})
}

// A given-up state round-trips, its last error escaped, truncated to 128
// bytes at a rune's start; a reader that does not know it counts every
// retry as made (s=1).
func TestGivenUpStateRoundTrip(t *testing.T) {
	long := strings.Repeat("é", 100) // 200 bytes
	for _, s := range []retrystate.State{
		{Offset: 3, Retries: 2, FirstFailure: time.UnixMilli(1000), Started: true, GivenUp: checkpoint.RetriesSpent,
			LastError: "order 7; amount=-5 (100%)\nnot\tvalid"},
		{Offset: 0, Retries: 0, Started: true, GivenUp: checkpoint.NotRetryable, LastError: long[:128]},
		{Offset: 9, Retries: 3, Started: true, GivenUp: checkpoint.RetriesSpent, LastError: "x", Halted: true},
	} {
		md := retrystate.EncodeState(s)
		if !strings.Contains(md, ";s=1") || strings.Count(md, ";") != strings.Count(md, "=") {
			t.Fatalf("%q: a field holds a ';' or '='", md)
		}
		got, err := retrystate.DecodeState(md)
		if err != nil || got != s {
			t.Fatalf("%q decoded to %+v, %v; want %+v", md, got, err, s)
		}
	}
	md := retrystate.EncodeState(retrystate.State{Retries: 1, Started: true, GivenUp: checkpoint.RetriesSpent, LastError: long})
	got, err := retrystate.DecodeState(md)
	if err != nil || len(got.LastError) != 128 || got.LastError != long[:128] {
		t.Fatalf("a 200-byte error kept as %d bytes %q (%v), want its first 128", len(got.LastError), got.LastError, err)
	}
	for _, bad := range []string{"rd1;r=1;x=9", "rd1;r=1;x=0", "rd1;r=1;e=%4", "rd1;r=1;e=%zz"} {
		if _, err := retrystate.DecodeState(bad); err == nil {
			t.Errorf("%q decoded without an error", bad)
		}
	}
}

// What a state covers (issue 46): the records of a whole-batch failure
// (c=), a failure at its record alone (p=1), and the last error of a
// retry state (e=), for a next owner that refuses the retry.
func TestStateRoundTripCover(t *testing.T) {
	for _, tt := range []struct {
		s  retrystate.State
		md string
	}{
		{retrystate.State{Offset: 3, Retries: 2, FirstFailure: time.UnixMilli(1), NextAt: time.UnixMilli(2), Records: 5, LastError: "timeout; retry"},
			"rd1;o=3;r=2;f=1;n=2;c=5;e=timeout%3B retry"},
		{retrystate.State{Offset: 3, Retries: 2, FirstFailure: time.UnixMilli(1), Started: true, Alone: true, LastError: "x"},
			"rd1;o=3;r=2;f=1;s=1;p=1;e=x"},
	} {
		md := retrystate.EncodeState(tt.s)
		if md != tt.md {
			t.Errorf("EncodeState(%+v) = %q, want %q", tt.s, md, tt.md)
		}
		got, err := retrystate.DecodeState(md)
		if err != nil || got != tt.s {
			t.Errorf("DecodeState(%q) = %+v, %v; want %+v", md, got, err, tt.s)
		}
	}
	for _, bad := range []string{"rd1;r=1;p=2", "rd1;r=1;p=x", "rd1;r=1;p"} {
		if _, err := retrystate.DecodeState(bad); err == nil || errors.Is(err, retrystate.ErrForeignMetadata) {
			t.Errorf("DecodeState(%q): %v, want an error that says it is damaged", bad, err)
		}
	}
}

// Metadata written before states said what they cover decodes to the
// same counts as before, covering nothing said (Records 0, not Alone).
func TestOldStatesKeepTheirCounts(t *testing.T) {
	for md, want := range map[string]retrystate.State{
		"rd1;r=3;f=1732262400000;d=5000;n=1732262405000": {Offset: -1, Retries: 3, FirstFailure: time.UnixMilli(1732262400000),
			LastDelay: 5 * time.Second, NextAt: time.UnixMilli(1732262405000)},
		"rd1;o=12;r=2;f=1;d=1000;s=1": {Offset: 12, Retries: 2, FirstFailure: time.UnixMilli(1), LastDelay: time.Second, Started: true},
		"rd1;o=7;r=2;f=1;s=1;x=1;c=1;e=x": {Offset: 7, Retries: 2, FirstFailure: time.UnixMilli(1), Started: true,
			GivenUp: checkpoint.RetriesSpent, Records: 1, LastError: "x"},
		"rd1;o=0;r=1;f=1;d=2000;n=2001;rr=5:2000": {Offset: 0, Retries: 1, FirstFailure: time.UnixMilli(1), LastDelay: 2 * time.Second,
			NextAt: time.UnixMilli(2001), Request: retrystate.Request{MaxRetries: 5, Delay: 2 * time.Second}},
	} {
		got, err := retrystate.DecodeState(md)
		if err != nil || got != want {
			t.Errorf("DecodeState(%q) = %+v, %v; want %+v", md, got, err, want)
		}
	}
}

// A next owner that refuses a restored retry (a lowered retry count, a
// spent time budget, a record too old) gives it up with the last error
// the state kept (issue 46: the error was nil, and the dead letter's
// redeliver-last-error empty).
func TestRefusedRestoredRetryKeepsItsLastError(t *testing.T) {
	now := time.UnixMilli(1_000_000)
	s := retrystate.State{Offset: 0, Retries: 3, FirstFailure: now.Add(-time.Minute), LastDelay: time.Second, NextAt: now, LastError: "timeout"}
	for _, p := range []checkpoint.Policy{
		{MaxRetries: 2},
		{MaxRetries: 5, MaxRetryTime: time.Second},
		{MaxRetries: 5, MaxRecordAge: time.Second},
	} {
		m := retrystate.NewMachine(p)
		m.Begin(now.Add(-time.Hour))
		if d := m.Resume(s, now, nil); d.Action != retrystate.RetryNow {
			t.Fatalf("Resume: %v, want a retry due now", d)
		}
		if d := m.Start(now); d.Action != retrystate.StopRetrying {
			t.Fatalf("Start under %+v: %v, want a refusal", p, d)
		}
		var xerr *checkpoint.ExhaustedError
		if !errors.As(m.Err(), &xerr) || xerr.Last == nil || xerr.Last.Error() != "timeout" || xerr.Retries != 2 {
			t.Errorf("under %+v: given up with %v, want 2 retries and the last error timeout", p, m.Err())
		}
		if m.State().LastError != "" {
			t.Errorf("the restored error stays in the state: %+v", m.State())
		}
	}
}
