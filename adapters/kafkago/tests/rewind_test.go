package tests

import (
	"context"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/redeliver-go/redeliver/adapters/kafkago"
	"github.com/redeliver-go/redeliver/stream"
	"github.com/redeliver-go/redeliver/stream/streamtest"
)

// recreate deletes topic and creates it again with one partition.
func recreate(t *testing.T, addrs []string, topic string) {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(addrs...))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	adm := kadm.NewClient(cl)
	ctx, cancel := context.WithTimeout(context.Background(), wait)
	defer cancel()
	if _, err := adm.DeleteTopics(ctx, topic); err != nil {
		t.Fatal(err)
	}
	for {
		resp, err := adm.CreateTopic(ctx, 1, 1, nil, topic)
		if err == nil && resp.Err == nil {
			return
		}
		if ctx.Err() != nil {
			t.Fatalf("create %s again: %v %v", topic, err, resp.Err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// A rewind of the partition's position is delivered, not filtered: the
// topic is deleted and created again with fewer records than the consumer
// had read, the fetcher resets to the new log's start ("re-reading offsets
// 0 to 4"), and those records are handled and committed.
func TestRewindIsDelivered(t *testing.T) {
	_, addrs := newCluster(t, "t", 1)
	produce(t, addrs, "t", 0, 0, 20)
	var rec streamtest.Recorder
	proc := newProcessor(t, stream.Chain(streamtest.Succeed, rec.Middleware()))
	start(t, addrs, "g", "t", proc, kafkago.WithMaxBatch(10))
	waitCommitted(t, addrs, "g", "t", map[int32]int64{0: 20})
	recreate(t, addrs, "t")
	produce(t, addrs, "t", 0, 100, 5)
	waitCommitted(t, addrs, "g", "t", map[int32]int64{0: 5})
	var handled []int64
	for _, d := range rec.Of("t", 0) {
		for o := d.FirstOffset; o <= d.LastOffset; o++ {
			handled = append(handled, o)
		}
	}
	if len(handled) != 25 {
		t.Fatalf("handled %v, want 0-19 of the old log, then 0-4 of the new", handled)
	}
	for i, o := range handled {
		w := int64(i)
		if i >= 20 {
			w = int64(i - 20)
		}
		if o != w {
			t.Fatalf("record %d handled at offset %d, want %d: %v", i, o, w, handled)
		}
	}
}
