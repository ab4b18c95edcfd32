package retrystate

import (
	"errors"
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"

	"github.com/redeliver-go/redeliver/checkpoint"
)

// The durable form of a State, written as a Kafka offset commit's metadata or
// beside an Event Hubs checkpoint:
//
//	rd1;o=40;r=3;f=1732262400000;d=5000;n=1732262405000
//	rd1;o=40;r=3;f=1732262400000;d=5000;s=1;rr=5:2000
//
// rd1 is the version; o the offset of the record the state belongs to
// ([State.Offset]); r the retries so far; f the first failure and n the
// time the next retry is due, both in Unix milliseconds; d the last delay
// in milliseconds; w the time spent waiting out outages in milliseconds
// ([State.OutageTime]); s=1 marks a started retry ([State.Started]); rr the
// handler's own [Request] as its retry limit (-1 for none) and its delay in
// milliseconds, rounded up; x the [checkpoint.Reason] of a batch given up whose
// exhaustion action has not succeeded ([State.GivenUp]) and e its last
// error, percent-encoded (every byte outside printable ASCII, and ';',
// '=' and '%'), also written with a retry state, for a next owner that
// refuses the retry; c how many records from o the state covers (a
// whole-batch failure's batch, or the records given up: [State.Records]);
// p=1 a failure at the record at o alone ([State.Alone]); h=1 a partition
// stopped at the batch ([State.Halted]).
// Fields at their zero value are left out (o is written
// whenever it is known, 0 included), and a State with no retry state
// encodes as "". Every count a policy can reach round-trips, up to the
// largest int; the longest encoding is under 600 bytes, within the 1024
// of the Event Hubs Kafka endpoint.
//
// Readers skip the fields they do not know, whatever their key or value,
// with or without a value, so that a later version can add some; every
// field this version adds is one that earlier rd1 readers skip too (a
// one-letter key with a non-negative integer, or a longer key).
const metadataVersion = "rd1"

// ErrForeignMetadata is returned by [DecodeState] for metadata that another
// tool wrote. Callers ignore such metadata and start from the zero State.
var ErrForeignMetadata = errors.New("checkpoint: metadata not written by redeliver")

// EncodeState returns the durable form of s: short, versioned ASCII. A
// State that holds nothing but its Offset encodes as "".
func EncodeState(s State) string {
	if s == (State{Offset: s.Offset}) {
		return ""
	}
	b := make([]byte, 0, 96)
	b = append(b, metadataVersion...)
	if s.Offset >= 0 {
		b = append(b, ";o="...)
		b = strconv.AppendInt(b, s.Offset, 10)
	}
	b = append(b, ";r="...)
	b = strconv.AppendInt(b, int64(s.Retries), 10)
	if !s.FirstFailure.IsZero() {
		b = append(b, ";f="...)
		b = strconv.AppendInt(b, s.FirstFailure.UnixMilli(), 10)
	}
	if s.LastDelay != 0 {
		b = append(b, ";d="...)
		b = strconv.AppendInt(b, s.LastDelay.Milliseconds(), 10)
	}
	if !s.NextAt.IsZero() {
		b = append(b, ";n="...)
		b = strconv.AppendInt(b, s.NextAt.UnixMilli(), 10)
	}
	if s.OutageTime > 0 {
		b = append(b, ";w="...)
		b = strconv.AppendInt(b, s.OutageTime.Milliseconds(), 10)
	}
	if s.Started {
		b = append(b, ";s=1"...)
	}
	if s.GivenUp != 0 {
		b = append(b, ";x="...)
		b = strconv.AppendInt(b, int64(s.GivenUp), 10)
	}
	if s.Records > 0 {
		b = append(b, ";c="...)
		b = strconv.AppendInt(b, int64(s.Records), 10)
	}
	if s.Alone {
		b = append(b, ";p=1"...)
	}
	if s.LastError != "" {
		b = append(b, ";e="...)
		b = appendEscaped(b, truncate(s.LastError, maxLastError))
	}
	if s.Halted {
		b = append(b, ";h=1"...)
	}
	if s.Request != (Request{}) {
		b = append(b, ";rr="...)
		b = strconv.AppendInt(b, int64(s.Request.MaxRetries), 10)
		b = append(b, ':')
		ms := s.Request.Delay.Milliseconds()
		if s.Request.Delay > time.Duration(ms)*time.Millisecond {
			ms++ // round up: a delay never becomes shorter, nor 0
		}
		b = strconv.AppendInt(b, ms, 10)
	}
	return string(b)
}

