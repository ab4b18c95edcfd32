// Command eventhubs runs redeliver on Azure Event Hubs, with no setup: on
// an in-memory event hub (adapters/eventhubs/memhub) whose processors
// balance partitions exactly as the SDK's Processor does.
//
// It sends 200 events over 4 partitions and consumes them with a handler
// whose downstream fails transiently: one batch of each partition fails
// twice before it goes through, and one batch is poison and goes to a
// dead-letter hub after its retries. While the first failed batch waits out
// its backoff, a second processor starts and steals partitions from the
// first (Event Hubs' load balancing); the new owners continue each retry
// count from the state kept beside the checkpoint. The program prints a
// timeline, then checks itself (every event handled or dead-lettered, no
// batch delivered more than retryCount+1 times across both processors,
// every checkpoint at the end of its partition) and exits 1 when the check
// fails.
//
// Checkpoints and ownership live in memory, or in Azure Blob Storage when
// REDELIVER_AZURE_STORAGE holds a storage connection string (Azurite's, as
// integration/azurite.sh start prints it, or a real account's): the SDK's
// own blob checkpoint store, in a container the program creates.
//
// With EVENTHUBS_CONNECTION_STRING and EVENTHUB_NAME set as well, the same
// consumer runs on that real namespace instead (see realNamespace): the
// program then only consumes, for a minute, and checks nothing.
package main

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"sort"
	"sync"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/messaging/azeventhubs/v2"
	"github.com/Azure/azure-sdk-for-go/sdk/messaging/azeventhubs/v2/checkpoints"
	"github.com/Azure/azure-sdk-for-go/sdk/storage/azblob/container"

	"github.com/redeliver-go/redeliver/adapters/eventhubs"
	"github.com/redeliver-go/redeliver/adapters/eventhubs/memhub"
	"github.com/redeliver-go/redeliver/checkpoint"
	"github.com/redeliver-go/redeliver/stream"
)

// policy retries a failed batch 3 times, 300ms apart.
var policy = checkpoint.Policy{MaxRetries: 3, Backoff: checkpoint.Fixed(300 * time.Millisecond)}

const (
	hubName    = "orders"
	dlqName    = "orders-dlq"
	group      = "billing"
	partitions = 4
	perPart    = 50
	batchSize  = 10
	poison     = 25 // the batch holding this sequence number of partition 1 never succeeds
)

func main() {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	var err error
	if os.Getenv("EVENTHUBS_CONNECTION_STRING") != "" {
		err = realNamespace(ctx)
	} else {
		err = run(ctx)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "eventhubs:", err)
		os.Exit(1)
	}
}

// realNamespace is the same consumer on a real Event Hubs namespace: a
// ConsumerClient from the connection string, the SDK's blob checkpoint
// store in the container REDELIVER_AZURE_CONTAINER (default "redeliver")
// of the storage account REDELIVER_AZURE_STORAGE names, and
// eventhubs.New, which builds the SDK Processor over a fenced wrapper of
// that store. It consumes for a minute.
func realNamespace(ctx context.Context) error {
	consumer, err := azeventhubs.NewConsumerClientFromConnectionString(
		os.Getenv("EVENTHUBS_CONNECTION_STRING"), os.Getenv("EVENTHUB_NAME"), azeventhubs.DefaultConsumerGroup, nil)
	if err != nil {
		return err
	}
	defer consumer.Close(context.Background())
	name := os.Getenv("REDELIVER_AZURE_CONTAINER")
	if name == "" {
		name = "redeliver"
	}
	cc, err := container.NewClientFromConnectionString(os.Getenv("REDELIVER_AZURE_STORAGE"), name, nil)
	if err != nil {
		return err
	}
	store, err := checkpoints.NewBlobStore(cc, nil)
	if err != nil {
		return err
	}
	proc, err := stream.NewProcessor(stream.HandlerFunc(func(_ context.Context, b *stream.Batch) error {
		fmt.Printf("partition %d: events %d-%d, retry %d\n", b.Partition, b.FirstOffset(), b.LastOffset(), b.Attempt.Retries)
		return nil
	}), stream.WithPolicy(policy))
	if err != nil {
		return err
	}
	c, err := eventhubs.New(proc, consumer, store, eventhubs.WithMaxBatch(batchSize))
	if err != nil {
		return err
	}
	return c.Run(ctx) // nil when ctx ends it: a clean shutdown
}

