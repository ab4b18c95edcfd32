package tests

import (
	"context"
	"fmt"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/segmentio/kafka-go"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/redeliver-go/redeliver/adapters/kafkago"
	"github.com/redeliver-go/redeliver/stream"
)

// benchBatch is the batch size of every loop: the records handled and then
// committed at once, per partition.
const benchBatch = 500

// benchMaxWait is the fetch MaxWait of every loop.
const benchMaxWait = 500 * time.Millisecond

// BenchmarkSuccessPath measures success-path throughput through the
// Processor and this adapter ("redeliver") against raw kafka-go loops with
// the same commit policy, on the same kfake cluster in the same run. Every
// loop joins the group with kafka-go's ConsumerGroup, reads each assigned
// partition in a goroutine of its own, touches every record, and commits
// each batch of at most benchBatch records of a partition synchronously with
// Client.OffsetCommit under the generation:
//
//   - raw: a kafka.Reader per partition (Partition set, no GroupID), read
//     with FetchMessage, the way kafka-go's docs read one partition;
//   - rawconn: a kafka.Conn per partition, read a fetch answer at a time
//     with ReadBatchWith (the adapter's fetch path until it read record
//     batches itself, for their control flags, aborted transactions and
//     leader epochs, which kafka.Conn drops);
//   - redeliver: the adapter and the Processor with a handler that touches
//     each record.
//
// The broker is an in-process kfake cluster, or the external broker named by
// REDELIVER_KAFKA_BROKERS (integration/kafka.sh starts one).
//
// b.N is the number of records: run it with -benchtime=1000000x or so. The
// records/s metric counts from the first record handed to a handler (or
// read by a raw loop) to the commit of the last one, so the group join is
// left out; ns/op includes it. cpu-ns/record is the CPU time of the whole
// process (the in-process broker included, the producing of the records
// not) per record: on a machine shared with other work it varies less than
// the wall-clock figures.
func BenchmarkSuccessPath(b *testing.B) {
	addrs := strings.Split(os.Getenv("REDELIVER_KAFKA_BROKERS"), ",")
	if addrs[0] == "" {
		cluster, err := kfake.NewCluster(kfake.NumBrokers(1))
		if err != nil {
			b.Fatal(err)
		}
		defer cluster.Close()
		addrs = cluster.ListenAddrs()
	}
	var run atomic.Int64
	for _, loop := range []struct {
		name string
		fn   func(b *testing.B, addrs []string, topic string, partitions int32) time.Duration
	}{
		{"raw", rawReaderLoop},
		{"rawconn", rawConnLoop},
		{"redeliver", redeliverLoop},
	} {
		b.Run(loop.name, func(b *testing.B) {
			for _, partitions := range []int32{1, 8} {
				b.Run(fmt.Sprintf("partitions=%d", partitions), func(b *testing.B) {
					topic := fmt.Sprintf("bench-%d", run.Add(1))
					benchProduce(b, addrs, topic, partitions, b.N)
					b.ReportAllocs()
					cpu0 := cpuTime()
					b.ResetTimer()
					d := loop.fn(b, addrs, topic, partitions)
					b.StopTimer()
					b.ReportMetric(float64(b.N)/d.Seconds(), "records/s")
					b.ReportMetric(float64(cpuTime()-cpu0)/float64(b.N), "cpu-ns/record")
					b.ReportMetric(float64(commitCount.Swap(0)), "commits")
					benchDelete(b, addrs, topic)
				})
			}
		})
	}
}

// cpuTime returns the CPU time the process has used, user and system, in
// nanoseconds.
func cpuTime() int64 {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return ru.Utime.Nano() + ru.Stime.Nano()
}

// benchProduce creates topic and spreads n records of 100 bytes over its
// partitions, record i to partition i % partitions. The batches are not
// compressed: 100 zero bytes compress so well that one fetch answer of 1MB
// would hold a whole partition.
func benchProduce(b *testing.B, addrs []string, topic string, partitions int32, n int) {
	b.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(addrs...), kgo.RecordPartitioner(kgo.ManualPartitioner()),
		kgo.ProducerLinger(0), kgo.MaxBufferedRecords(1<<20), kgo.ProducerBatchCompression(kgo.NoCompression()),
		// A new topic's partitions can take a while to get leaders on a
		// real broker: retry until they have (the context bounds it).
		kgo.UnknownTopicRetries(-1))
	if err != nil {
		b.Fatal(err)
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	if resp, err := kadm.NewClient(cl).CreateTopic(ctx, partitions, 1, nil, topic); err != nil || resp.Err != nil {
		b.Fatal(err, resp.Err)
	}
	value := make([]byte, 100)
	var (
		wg    sync.WaitGroup
		first atomic.Value
	)
	for i := range n {
		wg.Add(1)
		cl.Produce(ctx, &kgo.Record{Topic: topic, Partition: int32(i) % partitions, Value: value}, func(_ *kgo.Record, err error) {
			if err != nil {
				first.CompareAndSwap(nil, err)
			}
			wg.Done()
		})
	}
	wg.Wait()
	if err, _ := first.Load().(error); err != nil {
		b.Fatal(err)
	}
}

