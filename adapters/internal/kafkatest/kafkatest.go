// Package kafkatest holds what the Kafka adapters' tests share: the tests
// every adapter runs ([Run], given an [Adapter] description), those of
// the adapters whose consumer makes its publishers' producer
// ([WithPublisherRefusals], [BoundPublisherLivesWithRun]), the
// throughput benchmarks' harness ([RunLeaves], [RedeliverLoop],
// [BenchLateness]), an in-process kfake cluster, producing records, reading
// committed offsets back through the broker, and checking a partition's
// deliveries. It is a module of its own that no public module requires.
package kafkatest

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
	"github.com/twmb/franz-go/pkg/kversion"

	"github.com/redeliver-go/redeliver/stream"
	"github.com/redeliver-go/redeliver/stream/streamtest"
)

// Wait bounds every wait of the adapters' tests.
const Wait = 20 * time.Second

// NewCluster starts an in-process kfake cluster with one topic of the given
// partitions, closed at the end of the test, and returns it with its
// addresses.
func NewCluster(t testing.TB, topic string, partitions int32, opts ...kfake.Opt) (*kfake.Cluster, []string) {
	t.Helper()
	opts = append([]kfake.Opt{kfake.NumBrokers(1), kfake.SeedTopics(partitions, topic), kfake.GroupMinSessionTimeout(100 * time.Millisecond)}, opts...)
	c, err := kfake.NewCluster(opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	return c, c.ListenAddrs()
}

// Produce writes n records to the partition, with values "<partition>-<i>"
// for i from first, and waits for them to be acknowledged.
func Produce(t testing.TB, addrs []string, topic string, partition int32, first, n int) {
	t.Helper()
	produceRecords(t, addrs, appendRecords(nil, topic, partition, first, n))
}

// ProduceEach writes n records to each of the topic's partitions 0 to
// partitions-1, as Produce does to one, with one client and one wait.
func ProduceEach(t testing.TB, addrs []string, topic string, partitions int32, first, n int) {
	t.Helper()
	recs := make([]*kgo.Record, 0, int(partitions)*n)
	for p := range partitions {
		recs = appendRecords(recs, topic, p, first, n)
	}
	produceRecords(t, addrs, recs)
}

// appendRecords appends Produce's n records of the partition to recs.
func appendRecords(recs []*kgo.Record, topic string, partition int32, first, n int) []*kgo.Record {
	for i := range n {
		recs = append(recs, &kgo.Record{Topic: topic, Partition: partition, Value: fmt.Appendf(nil, "%d-%d", partition, first+i)})
	}
	return recs
}

// produceRecords writes recs, each to its own partition, and waits for
// them to be acknowledged.
func produceRecords(t testing.TB, addrs []string, recs []*kgo.Record) {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(addrs...), kgo.RecordPartitioner(kgo.ManualPartitioner()))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), Wait)
	defer cancel()
	if err := cl.ProduceSync(ctx, recs...).FirstErr(); err != nil {
		t.Fatal(err)
	}
}

// Committed reads the group's committed offsets through the broker; a group
// that does not exist yet has none.
func Committed(t testing.TB, addrs []string, group string) kadm.OffsetResponses {
	t.Helper()
	var offs kadm.OffsetResponses
	withAdmin(t, addrs, func(ctx context.Context, adm *kadm.Client) error {
		var err error
		offs, err = adm.FetchOffsets(ctx, group)
		if errors.Is(err, kerr.GroupIDNotFound) {
			return nil
		}
		return err
	})
	return offs
}

// withAdmin runs fn with an admin client of the brokers at addrs and a
// context bounded by Wait, and fails t with fn's error.
func withAdmin(t testing.TB, addrs []string, fn func(context.Context, *kadm.Client) error) {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(addrs...))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), Wait)
	defer cancel()
	if err := fn(ctx, kadm.NewClient(cl)); err != nil {
		t.Fatal(err)
	}
}

// Commit commits offset with metadata for the group's partition, as
// another tool (or a previous owner) would.
func Commit(t testing.TB, addrs []string, group, topic string, partition int32, offset int64, metadata string) {
	t.Helper()
	offs := kadm.Offsets{}
	offs.Add(kadm.Offset{Topic: topic, Partition: partition, At: offset, LeaderEpoch: -1, Metadata: metadata})
	withAdmin(t, addrs, func(ctx context.Context, adm *kadm.Client) error {
		resp, err := adm.CommitOffsets(ctx, group, offs)
		if err == nil {
			err = resp.Error()
		}
		return err
	})
}