// DecodeState parses what [EncodeState] wrote. Empty metadata is the zero
// State. Metadata of another tool returns [ErrForeignMetadata]; damaged
// redeliver metadata (a field this version knows with a value it cannot
// read) returns an error that says what is wrong. Fields it does not know
// are skipped, so that a later version can add some. Metadata that does
// not name its record (written before states did) decodes with Offset -1.
func DecodeState(md string) (State, error) {
	var s State
	if md == "" {
		return s, nil
	}
	s.Offset = -1
	rest, ok := strings.CutPrefix(md, metadataVersion)
	if !ok || (rest != "" && rest[0] != ';') {
		return s, ErrForeignMetadata
	}
	damaged := func(format string, args ...any) (State, error) {
		return State{}, fmt.Errorf("checkpoint: metadata %q: "+format, append([]any{md}, args...)...)
	}
	for field := range strings.SplitSeq(strings.TrimPrefix(rest, ";"), ";") {
		k, v, hasValue := strings.Cut(field, "=")
		switch k {
		case "o", "r", "f", "d", "n", "w", "s", "x", "e", "c", "p", "h", "rr":
		default:
			continue // unknown: a later version's
		}
		if !hasValue {
			return damaged("field %q has no value", k)
		}
		if k == "e" {
			text, ok := unescape(v)
			if !ok {
				return damaged("field e=%q: a bad escape", v)
			}
			s.LastError = text
			continue
		}
		if k == "rr" {
			r, err := decodeRequest(v)
			if err != nil {
				return damaged("field rr=%q: %v", v, err)
			}
			s.Request = r
			continue
		}
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil || n < 0 {
			return damaged("field %s=%q: want a non-negative integer", k, v)
		}
		switch k {
		case "o":
			s.Offset = n
		case "r":
			if n > math.MaxInt {
				return damaged("retries %d out of range", n)
			}
			s.Retries = int(n)
		case "c":
			if n > math.MaxInt {
				return damaged("records %d out of range", n)
			}
			s.Records = int(n)
		case "f":
			s.FirstFailure = time.UnixMilli(n)
		case "d":
			s.LastDelay = millis(n)
		case "n":
			s.NextAt = time.UnixMilli(n)
		case "w":
			s.OutageTime = millis(n)
		case "s":
			if n > 1 {
				return damaged("field s=%q: want 1 (started) or 0", v)
			}
			s.Started = n == 1
		case "h":
			if n > 1 {
				return damaged("field h=%q: want 1 (halted) or 0", v)
			}
			s.Halted = n == 1
		case "p":
			if n > 1 {
				return damaged("field p=%q: want 1 (the record alone) or 0", v)
			}
			s.Alone = n == 1
		case "x":
			if n < int64(checkpoint.RetriesSpent) || n > int64(checkpoint.NotRetryable) {
				return damaged("field x=%q: want a reason from %d to %d", v, checkpoint.RetriesSpent, checkpoint.NotRetryable)
			}
			s.GivenUp = checkpoint.Reason(n)
		}
	}
	if s == (State{Offset: s.Offset}) {
		return State{}, nil // no retry state: the zero State
	}
	return s, nil
}

// decodeRequest reads a Request written as "<max retries>:<delay ms>".
func decodeRequest(v string) (Request, error) {
	a, b, ok := strings.Cut(v, ":")
	if !ok {
		return Request{}, errors.New("want <max retries>:<delay in milliseconds>")
	}
	n, err := strconv.ParseInt(a, 10, strconv.IntSize)
	if err != nil || n < checkpoint.Infinite {
		return Request{}, errors.New("max retries: want -1 or more")
	}
	ms, err := strconv.ParseInt(b, 10, 64)
	if err != nil || ms < 0 {
		return Request{}, errors.New("delay: want a non-negative number of milliseconds")
	}
	return Request{MaxRetries: int(n), Delay: millis(ms)}, nil
}

