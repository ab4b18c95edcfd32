package bench

import (
	"context"
	"fmt"
	"os"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/IBM/sarama"
	"github.com/ThreeDotsLabs/watermill"
	wkafka "github.com/ThreeDotsLabs/watermill-kafka/v3/pkg/kafka"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/ThreeDotsLabs/watermill/message/router/middleware"
	"github.com/segmentio/kafka-go"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/redeliver-go/redeliver/adapters/franz"
	"github.com/redeliver-go/redeliver/adapters/kafkago"
	"github.com/redeliver-go/redeliver/checkpoint"
	"github.com/redeliver-go/redeliver/stream"
)

// BenchmarkPeersFailure runs one scenario through redeliver and through
// the consumers a user would otherwise write or pick, each leaf
// <peer>/partitions=<P> over a fresh topic of an in-process kfake cluster
// (or of the broker named by REDELIVER_KAFKA_BROKERS): b.N records of 100
// bytes spread over P partitions (record i to partition i % P), of which
// every 5,000th (i % 5000 == 4999, the same records for every peer) fails
// on its first delivery and succeeds when retried 1 ms later.
//
// The peers:
//
//   - franz-inplace: a raw franz-go group consumer (autocommit off,
//     BlockRebalanceOnPoll): PollRecords(ctx, 500), handle every record;
//     when one fails, sleep 1 ms and handle the whole poll again;
//     CommitUncommittedOffsets (synchronous), AllowRebalance.
//   - kafkago-reader: segmentio/kafka-go's kafka.Reader with a GroupID, the
//     way kafka-go's documentation consumes a group: one reader, one
//     goroutine, FetchMessage for every partition in turn; a failed message
//     is handled again in place after 1 ms; CommitMessages (synchronous:
//     CommitInterval 0) every 500 messages.
//   - watermill: Watermill's Kafka subscriber (watermill-kafka, on
//     IBM/sarama's consumer group) in a watermill Router with the Retry
//     middleware (MaxRetries 1, 1 ms apart, no jitter). The subscriber
//     hands a partition's messages out one at a time and marks each acked
//     one; sarama commits the marks in the background (autocommit).
//   - redeliver-franz, redeliver-kafkago: the Processor through each
//     adapter, batches of up to 500 records of a partition, a policy of one
//     retry 1 ms later; a batch holding a failing record fails as a whole
//     and is redelivered whole.
//
// Every peer fetches with a 500 ms fetch max wait and its client's other
// fetch defaults. What differs, because the peers differ:
//
//   - batch: 500 records per poll (franz-inplace), per batch (redeliver),
//     per commit (kafkago-reader); watermill has no batch, a message is
//     handled and acked alone.
//   - commits: synchronous, one per poll (franz-inplace) or per 500
//     messages (kafkago-reader); redeliver writes a batch's retry state
//     before its retry and coalesces success commits in the background
//     (the adapters' commit window), and its time ends when the group's
//     offsets are at every partition's end; watermill's sarama commits what was acked every
//     100 ms in the background (AutoCommit.Interval, shortened from sarama's
//     1 s so that the interval adds at most 100 ms to the figure). sarama
//     sends its commits on the connection its fetches use, and a broker
//     answers a connection's requests in order: once the partitions are
//     caught up, a commit waits for the long poll in flight, up to the fetch
//     max wait (commit-tail-ms shows it; it was 500 ms with 8 partitions
//     and 1 s with one, 100 and 200 ms with a 100 ms fetch max wait).
//   - the unit that fails and is retried: the whole poll, across partitions
//     (franz-inplace), the message (kafkago-reader, watermill), a
//     partition's batch (redeliver).
//
// records/s counts, the same way for every peer, from the first record
// handed to the peer's handling code to the moment every record was
// handled and the group's commits reached every partition's end: for the
// peers that commit synchronously the return of the last commit, for
// watermill the first look (every millisecond, once every record is
// handled) at the group's offsets that finds them at the end.
// commit-tail-ms is the part of that time after the last record was
// handled: the wait for the last commit. ns/op includes the group join. cpu-ns/record is the CPU time of the whole
// process per record (the in-process broker included, the producing of the
// records not); duplicates counts records handled more than once. Every
// leaf fails unless every record was handled, every chosen record failed
// once, and the commits reached every partition's end.
//
// b.N is the number of records: run each leaf in a process of its own with
// -benchtime=1000000x or so (scripts/bench.sh does).
func BenchmarkPeersFailure(b *testing.B) {
	addrs := benchAddrs(b)
	for _, peer := range peers {
		b.Run(peer.name, func(b *testing.B) {
			for _, partitions := range []int32{1, 8} {
				b.Run(fmt.Sprintf("partitions=%d", partitions), func(b *testing.B) {
					topic := fmt.Sprintf("peers-%d-%d", os.Getpid(), benchRun.Add(1))
					benchProduce(b, addrs, topic, partitions, b.N)
					l := newLeaf(b, partitions)
					b.ReportAllocs()
					cpu0 := cpuTime()
					b.ResetTimer()
					end := peer.fn(l, addrs, topic)
					b.StopTimer()
					cpu := cpuTime() - cpu0
					dup := l.check()
					checkCommitted(l, addrs, topic)
					b.ReportMetric(float64(b.N)/l.elapsed(end).Seconds(), "records/s")
					b.ReportMetric(float64(cpu)/float64(b.N), "cpu-ns/record")
					b.ReportMetric(float64(l.tail(end).Microseconds())/1e3, "commit-tail-ms")
					b.ReportMetric(float64(dup), "duplicates")
					benchDelete(b, addrs, topic)
				})
			}
		})
	}
}

