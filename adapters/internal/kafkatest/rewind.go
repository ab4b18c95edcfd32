package kafkatest

import (
	"context"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/redeliver-go/redeliver/stream"
	"github.com/redeliver-go/redeliver/stream/streamtest"
)

// Recreate deletes topic and creates it again with one partition.
func Recreate(t testing.TB, addrs []string, topic string) {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(addrs...))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	adm := kadm.NewClient(cl)
	ctx, cancel := context.WithTimeout(context.Background(), Wait)
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
// had read, the consumer (fetching by topic name) resets to the new log's
// start, and every record of the new log is handled and committed.
func rewindIsDelivered(t *testing.T, a Adapter) {
	_, addrs := NewCluster(t, "t", 1)
	Produce(t, addrs, "t", 0, 0, 30)
	var rec streamtest.Recorder
	proc := NewProcessor(t, stream.Chain(streamtest.Succeed, rec.Middleware()))
	Start(t, a, Config{Addrs: addrs, Group: "g", Topic: "t", Processor: proc, MaxBatch: 10, Options: a.FetchByName})
	WaitCommitted(t, addrs, "g", "t", map[int32]int64{0: 30})
	Recreate(t, addrs, "t")
	Produce(t, addrs, "t", 0, 100, 25)
	WaitCommitted(t, addrs, "g", "t", map[int32]int64{0: 25})
	var handled []int64
	for _, d := range rec.Of("t", 0) {
		if d.FirstOffset > d.LastOffset {
			t.Fatalf("delivery %d-%d", d.FirstOffset, d.LastOffset)
		}
		for o := d.FirstOffset; o <= d.LastOffset; o++ {
			handled = append(handled, o)
		}
	}
	// 0-29 of the first log, then 0-24 of the new one, in order, each once.
	if len(handled) != 55 {
		t.Fatalf("handled %d records, want 55 (30 of the old log, 25 of the new): %v", len(handled), handled)
	}
	for i, o := range handled {
		w := int64(i)
		if i >= 30 {
			w = int64(i - 30)
		}
		if o != w {
			t.Fatalf("record %d handled at offset %d, want %d: %v", i, o, w, handled)
		}
	}
}
