package conformance

import (
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"testing"

	"github.com/redeliver-go/redeliver/stream"
	"github.com/redeliver-go/redeliver/stream/streamtest"
)

// TestPoisonDeliveriesCountAFirstDeliveryOnce: a poison record whose
// first failure's state a move lost is delivered again as a first
// delivery by the next owner (docs/COUNTING.md); the cluster scenarios'
// count takes that first delivery once, as the contract's bound does, and
// reports the repeat. A retry delivered twice still counts twice.
func TestPoisonDeliveriesCountAFirstDeliveryOnce(t *testing.T) {
	r := &clusterRun{}
	fail := func(member string, claim uint64, offset int64, retry int) {
		r.hist.Hooks(member).Delivered(stream.DeliveredEvent{
			BatchInfo: stream.BatchInfo{Topic: "t", Partition: 0, ClaimID: claim, FirstOffset: offset, LastOffset: offset, Records: 1},
			Attempt:   stream.Attempt{Retries: retry, MaxRetries: clusterRetries}, Outcome: stream.Failed,
			Err: &stream.BatchError{Index: 0, Err: errPoison},
		})
	}
	// Record 42: its first failure lost by a move, then its whole budget.
	fail("a", 1, 42, 0)
	for retry := range clusterRetries + 1 {
		fail("b", 2, 42, retry)
	}
	// Record 192: its budget, once.
	for retry := range clusterRetries + 1 {
		fail("b", 2, 192, retry)
	}
	lo, hi, repeated := r.poisonDeliveries()
	if lo != clusterRetries+1 || hi != clusterRetries+1 || repeated != 1 {
		t.Errorf("poisonDeliveries = %d..%d, %d repeated; want %d..%d, 1 repeated", lo, hi, repeated, clusterRetries+1, clusterRetries+1)
	}
	// A retry delivered twice is over the bound, and is counted so.
	fail("b", 2, 192, 2)
	if _, hi, _ := r.poisonDeliveries(); hi != clusterRetries+2 {
		t.Errorf("with a retry delivered twice, the most = %d, want %d", hi, clusterRetries+2)
	}
}

// TestGivenUpCommitsCounted: the processors' "commit given up" warnings
// are counted by the partition of the logger they come through (or of the
// record), and nothing else is.
func TestGivenUpCommitsCounted(t *testing.T) {
	var g givenUpCommits
	l := slog.New(g.handler())
	p1 := l.With("topic", "t", "partition", int32(1))
	p1.Warn("redeliver: commit given up: the claim ended before a failed commit was written", "next", 10)
	p1.Warn("redeliver: commit failed, will try again after the delay", "try", 1)
	p1.Info("redeliver: commit given up, but at Info") // counted: the message is what names it
	l.Warn("redeliver: commit given up: the claim ended before a failed commit was written", "partition", int32(2))
	l.Warn("redeliver: commit given up: with no partition named")
	if got := [3]int{g.count(0), g.count(1), g.count(2)}; got != [3]int{0, 2, 1} {
		t.Errorf("given-up commits by partition 0, 1, 2 = %v, want [0 2 1]", got)
	}
}

// TestUnwrittenCommitsRecorded: an adapter's warning that its last
// success commit was not written becomes an Unwritten event of the member
// in the history, with the partition from the logger or the record, when
// its error says the member lost its place in the group or could not reach
// the broker; no other record does.
func TestUnwrittenCommitsRecorded(t *testing.T) {
	var h streamtest.History
	l := unwrittenLogger(&h, "a", slog.DiscardHandler)
	l.Warn("redeliver: the last success commit was not written before the partition was given up; its next owner delivers the records after the last checkpoint written again",
		"topic", "t", "partition", int32(2), "next", int64(240), "error", "unknown member")
	l.With("topic", "t", "partition", int32(1)).Warn(unwrittenMessage+" (with the partition's logger)", "next", int64(7),
		"error", errors.New("kafkago: commit at offset 7: dial tcp 127.0.0.1:29092: connect: connection refused"))
	l.Warn(unwrittenMessage, "topic", "t", "partition", int32(6), "next", int64(1290),
		"error", errors.New("confluent: commit t/6 at 1290: no answer: context canceled"))
	l.Warn("redeliver: a success commit failed, will try again at the commit interval or with the next one",
		"topic", "t", "partition", int32(0), "next", int64(5), "error", "unknown member")
	l.Warn(unwrittenMessage+" (no topic)", "partition", int32(3), "next", int64(9), "error", "unknown member")
	// The adapter's own refusal: a defect, not a lost place.
	l.Warn(unwrittenMessage, "topic", "t", "partition", int32(4), "next", int64(11),
		"error", "franz: commit of t/4 at offset 11: the partition's assignment in the group's new session is not known yet")
	l.Warn(unwrittenMessage+" (no error)", "topic", "t", "partition", int32(5), "next", int64(13))
	var got []string
	for _, e := range h.Events() {
		got = append(got, fmt.Sprintf("%v %s %s/%d %d", e.Kind, e.Member, e.Topic, e.Partition, e.Offset))
	}
	want := []string{"unwritten a t/2 240", "unwritten a t/1 7", "unwritten a t/6 1290"}
	if !slices.Equal(got, want) {
		t.Errorf("events %q, want %q", got, want)
	}
}