var benchRun atomic.Int64

// peerFn consumes the leaf's topic until every record was handled and
// committed, and returns when the commits reached every partition's end.
type peerFn func(l *leaf, addrs []string, topic string) time.Time

var peers = []struct {
	name string
	fn   peerFn
}{
	{"franz-inplace", franzInPlace},
	{"kafkago-reader", kafkagoReader},
	{"watermill", watermillRouter},
	{"redeliver-franz", redeliverFranz},
	{"redeliver-kafkago", redeliverKafkago},
}

// franzInPlace is the raw franz-go loop that retries a poll in place.
func franzInPlace(l *leaf, addrs []string, topic string) time.Time {
	b := l.b
	cl, err := kgo.NewClient(
		kgo.SeedBrokers(addrs...),
		kgo.ConsumerGroup(groupOf(topic)),
		kgo.ConsumeTopics(topic),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()),
		kgo.FetchMaxWait(benchMaxWait),
		kgo.DisableAutoCommit(),
		kgo.BlockRebalanceOnPoll(),
	)
	if err != nil {
		b.Fatal(err)
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), benchTimeout)
	defer cancel()
	var end time.Time
	for seen := 0; seen < b.N; {
		fs := cl.PollRecords(ctx, benchBatch)
		if err := ctx.Err(); err != nil {
			b.Fatalf("%d of %d records: %v", seen, b.N, err)
		}
		fs.EachError(func(t string, p int32, err error) { b.Fatalf("fetch %s/%d: %v", t, p, err) })
		n := fs.NumRecords()
		if n == 0 {
			continue
		}
		l.started()
		for l.batchFails(func(yield func(int32, int64) bool) {
			fs.EachRecord(func(r *kgo.Record) { yield(r.Partition, r.Offset) })
		}) {
			time.Sleep(failDelay)
		}
		fs.EachRecord(func(r *kgo.Record) { l.handle(r.Partition, r.Offset, len(r.Value)) })
		if err := cl.CommitUncommittedOffsets(ctx); err != nil {
			b.Fatalf("commit: %v", err)
		}
		end = time.Now()
		cl.AllowRebalance()
		seen += n
	}
	return end
}

// kafkagoReader reads the group with one kafka.Reader, retries a failed
// message in place and commits every benchBatch messages.
func kafkagoReader(l *leaf, addrs []string, topic string) time.Time {
	b := l.b
	rd := kafka.NewReader(kafka.ReaderConfig{
		Brokers:     addrs,
		GroupID:     groupOf(topic),
		Topic:       topic,
		StartOffset: kafka.FirstOffset,
		MaxWait:     benchMaxWait,
		// CommitInterval 0: CommitMessages commits synchronously.
	})
	defer rd.Close()
	ctx, cancel := context.WithTimeout(context.Background(), benchTimeout)
	defer cancel()
	var (
		end     time.Time
		pending = make([]kafka.Message, 0, benchBatch)
	)
	for seen := 0; seen < b.N; seen++ {
		m, err := rd.FetchMessage(ctx)
		if err != nil {
			b.Fatalf("%d of %d records: %v", seen, b.N, err)
		}
		l.started()
		for l.failsNow(int32(m.Partition), m.Offset) {
			time.Sleep(failDelay)
		}
		l.handle(int32(m.Partition), m.Offset, len(m.Value))
		pending = append(pending, m)
		if len(pending) == benchBatch || seen == b.N-1 {
			if err := rd.CommitMessages(ctx, pending...); err != nil {
				b.Fatalf("commit: %v", err)
			}
			end = time.Now()
			clear(pending)
			pending = pending[:0]
		}
	}
	return end
}

