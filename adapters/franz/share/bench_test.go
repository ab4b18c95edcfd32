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

func benchCluster(b *testing.B, opts ...kfake.Opt) []string {
	b.Helper()
	c, err := kfake.NewCluster(append([]kfake.Opt{kfake.NumBrokers(1)}, opts...)...)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(c.Close)
	return c.ListenAddrs()
}

// benchProduce creates topic with partitions and spreads n records of 100
// bytes over them.
func benchProduce(b *testing.B, addrs []string, topic string, partitions int32, n int) {
	b.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(addrs...), kgo.RecordPartitioner(kgo.ManualPartitioner()), kgo.ProducerLinger(0))
	if err != nil {
		b.Fatal(err)
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	if _, err := kadm.NewClient(cl).CreateTopic(ctx, partitions, 1, nil, topic); err != nil {
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
}

// earliest sets the share group's share.auto.offset.reset to earliest.
func earliest(b *testing.B, addrs []string, group string) {
	b.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(addrs...))
	if err != nil {
		b.Fatal(err)
	}
	defer cl.Close()
	req := kmsg.NewPtrIncrementalAlterConfigsRequest()
	res := kmsg.NewIncrementalAlterConfigsRequestResource()
	res.ResourceType, res.ResourceName = kmsg.ConfigResourceTypeGroupConfig, group
	c := kmsg.NewIncrementalAlterConfigsRequestResourceConfig()
	v := "earliest"
	c.Name, c.Op, c.Value = "share.auto.offset.reset", kmsg.IncrementalAlterConfigOpSet, &v
	res.Configs = append(res.Configs, c)
	req.Resources = append(req.Resources, res)
	if _, err := req.RequestWith(context.Background(), cl); err != nil {
		b.Fatal(err)
	}
}

// BenchmarkShareSuccessPath compares the share consumer with a raw
// franz-go share-group loop (poll, touch and accept every record, poll
// again) on the same kfake cluster in the same run. b.N is the number of
// records: run it with -benchtime=100000x or so. records/s counts from the
// first record handed out to the acceptance of the last one, so the group
// join is left out of both.
func BenchmarkShareSuccessPath(b *testing.B) {
	addrs := benchCluster(b)
	for _, loop := range []struct {
		name string
		fn   func(b *testing.B, addrs []string, topic string) time.Duration
	}{
		{"raw", rawShareLoop},
		{"share", shareLoop},
	} {
		b.Run(loop.name, func(b *testing.B) {
			for _, partitions := range []int32{1, 8} {
				b.Run(fmt.Sprintf("partitions=%d", partitions), func(b *testing.B) {
					topic := fmt.Sprintf("bench-%d", benchRun.Add(1))
					benchProduce(b, addrs, topic, partitions, b.N)
					b.ReportAllocs()
					b.ResetTimer()
					d := loop.fn(b, addrs, topic)
					b.StopTimer()
					b.ReportMetric(float64(b.N)/d.Seconds(), "records/s")
				})
			}
		})
	}
}

