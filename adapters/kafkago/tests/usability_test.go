package tests

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/segmentio/kafka-go"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/redeliver-go/redeliver/adapters/kafkago"
	"github.com/redeliver-go/redeliver/checkpoint"
	"github.com/redeliver-go/redeliver/stream"
)

// Run returns nil when it stopped because its context ended or Close was
// called: a clean shutdown is not an error.
func TestRunReturnsNilOnCleanShutdown(t *testing.T) {
	_, addrs := newCluster(t, "t", 1)
	proc := newProcessor(t, stream.HandlerFunc(func(context.Context, *stream.Batch) error { return nil }))
	for _, how := range []string{"context", "close"} {
		t.Run(how, func(t *testing.T) {
			c, err := kafkago.New(proc, kafkago.WithGroupConfig(groupConfig(addrs, "g-"+how, "t")))
			if err != nil {
				t.Fatal(err)
			}
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			done := make(chan error, 1)
			go func() { done <- c.Run(ctx) }()
			time.Sleep(50 * time.Millisecond)
			if how == "context" {
				cancel()
			} else {
				c.Close()
			}
			select {
			case err := <-done:
				if err != nil {
					t.Fatalf("Run returned %v after a clean shutdown (%s), want nil", err, how)
				}
			case <-time.After(wait):
				t.Fatal("Run did not return")
			}
		})
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
	_, addrs := newCluster(t, "t", 1)
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

// A nil *kafkago.Publisher is refused where it is given.
func TestDeadLetterRefusesNilPublisher(t *testing.T) {
	var pub *kafkago.Publisher
	if _, err := stream.DeadLetter(pub, "dlq"); err == nil || !strings.Contains(err.Error(), "nil *kafkago.Publisher") {
		t.Fatalf("DeadLetter with a nil *kafkago.Publisher: %v", err)
	}
}

// A dead-letter topic that does not exist: each failed try is reported
// with an error that names the topic and says what to do, and once the
// topic is created the dead-letter succeeds and the partition goes on.
func TestDeadLetterToMissingTopic(t *testing.T) {
	_, addrs := newCluster(t, "orders", 1)
	produce(t, addrs, "orders", 0, 0, 3)
	w := &kafka.Writer{Addr: kafka.TCP(addrs...), RequiredAcks: kafka.RequireAll, BatchTimeout: time.Millisecond, MaxAttempts: 1}
	defer w.Close()
	pub, err := kafkago.NewPublisher(w)
	if err != nil {
		t.Fatal(err)
	}
	dl, err := stream.DeadLetter(pub, "orders.dlq")
	if err != nil {
		t.Fatal(err)
	}
	var (
		mu    sync.Mutex
		tries []stream.ActionEvent
	)
	failed := make(chan struct{}, 1)
	h := stream.HandlerFunc(func(context.Context, *stream.Batch) error { return stream.Permanent(errors.New("schema mismatch")) })
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
	start(t, addrs, "g", "orders", proc)
	select {
	case <-failed:
	case <-time.After(wait):
		t.Fatal("no failed try of the dead-letter reported")
	}
	mu.Lock()
	msg := tries[0].Err.Error()
	mu.Unlock()
	for _, want := range []string{`topic "orders.dlq"`, "check that the topic exists", `topic "orders.dlq" does not exist (create it)`} {
		if !strings.Contains(msg, want) {
			t.Errorf("failed try's error %q does not say %q", msg, want)
		}
	}
	cl, err := kgo.NewClient(kgo.SeedBrokers(addrs...))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), wait)
	defer cancel()
	if _, err := kadm.NewClient(cl).CreateTopic(ctx, 1, 1, nil, "orders.dlq"); err != nil {
		t.Fatal(err)
	}
	waitCommitted(t, addrs, "g", "orders", map[int32]int64{0: 3})
	mu.Lock()
	defer mu.Unlock()
	if last := tries[len(tries)-1]; last.Err != nil {
		t.Fatalf("last try %+v, want a success", last)
	}
}