// watermillRouter consumes the group through Watermill's Kafka subscriber
// and a Router with the Retry middleware.
func watermillRouter(l *leaf, addrs []string, topic string) time.Time {
	b := l.b
	cfg := wkafka.DefaultSaramaSubscriberConfig()
	cfg.Consumer.Offsets.Initial = sarama.OffsetOldest
	cfg.Consumer.MaxWaitTime = benchMaxWait
	cfg.Consumer.Offsets.AutoCommit.Interval = 100 * time.Millisecond
	logger := watermill.NopLogger{}
	sub, err := wkafka.NewSubscriber(wkafka.SubscriberConfig{
		Brokers:               addrs,
		Unmarshaler:           wkafka.DefaultMarshaler{},
		OverwriteSaramaConfig: cfg,
		ConsumerGroup:         groupOf(topic),
	}, logger)
	if err != nil {
		b.Fatal(err)
	}
	router, err := message.NewRouter(message.RouterConfig{CloseTimeout: 10 * time.Second}, logger)
	if err != nil {
		b.Fatal(err)
	}
	router.AddMiddleware(middleware.Retry{
		MaxRetries:      1,
		InitialInterval: failDelay,
		MaxInterval:     failDelay,
		Multiplier:      1,
	}.Middleware)
	router.AddConsumerHandler("peers", topic, sub, func(msg *message.Message) error {
		l.started()
		p, ok1 := wkafka.MessagePartitionFromCtx(msg.Context())
		off, ok2 := wkafka.MessagePartitionOffsetFromCtx(msg.Context())
		if !ok1 || !ok2 {
			l.fail(fmt.Errorf("watermill: a message without its partition or offset"))
			return nil
		}
		if l.failsNow(p, off) {
			return errBench
		}
		l.handle(p, off, len(msg.Payload))
		return nil
	})
	stopped := make(chan struct{})
	go func() {
		defer close(stopped)
		if err := router.Run(context.Background()); err != nil {
			l.fail(fmt.Errorf("watermill router: %w", err))
		}
	}()
	defer func() {
		if err := router.Close(); err != nil {
			b.Error(err)
		}
		<-stopped
	}()
	// A client for the group's offsets, made before the records flow.
	cl, err := kgo.NewClient(kgo.SeedBrokers(addrs...))
	if err != nil {
		b.Fatal(err)
	}
	defer cl.Close()
	adm := kadm.NewClient(cl)
	ctx, cancel := context.WithTimeout(context.Background(), benchTimeout)
	defer cancel()
	l.waitAll(stopped)
	for {
		gap, err := commitGap(ctx, adm, l, topic)
		if err != nil {
			b.Fatalf("the group's offsets: %v", err)
		}
		if gap == "" {
			return time.Now()
		}
		select {
		case <-ctx.Done():
			b.Fatalf("the commits did not reach the end in %v: %s", benchTimeout, gap)
		case <-time.After(time.Millisecond):
		}
	}
}