func rawShareLoop(b *testing.B, addrs []string, topic string) time.Duration {
	group := topic + "-group"
	earliest(b, addrs, group)
	cl, err := kgo.NewClient(kgo.SeedBrokers(addrs...), kgo.ShareGroup(group), kgo.ConsumeTopics(topic), kgo.FetchMaxWait(100*time.Millisecond))
	if err != nil {
		b.Fatal(err)
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
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

// benchShareOpts are extra options from REDELIVER_SHARE_BENCH: "lanes=N"
// or "prefetch" (kgo.MaxConcurrentFetches(-1)), for experiments.
func benchShareOpts() []share.Option {
	var opts []share.Option
	switch v := os.Getenv("REDELIVER_SHARE_BENCH"); {
	case v == "prefetch":
		opts = append(opts, share.WithKgoOptions(kgo.MaxConcurrentFetches(-1)))
	case strings.HasPrefix(v, "lanes="):
		n, _ := strconv.Atoi(strings.TrimPrefix(v, "lanes="))
		opts = append(opts, share.WithLanes(n))
	}
	return opts
}

func shareLoop(b *testing.B, addrs []string, topic string) time.Duration {
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
	c, err := share.New(proc, append([]share.Option{share.WithKgoOptions(kgo.SeedBrokers(addrs...), kgo.ShareGroup(topic+"-group"), kgo.ConsumeTopics(topic), kgo.FetchMaxWait(100*time.Millisecond)),
		share.WithResetEarliest()}, benchShareOpts()...)...)
	if err != nil {
		b.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	stopped := make(chan error, 1)
	go func() { stopped <- c.Run(ctx) }()
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
// apart (then skipped). The metric is the time from the start until every
// good record is handled: the share consumer against the checkpoint
// consumer (adapters/franz), which holds the poison record's partition
// back while it retries.
//
// A share partition hands out at most group.share.partition.max.record.locks
// records (2000 by default) beyond its oldest unresolved record, so a held
// record stops its partition once that many behind it are out: the share
// mode runs with that default and with a window of 200,000.
func BenchmarkPoisonRecord(b *testing.B) {
	const records, partitions = 100_000, 4
	narrow := benchCluster(b)
	wide := benchCluster(b, kfake.BrokerConfigs(map[string]string{"group.share.partition.max.record.locks": "200000"}))
	policy := checkpoint.Policy{MaxRetries: 3, Backoff: checkpoint.Fixed(time.Second)}
	for _, mode := range []string{"share/window=2000", "share/window=200000", "checkpoint"} {
		addrs := narrow
		if mode == "share/window=200000" {
			addrs = wide
		}
		b.Run(mode, func(b *testing.B) {
			for range b.N {
				b.StopTimer()
				topic := fmt.Sprintf("poison-%d", benchRun.Add(1))
				benchProduce(b, addrs, topic, partitions, records)
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
				if mode == "checkpoint" {
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
				b.StartTimer()
				start := time.Now()
				t0 = start
				if mode != "checkpoint" {
					c, err := share.New(proc, append([]share.Option{share.WithKgoOptions(kgo.SeedBrokers(addrs...), kgo.ShareGroup(topic+"-g"), kgo.ConsumeTopics(topic), kgo.FetchMaxWait(100*time.Millisecond)),
						share.WithResetEarliest()}, benchShareOpts()...)...)
					if err != nil {
						b.Fatal(err)
					}
					go func() { stopped <- c.Run(ctx) }()
				} else {
					c, err := franz.New(proc, franz.WithKgoOptions(kgo.SeedBrokers(addrs...), kgo.ConsumerGroup(topic+"-g"), kgo.ConsumeTopics(topic),
						kgo.ConsumeResetOffset(kgo.NewOffset().AtStart())))
					if err != nil {
						b.Fatal(err)
					}
					go func() { stopped <- c.Run(ctx) }()
				}
				if os.Getenv("REDELIVER_SHARE_BENCH_TRACE") != "" {
					go func() {
						time.Sleep(time.Second)
						b.Logf("at 1s: %d %d %d %d records done per partition", perPart[0].Load(), perPart[1].Load(), perPart[2].Load(), perPart[3].Load())
						cl, _ := kgo.NewClient(kgo.SeedBrokers(addrs...))
						defer cl.Close()
						ds, err := kadm.NewClient(cl).DescribeShareGroups(context.Background(), topic+"-g")
						if err != nil {
							b.Logf("describe: %v", err)
							return
						}
						for _, d := range ds {
							for _, m := range d.Members {
								b.Logf("member %s: %v", m.MemberID[:6], m.Assignment)
							}
						}
					}()
				}
				var end time.Time
				select {
				case end = <-done:
				case <-time.After(5 * time.Minute):
					b.Fatalf("%s: %d of %d good records handled", mode, good.Load(), records-1)
				}
				b.StopTimer()
				b.ReportMetric(end.Sub(start).Seconds(), "s-to-all-good")
				cancel()
				<-stopped
			}
		})
	}
}
