package integration_test

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/IBM/sarama"
	"github.com/confluentinc/confluent-kafka-go/v2/kafka"
	kafkago "github.com/segmentio/kafka-go"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/redeliver-go/redeliver/adapters/confluent"
	"github.com/redeliver-go/redeliver/adapters/franz"
	rdkafkago "github.com/redeliver-go/redeliver/adapters/kafkago"
	rdsarama "github.com/redeliver-go/redeliver/adapters/sarama"
	"github.com/redeliver-go/redeliver/integration/kcluster"
	"github.com/redeliver-go/redeliver/integration/provider"
	"github.com/redeliver-go/redeliver/stream"
)

// TestTrailingMarkersOnCluster: partitions whose logs end with a
// transaction marker (a committed transaction on two partitions, an
// aborted one on the third), written by a transactional producer on the
// three-broker cluster, consumed under read_committed by each adapter, with
// the leader of partition 0 killed after the transactions. Each adapter
// must commit the log end (the marker's offset + 1), not one short of it
// (group lag 1 for ever), must never hand a marker or an aborted record to
// the handler, and must hand every committed record once. It runs when
// REDELIVER_KAFKA_CLUSTER is set.
//
// It failed for all four adapters before the engine took a claim's
// position past the records it skips (stream.Positioner): committed 15, 15
// and 10 against log ends of 16, a group lag of 1, or 6, for ever. It is
// named apart from TestCluster because its setup (a transactional
// producer, a broker killed before the consumer starts) is its own; see
// docs/RELIABILITY.md.
func TestTrailingMarkersOnCluster(t *testing.T) {
	if testing.Short() {
		t.Skip("the cluster scenarios are long")
	}
	p := provider.Cluster()
	for _, adapter := range []string{"franz", "kafkago", "sarama", "confluent"} {
		t.Run(adapter, func(t *testing.T) {
			b := p.Start(t)
			c := b.Cluster
			suffix := strconv.FormatInt(time.Now().UnixNano(), 36)
			topic, group := "rd-markers-"+adapter+"-"+suffix, "rd-markers-g-"+suffix
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
			defer cancel()
			adm, err := c.Admin()
			if err != nil {
				t.Fatal(err)
			}
			defer adm.Close()
			if resp, err := adm.CreateTopic(ctx, 3, -1, nil, topic); err != nil || resp.Err != nil {
				t.Fatalf("create %s: %v %v", topic, err, resp.Err)
			}
			t.Cleanup(func() {
				rctx, rcancel := context.WithTimeout(context.Background(), 5*time.Minute)
				defer rcancel()
				for n := 1; n <= kcluster.Nodes; n++ {
					if _, err := c.Run(rctx, "pid", strconv.Itoa(n)); err != nil {
						_, _ = c.Run(rctx, "restart", strconv.Itoa(n))
					}
				}
			})
			// Plain records, then one transaction per partition: committed
			// on 0 and 1, aborted on 2. Each log ends with its marker.
			plain, err := kgo.NewClient(kgo.SeedBrokers(c.Direct...), kgo.RecordPartitioner(kgo.ManualPartitioner()))
			if err != nil {
				t.Fatal(err)
			}
			defer plain.Close()
			var want []string
			for p := range int32(3) {
				for i := range 10 {
					v := fmt.Sprintf("%d:p%d", p, i)
					want = append(want, v)
					if err := plain.ProduceSync(ctx, &kgo.Record{Topic: topic, Partition: p, Value: []byte(v)}).FirstErr(); err != nil {
						t.Fatal(err)
					}
				}
			}
			txn, err := kgo.NewClient(kgo.SeedBrokers(c.Direct...), kgo.RecordPartitioner(kgo.ManualPartitioner()),
				kgo.TransactionalID("rd-markers-"+suffix))
			if err != nil {
				t.Fatal(err)
			}
			defer txn.Close()
			for p := range int32(3) {
				if err := txn.BeginTransaction(); err != nil {
					t.Fatal(err)
				}
				commit := p != 2
				for i := range 5 {
					v := fmt.Sprintf("%d:t%d", p, i)
					if commit {
						want = append(want, v)
					}
					if err := txn.ProduceSync(ctx, &kgo.Record{Topic: topic, Partition: p, Value: []byte(v)}).FirstErr(); err != nil {
						t.Fatal(err)
					}
				}
				if err := txn.EndTransaction(ctx, kgo.TransactionEndTry(commit)); err != nil {
					t.Fatal(err)
				}
			}
			// The markers land after EndTransaction returns: wait for the
			// end offsets to take them in (10 + 5 + the marker).
			ends := map[int32]int64{}
			for deadline := time.Now().Add(time.Minute); ; {
				offs, err := adm.ListEndOffsets(ctx, topic)
				done := err == nil && offs.Error() == nil
				if done {
					for p, o := range offs[topic] {
						ends[p] = o.Offset
						done = done && o.Offset == 16
					}
				}
				if done {
					break
				}
				if time.Now().After(deadline) {
					t.Fatalf("end offsets %v, want 16 on each partition (10 records, 5 in a transaction, its marker)", ends)
				}
				time.Sleep(100 * time.Millisecond)
			}
			leader, err := kcluster.Leader(ctx, adm, topic, 0)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := c.Run(ctx, "kill", strconv.Itoa(int(leader))); err != nil {
				t.Fatal(err)
			}
			t.Logf("killed broker %d, the leader of partition 0", leader)

			var (
				mu  sync.Mutex
				got []string
			)
			proc, err := stream.NewProcessor(stream.PerRecord(func(_ context.Context, r *stream.Record) error {
				mu.Lock()
				defer mu.Unlock()
				got = append(got, string(r.Value))
				return nil
			}))
			if err != nil {
				t.Fatal(err)
			}
			cons, err := markersConsumer(adapter, proc, b.Addrs, group, topic)
			if err != nil {
				t.Fatal(err)
			}
			runCtx, stop := context.WithCancel(ctx)
			ran := make(chan error, 1)
			begin := time.Now()
			go func() { ran <- cons.Run(runCtx) }()
			var at map[int32]int64
			var lastErr error
			for deadline := time.Now().Add(90 * time.Second); ; {
				offs, err := adm.FetchOffsets(ctx, group)
				if err == nil {
					err = offs.Error()
				}
				lastErr = err
				at = map[int32]int64{}
				ok := err == nil
				if ok {
					for p := range int32(3) {
						o, found := offs.Lookup(topic, p)
						at[p] = o.At
						ok = ok && found && o.At == ends[p]
					}
				}
				if ok {
					break
				}
				if time.Now().After(deadline) {
					stop()
					<-ran
					t.Fatalf("committed %v after 90s (offset fetch: %v), want the log ends %v (one short: the marker never committed past)", at, lastErr, ends)
				}
				time.Sleep(100 * time.Millisecond)
			}
			took := time.Since(begin)
			stop()
			if err := <-ran; err != nil {
				t.Errorf("Run: %v", err)
			}
			mu.Lock()
			defer mu.Unlock()
			slices.Sort(got)
			slices.Sort(want)
			if !slices.Equal(got, want) {
				t.Errorf("handler saw %d records %q\nwant %d %q", len(got), got, len(want), want)
			}
			for _, v := range got {
				if strings.Contains(v, "2:t") {
					t.Errorf("aborted record %q handed to the handler", v)
				}
			}
			t.Logf("%s: committed the log ends %v (each past its marker) in %v with broker %d down; %d records handled once each",
				adapter, at, took.Round(time.Millisecond), leader, len(got))
		})
	}
}