func run(ctx context.Context) error {
	hub, _ := memhub.New(hubName, partitions)
	dlq, _ := memhub.New(dlqName, 1)
	for _, id := range hub.PartitionIDs() {
		for i := range perPart {
			if err := hub.Send(id, &azeventhubs.EventData{Body: fmt.Appendf(nil, "order %s-%d", id, i)}); err != nil {
				return err
			}
		}
	}
	store, where, err := checkpointStore(ctx)
	if err != nil {
		return err
	}
	fmt.Printf("in-memory event hub %q: %d partitions, %d events each; checkpoints in %s\n", hubName, partitions, perPart, where)
	fmt.Printf("policy: %d retries, 300ms apart; batches of %d\n\n", policy.MaxRetries, batchSize)

	tl := &timeline{begin: time.Now(), deliveries: map[[2]int64]int{}, firsts: map[[2]int64]int{}, retries: map[[3]int64]int{}, handled: map[[2]int64]bool{}}
	pub, err := eventhubs.NewSenderPublisher(dlqName, dlq)
	if err != nil {
		return err
	}
	runCtx, stop := context.WithCancel(ctx)
	defer stop()
	var (
		wg    sync.WaitGroup
		errs  = make(chan error, 2)
		spawn sync.Once
	)
	start := func(name string, hooks stream.Hooks) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs <- processor(runCtx, name, hub, store, pub, hooks, tl.logger())
		}()
	}
	// The second processor starts once the first owns every partition and
	// waits out a backoff, so that it has partitions to steal.
	var (
		mu       sync.Mutex
		owned    = map[int32]bool{}
		retrying bool
	)
	startB := func() {
		if len(owned) == partitions && retrying {
			spawn.Do(func() { start("b", tl.hooks("b")) })
		}
	}
	hooks := stream.MergeHooks(tl.hooks("a"), stream.Hooks{
		Claimed: func(e stream.ClaimEvent) {
			mu.Lock()
			defer mu.Unlock()
			owned[e.Partition] = true
			startB()
		},
		Released: func(e stream.ReleaseEvent) {
			mu.Lock()
			defer mu.Unlock()
			delete(owned, e.Partition)
		},
		RetryScheduled: func(stream.RetryEvent) {
			mu.Lock()
			defer mu.Unlock()
			retrying = true
			startB()
		},
	})
	start("a", hooks)

	want := map[string]int64{}
	for _, id := range hub.PartitionIDs() {
		want[id] = perPart
	}
	waitErr := waitCheckpoints(ctx, store, want)
	stop()
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil && !errors.Is(err, context.Canceled) {
			return err
		}
	}
	if waitErr != nil {
		return waitErr
	}
	return tl.summary(ctx, store, dlq)
}

// checkpointStore returns the in-memory store, or the SDK's blob store in
// a new container when REDELIVER_AZURE_STORAGE is set.
func checkpointStore(ctx context.Context) (azeventhubs.CheckpointStore, string, error) {
	conn := os.Getenv("REDELIVER_AZURE_STORAGE")
	if conn == "" {
		return memhub.NewStore(), "memory", nil
	}
	var b [4]byte
	_, _ = rand.Read(b[:])
	name := "redeliver-example-" + hex.EncodeToString(b[:])
	cc, err := container.NewClientFromConnectionString(conn, name, nil)
	if err != nil {
		return nil, "", err
	}
	if _, err := cc.Create(ctx, nil); err != nil {
		return nil, "", fmt.Errorf("create container %s: %w", name, err)
	}
	store, err := checkpoints.NewBlobStore(cc, nil)
	return store, "Azure Blob Storage, container " + name + " (the SDK's blob checkpoint store)", err
}

