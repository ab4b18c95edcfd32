package share_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/redeliver-go/redeliver/adapters/franz"
	"github.com/redeliver-go/redeliver/adapters/franz/share"
	"github.com/redeliver-go/redeliver/checkpoint"
	"github.com/redeliver-go/redeliver/stream"
)

var benchRun atomic.Int64

// benchID keeps the topics and groups of one run apart from an earlier
// run's on a real broker.
var benchID = strconv.FormatInt(time.Now().UnixNano(), 36)

// benchCluster starts a kfake cluster whose share groups heartbeat every
// 100ms, so that a group's assignment settles in well under a second (the
// benchmarks wait for it before the records are made visible), with the
// broker configs given. With REDELIVER_KAFKA_BROKERS set it returns that
// broker instead (integration/kafka.sh starts one whose share groups
// heartbeat every 500ms), and skips a benchmark that needs broker configs.
func benchCluster(b *testing.B, configs map[string]string) []string {
	b.Helper()
	if brokers := os.Getenv("REDELIVER_KAFKA_BROKERS"); brokers != "" {
		if len(configs) > 0 {
			b.Skipf("needs broker configs %v: kfake only", configs)
		}
		return strings.Split(brokers, ",")
	}
	cfg := map[string]string{"group.share.heartbeat.interval.ms": "100"}
	for k, v := range configs {
		cfg[k] = v
	}
	c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.BrokerConfigs(cfg))
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(c.Close)
	return c.ListenAddrs()
}

// benchProduce creates topic with partitions and spreads n records of 100
// bytes over them, in one transaction that it leaves open: the records are
// invisible to read-committed consumers until commit is called. So the
// consumers can join and settle first, and then all get the same records
// at once.
func benchProduce(b *testing.B, addrs []string, topic string, partitions int32, n int) (commit func()) {
	b.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(addrs...), kgo.RecordPartitioner(kgo.ManualPartitioner()), kgo.ProducerLinger(0),
		kgo.TransactionalID(topic+"-tx"), kgo.TransactionTimeout(2*time.Minute))
	if err != nil {
		b.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	if _, err := kadm.NewClient(cl).CreateTopic(ctx, partitions, 1, nil, topic); err != nil {
		b.Fatal(err)
	}
	if err := cl.BeginTransaction(); err != nil {
		b.Fatal(err)
	}
	value := make([]byte, 100)
	recs := make([]*kgo.Record, 0, 10000)
	for i := range n {
		recs = append(recs, &kgo.Record{Topic: topic, Partition: int32(i) % partitions, Value: value})
		if len(recs) == cap(recs) || i == n-1 {
			if err := cl.ProduceSync(ctx, recs...).FirstErr(); err != nil {
				b.Fatal(err)
			}
			recs = recs[:0]
		}
	}
	return func() {
		defer cl.Close()
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		if err := cl.EndTransaction(ctx, kgo.TryCommit); err != nil {
			b.Fatal(err)
		}
	}
}

// shareGroupConfig makes a share group read from the earliest offset and
// only committed records, before any member joins.
func shareGroupConfig(b *testing.B, addrs []string, group string) {
	b.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(addrs...))
	if err != nil {
		b.Fatal(err)
	}
	defer cl.Close()
	req := kmsg.NewPtrIncrementalAlterConfigsRequest()
	res := kmsg.NewIncrementalAlterConfigsRequestResource()
	res.ResourceType, res.ResourceName = kmsg.ConfigResourceTypeGroupConfig, group
	for _, kv := range [][2]string{{"share.auto.offset.reset", "earliest"}, {"share.isolation.level", "read_committed"}} {
		c := kmsg.NewIncrementalAlterConfigsRequestResourceConfig()
		v := kv[1]
		c.Name, c.Op, c.Value = kv[0], kmsg.IncrementalAlterConfigOpSet, &v
		res.Configs = append(res.Configs, c)
	}
	req.Resources = append(req.Resources, res)
	resp, err := req.RequestWith(context.Background(), cl)
	if err != nil {
		b.Fatal(err)
	}
	for _, r := range resp.Resources {
		if r.ErrorCode != 0 {
			b.Fatalf("configuring share group %s: error code %d", group, r.ErrorCode)
		}
	}
}

// settled waits until the share group has the given number of members,
// each at the group's epoch (it knows its latest assignment) with a
// partition or more, and every partition of the topic is assigned: the
// steady state of a long-running consumer, which a member that joined
// last reaches one heartbeat after the others.
func settled(b *testing.B, addrs []string, group, topic string, members int, partitions int32) {
	b.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(addrs...))
	if err != nil {
		b.Fatal(err)
	}
	defer cl.Close()
	adm := kadm.NewClient(cl)
	deadline := time.Now().Add(time.Minute)
	last := "not described"
	for time.Now().Before(deadline) {
		ds, err := adm.DescribeShareGroups(context.Background(), group)
		if err == nil {
			d := ds[group]
			covered := map[int32]bool{}
			ok := d.Err == nil && len(d.Members) == members
			for _, m := range d.Members {
				ok = ok && m.MemberEpoch == d.GroupEpoch && len(m.Assignment[topic]) > 0
				for p := range m.Assignment[topic] {
					covered[p] = true
				}
			}
			if ok && len(covered) == int(partitions) {
				return
			}
			last = fmt.Sprintf("%d members, group epoch %d, %d partitions covered", len(d.Members), d.GroupEpoch, len(covered))
		}
		time.Sleep(20 * time.Millisecond)
	}
	b.Fatalf("share group %s did not settle within a minute: %s", group, last)
}

