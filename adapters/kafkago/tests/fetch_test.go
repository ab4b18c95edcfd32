package tests

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/segmentio/kafka-go"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/redeliver-go/redeliver/adapters/internal/kafkatest"
	"github.com/redeliver-go/redeliver/adapters/kafkago"
	"github.com/redeliver-go/redeliver/checkpoint"
	"github.com/redeliver-go/redeliver/stream"
	"github.com/redeliver-go/redeliver/stream/streamtest"
)

// fetchWatch counts the fetch requests of each partition of a kfake
// cluster and keeps the highest offset fetched.
type fetchWatch struct {
	fetches [2]atomic.Int64
	highest [2]atomic.Int64
}

func watchFetches(kc *kfake.Cluster) *fetchWatch {
	w := &fetchWatch{}
	kc.ControlKey(kmsg.Fetch.Int16(), func(r kmsg.Request) (kmsg.Response, error, bool) {
		for _, t := range r.(*kmsg.FetchRequest).Topics {
			for _, p := range t.Partitions {
				if p.Partition < 2 {
					w.fetches[p.Partition].Add(1)
					if p.FetchOffset > w.highest[p.Partition].Load() {
						w.highest[p.Partition].Store(p.FetchOffset)
					}
				}
			}
		}
		return nil, nil, false
	})
	return w
}

// TestPauseStopsFetching checks that a partition waiting out a backoff is
// not fetched at all (kafka-go cannot pause: the adapter stops fetching),
// while an idle partition of the same consumer keeps fetching, and that the
// records fetched before the pause come out after it.
func TestPauseStopsFetching(t *testing.T) {
	kc, addrs := newCluster(t, "t", 2)
	w := watchFetches(kc)
	produce(t, addrs, "t", 0, 0, 50)
	var (
		rec       streamtest.Recorder
		mu        sync.Mutex
		atPause   [2]int64
		atRetry   [2]int64
		snapshot  = make(chan struct{})
		scheduled sync.Once
	)
	const backoff = 1500 * time.Millisecond
	hooks := stream.Hooks{RetryScheduled: func(stream.RetryEvent) {
		scheduled.Do(func() {
			go func() {
				// Let a fetch that was in flight at the pause finish
				// (MaxWait is 100ms in these tests).
				time.Sleep(300 * time.Millisecond)
				mu.Lock()
				atPause = [2]int64{w.fetches[0].Load(), w.fetches[1].Load()}
				mu.Unlock()
				close(snapshot)
			}()
		})
	}}
	h := stream.HandlerFunc(func(ctx context.Context, b *stream.Batch) error {
		if b.Partition == 0 && b.FirstOffset() == 0 {
			if b.Attempt.Retries == 0 {
				return errInjected
			}
			<-snapshot
			mu.Lock()
			atRetry = [2]int64{w.fetches[0].Load(), w.fetches[1].Load()}
			mu.Unlock()
		}
		return nil
	})
	proc := newProcessor(t, stream.Chain(h, rec.Middleware()), stream.WithHooks(hooks),
		stream.WithPolicy(checkpoint.Policy{MaxRetries: 1, Backoff: checkpoint.Fixed(backoff)}))
	start(t, addrs, "g", "t", proc, kafkago.WithMaxBatch(10))
	waitCommitted(t, addrs, "g", "t", map[int32]int64{0: 50})
	checkHistory(t, rec.Of("t", 0), 50)
	mu.Lock()
	defer mu.Unlock()
	if atRetry[0] != atPause[0] {
		t.Errorf("partition 0 was fetched %d times during its backoff, want none", atRetry[0]-atPause[0])
	}
	if n := atRetry[1] - atPause[1]; n < 3 {
		t.Errorf("idle partition 1 was fetched %d times during the other's %v backoff, want it to go on fetching", n, backoff)
	}
}