// processor runs one Event Hubs processor named name, with its own fenced
// checkpoint store, until ctx ends.
func processor(ctx context.Context, name string, hub *memhub.Hub, store azeventhubs.CheckpointStore, pub stream.Publisher, hooks stream.Hooks, logger *slog.Logger) error {
	earliest := true
	opts := &azeventhubs.ProcessorOptions{
		LoadBalancingStrategy:       azeventhubs.ProcessorStrategyGreedy, // claim a fair share at once
		UpdateInterval:              200 * time.Millisecond,              // the SDK's default is 10s
		PartitionExpirationDuration: 2 * time.Second,                     // 60s
		StartPositions:              azeventhubs.StartPositions{Default: azeventhubs.StartPosition{Earliest: &earliest}},
	}
	fenced, err := eventhubs.NewCheckpointStore(store, "processor-"+name, &eventhubs.StoreOptions{PartitionExpirationDuration: opts.PartitionExpirationDuration})
	if err != nil {
		return err
	}
	p, err := hub.NewProcessor(fenced, group, "processor-"+name, opts)
	if err != nil {
		return err
	}
	dl, err := stream.DeadLetter(pub, dlqName)
	if err != nil {
		return err
	}
	proc, err := stream.NewProcessor(handler(), stream.WithPolicy(policy), stream.WithHooks(hooks),
		stream.WithExhaustionAction(dl), stream.WithLogger(logger.With("processor", name)))
	if err != nil {
		return err
	}
	c, err := eventhubs.NewWith(proc, p, fenced, eventhubs.WithMaxBatch(batchSize), eventhubs.WithReceiveWait(100*time.Millisecond))
	if err != nil {
		return err
	}
	return c.Run(ctx)
}

var errDownstream = errors.New("downstream unavailable")

// handler fails the batch holding sequence number 20 of each partition on
// its first two deliveries, and the one holding poison of partition 1
// always.
func handler() stream.Handler {
	return stream.HandlerFunc(func(_ context.Context, b *stream.Batch) error {
		if b.Partition == 1 && b.FirstOffset() <= poison && poison <= b.LastOffset() {
			return errDownstream
		}
		// The attempt number counts across both processors: the first two
		// deliveries fail, wherever they run.
		if b.FirstOffset() <= 20 && 20 <= b.LastOffset() && b.Attempt.Retries < 2 {
			return errDownstream
		}
		return nil
	})
}

