package e2e

import (
	"log/slog"
	"path/filepath"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/redeliver-go/redeliver/adapters/franz"
	"github.com/redeliver-go/redeliver/redrive"
	"github.com/redeliver-go/redeliver/redrive/sqlitestore"
	"github.com/redeliver-go/redeliver/stream/streamtest"
)

// TestPartialPublishThroughKafka: a sweep whose publish the broker writes
// for one partition of the retry topic and refuses for the other marks the
// written entries retrying and only the others failed; once the partition
// takes records again, the next sweep publishes those alone. Read back from
// the topic, every entry's first re-drive is there exactly once.
func TestPartialPublishThroughKafka(t *testing.T) {
	c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(2, "retry"))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	seeds := c.ListenAddrs()
	fault := c.Fault(kfake.Fault{Keys: []kmsg.Key{kmsg.Produce}, Topic: "retry", Partitions: []int32{1}, Err: kerr.PolicyViolation, Count: -1})
	pub, err := franz.NewPublisher(client(t, seeds, kgo.RecordPartitioner(kgo.RoundRobinPartitioner())))
	if err != nil {
		t.Fatal(err)
	}
	store, err := sqlitestore.Open(ctxFor(t, time.Minute), filepath.Join(t.TempDir(), "redrive.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer store.Close()
	now := time.Now().Truncate(time.Microsecond)
	es := parkedEntries(10, now, time.Hour)
	if _, err := store.Park(ctxFor(t, time.Minute), es); err != nil {
		t.Fatal(err)
	}
	clock := streamtest.NewClock(now)
	sch, err := redrive.NewScheduler(store, pub, redrive.WithClock(clock), redrive.WithRetryTopic("retry"), redrive.WithInterval(time.Minute),
		redrive.WithRetryTimeout(24*time.Hour), redrive.WithLogger(quiet))
	if err != nil {
		t.Fatal(err)
	}
	ev := sch.Sweep(ctxFor(t, time.Minute))
	if ev.Err != nil || ev.Redriven == 0 || ev.Failed == 0 || ev.Redriven+ev.Failed != len(es) {
		t.Fatalf("sweep with one partition refusing: %+v; want some re-driven and the others failed", ev)
	}
	if n := countStatus(t, store, redrive.Retrying); n != ev.Redriven {
		t.Fatalf("%d entries retrying, %d re-driven", n, ev.Redriven)
	}
	fault.Remove()
	clock.Advance(time.Minute)
	if ev2 := sch.Sweep(ctxFor(t, time.Minute)); ev2.Err != nil || ev2.Redriven != ev.Failed || ev2.Claimed != ev.Failed {
		t.Fatalf("sweep after the partition came back: %+v; want the %d failed alone", ev2, ev.Failed)
	}
	got := readAll(t, seeds, "retry", len(es), 10*time.Second)
	count := map[string]int{}
	for _, r := range got {
		count[header(r, redrive.HeaderKey)+"#"+header(r, redrive.HeaderNumber)]++
	}
	for _, e := range es {
		if count[e.Key+"#1"] != 1 {
			t.Errorf("%s: first re-drive read back %d times, want once", e.Key, count[e.Key+"#1"])
		}
	}
	if len(got) != len(es) {
		t.Errorf("%d records on the retry topic, want %d", len(got), len(es))
	}
}

// quiet is a logger for tests whose warnings are the expected outcome.
var quiet = slog.New(slog.DiscardHandler)
