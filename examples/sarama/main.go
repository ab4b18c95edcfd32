// Command sarama runs redeliver on IBM/sarama: by default on an embedded,
// in-process Kafka (kfake), or on a real cluster with -brokers.
//
// It produces a few hundred records with sarama's SyncProducer and consumes
// them through the sarama adapter with a handler whose downstream fails
// transiently: one batch of each partition fails twice before it goes
// through. While the first failed batch waits out its backoff, a second
// member joins the group: with sarama's default strategy (range) the
// rebalance is eager, so every claim of the first member ends, the withheld
// batches are abandoned, and their new owners continue their retry counts
// from the state committed with the checkpoint. The program prints a short
// timeline, then checks itself: every record handled, no batch delivered
// more than retryCount+1 times across the members, and the group's
// committed offsets, read back from the broker, at the end of each
// partition. It exits non-zero when the check fails.
package main

import (
	"bytes"
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/IBM/sarama"
	"github.com/twmb/franz-go/pkg/kfake"

	rdsarama "github.com/redeliver-go/redeliver/adapters/sarama"
	"github.com/redeliver-go/redeliver/checkpoint"
	"github.com/redeliver-go/redeliver/stream"
)

// policy retries a failed batch 3 times: 300ms, then 600ms, then 1.2s.
var policy = checkpoint.Policy{MaxRetries: 3, Backoff: checkpoint.Exponential(300 * time.Millisecond)}

func main() {
	var (
		brokers    = flag.String("brokers", "", "comma-separated Kafka brokers; empty runs an embedded Kafka")
		partitions = flag.Int("partitions", 3, "partitions of the topic")
		records    = flag.Int("records", 300, "records to produce, spread over the partitions")
		batch      = flag.Int("batch", 20, "most records per batch")
		timeout    = flag.Duration("timeout", 50*time.Second, "give up after this long")
	)
	flag.Parse()
	ctx, cancel := context.WithTimeout(context.Background(), *timeout)
	defer cancel()
	if err := run(ctx, *brokers, *partitions, *records, *batch); err != nil {
		fmt.Fprintln(os.Stderr, "sarama:", err)
		os.Exit(1)
	}
}

// config is the sarama configuration of the program's clients: a Kafka
// version the brokers speak (3.9.0; kfake and Kafka 2.1 and later), a
// group without a commit starting at the partition's start, and heartbeats
// every 500ms, so that a member notices a rebalance within half a second.
func config() *sarama.Config {
	c := sarama.NewConfig()
	c.Version = sarama.V3_9_0_0
	c.Consumer.Offsets.Initial = sarama.OffsetOldest
	c.Consumer.Group.Heartbeat.Interval = 500 * time.Millisecond
	c.Producer.RequiredAcks = sarama.WaitForAll
	c.Producer.Return.Successes = true
	c.Producer.Partitioner = sarama.NewRoundRobinPartitioner
	return c
}

// cluster is what the program asks the brokers with.
type cluster struct {
	client sarama.Client
	admin  sarama.ClusterAdmin
}

