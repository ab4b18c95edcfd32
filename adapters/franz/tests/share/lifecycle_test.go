package share_test

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/redeliver-go/redeliver/adapters/franz/share"
	"github.com/redeliver-go/redeliver/adapters/internal/kafkatest"
	"github.com/redeliver-go/redeliver/checkpoint"
	"github.com/redeliver-go/redeliver/stream"
	"github.com/redeliver-go/redeliver/stream/streamtest"
)

// Run returns nil after its context is cancelled or Close, ErrClosed after
// an earlier Close, and an error when called twice.
func TestRunRule(t *testing.T) {
	addrs := cluster(t, "t", 1, 2*time.Second, 5)
	newConsumer := func(group string) *share.Consumer {
		proc, err := stream.NewProcessor(streamtest.Succeed)
		if err != nil {
			t.Fatal(err)
		}
		c, err := share.New(proc, share.WithKgoOptions(kgo.SeedBrokers(addrs...), kgo.ShareGroup(group), kgo.ConsumeTopics("t")), share.WithLanes(1))
		if err != nil {
			t.Fatal(err)
		}
		return c
	}
	await := func(done chan error) error {
		select {
		case err := <-done:
			return err
		case <-time.After(wait):
			t.Fatal("Run did not return")
			return nil
		}
	}
	t.Run("context", func(t *testing.T) {
		c := newConsumer("g1")
		ctx, cancel := context.WithCancelCause(context.Background())
		done := make(chan error, 1)
		go func() { done <- c.Run(ctx) }()
		time.Sleep(50 * time.Millisecond)
		cancel(errors.New("ctrl-c"))
		if err := await(done); err != nil {
			t.Fatalf("Run returned %v after its context was cancelled, want nil", err)
		}
		if err := c.Run(context.Background()); err == nil {
			t.Fatal("a second Run returned nil")
		}
	})
	t.Run("close", func(t *testing.T) {
		c := newConsumer("g2")
		done := make(chan error, 1)
		go func() { done <- c.Run(context.Background()) }()
		time.Sleep(50 * time.Millisecond)
		if err := c.Close(); err != nil {
			t.Fatal(err)
		}
		if err := await(done); err != nil {
			t.Fatalf("Run returned %v after Close, want nil", err)
		}
	})
	t.Run("close before run", func(t *testing.T) {
		c := newConsumer("g3")
		c.Close()
		if err := c.Run(context.Background()); !errors.Is(err, stream.ErrClosed) {
			t.Fatalf("Run after Close returned %v, want ErrClosed", err)
		}
	})
}

// Close called from a handler, a hook, an exhaustion action or the
// WithOnReady function returns, and so does Run.
func TestCloseFromInside(t *testing.T) {
	for _, from := range []string{"handler", "hook", "action", "OnReady"} {
		t.Run(from, func(t *testing.T) {
			addrs := cluster(t, "t", 1, 2*time.Second, 5)
			kafkatest.Produce(t, addrs, "t", 0, 0, 5)
			var (
				cp     atomic.Pointer[share.Consumer]
				closed = make(chan error, 1)
			)
			closeIt := func() {
				if c := cp.Load(); c != nil {
					select {
					case closed <- c.Close():
					default:
					}
				}
			}
			h := stream.HandlerFunc(func(context.Context, *stream.Batch) error {
				switch from {
				case "handler":
					closeIt()
				case "action":
					return checkpoint.Permanent(errors.New("give up"))
				}
				return nil
			})
			var opts []stream.Option
			switch from {
			case "hook":
				opts = append(opts, stream.WithHooks(stream.Hooks{Delivered: func(stream.DeliveredEvent) { closeIt() }}))
			case "action":
				opts = append(opts, stream.WithExhaustionAction(func(context.Context, *stream.Batch, *checkpoint.ExhaustedError) error {
					closeIt()
					return nil
				}))
			}
			proc, err := stream.NewProcessor(h, opts...)
			if err != nil {
				t.Fatal(err)
			}
			sopts := []share.Option{share.WithKgoOptions(kgo.SeedBrokers(addrs...), kgo.ShareGroup("g"), kgo.ConsumeTopics("t"),
				kgo.FetchMaxWait(100*time.Millisecond)), share.WithResetEarliest(), share.WithLanes(2)}
			if from == "OnReady" {
				sopts = append(sopts, share.WithOnReady(closeIt))
			}
			c, err := share.New(proc, sopts...)
			if err != nil {
				t.Fatal(err)
			}
			cp.Store(c)
			done := make(chan error, 1)
			go func() { done <- c.Run(context.Background()) }()
			select {
			case err := <-closed:
				if err != nil {
					t.Fatalf("Close from the %s: %v", from, err)
				}
			case <-time.After(wait):
				t.Fatalf("Close called from the %s did not return", from)
			}
			select {
			case err := <-done:
				if err != nil {
					t.Fatalf("Run returned %v after Close, want nil", err)
				}
			case <-time.After(wait):
				t.Fatalf("Run did not return after Close from the %s", from)
			}
		})
	}
}

// A wrong topic name is logged at Warn within seconds of the start and
// reported by Health.
func TestStartChecks(t *testing.T) {
	addrs := cluster(t, "t", 1, 2*time.Second, 5)
	var buf syncBuffer
	proc, err := stream.NewProcessor(streamtest.Succeed)
	if err != nil {
		t.Fatal(err)
	}
	c, err := share.New(proc, share.WithLogger(slog.New(slog.NewTextHandler(&buf, nil))), share.WithLanes(1),
		share.WithKgoOptions(kgo.SeedBrokers(addrs...), kgo.ShareGroup("g"), kgo.ConsumeTopics("tt")))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- c.Run(ctx) }()
	defer func() { cancel(); <-done }()
	for deadline := time.Now().Add(5 * time.Second); !strings.Contains(buf.String(), `level=WARN msg="redeliver: a topic the consumer reads is not there`); time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("no warning about the missing topic in 5s:\n%s", buf.String())
		}
	}
	if err := c.Health(); err == nil || !strings.Contains(err.Error(), `consumed topic "tt"`) {
		t.Fatalf("Health: %v, want it to name topic tt", err)
	}
	var zero share.Consumer
	if err := zero.Health(); err == nil {
		t.Fatal("Health of a zero Consumer returned nil")
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
