// Command quickstart runs a redeliver consumer on Kafka: by default on an
// embedded, in-process Kafka (kfake), or on a real cluster with -brokers.
//
// It loads the retry policy from host.json, produces a few hundred records
// over several partitions, and consumes them through the franz-go adapter
// with a handler that fails transiently on some batches, asks for a retry
// with a RetryResult on others and finds one poison record, which is given
// up alone while the rest of its batch is handled. It prints a timeline of
// every delivery, retry and checkpoint, then checks itself: every record
// handled but the poison one, and the group's committed offsets, read back
// from the broker, at the end of each partition. It exits non-zero when the
// check fails.
package main

import (
	"bytes"
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/redeliver-go/redeliver/adapters/franz"
	"github.com/redeliver-go/redeliver/checkpoint"
	"github.com/redeliver-go/redeliver/hostconfig"
	"github.com/redeliver-go/redeliver/stream"
)

func main() {
	var (
		brokers    = flag.String("brokers", "", "comma-separated Kafka brokers; empty runs an embedded Kafka")
		hostJSON   = flag.String("config", "", "host.json to load (default: the one beside this program, or a built-in copy)")
		partitions = flag.Int("partitions", 4, "partitions of the topic")
		records    = flag.Int("records", 300, "records to produce, spread over the partitions")
		batch      = flag.Int("batch", 25, "most records per batch")
		timeout    = flag.Duration("timeout", 50*time.Second, "give up after this long")
	)
	flag.Parse()
	ctx, cancel := context.WithTimeout(context.Background(), *timeout)
	defer cancel()
	if err := run(ctx, *brokers, *hostJSON, *partitions, *records, *batch); err != nil {
		fmt.Fprintln(os.Stderr, "quickstart:", err)
		os.Exit(1)
	}
}

// defaultHostJSON is used when no host.json is found.
const defaultHostJSON = `{
  "version": "2.0",
  // retry a failed batch 3 times, 500ms apart, then move on
  "checkpointRetryPolicy": { "retryCount": 3, "sleepDuration": "00:00:00.500" },
}`

// loadConfig reads host.json: the one named, else the one beside this
// program when run from the repository root, else a built-in copy.
func loadConfig(path string) (*hostconfig.Config, error) {
	if path != "" {
		return hostconfig.Load(path)
	}
	if _, err := os.Stat("examples/quickstart/host.json"); err == nil {
		return hostconfig.Load("examples/quickstart/host.json")
	}
	return hostconfig.Parse("built-in host.json", []byte(defaultHostJSON))
}

func run(ctx context.Context, brokers, hostJSON string, partitions, records, batchSize int) error {
	cfg, err := loadConfig(hostJSON)
	if err != nil {
		return err
	}
	// Warnings name what the file or the environment says that is not in
	// force (a misspelt section, a near-miss override): nothing else
	// reports them.
	for _, w := range cfg.Warnings {
		fmt.Fprintln(os.Stderr, "host.json: warning:", w)
	}
	fmt.Println(cfg.Explain())

	var seeds []string
	if brokers == "" {
		cluster, err := kfake.NewCluster(kfake.NumBrokers(1))
		if err != nil {
			return fmt.Errorf("start embedded kafka: %w", err)
		}
		defer cluster.Close()
		seeds = cluster.ListenAddrs()
		fmt.Printf("embedded kafka at %s\n", strings.Join(seeds, ","))
	} else {
		seeds = strings.Split(brokers, ",")
	}
	suffix := time.Now().Format("150405.000")
	topic, group := "quickstart-"+suffix, "quickstart-group-"+suffix

	admin, err := kgo.NewClient(kgo.SeedBrokers(seeds...))
	if err != nil {
		return err
	}
	defer admin.Close()
	adm := kadm.NewClient(admin)
	if _, err := adm.CreateTopic(ctx, int32(partitions), 1, nil, topic); err != nil {
		return fmt.Errorf("create topic %s: %w", topic, err)
	}
	if err := produce(ctx, admin, topic, partitions, records); err != nil {
		return err
	}
	fmt.Printf("produced %d records to %s (%d partitions)\n\n", records, topic, partitions)

	// The policy and the exhaustion action come from host.json; a
	// dead-letter action would produce through pub.
	pub, err := franz.NewPublisher(admin)
	if err != nil {
		return err
	}
	opts, err := cfg.Options(pub)
	if err != nil {
		return err
	}
	policy, err := cfg.Policy()
	if err != nil {
		return err
	}
	tl := &timeline{begin: time.Now(), handled: map[int32]map[int64]bool{}, givenUp: map[int32]map[int64]bool{}, maxRetries: policy.MaxRetries}
	proc, err := stream.NewProcessor(handler(), append(opts, stream.WithHooks(tl.hooks()), stream.WithLogger(tl.logger()))...)
	if err != nil {
		return err
	}
	consumer, err := franz.New(proc,
		franz.WithKgoOptions(kgo.SeedBrokers(seeds...), kgo.ConsumerGroup(group), kgo.ConsumeTopics(topic),
			kgo.ConsumeResetOffset(kgo.NewOffset().AtStart())),
		franz.WithMaxBatch(batchSize),
	)
	if err != nil {
		return err
	}
	defer consumer.Close()

	ends, err := adm.ListEndOffsets(ctx, topic)
	if err != nil {
		return err
	}
	want := map[int32]int64{}
	ends.Each(func(o kadm.ListedOffset) { want[o.Partition] = o.Offset })

	runCtx, stop := context.WithCancel(ctx)
	defer stop()
	done := make(chan error, 1)
	go func() { done <- consumer.Run(runCtx) }()
	waitErr := waitCommitted(ctx, adm, group, topic, want)
	stop()
	if err := <-done; err != nil { // nil after a clean shutdown
		return fmt.Errorf("consumer: %w", err)
	}
	if waitErr != nil {
		return waitErr
	}
	return tl.summary(ctx, adm, group, topic, want)
}