func run(ctx context.Context, brokers string, partitions, records, batchSize int) error {
	var seeds []string
	if brokers == "" {
		kc, err := kfake.NewCluster(kfake.NumBrokers(1))
		if err != nil {
			return fmt.Errorf("start embedded kafka: %w", err)
		}
		defer kc.Close()
		seeds = kc.ListenAddrs()
		fmt.Printf("embedded kafka at %s\n", strings.Join(seeds, ","))
	} else {
		seeds = strings.Split(brokers, ",")
	}
	suffix := time.Now().Format("150405.000")
	topic, group := "sarama-"+suffix, "sarama-group-"+suffix
	client, err := sarama.NewClient(seeds, config())
	if err != nil {
		return fmt.Errorf("connect: %w", err)
	}
	defer client.Close()
	admin, err := sarama.NewClusterAdminFromClient(client)
	if err != nil {
		return fmt.Errorf("connect: %w", err)
	}
	c := &cluster{client: client, admin: admin}

	if err := admin.CreateTopic(topic, &sarama.TopicDetail{NumPartitions: int32(partitions), ReplicationFactor: 1}, false); err != nil {
		return fmt.Errorf("create topic %s: %w", topic, err)
	}
	if err := admin.CreateTopic(topic+".dlq", &sarama.TopicDetail{NumPartitions: 1, ReplicationFactor: 1}, false); err != nil {
		return fmt.Errorf("create topic %s.dlq: %w", topic, err)
	}
	if err := c.produce(ctx, topic, records); err != nil {
		return err
	}
	want, err := c.endOffsets(topic, partitions)
	if err != nil {
		return err
	}
	fmt.Printf("produced %d records to %s, end offsets %v\n", records, topic, want)
	fmt.Printf("policy: %d retries, exponential backoff from 300ms\n\n", policy.MaxRetries)

	tl := &timeline{begin: time.Now(), handled: map[int32]map[int64]bool{}, deliveries: map[[2]int64]int{}}
	runCtx, stop := context.WithCancel(ctx)
	defer stop()
	var (
		members sync.WaitGroup
		errs    = make(chan error, 2)
		joined  sync.Once
		spawn   func(name string, hooks stream.Hooks)
	)
	spawn = func(name string, hooks stream.Hooks) {
		members.Add(1)
		go func() {
			defer members.Done()
			errs <- member(runCtx, name, hooks, tl, seeds, group, topic, batchSize)
		}()
	}
	// The second member joins while the first waits out a backoff.
	hooks := tl.hooks("a")
	retry := hooks.RetryScheduled
	hooks.RetryScheduled = func(e stream.RetryEvent) {
		retry(e)
		joined.Do(func() { spawn("b", tl.hooks("b")) })
	}
	spawn("a", hooks)

	waitErr := c.waitCommitted(ctx, group, topic, want)
	stop()
	members.Wait()
	close(errs)
	for err := range errs {
		if err != nil { // nil after a clean shutdown
			return err
		}
	}
	if waitErr != nil {
		return waitErr
	}
	return tl.summary(ctx, c, group, topic, want)
}

// member runs a consumer named name in the group until ctx ends.
func member(ctx context.Context, name string, hooks stream.Hooks, tl *timeline, seeds []string, group, topic string, batchSize int) error {
	// A batch whose retries are spent goes to the dead-letter topic (none
	// does here: the downstream recovers within the budget). Its publisher
	// is made first, unbound; the consumer binds it (WithPublisher) and
	// produces through a SyncProducer it makes and closes with Run.
	pub := new(rdsarama.Publisher)
	dl, err := stream.DeadLetter(pub, topic+".dlq")
	if err != nil {
		return err
	}
	proc, err := stream.NewProcessor(handler(), stream.WithPolicy(policy), stream.WithHooks(hooks),
		stream.WithExhaustionAction(dl), stream.WithLogger(tl.logger().With("member", name)))
	if err != nil {
		return err
	}
	c, err := rdsarama.New(proc,
		rdsarama.WithGroup(seeds, group, topic),
		rdsarama.WithConfig(config()),
		rdsarama.WithMaxBatch(batchSize),
		rdsarama.WithPublisher(pub),
	)
	if err != nil {
		return err
	}
	tl.mu.Lock()
	tl.printf("%s  joins the group", name)
	tl.mu.Unlock()
	return c.Run(ctx)
}

// handler calls a downstream that fails transiently: the batch holding
// offset 30+10p of partition p fails on its first two deliveries. The
// decision depends on the offsets a batch holds and on its retry count
// (which follows the batch from member to member), not on how the records
// happen to be batched or which member has them.
func handler() stream.Handler {
	return stream.HandlerFunc(func(ctx context.Context, b *stream.Batch) error {
		poison := 30 + 10*int64(b.Partition)
		if b.FirstOffset() <= poison && poison <= b.LastOffset() && b.Attempt.Retries < 2 {
			return errors.New("downstream unavailable (503)")
		}
		return nil
	})
}

