package tests

import (
	"context"
	"errors"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/segmentio/kafka-go"

	"github.com/redeliver-go/redeliver/adapters/kafkago"
	"github.com/redeliver-go/redeliver/checkpoint"
	"github.com/redeliver-go/redeliver/stream"
	"github.com/redeliver-go/redeliver/stream/streamtest"
)

// TestBackoffKeepsOrderAndOtherPartitions fails the first delivery of one
// batch with a backoff while many more records wait behind it, and checks
// that the other partition goes on meanwhile and that nothing fetched before
// the pause is lost or reordered.
func TestBackoffKeepsOrderAndOtherPartitions(t *testing.T) {
	_, addrs := newCluster(t, "t", 2)
	produce(t, addrs, "t", 0, 0, 3000)
	produce(t, addrs, "t", 1, 0, 100)
	var (
		rec     streamtest.Recorder
		once    sync.Once
		retried = make(chan struct{})
		p1Done  atomic.Bool
	)
	h := stream.HandlerFunc(func(ctx context.Context, b *stream.Batch) error {
		if b.Partition == 0 && b.FirstOffset() == 20 && b.Attempt.Retries == 0 {
			return errors.New("fail once")
		}
		if b.Partition == 0 && b.FirstOffset() == 20 {
			once.Do(func() { close(retried) })
		}
		return nil
	})
	proc := newProcessor(t, stream.Chain(h, rec.Middleware()),
		stream.WithPolicy(checkpoint.Policy{MaxRetries: 3, Backoff: checkpoint.Fixed(400 * time.Millisecond)}))
	start(t, addrs, "g", "t", proc, kafkago.WithMaxBatch(10))
	select {
	case <-retried:
	case <-time.After(wait):
		t.Fatal("batch 20-29 was not retried")
	}
	if o, ok := committed(t, addrs, "g").Lookup("t", 1); ok && o.At == 100 {
		p1Done.Store(true)
	}
	waitCommitted(t, addrs, "g", "t", map[int32]int64{0: 3000, 1: 100})
	checkHistory(t, rec.Of("t", 0), 3000)
	checkHistory(t, rec.Of("t", 1), 100)
	if !p1Done.Load() {
		t.Error("partition 1 was not done while partition 0 waited out a 400ms backoff")
	}
}

// TestLongBackoffKeepsGeneration waits out a backoff three times the
// session timeout: the heartbeats go on, so the generation stays.
func TestLongBackoffKeepsGeneration(t *testing.T) {
	_, addrs := newCluster(t, "t", 1)
	produce(t, addrs, "t", 0, 0, 10)
	var (
		logs streamtest.Recorder
		lr   logRecorder
	)
	proc := newProcessor(t, stream.Chain(streamtest.Succeed, logs.Middleware(), streamtest.FailFirst(1, nil)),
		stream.WithPolicy(checkpoint.Policy{MaxRetries: 1, Backoff: checkpoint.Fixed(3 * time.Second)}))
	start(t, addrs, "g", "t", proc, kafkago.WithLogger(lr.logger()))
	waitCommitted(t, addrs, "g", "t", map[int32]int64{0: 10})
	if gens := lr.matching("generation started"); len(gens) != 1 {
		t.Errorf("generations: %q, want one", gens)
	}
	ds := logs.Of("t", 0)
	checkHistory(t, ds, 10)
	if len(ds) != 2 {
		t.Errorf("%d deliveries, want 2 (one failure, one retry)", len(ds))
	}
}

