package share_test

import (
	"context"
	"errors"
	"strings"
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

// The Run rule the Kafka adapters' consumers share (kafkatest.RunRule).
func TestRunRule(t *testing.T) {
	addrs := cluster(t, "t", 1, 2*time.Second, 5)
	kafkatest.RunRule(t, func(group string) kafkatest.Consumer {
		proc, err := stream.NewProcessor(streamtest.Succeed)
		if err != nil {
			t.Fatal(err)
		}
		c, err := share.New(proc, share.WithKgoOptions(kgo.SeedBrokers(addrs...), kgo.ShareGroup(group), kgo.ConsumeTopics("t")), share.WithLanes(1))
		if err != nil {
			t.Fatal(err)
		}
		return c
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
			kafkatest.RunClosedFromInside(t, c, from, closed)
		})
	}
}

// A wrong topic name is logged at Warn within seconds of the start and
// reported by Health.
func TestStartChecks(t *testing.T) {
	addrs := cluster(t, "t", 1, 2*time.Second, 5)
	var buf kafkatest.LogBuffer
	proc, err := stream.NewProcessor(streamtest.Succeed)
	if err != nil {
		t.Fatal(err)
	}
	c, err := share.New(proc, share.WithLogger(buf.Logger()), share.WithLanes(1),
		share.WithKgoOptions(kgo.SeedBrokers(addrs...), kgo.ShareGroup("g"), kgo.ConsumeTopics("tt")))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- c.Run(ctx) }()
	defer func() { cancel(); <-done }()
	buf.WaitFor(t, `level=WARN msg="redeliver: a topic the consumer reads is not there`, 5*time.Second)
	if err := c.Health(); err == nil || !strings.Contains(err.Error(), `consumed topic "tt"`) {
		t.Fatalf("Health: %v, want it to name topic tt", err)
	}
	var zero share.Consumer
	if err := zero.Health(); err == nil {
		t.Fatal("Health of a zero Consumer returned nil")
	}
}
