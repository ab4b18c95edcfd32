package redrive

import (
	"fmt"
	"strconv"
	"time"

	"github.com/redeliver-go/redeliver/redrive/internal/rowcodec"
	"github.com/redeliver-go/redeliver/stream"
)

// Status is where an entry stands in the re-drive. The state name an entry
// shows (see [Entry.State]) is its base state with the status's suffix.
type Status uint8

const (
	// Parked: waiting, in the application's own state (such as the design's
	// NONCE_PUBLISHED) or in [ParkedState] for a given-up batch. Due for a
	// re-drive once its expiry has passed since it entered the state.
	Parked Status = iota + 1
	// Retrying: re-published, waiting for the consumer of the retry topic
	// to complete it (the design's <state>_RETRY).
	Retrying
	// Done: completed. Final.
	Done
	// TimedOut: reported as given up, after the retry timeout or the
	// maximum number of re-drives (the design's <state>_TIMEOUT). Final.
	TimedOut
)

// String returns the status as stores write it: parked, retrying, done,
// timed_out.
func (s Status) String() string {
	switch s {
	case Parked:
		return "parked"
	case Retrying:
		return "retrying"
	case Done:
		return "done"
	case TimedOut:
		return "timed_out"
	}
	return fmt.Sprintf("Status(%d)", uint8(s))
}

// ParseStatus is the inverse of [Status.String].
func ParseStatus(s string) (Status, error) {
	for st := Parked; st <= TimedOut; st++ {
		if st.String() == s {
			return st, nil
		}
	}
	return 0, fmt.Errorf("redrive: unknown status %q", s)
}

// Pending reports whether the scheduler still looks after an entry in this
// status: parked or retrying.
func (s Status) Pending() bool { return s == Parked || s == Retrying }

// ParkedState is the base state of the entries the [Park] exhaustion action
// writes: they show as REDELIVER_PARKED, REDELIVER_PARKED_RETRY,
// REDELIVER_PARKED_DONE and REDELIVER_PARKED_TIMEOUT.
const ParkedState = "REDELIVER_PARKED"

// The suffixes of the state names, after the design's <state>_RETRY and
// <state>_TIMEOUT.
const (
	SuffixRetry   = "_RETRY"
	SuffixDone    = "_DONE"
	SuffixTimeout = "_TIMEOUT"
)

// StateName returns the state name of an entry in base state base with
// status st: base itself when parked, base+"_RETRY", base+"_DONE" or
// base+"_TIMEOUT" otherwise.
func StateName(base string, st Status) string {
	switch st {
	case Retrying:
		return base + SuffixRetry
	case Done:
		return base + SuffixDone
	case TimedOut:
		return base + SuffixTimeout
	}
	return base
}

// Entry is one parked record and where it stands. Stores keep every field;
// times are kept to the microsecond.
type Entry struct {
	// ID is the store's number for the entry, set when it is parked.
	ID int64
	// Key is the application's unique name for the entry: parking a key
	// that is already there does nothing, so parking is idempotent. The
	// [Park] action uses "topic/partition/offset".
	Key string
	// Base is the state the entry was parked in: the application's own
	// (e.g. "NONCE_PUBLISHED") or [ParkedState].
	Base string
	// Status is where the entry stands.
	Status Status
	// StateTime is when the entry entered its current status; the expiry
	// counts from it.
	StateTime time.Time
	// Created is when the entry was parked; the retry timeout counts from
	// it.
	Created time.Time
	// Expiry is how long the entry waits, parked or retrying, before it is
	// re-driven (again).
	Expiry time.Duration
	// DueAt is when the scheduler next looks at the entry: for a parked
	// entry StateTime+Expiry; for a retrying one the earlier of that and the
	// retry timeout; later after a failed publish. Zero for done and timed
	// out entries.
	DueAt time.Time
	// Redrives is the number of times the entry was re-published.
	Redrives int
	// Reparks is the number of its re-drives whose record failed again
	// and was handed back to the entry by the [Park] action (see
	// [Store.Repark]), each re-drive counted once. It is how often the
	// entry's record was given up again, not a number of entries: a
	// re-driven record never becomes a new entry.
	Reparks int
	// LastError is the error the record was parked with, or the last
	// failure to re-publish or report it.
	LastError string
	// Version counts the entry's changes; every change is a
	// compare-and-set on the status and version it expects.
	Version int64
	// Message is the original record: its topic, partition, offset, key,
	// value, headers and timestamp.
	Message stream.Record
	// OrderKey orders the entry behind the other entries of the same
	// order key: a store never claims it for a re-drive while an entry of
	// that order key with a lower ID is pending (parked or retrying), so a
	// key's entries are re-driven one at a time, in the order they were
	// parked, each once the one before is done or timed out. "" (an
	// entry of [Park] or [Await]) orders nothing. [ParkByKey] sets it to
	// [OrderKey] of the record's topic and ordering key. It must be text
	// (valid UTF-8 without a NUL).
	OrderKey string
}

// Origin returns the position of the record the entry stands for: the
// original topic, partition and offset its message names in
// [stream.HeaderTopic], [stream.HeaderPartition] and [stream.HeaderOffset]
// (a re-driven or dead-lettered record carries them), else the message's
// own. A topic header that is empty or not text (invalid UTF-8 or a NUL:
// no topic is so named) names no origin. Entries with the same origin are
// parked copies of one record; the [Park] action keeps one entry per
// record, so more than one is a sign of a wiring that strips the re-drive
// headers (see docs/REDRIVE.md).
func (e Entry) Origin() (topic string, partition int32, offset int64) {
	m := e.Message
	t, okT := headerValue(m.Headers, stream.HeaderTopic)
	p, okP := headerValue(m.Headers, stream.HeaderPartition)
	o, okO := headerValue(m.Headers, stream.HeaderOffset)
	if okT && okP && okO && t != "" && rowcodec.Text(t) {
		pn, errP := strconv.ParseInt(p, 10, 32)
		on, errO := strconv.ParseInt(o, 10, 64)
		if errP == nil && errO == nil {
			return t, int32(pn), on
		}
	}
	return m.Topic, m.Partition, m.Offset
}

// State returns the entry's state name, e.g. NONCE_PUBLISHED_RETRY (see
// [StateName]).
func (e Entry) State() string { return StateName(e.Base, e.Status) }

// Change is a compare-and-set of one entry, which a [Store] applies only if
// the entry still has the status and version the sweep read.
type Change struct {
	// ID names the entry; Status and Version are what the sweep read.
	ID      int64
	Status  Status
	Version int64
	// The entry's new values. The store increments the version.
	To        Status
	StateTime time.Time
	DueAt     time.Time // zero for Done and TimedOut
	Redrives  int
	LastError string
}