// handler fails some batches transiently, asks for a retry on others and
// finds one poison record. Decisions depend on the offsets a batch holds,
// so they do not depend on how the records happen to be batched.
func handler() stream.Handler {
	return stream.HandlerFunc(func(ctx context.Context, b *stream.Batch) error {
		has := func(off int64) bool { return b.FirstOffset() <= off && off <= b.LastOffset() }
		switch {
		case b.Partition == 0 && has(30) && b.Attempt.Retries < 2:
			return errors.New("inventory service timed out")
		case b.Partition == 1 && has(10) && b.Attempt.Retries == 0:
			return stream.Retry(1, 300*time.Millisecond) // processed, but come back once more
		}
		for i, r := range b.Records {
			if string(r.Value) == poisonValue {
				// The records before it are done; this one can never
				// succeed: it alone is given up, and the records after
				// it come next as a batch of their own.
				return stream.FailedAt(i, checkpoint.Permanent(fmt.Errorf("invalid order %q", r.Value)))
			}
		}
		return nil
	})
}

// poisonValue is the one record the handler cannot process: record 202,
// offset 50 of partition 2.
const poisonValue = "order-202"

func produce(ctx context.Context, cl *kgo.Client, topic string, partitions, n int) error {
	recs := make([]*kgo.Record, n)
	for i := range recs {
		recs[i] = &kgo.Record{Topic: topic, Partition: int32(i % partitions), Value: fmt.Appendf(nil, "order-%d", i)}
	}
	p, err := kgo.NewClient(kgo.SeedBrokers(seedsOf(cl)...), kgo.RecordPartitioner(kgo.ManualPartitioner()))
	if err != nil {
		return err
	}
	defer p.Close()
	if err := p.ProduceSync(ctx, recs...).FirstErr(); err != nil {
		return fmt.Errorf("produce: %w", err)
	}
	return nil
}

func seedsOf(cl *kgo.Client) []string {
	var out []string
	for _, b := range cl.OptValues(kgo.SeedBrokers) {
		out = append(out, b.([]string)...)
	}
	return out
}

