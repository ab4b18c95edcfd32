package share_test

import (
	"context"
	"errors"
	"log/slog"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/redeliver-go/redeliver/adapters/franz/share"
	"github.com/redeliver-go/redeliver/adapters/internal/kafkatest"
	"github.com/redeliver-go/redeliver/checkpoint"
	"github.com/redeliver-go/redeliver/stream"
)

// Run returns within a second of its context's cancellation whatever
// request the broker is slow to answer. Every other record fails and is
// held for a retry, so that the others' acknowledgements are flushed on
// their own (ShareAcknowledge) while it waits.
func TestShutdownUnderSlowAnswers(t *testing.T) {
	kafkatest.ShutdownUnderSlowAnswers(t, kafkatest.ShareSlowKeys, func(t *testing.T, ctx context.Context, addrs []string) <-chan error {
		proc, err := stream.NewProcessor(stream.PerRecord(func(_ context.Context, r *stream.Record) error {
			if r.Offset%2 == 1 {
				return errors.New("held for a retry")
			}
			return nil
		}), stream.WithPolicy(checkpoint.Policy{MaxRetries: 3, Backoff: checkpoint.Fixed(time.Minute)}))
		if err != nil {
			t.Fatal(err)
		}
		c, err := share.New(proc, share.WithResetEarliest(), share.WithLanes(2),
			share.WithKgoOptions(kgo.SeedBrokers(addrs...), kgo.ShareGroup("g"), kgo.ConsumeTopics("t"), kgo.FetchMaxWait(100*time.Millisecond)))
		if err != nil {
			t.Fatal(err)
		}
		done := make(chan error, 1)
		go func() { done <- c.Run(ctx) }()
		return done
	})
}

// shortDrain is the drain time of the tests whose handler waits for its
// context at the stop.
const shortDrain = 200 * time.Millisecond

// A clean stop gives up no record that never failed (issue 47, follow-up
// 1): under MaxRetries 0, consumer A stops while its handler is in the
// first record of a poll of five. A drains: the call finishes and the four
// records not handed over yet are delivered, so that none goes back to the
// broker, where the next member would count a failed delivery of each and
// give it up at once.
func TestStopDrainsThePollUnderMaxRetriesZero(t *testing.T) {
	const topic, group = "orders", "g"
	addrs := cluster(t, topic, 1, 5*time.Second, 5)
	kafkatest.Produce(t, addrs, topic, 0, 0, 5)
	var calls counter
	entered, release := make(chan struct{}, 1), make(chan struct{})
	procA, err := stream.NewProcessor(stream.PerRecord(func(ctx context.Context, r *stream.Record) error {
		calls.add(r.Offset)
		if r.Offset == 0 {
			entered <- struct{}{}
			<-release // still in the handler when the stop comes
		}
		return nil
	}), stream.WithPolicy(checkpoint.Policy{MaxRetries: 0}), stream.WithExhaustionAction(func(context.Context, *stream.Batch, *checkpoint.ExhaustedError) error {
		t.Error("A gave a record up")
		return nil
	}))
	if err != nil {
		t.Fatal(err)
	}
	var l logs
	stop := run(t, addrs, group, topic, procA, share.WithLanes(1), share.WithMaxBatch(5), share.WithLogger(slog.New(l.handler())))
	select {
	case <-entered:
	case <-time.After(wait):
		t.Fatal("the handler never got offset 0")
	}
	stopped := make(chan error, 1)
	go func() { stopped <- stop() }()
	time.Sleep(100 * time.Millisecond) //nolint:forbidigo // the stop is under way
	close(release)
	if err := <-stopped; err != nil {
		t.Fatal(err)
	}
	for off := range int64(5) {
		if n := calls.get(off); n != 1 {
			t.Errorf("A delivered offset %d %d times, want once (drained)", off, n)
		}
	}
	if l.find(slog.LevelWarn, "released at shutdown", nil) || l.find(slog.LevelInfo, "released at shutdown", nil) {
		l.dump(t)
		t.Error("A released records at a stop it could drain")
	}

	var given atomic.Int32
	procB, err := stream.NewProcessor(stream.PerRecord(func(ctx context.Context, r *stream.Record) error {
		calls.add(r.Offset)
		return nil
	}), stream.WithPolicy(checkpoint.Policy{MaxRetries: 0}), stream.WithExhaustionAction(func(context.Context, *stream.Batch, *checkpoint.ExhaustedError) error {
		given.Add(1)
		return nil
	}))
	if err != nil {
		t.Fatal(err)
	}
	run(t, addrs, group, topic, procB, share.WithLanes(1))
	time.Sleep(500 * time.Millisecond) //nolint:forbidigo // would B get any?
	if n := given.Load(); n != 0 {
		t.Errorf("B gave up %d records that never failed, want 0", n)
	}
	for off := range int64(5) {
		if n := calls.get(off); n != 1 {
			t.Errorf("offset %d was delivered %d times in all, want once", off, n)
		}
	}
}

// What a stop cannot drain is released and counted: a record held for a
// retry (it failed: the next member's delivery is its retry 1) and a record
// whose handler ignores the stop past the drain time (released with a Warn
// line that counts it as not failed).
func TestStopReleasesHeldAndCutOffRecordsCounted(t *testing.T) {
	const topic, group = "orders", "g"
	addrs := cluster(t, topic, 1, 5*time.Second, 5)
	kafkatest.Produce(t, addrs, topic, 0, 0, 2)
	entered := make(chan struct{}, 1)
	pol := checkpoint.Policy{MaxRetries: 1, Backoff: checkpoint.Fixed(time.Minute)}
	procA, err := stream.NewProcessor(stream.PerRecord(func(ctx context.Context, r *stream.Record) error {
		if r.Offset == 0 {
			return errors.New("bad") // held for its retry, a minute away
		}
		entered <- struct{}{}
		<-ctx.Done() // past the drain time
		return nil
	}), stream.WithPolicy(pol))
	if err != nil {
		t.Fatal(err)
	}
	var l logs
	stop := run(t, addrs, group, topic, procA, share.WithLanes(1), share.WithDrain(shortDrain), share.WithLogger(slog.New(l.handler())))
	select {
	case <-entered:
	case <-time.After(wait):
		t.Fatal("the handler never got offset 1")
	}
	begin := time.Now()
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	if d := time.Since(begin); d < shortDrain || d > shortDrain+time.Second {
		t.Errorf("the stop took %v, want the drain time %v and a little more", d, shortDrain)
	}
	if !l.find(slog.LevelWarn, "released at shutdown, the drain bound ran out", map[string]string{"records": "2", "not_failed": "1", "held_for_retry": "1"}) {
		l.dump(t)
		t.Error("no Warn line counts the records released at the stop")
	}

	retries := map[int64]int{}
	var mu sync.Mutex
	procB, err := stream.NewProcessor(stream.HandlerFunc(func(ctx context.Context, b *stream.Batch) error {
		mu.Lock()
		defer mu.Unlock()
		for _, r := range b.Records {
			retries[r.Offset] = b.Attempt.Retries
		}
		return nil
	}), stream.WithPolicy(pol))
	if err != nil {
		t.Fatal(err)
	}
	run(t, addrs, group, topic, procB, share.WithLanes(1))
	waitFor(t, "both records at B", func() bool { mu.Lock(); defer mu.Unlock(); return len(retries) == 2 })
	mu.Lock()
	defer mu.Unlock()
	if retries[0] != 1 {
		t.Errorf("B delivered offset 0 as retry %d, want 1: its failure at A counts", retries[0])
	}
}
