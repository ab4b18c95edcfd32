package integration_test

import (
	"context"
	"errors"
	"math"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/segmentio/kafka-go"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/redeliver-go/redeliver/adapters/franz"
	"github.com/redeliver-go/redeliver/adapters/kafkago"
	"github.com/redeliver-go/redeliver/checkpoint"
	"github.com/redeliver-go/redeliver/internal/retrystate"
	"github.com/redeliver-go/redeliver/stream"
	"github.com/redeliver-go/redeliver/stream/streamtest"
)

// Limits of Event Hubs' Kafka endpoint that the Kafka adapters meet
// (Azure's "Apache Kafka for Event Hubs" quotas and client configuration
// pages): offset commit metadata of at most 1024 bytes (Kafka's default
// is 4096), a consumer group session timeout between 6s and 300s, messages
// of at most 1 MB, and the classic consumer group protocol only (no
// KIP-848). kfake enforces the session timeouts and the message size when
// told; it does not limit commit metadata, so this test answers every
// OffsetCommit itself, refusing metadata over 1024 bytes with
// OFFSET_METADATA_TOO_LARGE as Event Hubs does, and measures what the
// adapters sent.
const (
	ehMaxMetadata   = 1024
	ehMinSession    = 6 * time.Second
	ehMaxSession    = 300 * time.Second
	ehMaxMessageLen = 1 << 20
)

// ehKafkaCluster is kfake set up with the Event Hubs endpoint's limits; it
// records the longest commit metadata and the commits it refused.
type ehKafkaCluster struct {
	*kfake.Cluster
	longest  atomic.Int64
	refused  atomic.Int64
	commits  atomic.Int64
	withMeta atomic.Int64
}

func newEHKafka(t *testing.T) *ehKafkaCluster {
	t.Helper()
	c, err := kfake.NewCluster(kfake.NumBrokers(1),
		kfake.GroupMinSessionTimeout(ehMinSession), kfake.GroupMaxSessionTimeout(ehMaxSession),
		kfake.BrokerConfigs(map[string]string{"message.max.bytes": "1048576"}))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	eh := &ehKafkaCluster{Cluster: c}
	c.ControlKey(int16(kmsg.OffsetCommit), func(kr kmsg.Request) (kmsg.Response, error, bool) {
		c.KeepControl()
		req := kr.(*kmsg.OffsetCommitRequest)
		eh.commits.Add(1)
		tooLarge := false
		for _, rt := range req.Topics {
			for _, rp := range rt.Partitions {
				n := int64(0)
				if rp.Metadata != nil {
					n = int64(len(*rp.Metadata))
				}
				if n > 0 {
					eh.withMeta.Add(1)
				}
				for cur := eh.longest.Load(); n > cur && !eh.longest.CompareAndSwap(cur, n); cur = eh.longest.Load() {
				}
				if n > ehMaxMetadata {
					tooLarge = true
				}
			}
		}
		if !tooLarge {
			return nil, nil, false // kfake commits it
		}
		eh.refused.Add(1)
		resp := req.ResponseKind().(*kmsg.OffsetCommitResponse)
		for _, rt := range req.Topics {
			st := kmsg.NewOffsetCommitResponseTopic()
			st.Topic = rt.Topic
			for _, rp := range rt.Partitions {
				sp := kmsg.NewOffsetCommitResponseTopicPartition()
				sp.Partition, sp.ErrorCode = rp.Partition, kerr.OffsetMetadataTooLarge.Code
				st.Partitions = append(st.Partitions, sp)
			}
			resp.Topics = append(resp.Topics, st)
		}
		return resp, nil, true
	})
	return eh
}

// The retry state the engine writes stays under the endpoint's limit even
// at its largest: the most retries an int holds, times far in the future,
// the longest delay, the longest offset and record count, and a last
// error whose 128 bytes kept are all escaped.
func TestRetryStateFitsEventHubsKafkaMetadata(t *testing.T) {
	far := time.Date(9999, 12, 31, 23, 59, 59, 999e6, time.UTC)
	md := retrystate.EncodeState(retrystate.State{Offset: math.MaxInt64, Retries: math.MaxInt, FirstFailure: far, LastDelay: time.Duration(math.MaxInt64), NextAt: far,
		OutageTime: time.Duration(math.MaxInt64), Started: true, Request: retrystate.Request{MaxRetries: math.MaxInt, Delay: time.Duration(math.MaxInt64)},
		GivenUp: checkpoint.NotRetryable, LastError: strings.Repeat(";", 500), Records: math.MaxInt, Alone: true, Halted: true})
	if len(md) > ehMaxMetadata {
		t.Fatalf("the largest retry state is %d bytes, over Event Hubs' %d: %q", len(md), ehMaxMetadata, md)
	}
	t.Logf("largest retry state: %d bytes (%q)", len(md), md)
}

