package franz_test

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/redeliver-go/redeliver/adapters/franz"
	"github.com/redeliver-go/redeliver/checkpoint"
	"github.com/redeliver-go/redeliver/stream"
	"github.com/redeliver-go/redeliver/stream/streamtest"
)

// Run returns nil when it stopped because its context ended or Close was
// called: a clean shutdown is not an error.
func TestRunReturnsNilOnCleanShutdown(t *testing.T) {
	addrs := newCluster(t, "t", 1)
	proc := newProcessor(t, stream.HandlerFunc(func(context.Context, *stream.Batch) error { return nil }))
	newConsumer := func(group string) *franz.Consumer {
		c, err := franz.New(proc, franz.WithKgoOptions(kgo.SeedBrokers(addrs...), kgo.ConsumerGroup(group), kgo.ConsumeTopics("t")))
		if err != nil {
			t.Fatal(err)
		}
		return c
	}
	t.Run("context", func(t *testing.T) {
		c := newConsumer("g1")
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan error, 1)
		go func() { done <- c.Run(ctx) }()
		time.Sleep(50 * time.Millisecond)
		cancel()
		if err := awaitRun(t, done); err != nil {
			t.Fatalf("Run returned %v after its context was cancelled, want nil", err)
		}
	})
	t.Run("close", func(t *testing.T) {
		c := newConsumer("g2")
		done := make(chan error, 1)
		go func() { done <- c.Run(context.Background()) }()
		time.Sleep(50 * time.Millisecond)
		c.Close()
		if err := awaitRun(t, done); err != nil {
			t.Fatalf("Run returned %v after Close, want nil", err)
		}
	})
}

func awaitRun(t *testing.T, done chan error) error {
	t.Helper()
	select {
	case err := <-done:
		return err
	case <-time.After(wait):
		t.Fatal("Run did not return")
		return nil
	}
}

// syncBuffer is a bytes.Buffer safe for concurrent writes.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// Without WithLogger, the consumer logs to the processor's logger.
func TestLoggerDefaultsToTheProcessors(t *testing.T) {
	addrs := newCluster(t, "t", 1)
	var buf syncBuffer
	proc := newProcessor(t, stream.HandlerFunc(func(context.Context, *stream.Batch) error { return nil }),
		stream.WithLogger(slog.New(slog.NewTextHandler(&buf, nil))))
	r := start(t, addrs, "g", "t", proc)
	time.Sleep(50 * time.Millisecond)
	if err := r.stop(t); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(buf.String(), "redeliver: consumer stopped") {
		t.Fatalf("the processor's logger did not get the consumer's log:\n%s", buf.String())
	}
}

// A dead-letter topic that does not exist: every failed try is reported
// with an error that names the topic and says what to do, the partition
// waits, and once the topic is created the dead-letter succeeds and the
// partition goes on.
func TestDeadLetterToMissingTopic(t *testing.T) {
	addrs := newCluster(t, "orders", 1)
	produce(t, addrs, "orders", 0, 0, 3)
	pub := new(franz.Publisher) // bound to the consumer's client by WithPublisher
	dl, err := stream.DeadLetter(pub, "orders.dlq")
	if err != nil {
		t.Fatal(err)
	}
	var (
		mu    sync.Mutex
		tries []stream.ActionEvent
	)
	failed := make(chan struct{}, 1)
	h := stream.HandlerFunc(func(_ context.Context, b *stream.Batch) error { return stream.Permanent(errors.New("schema mismatch")) })
	proc := newProcessor(t, h, stream.WithExhaustionAction(dl), stream.WithOperationBackoff(checkpoint.Fixed(20*time.Millisecond)),
		stream.WithHooks(stream.Hooks{ActionTried: func(e stream.ActionEvent) {
			mu.Lock()
			tries = append(tries, e)
			mu.Unlock()
			if e.Err != nil {
				select {
				case failed <- struct{}{}:
				default:
				}
			}
		}}))
	start(t, addrs, "g", "orders", proc, franz.WithPublisher(pub), kgo.UnknownTopicRetries(0))
	select {
	case <-failed:
	case <-time.After(wait):
		t.Fatal("no failed try of the dead-letter reported")
	}
	mu.Lock()
	msg := tries[0].Err.Error()
	mu.Unlock()
	for _, want := range []string{`topic "orders.dlq"`, "check that the topic exists", "UNKNOWN_TOPIC_OR_PARTITION"} {
		if !strings.Contains(msg, want) {
			t.Errorf("failed try's error %q does not say %q", msg, want)
		}
	}
	if o, ok := committed(t, addrs, "g").Lookup("orders", 0); ok && o.At > 0 {
		t.Fatalf("checkpoint %d moved past a batch whose dead-letter failed", o.At)
	}
	admCl, err := kgo.NewClient(kgo.SeedBrokers(addrs...))
	if err != nil {
		t.Fatal(err)
	}
	defer admCl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), wait)
	defer cancel()
	if _, err := kadm.NewClient(admCl).CreateTopic(ctx, 1, 1, nil, "orders.dlq"); err != nil {
		t.Fatal(err)
	}
	waitCommitted(t, addrs, "g", "orders", map[int32]int64{0: 3})
	mu.Lock()
	defer mu.Unlock()
	if last := tries[len(tries)-1]; last.Err != nil {
		t.Fatalf("last try %+v, want a success", last)
	}
}

// A Publisher built before the consumer, bound to its client by
// WithPublisher: the natural order (options, processor, consumer) works.
// Unbound, it says what is missing; bound to two consumers, New refuses.
func TestPublisherBoundToTheConsumer(t *testing.T) {
	addrs := newCluster(t, "t", 1)
	pub := new(franz.Publisher)
	err := pub.Publish(context.Background(), "x", []stream.Record{{Value: []byte("v")}})
	if err == nil || !strings.Contains(err.Error(), "WithPublisher") {
		t.Fatalf("Publish of an unbound publisher: %v", err)
	}
	proc := newProcessor(t, stream.HandlerFunc(func(context.Context, *stream.Batch) error { return nil }))
	r := start(t, addrs, "g", "t", proc, franz.WithPublisher(pub))
	if err := pub.Publish(context.Background(), "t", []stream.Record{{Value: []byte("v")}}); err != nil {
		t.Fatalf("Publish through the consumer's client: %v", err)
	}
	if _, err := franz.New(proc, franz.WithPublisher(pub), franz.WithKgoOptions(kgo.SeedBrokers(addrs...), kgo.ConsumerGroup("g2"), kgo.ConsumeTopics("t"))); err == nil {
		t.Fatal("a publisher bound to a second consumer accepted")
	}
	if _, err := franz.New(proc, franz.WithPublisher(nil), franz.WithKgoOptions(kgo.SeedBrokers(addrs...), kgo.ConsumerGroup("g3"), kgo.ConsumeTopics("t"))); err == nil {
		t.Fatal("WithPublisher(nil) accepted")
	}
	_ = r
}

// WithOnAssigned reports each session's assignment, where a
// kgo.OnPartitionsAssigned of the caller's would be replaced by the
// adapter's own.
func TestWithOnAssigned(t *testing.T) {
	addrs := newCluster(t, "t", 3)
	got := make(chan map[string][]int32, 10)
	start(t, addrs, "g", "t", newProcessor(t, streamtest.Succeed),
		franz.WithOnAssigned(func(a map[string][]int32) { got <- a }))
	select {
	case a := <-got:
		if len(a["t"]) != 3 {
			t.Errorf("assigned %v, want the topic's 3 partitions", a)
		}
	case <-time.After(wait):
		t.Fatal("no assignment reported")
	}
}