// ConsumeFromTheCommit runs a consumer of group g over t/0, which holds 10
// records and a commit at 5 with metadata "other-tool:1" (see Commit),
// through start, until all are committed; then, after the checks of before
// (nil for none), it checks that the claim started at the commit with its
// metadata and that the first delivery was at offset 5.
func ConsumeFromTheCommit(t *testing.T, addrs []string, start func(*stream.Processor), before func()) {
	t.Helper()
	var (
		rec     streamtest.Recorder
		claimed = make(chan stream.ClaimEvent, 1)
	)
	start(NewProcessor(t, stream.Chain(streamtest.Succeed, rec.Middleware()),
		stream.WithHooks(stream.Hooks{Claimed: func(e stream.ClaimEvent) { claimed <- e }})))
	WaitCommitted(t, addrs, "g", "t", map[int32]int64{0: 10})
	if before != nil {
		before()
	}
	e := <-claimed
	if e.Committed != 5 || e.Metadata != "other-tool:1" {
		t.Errorf("claimed with %d %q, want 5 %q", e.Committed, e.Metadata, "other-tool:1")
	}
	if ds := rec.Of("t", 0); len(ds) == 0 || ds[0].FirstOffset != 5 {
		t.Errorf("deliveries %+v, want the first at offset 5", ds)
	}
}

// WaitCommitted waits until every partition's committed offset is at least
// want[partition].
func WaitCommitted(t testing.TB, addrs []string, group, topic string, want map[int32]int64) {
	t.Helper()
	deadline := time.Now().Add(Wait)
	for {
		offs := Committed(t, addrs, group)
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
			t.Fatalf("committed offsets %v, waiting for %v", OffsetsOf(offs, topic), want)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// OffsetsOf returns the committed offsets of topic by partition.
func OffsetsOf(offs kadm.OffsetResponses, topic string) map[int32]int64 {
	m := make(map[int32]int64)
	for p, o := range offs[topic] {
		m[p] = o.At
	}
	return m
}

// CheckHistory checks one partition's deliveries: every delivery either
// repeats the batch before it (a retry) or starts right after it, the first
// starts at offset 0, and the last succeeded batch ends at end-1.
func CheckHistory(t testing.TB, ds []streamtest.Delivery, end int64) {
	t.Helper()
	var first, last int64 = -1, -1
	for i, d := range ds {
		switch {
		case d.FirstOffset == first && d.LastOffset == last: // redelivery
		case d.FirstOffset == last+1:
			first, last = d.FirstOffset, d.LastOffset
		default:
			t.Fatalf("delivery %d: offsets %d-%d after batch %d-%d: out of order or a gap", i, d.FirstOffset, d.LastOffset, first, last)
		}
	}
	if last != end-1 {
		t.Fatalf("last batch ends at %d, want %d", last, end-1)
	}
}

// CommitAsMember returns a function that commits offset for the group's
// partition on kc as the member that last synced with the group, under its
// generation: a commit the coordinator takes while the group is active,
// as a member's own (a late commit of a previous owner, say). It returns
// the commit's error, and may be called from any goroutine.
func CommitAsMember(kc *kfake.Cluster, addrs []string, group string) func(topic string, partition int32, offset int64) error {
	var (
		mu         sync.Mutex
		generation int32 = -1
		member     string
	)
	kc.ControlKey(int16(kmsg.SyncGroup), func(r kmsg.Request) (kmsg.Response, error, bool) {
		kc.KeepControl()
		if req, ok := r.(*kmsg.SyncGroupRequest); ok && req.Group == group {
			mu.Lock()
			generation, member = req.Generation, req.MemberID
			mu.Unlock()
		}
		return nil, nil, false
	})
	return func(topic string, partition int32, offset int64) error {
		mu.Lock()
		g, m := generation, member
		mu.Unlock()
		if g < 0 {
			return errors.New("kafkatest: no member has synced with the group yet")
		}
		// Topics by name: OffsetCommit from version 10 names them by ID.
		cl, err := kgo.NewClient(kgo.SeedBrokers(addrs...), kgo.MaxVersions(kversion.V3_9_0()))
		if err != nil {
			return err
		}
		defer cl.Close()
		ctx, cancel := context.WithTimeout(context.Background(), Wait)
		defer cancel()
		req := kmsg.NewPtrOffsetCommitRequest()
		req.Group, req.Generation, req.MemberID = group, g, m
		rt := kmsg.NewOffsetCommitRequestTopic()
		rt.Topic = topic
		rp := kmsg.NewOffsetCommitRequestTopicPartition()
		rp.Partition, rp.Offset = partition, offset
		rt.Partitions = append(rt.Partitions, rp)
		req.Topics = append(req.Topics, rt)
		resp, err := req.RequestWith(ctx, cl)
		if err != nil {
			return err
		}
		for _, t := range resp.Topics {
			for _, p := range t.Partitions {
				if err := kerr.ErrorForCode(p.ErrorCode); err != nil {
					return fmt.Errorf("kafkatest: commit %s/%d at %d as member %s of generation %d: %w", topic, partition, offset, m, g, err)
				}
			}
		}
		return nil
	}
}
