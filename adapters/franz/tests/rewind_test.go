package franz_test

import (
	"context"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kversion"

	"github.com/redeliver-go/redeliver/adapters/franz"
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
// had read, franz-go (fetching by topic name, as with brokers before 2.8)
// resets to the new log's start, and every record of the new log is
// handled and committed.
func TestRewindIsDelivered(t *testing.T) {
	addrs := newCluster(t, "t", 1)
	produce(t, addrs, "t", 0, 0, 30)
	var rec streamtest.Recorder
	proc := newProcessor(t, stream.Chain(streamtest.Succeed, rec.Middleware()))
	start(t, addrs, "g", "t", proc, kgo.MaxVersions(kversion.V2_7_0()), franz.WithMaxBatch(10))
	waitCommitted(t, addrs, "g", "t", map[int32]int64{0: 30})
	recreate(t, addrs, "t")
	produce(t, addrs, "t", 0, 100, 25)
	waitCommitted(t, addrs, "g", "t", map[int32]int64{0: 25})
	ds := rec.Of("t", 0)
	var handled []int64
	for _, d := range ds {
		if d.FirstOffset > d.LastOffset {
			t.Fatalf("delivery %d-%d", d.FirstOffset, d.LastOffset)
		}
		for o := d.FirstOffset; o <= d.LastOffset; o++ {
			handled = append(handled, o)
		}
	}
	// 0-29 of the first log, then 0-24 of the new one, in order, each once.
	want := 55
	if len(handled) != want {
		t.Fatalf("handled %d records, want %d (30 of the old log, 25 of the new): %v", len(handled), want, handled)
	}
	for i, o := range handled {
		if w := int64(i); i >= 30 {
			w = int64(i - 30)
			if o != w {
				t.Fatalf("record %d handled at offset %d, want %d: %v", i, o, w, handled)
			}
		} else if o != w {
			t.Fatalf("record %d handled at offset %d, want %d", i, o, w)
		}
	}
}