func (c *cluster) produce(ctx context.Context, topic string, n int) error {
	p, err := sarama.NewSyncProducerFromClient(c.client)
	if err != nil {
		return err
	}
	defer p.Close()
	msgs := make([]*sarama.ProducerMessage, n)
	for i := range msgs {
		msgs[i] = &sarama.ProducerMessage{Topic: topic, Value: sarama.StringEncoder(fmt.Sprintf("order-%d", i))}
	}
	// A new topic's leaders may not be known at once: try again briefly.
	for try := 0; ; try++ {
		err := p.SendMessages(msgs)
		if err == nil {
			return nil
		}
		if try == 20 || ctx.Err() != nil {
			return fmt.Errorf("produce: %w", err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

func (c *cluster) endOffsets(topic string, partitions int) (map[int32]int64, error) {
	want := map[int32]int64{}
	for p := range int32(partitions) {
		off, err := c.client.GetOffset(topic, p, sarama.OffsetNewest)
		if err != nil {
			return nil, fmt.Errorf("end offset of partition %d: %w", p, err)
		}
		want[p] = off
	}
	return want, nil
}

// committed reads the group's committed offsets back from the broker; -1
// for none.
func (c *cluster) committed(group, topic string, partitions int) (map[int32]int64, error) {
	ps := make([]int32, partitions)
	for i := range ps {
		ps[i] = int32(i)
	}
	resp, err := c.admin.ListConsumerGroupOffsets(group, map[string][]int32{topic: ps})
	if err != nil {
		return nil, err
	}
	got := map[int32]int64{}
	for _, p := range ps {
		if b := resp.GetBlock(topic, p); b != nil && b.Err == sarama.ErrNoError {
			got[p] = b.Offset
		}
	}
	return got, nil
}

// waitCommitted polls the group's committed offsets until they reach want.
func (c *cluster) waitCommitted(ctx context.Context, group, topic string, want map[int32]int64) error {
	for {
		got, err := c.committed(group, topic, len(want))
		if err == nil && reached(got, want) {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("committed offsets %v never reached %v: %w", got, want, context.Cause(ctx))
		case <-time.After(50 * time.Millisecond):
		}
	}
}

func reached(got, want map[int32]int64) bool {
	for p, w := range want {
		if got[p] < w {
			return false
		}
	}
	return true
}

// timeline prints the events worth seeing and remembers what was handled.
type timeline struct {
	begin      time.Time
	mu         sync.Mutex
	handled    map[int32]map[int64]bool
	deliveries map[[2]int64]int // by partition and first offset
	failures   int
	retries    int
	abandoned  int
	claims     map[string]int
}

// printf prints a line stamped with the time since the start; the caller
// holds tl.mu, so that lines come out in the order their stamps say.
func (tl *timeline) printf(format string, args ...any) {
	fmt.Printf("%6.3fs  "+format+"\n", append([]any{time.Since(tl.begin).Seconds()}, args...)...)
}

// logger returns a logger whose warnings and errors (the adapter's and the
// processor's) are lines of the timeline, stamped and printed in their
// place among the events.
func (tl *timeline) logger() *slog.Logger {
	return slog.New(slog.NewTextHandler(tl, &slog.HandlerOptions{
		Level: slog.LevelWarn,
		ReplaceAttr: func(groups []string, a slog.Attr) slog.Attr {
			if a.Key == slog.TimeKey && len(groups) == 0 {
				return slog.Attr{} // the timeline stamps the line
			}
			return a
		},
	}))
}

// Write prints a log line as a line of the timeline.
func (tl *timeline) Write(p []byte) (int, error) {
	tl.mu.Lock()
	defer tl.mu.Unlock()
	tl.printf("%s", bytes.TrimRight(p, "\n"))
	return len(p), nil
}

func (tl *timeline) hooks(member string) stream.Hooks {
	return stream.Hooks{
		Claimed: func(e stream.ClaimEvent) {
			tl.mu.Lock()
			defer tl.mu.Unlock()
			state := ""
			if e.Metadata != "" {
				state = ", retry state: " + stream.DescribeMetadata(e.Metadata, policy.MaxRetries)
			}
			tl.printf("%s  p%d claimed, committed offset %d%s", member, e.Partition, e.Committed, state)
		},
		Released: func(e stream.ReleaseEvent) {
			tl.mu.Lock()
			defer tl.mu.Unlock()
			tl.printf("%s  p%d released: %v", member, e.Partition, e.Cause)
		},
		Delivered: func(e stream.DeliveredEvent) {
			tl.mu.Lock()
			defer tl.mu.Unlock()
			tl.deliveries[[2]int64{int64(e.Partition), e.FirstOffset}]++
			switch e.Outcome {
			case stream.Succeeded, stream.RetryRequested:
				if tl.handled[e.Partition] == nil {
					tl.handled[e.Partition] = map[int64]bool{}
				}
				for o := e.FirstOffset; o <= e.LastOffset; o++ {
					tl.handled[e.Partition][o] = true
				}
				if e.Attempt.Retries > 0 {
					tl.printf("%s  p%d batch %3d-%3d  attempt %d succeeded", member, e.Partition, e.FirstOffset, e.LastOffset, e.Attempt.Number())
				}
			case stream.Failed:
				tl.failures++
				tl.printf("%s  p%d batch %3d-%3d  attempt %d failed: %v", member, e.Partition, e.FirstOffset, e.LastOffset, e.Attempt.Number(), e.Err)
			}
		},
		RetryScheduled: func(e stream.RetryEvent) {
			tl.mu.Lock()
			defer tl.mu.Unlock()
			tl.retries++
			tl.printf("%s  p%d batch %3d-%3d  retry %d in %v, checkpoint withheld at %d", member, e.Partition, e.FirstOffset, e.LastOffset, e.Retry, e.Delay, e.FirstOffset)
		},
		Abandoned: func(e stream.AbandonedEvent) {
			tl.mu.Lock()
			defer tl.mu.Unlock()
			tl.abandoned++
			tl.printf("%s  p%d batch %3d-%3d  abandoned (%v), left to the next owner", member, e.Partition, e.FirstOffset, e.LastOffset, e.Cause)
		},
	}
}

// summary prints the totals and checks them against the broker.
func (tl *timeline) summary(ctx context.Context, c *cluster, group, topic string, want map[int32]int64) error {
	got, err := c.committed(group, topic, len(want))
	if err != nil {
		return err
	}
	tl.mu.Lock()
	defer tl.mu.Unlock()
	fmt.Printf("\n%d failed deliveries, %d retries scheduled, %d batches abandoned on a generation change\n", tl.failures, tl.retries, tl.abandoned)
	var problems []string
	parts := make([]int32, 0, len(want))
	for p := range want {
		parts = append(parts, p)
	}
	slices.Sort(parts)
	for _, p := range parts {
		n := int64(len(tl.handled[p]))
		fmt.Printf("partition %d: %d of %d records handled, committed offset %d\n", p, n, want[p], got[p])
		if n != want[p] {
			problems = append(problems, fmt.Sprintf("partition %d: %d of %d records handled", p, n, want[p]))
		}
		if got[p] != want[p] {
			problems = append(problems, fmt.Sprintf("partition %d: committed %d, end %d", p, got[p], want[p]))
		}
	}
	for k, n := range tl.deliveries {
		if n > policy.MaxRetries+1 {
			problems = append(problems, fmt.Sprintf("partition %d: batch at %d delivered %d times, more than retryCount+1 = %d",
				k[0], k[1], n, policy.MaxRetries+1))
		}
	}
	if tl.failures < len(want) {
		problems = append(problems, fmt.Sprintf("%d failed deliveries, want at least %d (one flaky batch per partition)", tl.failures, len(want)))
	}
	if len(problems) > 0 {
		return fmt.Errorf("check failed:\n  %s", strings.Join(problems, "\n  "))
	}
	fmt.Println("ok: every record handled, no batch over its retry budget, every partition committed to its end")
	return nil
}