// BenchmarkShareSuccessPath compares the share consumer with a raw
// franz-go share-group loop (poll, touch and accept every record, poll
// again) on the same kfake cluster in the same run. b.N is the number of
// records: run it with -benchtime=100000x or so. Each loop joins its group
// and waits until the group's assignment has settled; then the records
// become visible at once (a committed transaction, read by read-committed
// groups). records/s counts from the first record handed out to the
// acceptance of the last one: the steady state of a long-running
// consumer, with the join left out of both.
func BenchmarkShareSuccessPath(b *testing.B) {
	addrs := benchCluster(b, nil)
	for _, loop := range []struct {
		name string
		fn   func(b *testing.B, addrs []string, topic string, partitions int32, commit func()) time.Duration
	}{
		{"raw", rawShareLoop},
		{"share", shareLoop},
	} {
		b.Run(loop.name, func(b *testing.B) {
			for _, partitions := range []int32{1, 8} {
				b.Run(fmt.Sprintf("partitions=%d", partitions), func(b *testing.B) {
					topic := fmt.Sprintf("bench-%s-%d", benchID, benchRun.Add(1))
					commit := benchProduce(b, addrs, topic, partitions, b.N)
					b.ReportAllocs()
					b.ResetTimer()
					d := loop.fn(b, addrs, topic, partitions, commit)
					b.StopTimer()
					b.ReportMetric(float64(b.N)/d.Seconds(), "records/s")
				})
			}
		})
	}
}

