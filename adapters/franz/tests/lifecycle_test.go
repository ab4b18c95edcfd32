package franz_test

import (
	"context"
	"runtime"
	"sync/atomic"
	"testing"
	"time"
	"weak"

	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/redeliver-go/redeliver/adapters/franz"
	"github.com/redeliver-go/redeliver/adapters/internal/kafkatest"
	"github.com/redeliver-go/redeliver/stream"
	"github.com/redeliver-go/redeliver/stream/streamtest"
)

// closeFrom runs a consumer whose handler, hook or WithOnAssigned function
// calls its Close, and checks that Close and Run return.
func TestCloseFromInside(t *testing.T) {
	for _, from := range []string{"handler", "hook", "OnAssigned"} {
		t.Run(from, func(t *testing.T) {
			kc, addrs := kafkatest.NewCluster(t, "t", 2)
			produce(t, addrs, "t", 0, 0, 10)
			var (
				cp     atomic.Pointer[franz.Consumer]
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
				if from == "handler" {
					closeIt()
				}
				return nil
			})
			var opts []stream.Option
			if from == "hook" {
				opts = append(opts, stream.WithHooks(stream.Hooks{Delivered: func(stream.DeliveredEvent) { closeIt() }}))
			}
			fopts := []franz.Option{franz.WithKgoOptions(kgo.SeedBrokers(addrs...), kgo.ConsumerGroup("g"), kgo.ConsumeTopics("t"),
				kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))}
			// The group's join waits until the consumer is made, so that the
			// assignment is reported from the client's callback.
			joined := make(chan struct{})
			kc.ControlKey(kmsg.JoinGroup.Int16(), func(kmsg.Request) (kmsg.Response, error, bool) {
				kc.SleepControl(func() { <-joined })
				return nil, nil, false
			})
			if from == "OnAssigned" {
				fopts = append(fopts, franz.WithOnAssigned(func(map[string][]int32) { closeIt() }))
			}
			c, err := franz.New(newProcessor(t, h, opts...), fopts...)
			if err != nil {
				t.Fatal(err)
			}
			cp.Store(c)
			close(joined)
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
			if err := c.Close(); err != nil {
				t.Fatal(err)
			}
		})
	}
}

// A Consumer made with WithClient, and its processor, are freed once the
// caller lets go of them, its client closed: the adapter keeps nothing of
// them.
func TestWithClientConsumerIsFreed(t *testing.T) {
	addrs := newCluster(t, "t", 1)
	produce(t, addrs, "t", 0, 0, 5)
	consumer, processor := func() (weak.Pointer[franz.Consumer], weak.Pointer[stream.Processor]) {
		cl, err := kgo.NewClient(append([]kgo.Opt{kgo.SeedBrokers(addrs...), kgo.ConsumerGroup("g"), kgo.ConsumeTopics("t"),
			kgo.ConsumeResetOffset(kgo.NewOffset().AtStart())}, franz.ClientOptions()...)...)
		if err != nil {
			t.Fatal(err)
		}
		proc := newProcessor(t, streamtest.Succeed)
		c, err := franz.New(proc, franz.WithClient(cl))
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan error, 1)
		go func() { done <- c.Run(ctx) }()
		waitCommitted(t, addrs, "g", "t", map[int32]int64{0: 5})
		cancel()
		if err := <-done; err != nil {
			t.Fatal(err)
		}
		cl.Close()
		return weak.Make(c), weak.Make(proc)
	}()
	deadline := time.Now().Add(wait)
	for consumer.Value() != nil || processor.Value() != nil {
		if time.Now().After(deadline) {
			t.Fatal("the Consumer or its Processor is still referenced after its Run returned and its client closed: leaked")
		}
		runtime.GC()
		time.Sleep(10 * time.Millisecond) // the client's goroutines end after its Close
	}
}