// processorFor returns a Processor whose handler fails a batch holding a
// failing record, and a channel that gets the time at which the commits
// reached every partition's end.
func processorFor(l *leaf, tel ...telemetry) (*stream.Processor, <-chan time.Time) {
	var (
		mu    sync.Mutex
		next  = make(map[int32]int64)
		total int64
		done  = make(chan time.Time, 1)
	)
	h := stream.HandlerFunc(func(_ context.Context, bt *stream.Batch) error {
		l.started()
		if l.batchFails(func(yield func(int32, int64) bool) {
			for i := range bt.Records {
				if !yield(bt.Partition, bt.Records[i].Offset) {
					return
				}
			}
		}) {
			return errBench
		}
		for i := range bt.Records {
			l.handle(bt.Partition, bt.Records[i].Offset, len(bt.Records[i].Value))
		}
		return nil
	})
	hooks := stream.Hooks{
		Checkpointed: func(e stream.CheckpointEvent) {
			if e.Metadata != "" {
				return // the retry state of a withheld batch
			}
			mu.Lock()
			defer mu.Unlock()
			total += e.Next - next[e.Partition]
			next[e.Partition] = e.Next
			if total == int64(l.b.N) {
				done <- time.Now()
			}
		},
		Exhausted: func(e stream.ExhaustedEvent) {
			l.fail(fmt.Errorf("partition %d: batch %d-%d given up", e.Partition, e.FirstOffset, e.LastOffset))
		},
	}
	var handler stream.Handler = h
	for _, t := range tel {
		hooks = stream.MergeHooks(hooks, t.hooks)
		if t.mw != nil {
			handler = stream.Chain(handler, t.mw)
		}
	}
	proc, err := stream.NewProcessor(handler, stream.WithHooks(hooks),
		stream.WithPolicy(checkpoint.Policy{MaxRetries: 1, Backoff: checkpoint.Fixed(failDelay)}))
	if err != nil {
		l.b.Fatal(err)
	}
	return proc, done
}

// runConsumer runs a redeliver consumer until the commits reach every
// partition's end: once the engine has reported the last checkpoint, it
// reads the group's offsets until they are there, as the adapters write
// success commits in the background (their commit window).
func runConsumer(l *leaf, addrs []string, topic string, run func(context.Context) error, done <-chan time.Time) time.Time {
	b := l.b
	cl, err := kgo.NewClient(kgo.SeedBrokers(addrs...))
	if err != nil {
		b.Fatal(err)
	}
	defer cl.Close()
	adm := kadm.NewClient(cl)
	ctx, cancel := context.WithCancel(context.Background())
	stopped := make(chan error, 1)
	go func() { stopped <- run(ctx) }()
	defer func() {
		cancel()
		<-stopped
	}()
	select {
	case <-done:
		wctx, wcancel := context.WithTimeout(ctx, benchTimeout)
		defer wcancel()
		for {
			gap, err := commitGap(wctx, adm, l, topic)
			if err != nil {
				b.Fatalf("the group's offsets: %v", err)
			}
			if gap == "" {
				return time.Now()
			}
			time.Sleep(100 * time.Microsecond)
		}
	case err := <-stopped:
		b.Fatalf("consumer stopped: %v", err)
	case <-time.After(benchTimeout):
		b.Fatalf("records not all committed in %v", benchTimeout)
	}
	return time.Time{}
}

// redeliverFranz runs the Processor through the franz-go adapter.
func redeliverFranz(l *leaf, addrs []string, topic string) time.Time {
	return franzWith(l, addrs, topic)
}

// franzWith runs the Processor through the franz-go adapter, with tel's
// hooks and middleware, if any.
func franzWith(l *leaf, addrs []string, topic string, tel ...telemetry) time.Time {
	proc, done := processorFor(l, tel...)
	c, err := franz.New(proc, franz.WithMaxBatch(benchBatch), franz.WithKgoOptions(
		kgo.SeedBrokers(addrs...),
		kgo.ConsumerGroup(groupOf(topic)),
		kgo.ConsumeTopics(topic),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()),
		kgo.FetchMaxWait(benchMaxWait),
	))
	if err != nil {
		l.b.Fatal(err)
	}
	return runConsumer(l, addrs, topic, c.Run, done)
}

// redeliverKafkago runs the Processor through the kafka-go adapter.
func redeliverKafkago(l *leaf, addrs []string, topic string) time.Time {
	proc, done := processorFor(l)
	c, err := kafkago.New(proc, kafkago.WithMaxBatch(benchBatch),
		kafkago.WithGroupConfig(kafka.ConsumerGroupConfig{ID: groupOf(topic), Brokers: addrs, Topics: []string{topic}}),
		kafkago.WithFetchConfig(kafka.ReadBatchConfig{MaxWait: benchMaxWait}))
	if err != nil {
		l.b.Fatal(err)
	}
	return runConsumer(l, addrs, topic, c.Run, done)
}