// markersConsumer builds a read_committed consumer of the named adapter.
func markersConsumer(adapter string, proc *stream.Processor, brokers []string, group, topic string) (interface{ Run(context.Context) error }, error) {
	switch adapter {
	case "franz":
		return franz.New(proc, franz.WithKgoOptions(kgo.SeedBrokers(brokers...), kgo.ConsumerGroup(group), kgo.ConsumeTopics(topic),
			kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()), kgo.FetchMaxWait(100*time.Millisecond),
			kgo.FetchIsolationLevel(kgo.ReadCommitted())))
	case "kafkago":
		return rdkafkago.New(proc, rdkafkago.WithGroupConfig(kafkago.ConsumerGroupConfig{
			ID: group, Brokers: brokers, Topics: []string{topic}, StartOffset: kafkago.FirstOffset,
		}), rdkafkago.WithFetchConfig(kafkago.ReadBatchConfig{MaxWait: 100 * time.Millisecond, IsolationLevel: kafkago.ReadCommitted}))
	case "sarama":
		sc := sarama.NewConfig()
		sc.Version = sarama.V3_9_0_0
		sc.Consumer.Offsets.Initial = sarama.OffsetOldest
		sc.Consumer.IsolationLevel = sarama.ReadCommitted
		return rdsarama.New(proc, rdsarama.WithGroup(brokers, group, topic), rdsarama.WithConfig(sc))
	case "confluent":
		return confluent.New(proc, confluent.WithGroup(kafka.ConfigMap{
			"bootstrap.servers": strings.Join(brokers, ","),
			"group.id":          group,
			"auto.offset.reset": "earliest",
			"isolation.level":   "read_committed",
			"log_level":         3,
		}, topic))
	}
	return nil, fmt.Errorf("no adapter %q", adapter)
}
