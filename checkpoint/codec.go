package checkpoint

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"
)

// The durable form of a State, written as a Kafka offset commit's metadata or
// beside an Event Hubs checkpoint:
//
//	rd1;r=3;f=1732262400000;d=5000;n=1732262405000
//	rd1;r=3;f=1732262400000;d=5000;s=1;rr=5:2000
//
// rd1 is the version; r the retries so far; f the first failure and n the
// time the next retry is due, both in Unix milliseconds; d the last delay in
// milliseconds; s=1 marks a started retry ([State.Started]); rr the
// handler's own [Request] as its retry limit (-1 for none) and its delay in
// milliseconds, rounded up. Fields at their zero value are left out, and
// the zero State encodes as "". The longest encoding is under 120 bytes.
//
// Readers skip the fields they do not know, whatever their key or value,
// with or without a value, so that a later version can add some; every
// field this version adds is one that earlier rd1 readers skip too (a
// one-letter key with a non-negative integer, or a longer key).
const metadataVersion = "rd1"

// ErrForeignMetadata is returned by [DecodeState] for metadata that another
// tool wrote. Callers ignore such metadata and start from the zero State.
var ErrForeignMetadata = errors.New("checkpoint: metadata not written by redeliver")

// EncodeState returns the durable form of s: short, versioned ASCII.
func EncodeState(s State) string {
	if s == (State{}) {
		return ""
	}
	b := make([]byte, 0, 96)
	b = append(b, metadataVersion...)
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
	if s.Started {
		b = append(b, ";s=1"...)
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
// are skipped, so that a later version can add some.
func DecodeState(md string) (State, error) {
	var s State
	if md == "" {
		return s, nil
	}
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
		case "r", "f", "d", "n", "s", "rr":
		default:
			continue // unknown: a later version's
		}
		if !hasValue {
			return damaged("field %q has no value", k)
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
		case "r":
			if n > 1<<31-1 {
				return damaged("retries %d out of range", n)
			}
			s.Retries = int(n)
		case "f":
			s.FirstFailure = time.UnixMilli(n)
		case "d":
			if n > int64(maxDuration/time.Millisecond) {
				return damaged("delay %dms out of range", n)
			}
			s.LastDelay = time.Duration(n) * time.Millisecond
		case "n":
			s.NextAt = time.UnixMilli(n)
		case "s":
			if n > 1 {
				return damaged("field s=%q: want 1 (started) or 0", v)
			}
			s.Started = n == 1
		}
	}
	return s, nil
}

// decodeRequest reads a Request written as "<max retries>:<delay ms>".
func decodeRequest(v string) (Request, error) {
	a, b, ok := strings.Cut(v, ":")
	if !ok {
		return Request{}, errors.New("want <max retries>:<delay in milliseconds>")
	}
	n, err := strconv.ParseInt(a, 10, 32)
	if err != nil || n < Infinite {
		return Request{}, errors.New("max retries: want -1 or more")
	}
	ms, err := strconv.ParseInt(b, 10, 64)
	if err != nil || ms < 0 || ms > int64(maxDuration/time.Millisecond) {
		return Request{}, errors.New("delay: want a non-negative number of milliseconds")
	}
	return Request{MaxRetries: int(n), Delay: time.Duration(ms) * time.Millisecond}, nil
}
