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
//
// rd1 is the version; r the retries so far; f the first failure and n the
// time the next retry is due, both in Unix milliseconds; d the last delay in
// milliseconds. Fields at their zero value are left out, and the zero State
// encodes as "". The longest encoding is well under 100 bytes.
const metadataVersion = "rd1"

// ErrForeignMetadata is returned by [DecodeState] for metadata that another
// tool wrote. Callers ignore such metadata and start from the zero State.
var ErrForeignMetadata = errors.New("checkpoint: metadata not written by redeliver")

// EncodeState returns the durable form of s: short, versioned ASCII.
func EncodeState(s State) string {
	if s == (State{}) {
		return ""
	}
	b := make([]byte, 0, 64)
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
	return string(b)
}

// DecodeState parses what [EncodeState] wrote. Empty metadata is the zero
// State. Metadata of another tool returns [ErrForeignMetadata]; damaged
// redeliver metadata returns an error that says what is wrong. Fields it does
// not know are skipped, so that a later version can add some.
func DecodeState(md string) (State, error) {
	var s State
	if md == "" {
		return s, nil
	}
	rest, ok := strings.CutPrefix(md, metadataVersion)
	if !ok || (rest != "" && rest[0] != ';') {
		return s, ErrForeignMetadata
	}
	for field := range strings.SplitSeq(strings.TrimPrefix(rest, ";"), ";") {
		if field == "" {
			continue
		}
		k, v, ok := strings.Cut(field, "=")
		if !ok {
			return State{}, fmt.Errorf("checkpoint: metadata %q: field %q has no '='", md, field)
		}
		if len(k) != 1 {
			continue
		}
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil || n < 0 {
			return State{}, fmt.Errorf("checkpoint: metadata %q: field %s=%q: want a non-negative integer", md, k, v)
		}
		switch k {
		case "r":
			if n > 1<<31-1 {
				return State{}, fmt.Errorf("checkpoint: metadata %q: retries %d out of range", md, n)
			}
			s.Retries = int(n)
		case "f":
			s.FirstFailure = time.UnixMilli(n)
		case "d":
			if n > int64(maxDuration/time.Millisecond) {
				return State{}, fmt.Errorf("checkpoint: metadata %q: delay %dms out of range", md, n)
			}
			s.LastDelay = time.Duration(n) * time.Millisecond
		case "n":
			s.NextAt = time.UnixMilli(n)
		}
	}
	return s, nil
}