// TestRebalanceCancelsAndWaits has a second consumer join while the first
// one's handlers block: kafka-go's rebalances are eager, so every claim of
// the first consumer is cancelled with stream.ErrRevoked; nothing is lost and
// the first consumer commits nothing for the blocked batches.
func TestRebalanceCancelsAndWaits(t *testing.T) {
	_, addrs := newCluster(t, "t", 4)
	for p := range int32(4) {
		produce(t, addrs, "t", p, 0, 10)
	}
	var (
		mu      sync.Mutex
		causes  []error
		entered = make(chan int32, 64)
		block   atomic.Bool
	)
	block.Store(true)
	var rec streamtest.Recorder
	h := stream.HandlerFunc(func(ctx context.Context, b *stream.Batch) error {
		if !block.Load() {
			return nil
		}
		entered <- b.Partition
		<-ctx.Done()
		mu.Lock()
		causes = append(causes, context.Cause(ctx))
		mu.Unlock()
		return ctx.Err()
	})
	proc := newProcessor(t, stream.Chain(h, rec.Middleware()))
	start(t, addrs, "g", "t", proc)
	seen := map[int32]bool{}
	for len(seen) < 4 {
		select {
		case p := <-entered:
			seen[p] = true
		case <-time.After(wait):
			t.Fatalf("first consumer entered the handler for %v only", seen)
		}
	}
	if o := offsetsOf(committed(t, addrs, "g"), "t"); len(o) != 0 {
		t.Fatalf("commits before any batch succeeded: %v", o)
	}
	block.Store(false)
	start(t, addrs, "g", "t", proc)
	waitCommitted(t, addrs, "g", "t", map[int32]int64{0: 10, 1: 10, 2: 10, 3: 10})
	mu.Lock()
	defer mu.Unlock()
	if len(causes) != 4 {
		t.Errorf("%d blocked batches ended, want 4", len(causes))
	}
	for _, cause := range causes {
		if !errors.Is(cause, stream.ErrRevoked) {
			t.Errorf("cause %v, want stream.ErrRevoked", cause)
		}
	}
	for p := range int32(4) {
		ds := rec.Of("t", p)
		if len(ds) == 0 || ds[len(ds)-1].Err != nil || ds[len(ds)-1].LastOffset != 9 {
			t.Errorf("partition %d: deliveries %+v, want the batch redelivered whole and succeeded", p, ds)
		}
	}
}

// TestShutdownIsPrompt stops a consumer whose partitions are idle (their
// fetches wait for an answer, for up to 10s with the default MaxWait) and
// one of which waits out a long backoff: Run returns within a
// second, and the batch in backoff is not committed.
func TestShutdownIsPrompt(t *testing.T) {
	_, addrs := newCluster(t, "t", 4)
	produce(t, addrs, "t", 0, 0, 5)
	backoff := make(chan struct{})
	var once sync.Once
	proc := newProcessor(t, stream.Chain(streamtest.Succeed, streamtest.FailFirst(-1, nil)),
		stream.WithPolicy(checkpoint.Policy{MaxRetries: -1, Backoff: checkpoint.Fixed(time.Minute)}),
		stream.WithHooks(stream.Hooks{RetryScheduled: func(stream.RetryEvent) { once.Do(func() { close(backoff) }) }}))
	r := start(t, addrs, "g", "t", proc, func(fc *kafka.ReadBatchConfig) { fc.MaxWait = 0 }) // the default 10s
	select {
	case <-backoff:
	case <-time.After(wait):
		t.Fatal("no backoff began")
	}
	time.Sleep(200 * time.Millisecond) // the idle partitions are waiting for their fetches now
	t0 := time.Now()
	if err := r.Stop(t); err != nil {
		t.Errorf("Run returned %v, want nil: a clean shutdown", err)
	}
	if d := time.Since(t0); d > time.Second {
		t.Errorf("Run took %v to return, want at most 1s", d)
	}
	o, _ := committed(t, addrs, "g").Lookup("t", 0)
	if o.At > 0 {
		t.Errorf("committed offset %d for a batch that never succeeded", o.At)
	}
}

