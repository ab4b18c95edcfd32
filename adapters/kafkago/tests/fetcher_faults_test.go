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

// After its topic is deleted, a partition's fetcher says so about once a
// second ("will try again", at Warn) instead of waiting inside kafka-go's
// leader lookup with one Info line until the claim ends.
func TestDeletedTopicIsReported(t *testing.T) {
	_, addrs := newCluster(t, "t", 1)
	produce(t, addrs, "t", 0, 0, 5)
	var lr logRecorder
	start(t, addrs, "g", "t", newProcessor(t, streamtest.Succeed), kafkago.WithLogger(lr.logger()))
	waitCommitted(t, addrs, "g", "t", map[int32]int64{0: 5})
	cl, err := kgo.NewClient(kgo.SeedBrokers(addrs...))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), wait)
	defer cancel()
	if _, err := kadm.NewClient(cl).DeleteTopics(ctx, "t"); err != nil {
		t.Fatal(err)
	}
	deleted := time.Now()
	for {
		warns := 0
		for _, m := range lr.matching("will try again") {
			if len(m) > 5 && m[:5] == "WARN " && (strings.Contains(m, "Unknown Topic Or Partition") || strings.Contains(m, "UNKNOWN_TOPIC_OR_PARTITION")) {
				warns++
			}
		}
		if warns >= 2 {
			break
		}
		if time.Since(deleted) > 5*time.Second {
			t.Fatalf("%d warnings naming the unknown topic in %v after it was deleted, want one about every second; log:\n%q", warns, time.Since(deleted), lr.matching("redeliver"))
		}
		time.Sleep(50 * time.Millisecond)
	}
}
