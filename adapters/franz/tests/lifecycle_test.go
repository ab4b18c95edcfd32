package franz_test

import (
	"context"
	"errors"
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

// Close called from the WithOnAssigned function before Run was called
// returns, and Run then returns stream.ErrClosed: the client the consumer
// builds joins its group as it is built, so the assignment can come
// before Run. Close used to close the client there and then, inside the
// client's own callback, whose end the client's Close waits for.
func TestCloseFromOnAssignedBeforeRun(t *testing.T) {
	kc, addrs := kafkatest.NewCluster(t, "t", 1)
	// The group's join waits until the consumer is made, so that the
	// callback has the consumer to close.
	joined := make(chan struct{})
	kc.ControlKey(kmsg.JoinGroup.Int16(), func(kmsg.Request) (kmsg.Response, error, bool) {
		kc.SleepControl(func() { <-joined })
		return nil, nil, false
	})
	var (
		cp     atomic.Pointer[franz.Consumer]
		closed = make(chan error, 1)
	)
	c, err := franz.New(newProcessor(t, streamtest.Succeed),
		franz.WithKgoOptions(kgo.SeedBrokers(addrs...), kgo.ConsumerGroup("g"), kgo.ConsumeTopics("t")),
		franz.WithOnAssigned(func(map[string][]int32) {
			if c := cp.Load(); c != nil {
				select {
				case closed <- c.Close():
				default:
				}
			}
		}))
	if err != nil {
		t.Fatal(err)
	}
	cp.Store(c)
	close(joined)
	select {
	case err := <-closed:
		if err != nil {
			t.Fatalf("Close from the WithOnAssigned function: %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Close called from the WithOnAssigned function before Run did not return")
	}
	done := make(chan error, 1)
	go func() { done <- c.Run(context.Background()) }()
	select {
	case err := <-done:
		if !errors.Is(err, stream.ErrClosed) {
			t.Errorf("Run returned %v after Close, want stream.ErrClosed", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Run did not return after Close")
	}
}
