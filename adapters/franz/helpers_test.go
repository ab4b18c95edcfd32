package franz_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/redeliver-go/redeliver/adapters/franz"
	"github.com/redeliver-go/redeliver/stream"
)

// wait bounds every wait of these tests.
const wait = 20 * time.Second

// newCluster starts an in-process kfake cluster with one topic of the given
// partitions and returns its addresses.
func newCluster(t testing.TB, topic string, partitions int32, opts ...kfake.Opt) []string {
	t.Helper()
	opts = append([]kfake.Opt{kfake.NumBrokers(1), kfake.SeedTopics(partitions, topic), kfake.GroupMinSessionTimeout(100 * time.Millisecond)}, opts...)
	c, err := kfake.NewCluster(opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	return c.ListenAddrs()
}

// produce writes n records to the partition, with values "<partition>-<i>"
// for i from first, and waits for them to be acknowledged.
func produce(t testing.TB, addrs []string, topic string, partition int32, first, n int) {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(addrs...), kgo.RecordPartitioner(kgo.ManualPartitioner()))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	recs := make([]*kgo.Record, n)
	for i := range recs {
		recs[i] = &kgo.Record{Topic: topic, Partition: partition, Value: []byte(fmt.Sprintf("%d-%d", partition, first+i))}
	}
	ctx, cancel := context.WithTimeout(context.Background(), wait)
	defer cancel()
	if err := cl.ProduceSync(ctx, recs...).FirstErr(); err != nil {
		t.Fatal(err)
	}
}

// committed reads the group's committed offsets through the broker; a group
// that does not exist yet has none.
func committed(t testing.TB, addrs []string, group string) kadm.OffsetResponses {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(addrs...))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), wait)
	defer cancel()
	offs, err := kadm.NewClient(cl).FetchOffsets(ctx, group)
	if errors.Is(err, kerr.GroupIDNotFound) {
		return nil
	}
	if err != nil {
		t.Fatal(err)
	}
	return offs
}

// waitCommitted waits until every partition's committed offset is at least
// want[partition].
func waitCommitted(t testing.TB, addrs []string, group, topic string, want map[int32]int64) {
	t.Helper()
	deadline := time.Now().Add(wait)
	for {
		offs := committed(t, addrs, group)
		ok := true
		for p, w := range want {
			o, found := offs.Lookup(topic, p)
			if !found || o.Err != nil || o.At < w {
				ok = false
			}
		}
		if ok {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("committed offsets %v, waiting for %v", offsetsOf(offs, topic), want)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func offsetsOf(offs kadm.OffsetResponses, topic string) map[int32]int64 {
	m := make(map[int32]int64)
	for p, o := range offs[topic] {
		m[p] = o.At
	}
	return m
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
