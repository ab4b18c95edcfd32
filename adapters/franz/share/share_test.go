package share_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/redeliver-go/redeliver/adapters/franz/share"
	"github.com/redeliver-go/redeliver/adapters/internal/kafkatest"
	"github.com/redeliver-go/redeliver/checkpoint"
	"github.com/redeliver-go/redeliver/stream"
)

const wait = kafkatest.Wait

// cluster starts kfake with one topic and short share-group locks: lock
// seconds, swept every 50ms.
func cluster(t *testing.T, topic string, partitions int32, lock time.Duration, limit int) []string {
	t.Helper()
	_, addrs := kafkatest.NewCluster(t, topic, partitions, kfake.BrokerConfigs(map[string]string{
		"group.share.record.lock.duration.ms": fmt.Sprint(lock.Milliseconds()),
		"share.record.lock.sweep.interval.ms": "50",
		"group.share.delivery.count.limit":    fmt.Sprint(limit),
		"group.share.heartbeat.interval.ms":   "100",
	}))
	return addrs
}

// delivery is one record handed to the handler.
type delivery struct {
	offset    int64
	partition int32
	at        time.Time
	retry     int
	value     string
}

// log records deliveries and the records that were accepted.
type log struct {
	mu         sync.Mutex
	deliveries []delivery
}

func (l *log) add(d delivery) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.deliveries = append(l.deliveries, d)
}

func (l *log) snapshot() []delivery {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]delivery(nil), l.deliveries...)
}

// run starts a share consumer over proc and stops it at the end of the test.
func run(t *testing.T, addrs []string, group, topic string, proc *stream.Processor, opts ...share.Option) (stop func() error) {
	t.Helper()
	kopts := []kgo.Opt{kgo.SeedBrokers(addrs...), kgo.ShareGroup(group), kgo.ConsumeTopics(topic), kgo.FetchMaxWait(100 * time.Millisecond)}
	opts = append([]share.Option{share.WithKgoOptions(kopts...), share.WithResetEarliest()}, opts...)
	if testing.Verbose() {
		opts = append(opts, share.WithLogger(slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug}))))
	}
	c, err := share.New(proc, opts...)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- c.Run(ctx) }()
	var once sync.Once
	var rerr error
	stop = func() error {
		once.Do(func() {
			cancel()
			select {
			case rerr = <-done:
			case <-time.After(wait):
				rerr = errors.New("Run did not return")
			}
		})
		return rerr
	}
	t.Cleanup(func() { _ = stop() })
	return stop
}

// waitFor polls cond until it holds or the test's wait runs out.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(wait)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// The backoff holds: a failed record comes back no earlier than its due
// time, its lock renewed meanwhile (the broker's delivery count stays 1, so
// it never went back to the broker, although the backoff is longer than the
// lock), and records behind it on the same partition are handled while it
// waits.
func TestBackoffHeldWithRenewalWhileOthersFlow(t *testing.T) {
	const topic, group = "orders", "g"
	const lock = time.Second
	const backoff = 2500 * time.Millisecond
	addrs := cluster(t, topic, 1, lock, 5)
	kafkatest.Produce(t, addrs, topic, 0, 0, 10)

	var l log
	var mu sync.Mutex
	counts := map[int64]int32{}
	proc, err := stream.NewProcessor(stream.PerRecord(func(ctx context.Context, r *stream.Record) error {
		l.add(delivery{offset: r.Offset, at: time.Now(), value: string(r.Value)})
		if r.Offset == 3 {
			mu.Lock()
			counts[r.Offset]++
			n := counts[r.Offset]
			mu.Unlock()
			if n <= 2 {
				return fmt.Errorf("downstream refused %d", n)
			}
		}
		return nil
	}), stream.WithPolicy(checkpoint.Policy{MaxRetries: 5, Backoff: checkpoint.Fixed(backoff)}))
	if err != nil {
		t.Fatal(err)
	}
	run(t, addrs, group, topic, proc)

	// Once offset 3 failed for the first time, produce more: they must be
	// handled before its first retry is due.
	waitFor(t, "the first failure", func() bool {
		for _, d := range l.snapshot() {
			if d.offset == 3 {
				return true
			}
		}
		return false
	})
	kafkatest.Produce(t, addrs, topic, 0, 10, 10)
	waitFor(t, "all 20 records handled", func() bool {
		seen := map[int64]bool{}
		for _, d := range l.snapshot() {
			seen[d.offset] = true
		}
		mu.Lock()
		defer mu.Unlock()
		return len(seen) == 20 && counts[3] == 3
	})

	var tries []time.Time
	var laterDone time.Time
	for _, d := range l.snapshot() {
		switch {
		case d.offset == 3:
			tries = append(tries, d.at)
		case d.offset >= 10 && d.at.After(laterDone):
			laterDone = d.at
		}
	}
	if len(tries) != 3 {
		t.Fatalf("offset 3 delivered %d times, want 3", len(tries))
	}
	for i := 1; i < len(tries); i++ {
		gap := tries[i].Sub(tries[i-1])
		if gap < backoff {
			t.Errorf("retry %d came %v after the previous delivery, before its backoff of %v", i, gap, backoff)
		}
		t.Logf("retry %d: %v after the previous delivery (backoff %v, lateness %v)", i, gap, backoff, gap-backoff)
	}
	if !laterDone.Before(tries[1]) {
		t.Errorf("the records produced after the failure were done at %v, not before the retry at %v", laterDone, tries[1])
	}
	// Every record once, but offset 3: nothing was redelivered by the
	// broker (its locks were renewed and every success accepted).
	n := map[int64]int{}
	for _, d := range l.snapshot() {
		n[d.offset]++
	}
	for off, c := range n {
		if off != 3 && c != 1 {
			t.Errorf("offset %d delivered %d times, want 1", off, c)
		}
	}
}