func TestNewErrors(t *testing.T) {
	proc := newProcessor(t, streamtest.Succeed)
	group := kafkago.WithGroupConfig(kafka.ConsumerGroupConfig{ID: "g", Brokers: []string{"localhost:9092"}, Topics: []string{"t"}})
	for _, tc := range []struct {
		name string
		proc *stream.Processor
		opts []kafkago.Option
	}{
		{"nil processor", nil, []kafkago.Option{group}},
		{"no group", proc, nil},
		{"group without ID", proc, []kafkago.Option{kafkago.WithGroupConfig(kafka.ConsumerGroupConfig{Brokers: []string{"localhost:9092"}, Topics: []string{"t"}})}},
		{"group without topics", proc, []kafkago.Option{kafkago.WithGroupConfig(kafka.ConsumerGroupConfig{ID: "g", Brokers: []string{"localhost:9092"}})}},
		{"bad start offset", proc, []kafkago.Option{kafkago.WithGroupConfig(kafka.ConsumerGroupConfig{ID: "g", Brokers: []string{"localhost:9092"}, Topics: []string{"t"}, StartOffset: 42})}},
		{"fetch min bytes above max bytes", proc, []kafkago.Option{group, kafkago.WithFetchConfig(kafka.ReadBatchConfig{MinBytes: 10, MaxBytes: 5})}},
		{"fetch min bytes above default max bytes", proc, []kafkago.Option{group, kafkago.WithFetchConfig(kafka.ReadBatchConfig{MinBytes: 2e6})}},
		{"negative fetch max wait", proc, []kafkago.Option{group, kafkago.WithFetchConfig(kafka.ReadBatchConfig{MaxWait: -time.Second})}},
		{"unknown isolation level", proc, []kafkago.Option{group, kafkago.WithFetchConfig(kafka.ReadBatchConfig{IsolationLevel: 7})}},
		{"max batch 0", proc, []kafkago.Option{group, kafkago.WithMaxBatch(0)}},
		{"negative max wait", proc, []kafkago.Option{group, kafkago.WithMaxWait(-time.Second)}},
		{"commit timeout 0", proc, []kafkago.Option{group, kafkago.WithCommitTimeout(0)}},
		{"nil client", proc, []kafkago.Option{group, kafkago.WithClient(nil)}},
		{"client without Addr", proc, []kafkago.Option{group, kafkago.WithClient(&kafka.Client{})}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, err := kafkago.New(tc.proc, tc.opts...)
			if err == nil {
				c.Close()
				t.Fatal("New returned no error")
			}
			t.Log(err)
		})
	}
}

// A client given with WithClient carries the offset fetches and commits:
// the consumer reads the committed offsets and commits through it.
func TestWithClient(t *testing.T) {
	_, addrs := newCluster(t, "t", 2)
	for p := range int32(2) {
		produce(t, addrs, "t", p, 0, 10)
	}
	start(t, addrs, "g", "t", newProcessor(t, streamtest.Succeed), kafkago.WithClient(&kafka.Client{Addr: kafka.TCP(addrs...)}))
	waitCommitted(t, addrs, "g", "t", map[int32]int64{0: 10, 1: 10})
}

// TestRunLeavesNoGoroutines checks that Run, once it returns, has ended
// every goroutine it started, kafka-go's included, and closed its
// connections.
func TestRunLeavesNoGoroutines(t *testing.T) {
	_, addrs := newCluster(t, "t", 4)
	for p := range int32(4) {
		produce(t, addrs, "t", p, 0, 20)
	}
	time.Sleep(100 * time.Millisecond) // let the producers' goroutines end
	before := runtime.NumGoroutine()
	proc := newProcessor(t, stream.Chain(streamtest.Succeed, streamtest.FailFirst(1, nil)),
		stream.WithPolicy(checkpoint.Policy{MaxRetries: 1, Backoff: checkpoint.Fixed(time.Minute)}))
	r := start(t, addrs, "g", "t", proc, kafkago.WithMaxBatch(5))
	waitCommitted(t, addrs, "g", "t", map[int32]int64{0: 0, 1: 0, 2: 0, 3: 0})
	time.Sleep(200 * time.Millisecond) // every partition in its backoff
	if err := r.Stop(t); err != nil {
		t.Fatalf("Run returned %v", err)
	}
	deadline := time.Now().Add(5 * time.Second)
	for {
		n := runtime.NumGoroutine()
		if n <= before {
			return
		}
		if time.Now().After(deadline) {
			buf := make([]byte, 1<<20)
			t.Fatalf("%d goroutines after Run returned, %d before:\n%s", n, before, buf[:runtime.Stack(buf, true)])
		}
		time.Sleep(20 * time.Millisecond)
	}
}
