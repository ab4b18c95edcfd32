package fetcherr

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
)

// poll is a poll's results: partition 0 of topic "t" with err, or with n
// records when err is nil.
func poll(err error, n int) kgo.Fetches {
	p := kgo.FetchPartition{Partition: 0, Err: err}
	for i := range n {
		p.Records = append(p.Records, &kgo.Record{Topic: "t", Offset: int64(i)})
	}
	return kgo.Fetches{{Topics: []kgo.FetchTopic{{Topic: "t", Partitions: []kgo.FetchPartition{p}}}}}
}

func tracker() (*Tracker, *bytes.Buffer) {
	var buf bytes.Buffer
	return &Tracker{Log: slog.New(slog.NewTextHandler(&buf, nil)), Pkg: "franz"}, &buf
}

// An error that comes on every poll is logged when it first comes, then
// once per errLogEvery with how often it came; it ends Run once it has
// lasted permanentAfter; a fetch that works clears it.
func TestTrackerLogsAtABoundedRateAndEndsALastingError(t *testing.T) {
	f, buf := tracker()
	t0 := time.Unix(1000, 0)
	for i := range 60 * 20 { // a poll every 50ms for a minute
		now := t0.Add(time.Duration(i) * 50 * time.Millisecond)
		fatal, failed := f.Seen(poll(kerr.TopicAuthorizationFailed, 0), now)
		if !failed {
			t.Fatalf("poll %d: an error and no record not reported failed", i)
		}
		if fatal != nil {
			t.Fatalf("poll %d at %v: ended Run with %v before a minute", i, now.Sub(t0), fatal)
		}
	}
	if n := strings.Count(buf.String(), "fetch error"); n != 2 {
		t.Fatalf("%d lines in a minute of one error, want 2 (first, and 30s later):\n%s", n, buf)
	}
	if !strings.Contains(buf.String(), "repeats=599") {
		t.Errorf("the 30s line does not say the error came 599 times meanwhile:\n%s", buf)
	}
	if ps := f.Problems(t0.Add(time.Minute)); len(ps) != 1 || !strings.Contains(ps[0].Error(), "franz: fetching t/0 fails since 1m0s ago") {
		t.Errorf("Problems: %v", ps)
	}
	fatal, _ := f.Seen(poll(kerr.TopicAuthorizationFailed, 0), t0.Add(time.Minute))
	if fatal == nil || !errors.Is(fatal, kerr.TopicAuthorizationFailed) || !strings.Contains(fatal.Error(), "t/0 has failed for 1m0s") {
		t.Fatalf("after a minute: %v, want the error that ends Run", fatal)
	}
	if _, failed := f.Seen(poll(nil, 3), t0.Add(61*time.Second)); failed {
		t.Error("a poll with records reported failed")
	}
	if ps := f.Problems(t0.Add(61 * time.Second)); len(ps) != 0 {
		t.Errorf("Problems once fetching works: %v", ps)
	}
	if !strings.Contains(buf.String(), "fetching the partition works again") {
		t.Errorf("no line saying fetching works again:\n%s", buf)
	}
}

// UNKNOWN_TOPIC_ID ends Run at once.
func TestTrackerUnknownTopicIDEndsRun(t *testing.T) {
	f, _ := tracker()
	fatal, _ := f.Seen(poll(kerr.UnknownTopicID, 0), time.Unix(1000, 0))
	if fatal == nil || !strings.Contains(fatal.Error(), `franz: topic "t" was deleted`) || !errors.Is(fatal, kerr.UnknownTopicID) {
		t.Fatalf("got %v", fatal)
	}
}

// An error no poll reported for staleAfter (a share group's fetches leave
// out a partition with nothing to give) is no longer a problem, and when it
// comes again it starts over: its minute counts from then.
func TestTrackerForgetsAStaleError(t *testing.T) {
	f, buf := tracker()
	t0 := time.Unix(1000, 0)
	f.Seen(poll(kerr.TopicAuthorizationFailed, 0), t0)
	if ps := f.Problems(t0.Add(staleAfter - time.Millisecond)); len(ps) != 1 {
		t.Fatalf("Problems before the error went stale: %v", ps)
	}
	if ps := f.Problems(t0.Add(staleAfter)); len(ps) != 0 {
		t.Fatalf("Problems once the error went stale: %v", ps)
	}
	again := t0.Add(50 * time.Second)
	for d := time.Duration(0); d < permanentAfter; d += time.Second {
		if fatal, _ := f.Seen(poll(kerr.TopicAuthorizationFailed, 0), again.Add(d)); fatal != nil {
			t.Fatalf("the error that came again ended Run %v after it came again: %v", d, fatal)
		}
	}
	if fatal, _ := f.Seen(poll(kerr.TopicAuthorizationFailed, 0), again.Add(permanentAfter)); fatal == nil {
		t.Fatalf("the error that came again did not end Run %v after it came again", permanentAfter)
	}
	if n := strings.Count(buf.String(), `msg="redeliver: fetch error" `); n != 2 {
		t.Errorf("%d lines, want 2: the error, and the error again", n)
	}
}

// Cancellations and a closed client are not fetch errors.
func TestTrackerIgnoresShutdown(t *testing.T) {
	f, buf := tracker()
	for _, err := range []error{kgo.ErrClientClosed, errors.Join(errors.New("x"), context.Canceled)} {
		if _, failed := f.Seen(poll(err, 0), time.Unix(1000, 0)); failed {
			t.Errorf("%v reported as a failed poll", err)
		}
	}
	if buf.Len() != 0 {
		t.Errorf("logged: %s", buf)
	}
}

func TestBackoff(t *testing.T) {
	var b Backoff
	var got []time.Duration
	for range 8 {
		got = append(got, b.Next(true))
	}
	want := []time.Duration{10, 20, 40, 80, 160, 320, 500, 500}
	for i := range want {
		want[i] *= time.Millisecond
	}
	if !slices.Equal(got, want) {
		t.Fatalf("backoffs %v, want %v", got, want)
	}
	if d := b.Next(false); d != 0 {
		t.Fatalf("after a poll that did not fail: %v", d)
	}
	if d := b.Next(true); d != 10*time.Millisecond {
		t.Fatalf("the next failure waits %v, want 10ms again", d)
	}
}
