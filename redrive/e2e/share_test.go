package e2e

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/redeliver-go/redeliver/adapters/franz"
	"github.com/redeliver-go/redeliver/adapters/franz/share"
	"github.com/redeliver-go/redeliver/checkpoint"
	"github.com/redeliver-go/redeliver/redrive"
	"github.com/redeliver-go/redeliver/redrive/sqlitestore"
	"github.com/redeliver-go/redeliver/stream"
)

// TestShareGroupParks: a share-group consumer whose handler fails on some
// records for good parks exactly those records (a share group's results are
// per record, so the records beside them are accepted, not parked with
// them), rejects each on the broker only after its entry is in the store,
// and the scheduler re-drives the entries to a retry topic whose consumer
// completes them. On kfake with the SQLite store.
func TestShareGroupParks(t *testing.T) {
	c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.BrokerConfigs(map[string]string{
		"group.share.heartbeat.interval.ms":   "100",
		"group.share.record.lock.duration.ms": "5000",
	}))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	seeds := c.ListenAddrs()
	ctx := ctxFor(t, 90*time.Second)
	store, err := sqlitestore.Open(ctx, filepath.Join(t.TempDir(), "redrive.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { store.Close() })

	sfx := suffix()
	topic, retryTopic := "orders-"+sfx, "orders-retry-"+sfx
	createTopics(t, seeds, 2, topic, retryTopic)

	// 40 records over 2 partitions; every 7th fails for good.
	const n = 40
	poison := map[string]bool{}
	prod := client(t, seeds, kgo.RecordPartitioner(kgo.ManualPartitioner()))
	var recs []*kgo.Record
	for i := range n {
		key := fmt.Sprintf("order-%02d", i)
		if i%7 == 3 {
			poison[key] = true
		}
		recs = append(recs, &kgo.Record{Topic: topic, Partition: int32(i % 2), Key: []byte(key), Value: []byte("v" + key)})
	}
	if err := prod.ProduceSync(ctx, recs...).FirstErr(); err != nil {
		t.Fatal(err)
	}
	offsetOf := map[string]string{} // key -> topic/partition/offset
	for _, r := range recs {
		offsetOf[string(r.Key)] = redrive.RecordKey(r.Topic, r.Partition, r.Offset)
	}

	park, err := redrive.Park(store, 300*time.Millisecond)
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	handled := map[string]bool{}
	var events []share.Event
	proc, err := stream.NewProcessor(stream.PerRecord(func(_ context.Context, r *stream.Record) error {
		if poison[string(r.Key)] {
			return errors.New("downstream refused " + string(r.Key))
		}
		mu.Lock()
		handled[string(r.Key)] = true
		mu.Unlock()
		return nil
	}), stream.WithPolicy(checkpoint.Policy{MaxRetries: 1, Backoff: checkpoint.Fixed(10 * time.Millisecond)}), stream.WithExhaustionAction(park))
	if err != nil {
		t.Fatal(err)
	}
	cons, err := share.New(proc,
		share.WithKgoOptions(kgo.SeedBrokers(seeds...), kgo.ShareGroup("share-"+sfx), kgo.ConsumeTopics(topic), kgo.FetchMaxWait(100*time.Millisecond)),
		share.WithResetEarliest(),
		share.WithEvents(func(e share.Event) {
			mu.Lock()
			events = append(events, e)
			mu.Unlock()
		}))
	if err != nil {
		t.Fatal(err)
	}
	stopShare := runUntilStopped(t, ctx, "share consumer", cons.Run)
	defer stopShare()

	// Every good record accepted and every poison record rejected.
	final := func() (accepted, rejected map[string]bool) {
		mu.Lock()
		defer mu.Unlock()
		accepted, rejected = map[string]bool{}, map[string]bool{}
		for _, e := range events {
			k := redrive.RecordKey(e.Topic, e.Partition, e.Offset)
			switch e.Kind {
			case share.Accepted:
				accepted[k] = true
			case share.Rejected:
				rejected[k] = true
			}
		}
		return accepted, rejected
	}
	waitUntil(t, ctx, "every record accepted or rejected", func() bool {
		a, r := final()
		return len(a)+len(r) >= n
	})
	accepted, rejected := final()
	for key, k := range offsetOf {
		if poison[key] && (!rejected[k] || accepted[k]) {
			t.Errorf("poison record %s (%s): rejected %v, accepted %v; want rejected only", key, k, rejected[k], accepted[k])
		}
		if !poison[key] && (!accepted[k] || rejected[k] || !handled[key]) {
			t.Errorf("record %s (%s): accepted %v, rejected %v, handled %v; want handled and accepted", key, k, accepted[k], rejected[k], handled[key])
		}
	}

	// A record is rejected only after its exhaustion action succeeded.
	mu.Lock()
	done := map[string]bool{}
	for _, e := range events {
		k := redrive.RecordKey(e.Topic, e.Partition, e.Offset)
		switch e.Kind {
		case share.ActionDone:
			done[k] = true
		case share.Rejected:
			if !done[k] {
				t.Errorf("%s rejected before its park succeeded", k)
			}
		}
	}
	mu.Unlock()

	// Exactly the poison records are parked, one entry each.
	parked, err := store.List(ctx, redrive.Filter{})
	if err != nil {
		t.Fatal(err)
	}
	var got, want []string
	for _, e := range parked {
		got = append(got, e.Key)
		if e.Status != redrive.Parked || !strings.Contains(e.LastError, "downstream refused") {
			t.Errorf("entry %s: status %v, error %q", e.Key, e.Status, e.LastError)
		}
	}
	for key := range poison {
		want = append(want, offsetOf[key])
	}
	slices.Sort(got)
	slices.Sort(want)
	if !slices.Equal(got, want) {
		t.Fatalf("parked entries %v, want exactly the poison records %v", got, want)
	}

	// The re-drive: the scheduler publishes the entries to the retry
	// topic, whose consumer (the downstream is back) completes them.
	retryProc, err := stream.NewProcessor(stream.Chain(stream.PerRecord(func(context.Context, *stream.Record) error { return nil }),
		redrive.CompleteOnSuccess(store)))
	if err != nil {
		t.Fatal(err)
	}
	retryCons, err := franz.New(retryProc, franz.WithKgoOptions(kgo.SeedBrokers(seeds...), kgo.ConsumerGroup("retry-"+sfx), kgo.ConsumeTopics(retryTopic),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart())))
	if err != nil {
		t.Fatal(err)
	}
	stopRetry := runUntilStopped(t, ctx, "retry consumer", retryCons.Run)
	defer stopRetry()
	sch, err := redrive.NewScheduler(store, publisher(t, seeds), redrive.WithInterval(100*time.Millisecond), redrive.WithRetryTopic(retryTopic),
		redrive.WithRetryTimeout(time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	stopSch := runUntilStopped(t, ctx, "scheduler", sch.Run)
	defer stopSch()
	waitUntil(t, ctx, "every parked entry done", func() bool {
		return countStatus(t, store, redrive.Done) == len(poison)
	})
	t.Logf("%d records in a share group, %d failed for good: %d parked one by one, re-driven and done", n, len(poison), len(parked))
}

// runUntilStopped runs f in a goroutine and returns a function that stops
// it and reports an error it returned.
func runUntilStopped(t *testing.T, ctx context.Context, name string, f func(context.Context) error) func() {
	rctx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- f(rctx) }()
	return func() {
		cancel()
		select {
		case err := <-done:
			if err != nil && !errors.Is(err, context.Canceled) {
				t.Errorf("%s: %v", name, err)
			}
		case <-time.After(30 * time.Second):
			t.Errorf("%s did not stop", name)
		}
	}
}
