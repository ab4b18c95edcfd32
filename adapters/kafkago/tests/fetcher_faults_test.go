package tests

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/segmentio/kafka-go"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/redeliver-go/redeliver/adapters/kafkago"
	"github.com/redeliver-go/redeliver/adapters/kafkago/internal/engine"
	"github.com/redeliver-go/redeliver/stream/streamtest"
)

// With ReadCommitted and a LastOffset start, a partition with no commit
// starts at its last stable offset: the records of a transaction open at
// the start, and committed later, are delivered. The high watermark is past
// them.
func TestLastOffsetUnderReadCommittedStartsAtTheStableOffset(t *testing.T) {
	kc, addrs := newCluster(t, "t", 1)
	produce(t, addrs, "t", 0, 0, 3) // before the start: not delivered

	txn, err := kgo.NewClient(kgo.SeedBrokers(addrs...), kgo.RecordPartitioner(kgo.ManualPartitioner()), kgo.TransactionalID("open"))
	if err != nil {
		t.Fatal(err)
	}
	defer txn.Close()
	ctx, cancel := context.WithTimeout(context.Background(), wait)
	defer cancel()
	if err := txn.BeginTransaction(); err != nil {
		t.Fatal(err)
	}
	var recs []*kgo.Record
	for _, v := range []string{"txn-0", "txn-1"} {
		recs = append(recs, &kgo.Record{Topic: "t", Partition: 0, Value: []byte(v)})
	}
	if err := txn.ProduceSync(ctx, recs...).FirstErr(); err != nil {
		t.Fatal(err)
	}

	listed := kc.Fault(kfake.Fault{Keys: []kmsg.Key{kmsg.ListOffsets}, Observe: true, Count: -1})
	defer listed.Remove()
	vl := newValueLog("0-3")
	start(t, addrs, "g", "t", newProcessor(t, vl.handler()),
		func(gc *kafka.ConsumerGroupConfig) { gc.StartOffset = kafka.LastOffset },
		func(fc *kafka.ReadBatchConfig) { fc.IsolationLevel = kafka.ReadCommitted })
	for deadline := time.Now().Add(wait); listed.Hits() < 2; time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the partition's offsets were not listed")
		}
	}
	time.Sleep(100 * time.Millisecond) // the start offset is chosen
	if err := txn.EndTransaction(ctx, kgo.TryCommit); err != nil {
		t.Fatal(err)
	}
	produce(t, addrs, "t", 0, 3, 1)
	got := vl.wait(t)
	if want := []string{"txn-0", "txn-1", "0-3"}; !slices.Equal(got, want) {
		t.Fatalf("handler saw %q, want %q: the transaction open at the start is skipped", got, want)
	}
}

// After its topic is deleted, a partition's fetcher says so at Warn
// ("will try again") within seconds, instead of waiting inside kafka-go's
// leader lookup with one Info line until the claim ends; and it says so
// once, not on every try.
func TestDeletedTopicIsReported(t *testing.T) {
	_, addrs := newCluster(t, "t", 1)
	produce(t, addrs, "t", 0, 0, 5)
	var lr logRecorder
	start(t, addrs, "g", "t", newProcessor(t, streamtest.Succeed), kafkago.WithLogger(lr.logger()))
	waitCommitted(t, addrs, "g", "t", map[int32]int64{0: 5})
	deleteTopic(t, addrs, "t")
	deleted := time.Now()
	warns := func() int {
		n := 0
		for _, m := range lr.matching("will try again") {
			if strings.HasPrefix(m, "WARN ") && (strings.Contains(m, "Unknown Topic Or Partition") || strings.Contains(m, "UNKNOWN_TOPIC_OR_PARTITION")) {
				n++
			}
		}
		return n
	}
	for warns() == 0 {
		if time.Since(deleted) > 3*time.Second {
			t.Fatalf("no warning naming the unknown topic in %v after it was deleted; log:\n%q", time.Since(deleted), lr.matching("redeliver"))
		}
		time.Sleep(50 * time.Millisecond)
	}
	time.Sleep(3 * time.Second) // about 3 more tries
	if n := warns(); n > 1 {
		t.Errorf("%d warnings of the same unknown topic in 3s, want one (then one every 30s)", n)
	}
}

// A fetch failure that lasts (the topic deleted and not created again,
// with the time it may last shortened to 1s) ends Run with an error that
// names the partition and the failure.
func TestLastingFetchErrorEndsRun(t *testing.T) {
	defer engine.SetPermanentAfter(time.Second)()
	_, addrs := newCluster(t, "t", 1)
	produce(t, addrs, "t", 0, 0, 5)
	r := start(t, addrs, "g", "t", newProcessor(t, streamtest.Succeed))
	waitCommitted(t, addrs, "g", "t", map[int32]int64{0: 5})
	deleteTopic(t, addrs, "t")
	select {
	case <-r.Done():
		err := r.Err()
		if err == nil || !strings.Contains(err.Error(), "t/0") || !strings.Contains(err.Error(), "Unknown Topic Or Partition") {
			t.Fatalf("Run returned %v, want an error naming t/0 and the unknown topic", err)
		}
		t.Log(err)
	case <-time.After(wait):
		t.Fatal("Run did not end under a lasting fetch failure")
	}
}

func deleteTopic(t *testing.T, addrs []string, topic string) {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(addrs...))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), wait)
	defer cancel()
	if _, err := kadm.NewClient(cl).DeleteTopics(ctx, topic); err != nil {
		t.Fatal(err)
	}
}