// benchDelete deletes topic, so that the cluster's memory does not grow
// from run to run.
func benchDelete(b *testing.B, addrs []string, topic string) {
	b.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(addrs...))
	if err != nil {
		b.Fatal(err)
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if _, err := kadm.NewClient(cl).DeleteTopics(ctx, topic); err != nil {
		b.Fatal(err)
	}
}

// perPartition returns how many of n records benchProduce gave each
// partition.
func perPartition(n int, partitions int32) []int {
	per := make([]int, partitions)
	for i := range n {
		per[i%int(partitions)]++
	}
	return per
}

func benchGroup(addrs []string, topic string) kafka.ConsumerGroupConfig {
	return kafka.ConsumerGroupConfig{ID: topic + "-group", Brokers: addrs, Topics: []string{topic}}
}

// rawRun is what the raw loops share: the group's generation, a client to
// commit with, and the time of the first record read.
type rawRun struct {
	b      *testing.B
	gen    *kafka.Generation
	client *kafka.Client
	first  sync.Once
	start  time.Time
	sink   atomic.Int64
}

// rawJoin joins the benchmark's group and runs part for each assigned
// partition in a goroutine of its own, with the partition's record count;
// it returns the time from the first record read to the last commit.
func rawJoin(b *testing.B, addrs []string, topic string, partitions int32,
	part func(ctx context.Context, r *rawRun, partition int, start int64, want int) error) time.Duration {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	cg, err := kafka.NewConsumerGroup(benchGroup(addrs, topic))
	if err != nil {
		b.Fatal(err)
	}
	defer cg.Close()
	gen, err := cg.Next(ctx)
	if err != nil {
		b.Fatal(err)
	}
	// A real broker can still answer "not leader" for a new topic's
	// partitions for a moment after the records were produced: wait until
	// each leader answers, as a consumer would retry (the adapter does).
	for p := range int(partitions) {
		for {
			conn, err := kafka.DefaultDialer.DialLeader(ctx, "tcp", addrs[0], topic, p)
			if err == nil {
				_, err = conn.ReadLastOffset()
				conn.Close()
			}
			if err == nil {
				break
			}
			if ctx.Err() != nil {
				b.Fatalf("partition %d: no leader: %v", p, err)
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
	r := &rawRun{b: b, gen: gen, client: &kafka.Client{Addr: kafka.TCP(addrs...)}}
	per := perPartition(b.N, partitions)
	var (
		wg   sync.WaitGroup
		errs = make(chan error, partitions)
	)
	for _, a := range gen.Assignments[topic] {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := part(ctx, r, a.ID, a.Offset, per[a.ID]); err != nil {
				errs <- fmt.Errorf("partition %d: %w", a.ID, err)
			}
		}()
	}
	wg.Wait()
	end := time.Now()
	close(errs)
	for err := range errs {
		b.Fatal(err)
	}
	return end.Sub(r.start)
}

func (r *rawRun) started() { r.first.Do(func() { r.start = time.Now() }) }

// commit commits next for the partition under the generation, as the
// adapter does.
// commitCount counts the commits of the running leaf, for its "commits"
// metric: every loop should commit about b.N / benchBatch times.
var commitCount atomic.Int64

func (r *rawRun) commit(ctx context.Context, topic string, partition int, next int64) error {
	commitCount.Add(1)
	resp, err := r.client.OffsetCommit(ctx, &kafka.OffsetCommitRequest{
		GroupID: r.gen.GroupID, GenerationID: int(r.gen.ID), MemberID: r.gen.MemberID,
		Topics: map[string][]kafka.OffsetCommit{topic: {{Partition: partition, Offset: next}}},
	})
	if err != nil {
		return err
	}
	for _, p := range resp.Topics[topic] {
		if p.Error != nil {
			return p.Error
		}
	}
	return nil
}

// rawReaderLoop reads each partition with a kafka.Reader.
func rawReaderLoop(b *testing.B, addrs []string, topic string, partitions int32) time.Duration {
	return rawJoin(b, addrs, topic, partitions, func(ctx context.Context, r *rawRun, partition int, start int64, want int) error {
		rd := kafka.NewReader(kafka.ReaderConfig{Brokers: addrs, Topic: topic, Partition: partition,
			MaxWait: benchMaxWait, ReadLagInterval: -1})
		defer rd.Close()
		if err := rd.SetOffset(start); err != nil {
			return err
		}
		sink := 0
		for seen := 0; seen < want; {
			n := min(benchBatch, want-seen)
			var last kafka.Message
			for range n {
				m, err := rd.FetchMessage(ctx)
				if err != nil {
					return err
				}
				r.started()
				sink += len(m.Value)
				last = m
			}
			if err := r.commit(ctx, topic, partition, last.Offset+1); err != nil {
				return err
			}
			seen += n
		}
		r.sink.Add(int64(sink))
		return nil
	})
}

// rawConnLoop reads each partition with a kafka.Conn, a fetch answer at a
// time, and handles and commits each answer in batches.
func rawConnLoop(b *testing.B, addrs []string, topic string, partitions int32) time.Duration {
	return rawJoin(b, addrs, topic, partitions, func(ctx context.Context, r *rawRun, partition int, start int64, want int) error {
		conn, err := kafka.DefaultDialer.DialLeader(ctx, "tcp", addrs[0], topic, partition)
		if err != nil {
			return err
		}
		defer conn.Close()
		if start < 0 {
			if start, err = conn.ReadFirstOffset(); err != nil {
				return err
			}
		}
		if _, err := conn.Seek(start, kafka.SeekAbsolute); err != nil {
			return err
		}
		var (
			msgs []kafka.Message
			sink int
		)
		for seen := 0; seen < want; {
			conn.SetReadDeadline(time.Now().Add(benchMaxWait + 10*time.Second))
			batch := conn.ReadBatchWith(kafka.ReadBatchConfig{MinBytes: 1, MaxBytes: 1e6, MaxWait: benchMaxWait})
			msgs = msgs[:0]
			for {
				m, err := batch.ReadMessage()
				if err != nil {
					break
				}
				msgs = append(msgs, m)
			}
			if err := batch.Close(); err != nil {
				return err
			}
			for i := 0; i < len(msgs); {
				n := min(benchBatch, len(msgs)-i)
				r.started()
				for _, m := range msgs[i : i+n] {
					sink += len(m.Value)
				}
				if err := r.commit(ctx, topic, partition, msgs[i+n-1].Offset+1); err != nil {
					return err
				}
				i += n
				seen += n
			}
			clear(msgs)
		}
		r.sink.Add(int64(sink))
		return nil
	})
}

// redeliverLoop runs the same records through the Processor and the adapter
// with a handler that touches each record, until every partition's
// checkpoint is at its end.
func redeliverLoop(b *testing.B, addrs []string, topic string, _ int32) time.Duration {
	var (
		startOnce sync.Once
		start     time.Time
		sink      atomic.Int64
		mu        sync.Mutex
		next      = make(map[int32]int64)
		total     int64
		done      = make(chan time.Time, 1)
	)
	h := stream.HandlerFunc(func(_ context.Context, bt *stream.Batch) error {
		startOnce.Do(func() { start = time.Now() })
		n := 0
		for i := range bt.Records {
			n += len(bt.Records[i].Value)
		}
		sink.Add(int64(n))
		return nil
	})
	hooks := stream.Hooks{Checkpointed: func(e stream.CheckpointEvent) {
		mu.Lock()
		defer mu.Unlock()
		commitCount.Add(1)
		total += e.Next - next[e.Partition]
		next[e.Partition] = e.Next
		if total == int64(b.N) {
			done <- time.Now()
		}
	}}
	proc, err := stream.NewProcessor(h, stream.WithHooks(hooks))
	if err != nil {
		b.Fatal(err)
	}
	c, err := kafkago.New(proc, kafkago.WithGroupConfig(benchGroup(addrs, topic)), kafkago.WithMaxBatch(benchBatch),
		kafkago.WithFetchConfig(kafka.ReadBatchConfig{MaxWait: benchMaxWait}))
	if err != nil {
		b.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	stopped := make(chan error, 1)
	go func() { stopped <- c.Run(ctx) }()
	defer func() {
		cancel()
		<-stopped
	}()
	select {
	case end := <-done:
		return end.Sub(start)
	case err := <-stopped:
		b.Fatalf("consumer stopped: %v", err)
	case <-time.After(5 * time.Minute):
		b.Fatal("records not all committed in 5 minutes")
	}
	return 0
}