// Both Kafka adapters consume through a broker with the Event Hubs Kafka
// endpoint's limits, withholding and retrying batches: every record
// handled, every partition committed to its end, no commit refused, and
// every metadata string within 1024 bytes.
func TestKafkaAdaptersOnEventHubsKafkaLimits(t *testing.T) {
	for _, tc := range []struct {
		name string
		run  func(ctx context.Context, t *testing.T, addrs []string, group, topic string, proc *stream.Processor) error
	}{
		{"franz", func(ctx context.Context, t *testing.T, addrs []string, group, topic string, proc *stream.Processor) error {
			c, err := franz.New(proc, franz.WithMaxBatch(10), franz.WithKgoOptions(
				kgo.SeedBrokers(addrs...), kgo.ConsumerGroup(group), kgo.ConsumeTopics(topic),
				kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()),
				kgo.SessionTimeout(30*time.Second), kgo.HeartbeatInterval(3*time.Second), // Azure's recommended values
				kgo.FetchMaxWait(100*time.Millisecond)))
			if err != nil {
				return err
			}
			return c.Run(ctx)
		}},
		{"kafkago", func(ctx context.Context, t *testing.T, addrs []string, group, topic string, proc *stream.Processor) error {
			c, err := kafkago.New(proc, kafkago.WithMaxBatch(10), kafkago.WithGroupConfig(kafka.ConsumerGroupConfig{
				ID: group, Brokers: addrs, Topics: []string{topic}, StartOffset: kafka.FirstOffset,
				SessionTimeout: 30 * time.Second, HeartbeatInterval: 3 * time.Second}))
			if err != nil {
				return err
			}
			return c.Run(ctx)
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			eh := newEHKafka(t)
			const parts, n = 3, 60
			topic, group := "eh-orders", "eh-billing"
			cl, err := kgo.NewClient(kgo.SeedBrokers(eh.ListenAddrs()...), kgo.RecordPartitioner(kgo.ManualPartitioner()))
			if err != nil {
				t.Fatal(err)
			}
			defer cl.Close()
			adm := kadm.NewClient(cl)
			ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
			defer cancel()
			if _, err := adm.CreateTopic(ctx, parts, 1, nil, topic); err != nil {
				t.Fatal(err)
			}
			for p := range int32(parts) {
				for i := range n {
					r := &kgo.Record{Topic: topic, Partition: p, Value: []byte{byte(i)}}
					if err := cl.ProduceSync(ctx, r).FirstErr(); err != nil {
						t.Fatal(err)
					}
				}
			}
			big := &kgo.Record{Topic: topic, Partition: 0, Value: make([]byte, ehMaxMessageLen+1)}
			if err := cl.ProduceSync(ctx, big).FirstErr(); !errors.Is(err, kerr.MessageTooLarge) && !errors.Is(err, kerr.RecordListTooLarge) {
				t.Fatalf("a record over 1 MB was not refused (%v): the broker is not set up with the endpoint's limits", err)
			}

			var hist streamtest.History
			var mu sync.Mutex
			tries := map[[2]int64]int{}
			handler := stream.HandlerFunc(func(_ context.Context, b *stream.Batch) error {
				mu.Lock()
				defer mu.Unlock()
				k := [2]int64{int64(b.Partition), b.FirstOffset()}
				tries[k]++
				if b.FirstOffset() <= 20 && 20 <= b.LastOffset() && tries[k] <= 2 {
					return errors.New("downstream unavailable")
				}
				return nil
			})
			proc, err := stream.NewProcessor(handler, stream.WithHooks(hist.Hooks("a")),
				stream.WithPolicy(checkpoint.Policy{MaxRetries: 5, Backoff: checkpoint.Fixed(50 * time.Millisecond)}))
			if err != nil {
				t.Fatal(err)
			}
			runCtx, stop := context.WithCancel(ctx)
			done := make(chan error, 1)
			go func() { done <- tc.run(runCtx, t, eh.ListenAddrs(), group, topic, proc) }()
			for {
				offs, err := adm.FetchOffsets(ctx, group)
				total := int64(0)
				if err == nil {
					for _, o := range offs[topic] {
						total += max(o.Offset.At, 0)
					}
				}
				if total == parts*n {
					break
				}
				if ctx.Err() != nil {
					t.Fatalf("committed offsets add up to %d, want %d", total, parts*n)
				}
				time.Sleep(20 * time.Millisecond)
			}
			stop()
			<-done
			ends := map[streamtest.TopicPartition]int64{}
			for p := range int32(parts) {
				ends[streamtest.TopicPartition{Topic: topic, Partition: p}] = n
			}
			r := hist.Check(ends)
			for _, v := range r.Violations {
				t.Error(v)
			}
			if eh.withMeta.Load() == 0 {
				t.Error("no commit carried retry state: the test did not exercise the metadata limit")
			}
			if eh.refused.Load() != 0 || eh.longest.Load() > ehMaxMetadata {
				t.Errorf("%d commits refused for metadata over %d bytes; the longest was %d bytes", eh.refused.Load(), ehMaxMetadata, eh.longest.Load())
			}
			t.Logf("%d offset commits, %d partitions with retry state, longest metadata %d bytes (limit %d)",
				eh.commits.Load(), eh.withMeta.Load(), eh.longest.Load(), ehMaxMetadata)
		})
	}
}
