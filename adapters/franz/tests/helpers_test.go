package franz_test

import (
	"context"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/redeliver-go/redeliver/adapters/franz"
	"github.com/redeliver-go/redeliver/adapters/internal/kafkatest"
	"github.com/redeliver-go/redeliver/stream"
)

// The shared helpers, under the names these tests use.
const wait = kafkatest.Wait

var (
	produce       = kafkatest.Produce
	committed     = kafkatest.Committed
	waitCommitted = kafkatest.WaitCommitted
	offsetsOf     = kafkatest.OffsetsOf
	checkHistory  = kafkatest.CheckHistory
)

// newCluster starts an in-process kfake cluster with one topic of the given
// partitions and returns its addresses.
func newCluster(t testing.TB, topic string, partitions int32, opts ...kfake.Opt) []string {
	t.Helper()
	_, addrs := kafkatest.NewCluster(t, topic, partitions, opts...)
	return addrs
}

// running is a consumer started by start.
type running struct {
	c      *franz.Consumer
	cancel context.CancelFunc
	done   chan error
}

// start runs a consumer of topic in group over proc and stops it at the end
// of the test.
func start(t testing.TB, addrs []string, group, topic string, proc *stream.Processor, opts ...any) *running {
	t.Helper()
	kopts := []kgo.Opt{kgo.SeedBrokers(addrs...), kgo.ConsumerGroup(group), kgo.ConsumeTopics(topic),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()), kgo.FetchMaxWait(100 * time.Millisecond)}
	var fopts []franz.Option
	for _, o := range opts {
		switch o := o.(type) {
		case kgo.Opt:
			kopts = append(kopts, o)
		case franz.Option:
			fopts = append(fopts, o)
		default:
			t.Fatalf("option %T", o)
		}
	}
	c, err := franz.New(proc, append(fopts, franz.WithKgoOptions(kopts...))...)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	r := &running{c: c, cancel: cancel, done: make(chan error, 1)}
	go func() { r.done <- c.Run(ctx) }()
	t.Cleanup(func() { r.stop(t) })
	return r
}

// stop stops the consumer and returns Run's error.
func (r *running) stop(t testing.TB) error {
	t.Helper()
	r.cancel()
	select {
	case err := <-r.done:
		r.done <- err
		return err
	case <-time.After(wait):
		t.Fatal("consumer did not stop")
		return nil
	}
}

func values(b *stream.Batch) []string {
	vs := make([]string, len(b.Records))
	for i, r := range b.Records {
		vs[i] = string(r.Value)
	}
	return vs
}