// TestBufferIsBounded blocks the handler on the first batch of a long
// partition and checks that the adapter stops fetching once its buffer is
// full, instead of reading the whole partition into memory.
func TestBufferIsBounded(t *testing.T) {
	kc, addrs := newCluster(t, "t", 1)
	w := watchFetches(kc)
	for i := range 100 {
		produce(t, addrs, "t", 0, i*100, 100) // 100 record batches of 100 records
	}
	release := make(chan struct{})
	h := stream.HandlerFunc(func(ctx context.Context, b *stream.Batch) error {
		if b.FirstOffset() == 0 {
			select {
			case <-release:
			case <-ctx.Done():
			}
		}
		return nil
	})
	start(t, addrs, "g", "t", newProcessor(t, h), kafkago.WithMaxBatch(10),
		func(fc *kafka.ReadBatchConfig) { fc.MaxBytes = 4 << 10 })
	// Wait for the fetching to stop.
	deadline := time.Now().Add(wait)
	for last := int64(-1); ; {
		time.Sleep(300 * time.Millisecond)
		n := w.fetches[0].Load()
		if n == last && n > 0 {
			break
		}
		last = n
		if time.Now().After(deadline) {
			t.Fatal("the adapter kept fetching while its handler was blocked")
		}
	}
	const highWater = 2048 // max(4 x 10, 2048)
	// The last fetch started below the bound and its answer (a few
	// record batches of 100) took the buffer past it.
	if h := w.highest[0].Load(); h < highWater-500 || h >= highWater {
		t.Errorf("highest offset fetched %d with the first batch blocked; want the last fetch to start a little below the buffer's bound %d", h, highWater)
	}
	close(release)
	waitCommitted(t, addrs, "g", "t", map[int32]int64{0: 10000})
}

// TestStaleCommitRejoins answers one commit with ILLEGAL_GENERATION: the
// consumer ends its generation at once, joins again, and goes on from the
// last commit, delivering the batch whose commit was refused again.
func TestStaleCommitRejoins(t *testing.T) {
	kc, addrs := newCluster(t, "t", 1)
	produce(t, addrs, "t", 0, 0, 30)
	var refused atomic.Bool
	kc.ControlKey(kmsg.OffsetCommit.Int16(), func(r kmsg.Request) (kmsg.Response, error, bool) {
		req := r.(*kmsg.OffsetCommitRequest)
		if req.Topics[0].Partitions[0].Offset != 20 || !refused.CompareAndSwap(false, true) {
			kc.KeepControl()
			return nil, nil, false
		}
		resp := req.ResponseKind().(*kmsg.OffsetCommitResponse)
		rt := kmsg.NewOffsetCommitResponseTopic()
		rt.Topic = req.Topics[0].Topic
		rp := kmsg.NewOffsetCommitResponseTopicPartition()
		rp.Partition = 0
		rp.ErrorCode = 22 // ILLEGAL_GENERATION
		rt.Partitions = append(rt.Partitions, rp)
		resp.Topics = append(resp.Topics, rt)
		return resp, nil, true
	})
	var (
		rec streamtest.Recorder
		lr  logRecorder
	)
	start(t, addrs, "g", "t", newProcessor(t, stream.Chain(streamtest.Succeed, rec.Middleware())),
		kafkago.WithMaxBatch(10), kafkago.WithLogger(lr.logger()), kafkago.WithCommitWindow(0, 0))
	waitCommitted(t, addrs, "g", "t", map[int32]int64{0: 30})
	if !refused.Load() {
		t.Fatal("no commit was refused")
	}
	if gens := lr.matching("generation started"); len(gens) != 2 {
		t.Errorf("generations %q, want 2: the refused commit should end the first", gens)
	}
	var of10 int
	for _, d := range rec.Of("t", 0) {
		if d.FirstOffset == 10 {
			of10++
		}
	}
	if of10 != 2 {
		t.Errorf("batch 10-19 delivered %d times, want 2 (its commit was refused)", of10)
	}
}

// TestCommittedMetadataIsRead commits an offset with metadata as another
// tool would, and checks that the claim starts there and reports both.
func TestCommittedMetadataIsRead(t *testing.T) {
	_, addrs := newCluster(t, "t", 1)
	produce(t, addrs, "t", 0, 0, 10)
	kafkatest.Commit(t, addrs, "g", "t", 0, 5, "other-tool:1")
	kafkatest.ConsumeFromTheCommit(t, addrs, func(p *stream.Processor) { start(t, addrs, "g", "t", p) }, nil)
}