func waitCheckpoints(ctx context.Context, store azeventhubs.CheckpointStore, want map[string]int64) error {
	for {
		got, err := eventhubs.Committed(ctx, store, memhub.Namespace, hubName, group)
		if err != nil {
			return err
		}
		done := true
		for id, n := range want {
			if got[id].Next != n {
				done = false
			}
		}
		if done {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("checkpoints %v, want %v: %w", got, want, ctx.Err())
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// timeline prints what the processors do and keeps what the check needs.
type timeline struct {
	begin      time.Time
	mu         sync.Mutex
	deliveries map[[2]int64]int  // by partition and first sequence number
	firsts     map[[2]int64]int  // first deliveries (retry 0), likewise
	retries    map[[3]int64]int  // deliveries by partition, first sequence number and retry number
	handled    map[[2]int64]bool // events handled or dead-lettered
}

// printf prints a line stamped with the time since the start; the caller
// holds t.mu, so that lines come out in the order their stamps say.
func (t *timeline) printf(format string, args ...any) {
	fmt.Printf("%6s  "+format+"\n", append([]any{time.Since(t.begin).Round(10 * time.Millisecond).String()}, args...)...)
}

// logger returns a logger whose warnings and errors (the adapter's and the
// processor's) are lines of the timeline, stamped and printed in their
// place among the events.
func (t *timeline) logger() *slog.Logger {
	return slog.New(slog.NewTextHandler(t, &slog.HandlerOptions{
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
func (t *timeline) Write(p []byte) (int, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.printf("%s", bytes.TrimRight(p, "\n"))
	return len(p), nil
}

func (t *timeline) hooks(name string) stream.Hooks {
	return stream.Hooks{
		Claimed: func(e stream.ClaimEvent) {
			t.mu.Lock()
			defer t.mu.Unlock()
			state := ""
			if e.Metadata != "" {
				state = " with retry state " + e.Metadata
			}
			t.printf("%s  owns partition %d from %d%s", name, e.Partition, max(e.Committed, 0), state)
		},
		Delivered: func(e stream.DeliveredEvent) {
			t.mu.Lock()
			defer t.mu.Unlock()
			t.deliveries[[2]int64{int64(e.Partition), e.FirstOffset}]++
			t.retries[[3]int64{int64(e.Partition), e.FirstOffset, int64(e.Attempt.Retries)}]++
			if e.Attempt.Retries == 0 {
				t.firsts[[2]int64{int64(e.Partition), e.FirstOffset}]++
			}
			if e.Outcome == stream.Succeeded {
				for o := e.FirstOffset; o <= e.LastOffset; o++ {
					t.handled[[2]int64{int64(e.Partition), o}] = true
				}
			}
			if e.Outcome != stream.Succeeded || e.Attempt.Retries > 0 {
				t.printf("%s  partition %d events %d-%d retry %d: %v", name, e.Partition, e.FirstOffset, e.LastOffset, e.Attempt.Retries, e.Outcome)
			}
		},
		Exhausted: func(e stream.ExhaustedEvent) {
			t.mu.Lock()
			defer t.mu.Unlock()
			for o := e.FirstOffset; o <= e.LastOffset; o++ {
				t.handled[[2]int64{int64(e.Partition), o}] = true
			}
			t.printf("%s  partition %d events %d-%d given up after %d retries: to %s", name, e.Partition, e.FirstOffset, e.LastOffset, e.Err.Retries, dlqName)
		},
		Abandoned: func(e stream.AbandonedEvent) {
			t.mu.Lock()
			defer t.mu.Unlock()
			t.printf("%s  partition %d events %d-%d abandoned without a checkpoint (%v)", name, e.Partition, e.FirstOffset, e.LastOffset, e.Cause)
		},
		Released: func(e stream.ReleaseEvent) {
			t.mu.Lock()
			defer t.mu.Unlock()
			if e.Cause != nil && !errors.Is(e.Cause, context.Canceled) {
				t.printf("%s  lets partition %d go: %v", name, e.Partition, e.Cause)
			}
		},
	}
}

func (t *timeline) summary(ctx context.Context, store azeventhubs.CheckpointStore, dlq *memhub.Hub) error {
	t.mu.Lock()
	defer t.mu.Unlock()
	var problems []string
	for p := range partitions {
		for o := range perPart {
			if !t.handled[[2]int64{int64(p), int64(o)}] {
				problems = append(problems, fmt.Sprintf("event %d of partition %d neither handled nor dead-lettered", o, p))
			}
		}
	}
	keys := make([][2]int64, 0, len(t.deliveries))
	for k := range t.deliveries {
		keys = append(keys, k)
	}
	sort.Slice(keys, func(i, j int) bool {
		return keys[i][0] < keys[j][0] || keys[i][0] == keys[j][0] && keys[i][1] < keys[j][1]
	})
	// The retry bound (README, Guarantees): at most retryCount + 1
	// deliveries of a batch, no retry number twice; a first delivery whose
	// failure was not committed before its partition moved is delivered
	// again as a first delivery, and only that repeats.
	most := 0
	for _, k := range keys {
		n := t.deliveries[k]
		most = max(most, n)
		if again := t.firsts[k] - 1; n-max(again, 0) > policy.MaxRetries+1 {
			problems = append(problems, fmt.Sprintf("batch %d of partition %d delivered %d times (%d of them first deliveries again), want at most %d",
				k[1], k[0], n, max(again, 0), policy.MaxRetries+1))
		}
	}
	for k, n := range t.retries {
		if k[2] > 0 && n > 1 {
			problems = append(problems, fmt.Sprintf("batch %d of partition %d: retry %d delivered %d times", k[1], k[0], k[2], n))
		}
	}
	dead, _ := dlq.Events("0")
	pos, err := eventhubs.Committed(ctx, store, memhub.Namespace, hubName, group)
	if err != nil {
		return err
	}
	ids := make([]string, 0, len(pos))
	for id := range pos {
		ids = append(ids, id)
	}
	sort.Strings(ids)
	fmt.Println()
	for _, id := range ids {
		fmt.Printf("checkpoint of partition %s: next event %d\n", id, pos[id].Next)
	}
	fmt.Printf("dead-lettered to %s: %d events", dlqName, len(dead))
	if len(dead) > 0 {
		fmt.Printf(" (from partition %v, sequence number %v on)", dead[0].Properties[stream.HeaderPartition], dead[0].Properties[stream.HeaderOffset])
	}
	fmt.Println()
	if len(dead) == 0 {
		problems = append(problems, "nothing was dead-lettered")
	}
	if len(problems) > 0 {
		for _, p := range problems {
			fmt.Println("FAIL:", p)
		}
		return fmt.Errorf("%d problems", len(problems))
	}
	fmt.Printf("ok: %d events handled or dead-lettered, at most %d deliveries of a batch (retryCount %d), every checkpoint at its partition's end\n",
		partitions*perPart, most, policy.MaxRetries)
	return nil
}