// appendEscaped appends s to b with every byte outside printable ASCII,
// and ';', '=' and '%', as %XX.
func appendEscaped(b []byte, s string) []byte {
	const hex = "0123456789ABCDEF"
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c < 0x20 || c > 0x7e || c == ';' || c == '=' || c == '%' {
			b = append(b, '%', hex[c>>4], hex[c&15])
			continue
		}
		b = append(b, c)
	}
	return b
}

// unescape undoes appendEscaped; false for a bad escape.
func unescape(v string) (string, bool) {
	if !strings.Contains(v, "%") {
		return v, true
	}
	out := make([]byte, 0, len(v))
	for i := 0; i < len(v); i++ {
		if v[i] != '%' {
			out = append(out, v[i])
			continue
		}
		if i+2 >= len(v) {
			return "", false
		}
		n, err := strconv.ParseUint(v[i+1:i+3], 16, 8)
		if err != nil {
			return "", false
		}
		out = append(out, byte(n))
		i += 2
	}
	return string(out), true
}

// millis returns ms milliseconds as a Duration, the largest Duration for
// more than it holds (a delay written rounded up from the largest one).
func millis(ms int64) time.Duration {
	if ms > int64(maxDuration/time.Millisecond) {
		return maxDuration
	}
	return time.Duration(ms) * time.Millisecond
}

// String describes s for people, times in UTC to the millisecond:
//
//	no retry
//	retry 2 due at 12:00:01.5 UTC
//	retry 2 started
//
// followed, for a handler's own request, by "(RetryResult: 3 retries, 10s
// apart)". [Describe] adds the policy's limit and reads metadata.
func (s State) String() string { return s.describe(0, false) }

// Describe reads the durable form of a retry state (a Kafka offset
// commit's metadata) and describes it for people, with the limit of the
// policy in force, maxRetries ([checkpoint.Infinite] for none; a handler's own request
// in the state replaces it):
//
//	retry 2 of 5, due at 12:00:01.5 UTC
//	given up after 3 deliveries (retries spent), its exhaustion action not done; last error: timeout
//
// Empty metadata reads "no retry"; metadata of another tool or damaged
// metadata says so.
func Describe(md string, maxRetries int) string {
	s, err := DecodeState(md)
	switch {
	case errors.Is(err, ErrForeignMetadata):
		return fmt.Sprintf("not redeliver's metadata (%q)", md)
	case err != nil:
		return err.Error()
	}
	return s.describe(maxRetries, true)
}

func (s State) describe(maxRetries int, withMax bool) string {
	if s.GivenUp != 0 {
		// Given up: what happens next, then what it was given up with.
		what := "given up after " + count(s.Retries+1, "delivery", "deliveries") + " (" + s.GivenUp.String() + ")"
		switch {
		case s.Records == 1:
			what += ", the record alone"
		case s.Records > 1:
			what += fmt.Sprintf(", with the %d records from it", s.Records)
		}
		what += ", its exhaustion action not done"
		if s.Halted {
			what = "stopped by StopPartition after " + count(s.Retries+1, "delivery", "deliveries") + " (" + s.GivenUp.String() + "): a next owner delivers it again with a fresh count"
		}
		if s.LastError != "" {
			what += "; last error: " + s.LastError
		}
		return what
	}
	if s.Retries == 0 {
		return "no retry"
	}
	var b strings.Builder
	fmt.Fprintf(&b, "retry %d", s.Retries)
	if s.Request != (Request{}) {
		maxRetries = s.Request.MaxRetries
	}
	if withMax {
		if maxRetries == checkpoint.Infinite {
			b.WriteString(" (no limit)")
		} else {
			fmt.Fprintf(&b, " of %d", maxRetries)
		}
		b.WriteString(",")
	}
	switch {
	case s.Started:
		b.WriteString(" started")
	case s.NextAt.IsZero():
		b.WriteString(" due now")
	default:
		fmt.Fprintf(&b, " due at %s UTC", s.NextAt.UTC().Format("15:04:05.999"))
	}
	if s.Request != (Request{}) {
		n := "no limit of retries"
		if s.Request.MaxRetries != checkpoint.Infinite {
			n = count(s.Request.MaxRetries, "retry", "retries")
		}
		fmt.Fprintf(&b, " (RetryResult: %s, %v apart)", n, s.Request.Delay)
	}
	return b.String()
}
