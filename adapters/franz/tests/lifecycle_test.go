package franz_test

import (
	"context"
	"runtime"
	"testing"
	"time"
	"weak"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/redeliver-go/redeliver/adapters/franz"
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