// waitCommitted polls the group's committed offsets until they reach want.
func waitCommitted(ctx context.Context, adm *kadm.Client, group, topic string, want map[int32]int64) error {
	for {
		got, err := committed(ctx, adm, group, topic)
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

func committed(ctx context.Context, adm *kadm.Client, group, topic string) (map[int32]int64, error) {
	resp, err := adm.FetchOffsets(ctx, group)
	if err != nil {
		return nil, err
	}
	got := map[int32]int64{}
	resp.Each(func(o kadm.OffsetResponse) {
		if o.Topic == topic && o.Err == nil {
			got[o.Partition] = o.At
		}
	})
	return got, nil
}

func reached(got, want map[int32]int64) bool {
	for p, w := range want {
		if got[p] < w {
			return false
		}
	}
	return true
}

// timeline prints every event and remembers which records were handled
// and which were given up.
type timeline struct {
	begin      time.Time
	mu         sync.Mutex
	handled    map[int32]map[int64]bool
	givenUp    map[int32]map[int64]bool
	maxRetries int // the policy's, to describe retry state
	retries    int
	delivered  int
}

// printf prints a line stamped with the time since the start; the caller
// holds tl.mu, so that lines come out in the order their stamps say.
func (tl *timeline) printf(format string, args ...any) {
	fmt.Printf("%7.3fs  "+format+"\n", append([]any{time.Since(tl.begin).Seconds()}, args...)...)
}

// logger returns a logger whose warnings and errors (the consumer's and
// the processor's: a record given up, a failing commit) are lines of the
// timeline, stamped and printed in their place among the events.
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

func mark(m map[int32]map[int64]bool, p int32, first, last int64) {
	if m[p] == nil {
		m[p] = map[int64]bool{}
	}
	for o := first; o <= last; o++ {
		m[p][o] = true
	}
}

func (tl *timeline) hooks() stream.Hooks {
	return stream.Hooks{
		Delivered: func(e stream.DeliveredEvent) {
			tl.mu.Lock()
			defer tl.mu.Unlock()
			tl.delivered++
			what := e.Outcome.String()
			var be *stream.BatchError
			switch {
			case e.Outcome == stream.Failed && errors.As(e.Err, &be):
				// The records before the failed one are done.
				if be.Index > 0 {
					mark(tl.handled, e.Partition, e.FirstOffset, e.FirstOffset+int64(be.Index)-1)
				}
				what = fmt.Sprintf("failed at offset %d: %v", e.FirstOffset+int64(be.Index), be.Err)
			case e.Outcome == stream.Failed:
				what += ": " + e.Err.Error()
			case e.Outcome == stream.Succeeded, e.Outcome == stream.RetryRequested:
				mark(tl.handled, e.Partition, e.FirstOffset, e.LastOffset)
			}
			tl.printf("p%d  batch %3d-%3d  attempt %d  %s", e.Partition, e.FirstOffset, e.LastOffset, e.Attempt.Number(), what)
		},
		RetryScheduled: func(e stream.RetryEvent) {
			tl.mu.Lock()
			defer tl.mu.Unlock()
			tl.retries++
			tl.printf("p%d  batch %3d-%3d  retry %d in %v; checkpoint withheld", e.Partition, e.FirstOffset, e.LastOffset, e.Retry, e.Delay)
		},
		Exhausted: func(e stream.ExhaustedEvent) {
			tl.mu.Lock()
			defer tl.mu.Unlock()
			mark(tl.givenUp, e.Partition, e.FirstOffset, e.LastOffset)
			if e.Records == 1 {
				tl.printf("p%d  record %3d      given up (%v); skipped, the rest of its batch comes next", e.Partition, e.FirstOffset, e.Err.Reason)
				return
			}
			tl.printf("p%d  batch %3d-%3d  given up (%v); skipped", e.Partition, e.FirstOffset, e.LastOffset, e.Err.Reason)
		},
		Checkpointed: func(e stream.CheckpointEvent) {
			tl.mu.Lock()
			defer tl.mu.Unlock()
			if e.Metadata != "" {
				tl.printf("p%d  checkpoint stays at %d, retry state written: %s", e.Partition, e.Next, stream.DescribeMetadata(e.Metadata, tl.maxRetries))
				return
			}
			tl.printf("p%d  checkpoint -> %d", e.Partition, e.Next)
		},
	}
}

// summary prints the totals and checks them against the broker.
func (tl *timeline) summary(ctx context.Context, adm *kadm.Client, group, topic string, want map[int32]int64) error {
	got, err := committed(ctx, adm, group, topic)
	if err != nil {
		return err
	}
	tl.mu.Lock()
	defer tl.mu.Unlock()
	given := 0
	for _, m := range tl.givenUp {
		given += len(m)
	}
	fmt.Printf("\n%d deliveries, %d retries, %d record given up\n", tl.delivered, tl.retries, given)
	var problems []string
	for p := int32(0); p < int32(len(want)); p++ {
		handled, skipped := int64(len(tl.handled[p])), int64(len(tl.givenUp[p]))
		fmt.Printf("partition %d: %d records handled, %d given up, of %d; committed offset %d (end %d)\n",
			p, handled, skipped, want[p], got[p], want[p])
		if handled+skipped != want[p] {
			problems = append(problems, fmt.Sprintf("partition %d: %d handled and %d given up of %d records", p, handled, skipped, want[p]))
		}
		for o := range tl.givenUp[p] {
			if tl.handled[p][o] {
				problems = append(problems, fmt.Sprintf("partition %d: record %d both handled and given up", p, o))
			}
		}
		if got[p] != want[p] {
			problems = append(problems, fmt.Sprintf("partition %d: committed %d, end %d", p, got[p], want[p]))
		}
	}
	if given != 1 || !tl.givenUp[2][50] {
		problems = append(problems, fmt.Sprintf("records given up %v, want only the poison record, offset 50 of partition 2", tl.givenUp))
	}
	if len(problems) > 0 {
		return fmt.Errorf("check failed:\n  %s", strings.Join(problems, "\n  "))
	}
	fmt.Println("ok: every record handled except the poison record, given up alone, and every partition committed to its end")
	return nil
}
