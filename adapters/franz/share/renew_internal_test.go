package share

import (
	"context"
	"errors"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/redeliver-go/redeliver/stream"
)

type fixedClock time.Time

func (c fixedClock) Now() time.Time { return time.Time(c) }
func (c fixedClock) NewTimer(time.Duration) (<-chan time.Time, func() bool) {
	return nil, func() bool { return false }
}

// renewWith renews one lease, due for renewal, whose flush the broker (or
// franz-go) answers with err for its partition, and returns its deadline
// before and after, with the lane's log.
func renewWith(t *testing.T, err error) (before, after time.Time, lines []string) {
	t.Helper()
	now := time.Date(2026, 11, 28, 7, 41, 39, 0, time.UTC)
	var c captured
	l := &lane{c: &Consumer{clock: fixedClock(now), lock: 30 * time.Second}, log: slog.New(&c)}
	l.flushFn = func(context.Context) error {
		if err != nil {
			// As franz-go does: the callback runs before FlushAcks returns.
			l.acked(nil, kgo.ShareAckResults{{Topic: "orders", Partition: 0, Err: err}})
		}
		return nil
	}
	p := &poll{l: l}
	ls := &lease{p: p, kr: &kgo.Record{Topic: "orders", Partition: 0, Offset: 13992},
		rec: stream.Record{Topic: "orders", Partition: 0, Offset: 13992}, dc: 1,
		deadline: now.Add(10 * time.Second)} // under half the lock left: due
	before = ls.deadline
	p.renew(context.Background(), now, []engineLease{ls})
	return before, ls.deadline, c.lines
}

// The chaos run's share-consumer violation (issue 51): after a broker
// came back or a leader moved, franz-go dropped a held record's renewal
// because the share session it was acquired in had ended (or its
// partition had moved to another leader), and the broker had meanwhile
// handed the record to another member. A renewal refused that way ends
// the lease at once: the engine then cancels what runs for the record and
// acknowledges nothing (no REJECT, no dead letter started after it).
func TestRenewalRefusedForAGoneAcquisitionLosesTheLease(t *testing.T) {
	for _, err := range []error{kerr.InvalidShareSessionEpoch, kerr.InvalidRecordState, kerr.ShareSessionNotFound} {
		t.Run(err.Error(), func(t *testing.T) {
			before, after, lines := renewWith(t, err)
			if !after.Before(before) {
				t.Fatalf("the lease still runs until %v after the renewal was refused with %v: the consumer would act on a record the broker gave to another member", after, err)
			}
			found := false
			for _, line := range lines {
				found = found || strings.HasPrefix(line, "WARN") && strings.Contains(line, "renewal refused") && strings.Contains(line, "offset=13992")
			}
			if !found {
				t.Errorf("no Warn line says the renewal of offset 13992 was refused: %q", lines)
			}
		})
	}
}

// A renewal that did not get through (a broker away, a timeout) says
// nothing about the lock: the lease keeps its deadline and the renewal is
// tried again; a renewal that succeeded extends it.
func TestRenewalNotThroughKeepsTheLease(t *testing.T) {
	before, after, _ := renewWith(t, errors.New("dial tcp 127.0.0.1:29531: connect: connection refused"))
	if !after.Equal(before) {
		t.Fatalf("deadline %v after a renewal that did not get through, want %v (unchanged)", after, before)
	}
	before, after, _ = renewWith(t, nil)
	if !after.After(before) {
		t.Fatalf("deadline %v after a renewal that succeeded, want later than %v", after, before)
	}
}
