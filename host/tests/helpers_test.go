package tests

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/segmentio/kafka-go"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/redeliver-go/redeliver/adapters/franz/franzhost"
	"github.com/redeliver-go/redeliver/adapters/kafkago/kafkagohost"
	"github.com/redeliver-go/redeliver/host"
	"github.com/redeliver-go/redeliver/host/internal/hosttest"
)

// These are the host's tests that run on an embedded Kafka
// (kfake) through both client modules, adapters/franz/franzhost and
// adapters/kafkago/kafkagohost. It is a module of its own, never
// published, so that the host's module requires no Kafka client and no
// test-only module.

// token is the status page's token in these tests.
const token = "0123456789abcdef-status"

// The shared helpers, under the names these tests use.
const wait = hosttest.Wait

var (
	waitFor   = hosttest.WaitFor
	parse     = hosttest.Parse
	start     = hosttest.Start
	get       = hosttest.Get
	status    = hosttest.Status
	post      = hosttest.Post
	partition = hosttest.Partition
)

// newCluster starts an in-process Kafka with the given topics, each of
// partitions partitions, closed at the end of the test.
func newCluster(t testing.TB, partitions int32, topics ...string) []string {
	t.Helper()
	c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(partitions, topics...),
		kfake.GroupMinSessionTimeout(100*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	return c.ListenAddrs()
}

// produce writes n records with values "<i>" for i from 0 to the
// partition and waits for them to be acknowledged.
func produce(t testing.TB, addrs []string, topic string, partition int32, n int) {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(addrs...), kgo.RecordPartitioner(kgo.ManualPartitioner()))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	recs := make([]*kgo.Record, n)
	for i := range recs {
		recs[i] = &kgo.Record{Topic: topic, Partition: partition, Value: fmt.Appendf(nil, "%d", i)}
	}
	ctx, cancel := context.WithTimeout(context.Background(), wait)
	defer cancel()
	if err := cl.ProduceSync(ctx, recs...).FirstErr(); err != nil {
		t.Fatal(err)
	}
}

// committed reads a group's committed offsets through the broker.
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

// waitCommitted waits until the group's committed offset of the partition
// is want.
func waitCommitted(t testing.TB, addrs []string, group, topic string, partition int32, want int64) {
	t.Helper()
	var last int64 = -1
	deadline := time.Now().Add(wait)
	for {
		if o, ok := committed(t, addrs, group).Lookup(topic, partition); ok && o.Err == nil {
			last = o.At
			if last == want {
				return
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("group %s: committed offset of %s/%d is %d, want %d", group, topic, partition, last, want)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// fastKafkaGo makes kafka-go's group quick to join on kfake.
func fastKafkaGo(gc *kafka.ConsumerGroupConfig) {
	gc.HeartbeatInterval = 100 * time.Millisecond
	gc.SessionTimeout = time.Second
	gc.RebalanceTimeout = 2 * time.Second
	gc.JoinGroupBackoff = 100 * time.Millisecond
}

// adapters returns the host options that give it both Kafka adapters:
// franz-go's, and kafka-go's made quick to join kfake's groups.
func adapters(t testing.TB) []host.Option {
	t.Helper()
	franz, err := franzhost.New()
	if err != nil {
		t.Fatal(err)
	}
	kafkago, err := kafkagohost.New(kafkagohost.WithGroupConfig(fastKafkaGo))
	if err != nil {
		t.Fatal(err)
	}
	return []host.Option{host.WithAdapter(franz), host.WithAdapter(kafkago)}
}

// onKafka returns the host options for the brokers at addrs, with both
// adapters, followed by opts.
func onKafka(t testing.TB, addrs []string, opts ...host.Option) []host.Option {
	t.Helper()
	return append(append(adapters(t), host.WithBrokers(addrs...)), opts...)
}