func rawShareLoop(b *testing.B, addrs []string, topic string, partitions int32, commit func()) time.Duration {
	group := topic + "-group"
	shareGroupConfig(b, addrs, group)
	cl, err := kgo.NewClient(kgo.SeedBrokers(addrs...), kgo.ShareGroup(group), kgo.ConsumeTopics(topic), kgo.FetchMaxWait(100*time.Millisecond))
	if err != nil {
		b.Fatal(err)
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	go func() {
		// The member joins at its first poll: commit once it has.
		settled(b, addrs, group, topic, 1, partitions)
		commit()
	}()
	var start time.Time
	seen, sink := 0, 0
	for seen < b.N {
		fs := cl.PollFetches(ctx)
		if err := ctx.Err(); err != nil {
			b.Fatalf("raw loop: %d of %d records: %v", seen, b.N, err)
		}
		fs.EachRecord(func(r *kgo.Record) {
			if start.IsZero() {
				start = time.Now()
			}
			sink += len(r.Value)
			r.Ack(kgo.AckAccept)
			seen++
		})
	}
	if err := cl.FlushAcks(ctx); err != nil {
		b.Fatal(err)
	}
	_ = sink
	return time.Since(start)
}

// benchLanes is the number of lanes of the share consumer in the success
// path: the default, or REDELIVER_SHARE_BENCH_LANES for experiments.
func benchLanes() int {
	if n, err := strconv.Atoi(os.Getenv("REDELIVER_SHARE_BENCH_LANES")); err == nil && n > 0 {
		return n
	}
	return 4
}

func shareLoop(b *testing.B, addrs []string, topic string, partitions int32, commit func()) time.Duration {
	var (
		startOnce sync.Once
		start     time.Time
		accepted  atomic.Int64
		sink      atomic.Int64
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
	// A delivery that succeeded accepts its records: count them from the
	// Delivered hook, once per batch.
	proc, err := stream.NewProcessor(h, stream.WithHooks(stream.Hooks{Delivered: func(e stream.DeliveredEvent) {
		if e.Outcome == stream.Succeeded && accepted.Add(int64(e.Records)) == int64(b.N) {
			done <- time.Now()
		}
	}}))
	if err != nil {
		b.Fatal(err)
	}
	group := topic + "-group"
	shareGroupConfig(b, addrs, group)
	lanes := benchLanes()
	c, err := share.New(proc, share.WithKgoOptions(kgo.SeedBrokers(addrs...), kgo.ShareGroup(group), kgo.ConsumeTopics(topic), kgo.FetchMaxWait(100*time.Millisecond)),
		share.WithLanes(lanes))
	if err != nil {
		b.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	stopped := make(chan error, 1)
	go func() { stopped <- c.Run(ctx) }()
	settled(b, addrs, group, topic, lanes, partitions)
	commit()
	var end time.Time
	select {
	case end = <-done:
	case <-time.After(5 * time.Minute):
		b.Fatalf("share: %d of %d records accepted", accepted.Load(), b.N)
	}
	cancel()
	<-stopped
	return end.Sub(start)
}

// BenchmarkPoisonRecord: 100,000 records over 4 partitions, one of which
// (partition 0, offset 0) always fails, under a policy of 3 retries 1s
// apart (then skipped). The metric is the time from the moment the records
// become visible (the consumer's group has settled first) until every good
// record is handled: the share consumer against the checkpoint consumer
// (adapters/franz), which holds the poison record's partition back while
// it retries.
//
// Two things hold a poisoned partition back in share mode too, and the
// leaves show each:
//   - a lane holding a record does not poll (franz-go would accept the
//     record at the next poll), so with no more lanes than partitions the
//     poisoned partition has no other member to read it (lanes=4);
//   - a share partition hands out at most share.partition.max.record.locks
//     records (2000 by default) beyond its oldest unresolved record, so a
//     held record stops its partition once that many after it are out
//     (lanes=8, the default window, against window=200000).
func BenchmarkPoisonRecord(b *testing.B) {
	const records, partitions = 100_000, 4
	narrow := benchCluster(b, nil)
	policy := checkpoint.Policy{MaxRetries: 3, Backoff: checkpoint.Fixed(time.Second)}
	for _, mode := range []struct {
		name  string
		lanes int // 0: checkpoint mode
		wide  bool
	}{
		{"checkpoint", 0, false},
		{"share/lanes=4/window=2000", 4, false},
		{"share/lanes=8/window=2000", 8, false},
		{"share/lanes=8/window=200000", 8, true},
	} {
		b.Run(mode.name, func(b *testing.B) {
			addrs := narrow
			if mode.wide {
				addrs = benchCluster(b, map[string]string{"group.share.partition.max.record.locks": "200000"})
			}
			for range b.N {
				b.StopTimer()
				topic := fmt.Sprintf("poison-%s-%d", benchID, benchRun.Add(1))
				group := topic + "-g"
				commit := benchProduce(b, addrs, topic, partitions, records)
				var good atomic.Int64
				var perPart [partitions]atomic.Int64
				var t0 time.Time
				done := make(chan time.Time, 1)
				h := stream.PerRecord(func(_ context.Context, r *stream.Record) error {
					if r.Partition == 0 && r.Offset == 0 {
						return errors.New("poison")
					}
					if perPart[r.Partition].Add(1) == records/partitions-int64(map[bool]int{true: 1}[r.Partition == 0]) {
						b.Logf("partition %d done at %v", r.Partition, time.Since(t0))
					}
					if good.Add(1) == records-1 {
						done <- time.Now()
					}
					return nil
				})
				if mode.lanes == 0 {
					// The checkpoint mode redelivers the whole batch:
					// count each good record once.
					var mu sync.Mutex
					seen := map[[2]int64]bool{}
					h = stream.HandlerFunc(func(_ context.Context, bt *stream.Batch) error {
						mu.Lock()
						defer mu.Unlock()
						for _, r := range bt.Records {
							if r.Partition == 0 && r.Offset == 0 {
								continue
							}
							k := [2]int64{int64(r.Partition), r.Offset}
							if !seen[k] {
								seen[k] = true
								if good.Add(1) == records-1 {
									done <- time.Now()
								}
							}
						}
						if bt.Partition == 0 && bt.FirstOffset() == 0 {
							return errors.New("poison")
						}
						return nil
					})
				}
				proc, err := stream.NewProcessor(h, stream.WithPolicy(policy))
				if err != nil {
					b.Fatal(err)
				}
				ctx, cancel := context.WithCancel(context.Background())
				stopped := make(chan error, 1)
				if mode.lanes > 0 {
					shareGroupConfig(b, addrs, group)
					c, err := share.New(proc, share.WithKgoOptions(kgo.SeedBrokers(addrs...), kgo.ShareGroup(group), kgo.ConsumeTopics(topic), kgo.FetchMaxWait(100*time.Millisecond)),
						share.WithLanes(mode.lanes))
					if err != nil {
						b.Fatal(err)
					}
					go func() { stopped <- c.Run(ctx) }()
					settled(b, addrs, group, topic, mode.lanes, partitions)
				} else {
					assigned := make(chan struct{})
					var once sync.Once
					c, err := franz.New(proc, franz.WithKgoOptions(kgo.SeedBrokers(addrs...), kgo.ConsumerGroup(group), kgo.ConsumeTopics(topic),
						kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()), kgo.FetchIsolationLevel(kgo.ReadCommitted())),
						franz.WithOnAssigned(func(a map[string][]int32) {
							if len(a[topic]) == partitions {
								once.Do(func() { close(assigned) })
							}
						}))
					if err != nil {
						b.Fatal(err)
					}
					go func() { stopped <- c.Run(ctx) }()
					select {
					case <-assigned:
					case <-time.After(time.Minute):
						b.Fatal("checkpoint: the group did not assign the partitions within a minute")
					}
				}
				b.StartTimer()
				start := time.Now()
				t0 = start
				commit()
				var end time.Time
				select {
				case end = <-done:
				case <-time.After(5 * time.Minute):
					b.Fatalf("%s: %d of %d good records handled", mode.name, good.Load(), records-1)
				}
				b.StopTimer()
				b.ReportMetric(end.Sub(start).Seconds(), "s-to-all-good")
				cancel()
				<-stopped
			}
		})
	}
}
