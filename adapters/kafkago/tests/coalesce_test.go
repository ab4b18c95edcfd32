package tests

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/redeliver-go/redeliver/adapters/internal/kafkatest"
	"github.com/redeliver-go/redeliver/adapters/kafkago"
	"github.com/redeliver-go/redeliver/checkpoint"
	"github.com/redeliver-go/redeliver/stream"
)

// TestSuccessCommitsCoalesce consumes 2,000 records in batches of 5 and
// checks that the broker gets far fewer commits than batches (400), and
// that the last commit, at the end, is written while the consumer runs on
// (the partition is caught up).
func TestSuccessCommitsCoalesce(t *testing.T) {
	kc, addrs := newCluster(t, "t", 1)
	produce(t, addrs, "t", 0, 0, 2000)
	var commits atomic.Int32
	kc.ControlKey(kmsg.OffsetCommit.Int16(), func(kmsg.Request) (kmsg.Response, error, bool) {
		kc.KeepControl()
		commits.Add(1)
		return nil, nil, false
	})
	start(t, addrs, "g", "t", newProcessor(t, stream.HandlerFunc(func(context.Context, *stream.Batch) error { return nil })),
		kafkago.WithMaxBatch(5), coalescing)
	waitCommitted(t, addrs, "g", "t", map[int32]int64{0: 2000})
	if n := commits.Load(); n > 100 {
		t.Errorf("the broker got %d commits for 400 batches, want at most 100", n)
	}
}

// TestRetryStateIsWrittenBeforeTheRetry checks, with coalescing on, that
// the retry state of a failed batch is on the broker when the batch is
// delivered again (the success after it, which clears it, is written in
// the background: TestClearingSuccessDoesNotHoldTheNextBatch).
func TestRetryStateIsWrittenBeforeTheRetry(t *testing.T) {
	_, addrs := newCluster(t, "t", 1)
	produce(t, addrs, "t", 0, 0, 20)
	adm, err := kgo.NewClient(kgo.SeedBrokers(addrs...))
	if err != nil {
		t.Fatal(err)
	}
	defer adm.Close()
	offsetOf := func() (kadm.OffsetResponse, error) {
		ctx, cancel := context.WithTimeout(context.Background(), wait)
		defer cancel()
		offs, err := kadm.NewClient(adm).FetchOffsets(ctx, "g")
		if err != nil {
			return kadm.OffsetResponse{}, err
		}
		o, _ := offs.Lookup("t", 0)
		return o, nil
	}
	var (
		failed atomic.Bool
		mu     sync.Mutex
		errs   []error
	)
	note := func(err error) {
		mu.Lock()
		errs = append(errs, err)
		mu.Unlock()
	}
	h := func(_ context.Context, b *stream.Batch) error {
		first := b.FirstOffset()
		switch {
		case first == 10 && b.Attempt.Retries == 0 && failed.CompareAndSwap(false, true):
			return errors.New("fails once")
		case first == 10:
			if o, err := offsetOf(); err != nil || o.At != 10 || o.Metadata == "" {
				note(errors.New("the retry was delivered before its retry state was written"))
			}
		}
		return nil
	}
	proc := newProcessor(t, stream.HandlerFunc(h), stream.WithPolicy(checkpoint.Policy{MaxRetries: 3, Backoff: checkpoint.Fixed(time.Millisecond)}))
	start(t, addrs, "g", "t", proc, kafkago.WithMaxBatch(5), coalescing)
	waitCommitted(t, addrs, "g", "t", map[int32]int64{0: 20})
	if o, err := offsetOf(); err != nil || o.Metadata != "" {
		note(fmt.Errorf("the retry state is still committed at the end (%q, %v): the success after the retry did not clear it", o.Metadata, err))
	}
	mu.Lock()
	defer mu.Unlock()
	for _, err := range errs {
		t.Error(err)
	}
	if !failed.Load() {
		t.Fatal("the batch at 10 did not fail")
	}
}

// TestClearingSuccessDoesNotHoldTheNextBatch: with coalescing on, the
// commit that clears a retried batch's retry state is written in the
// background; the next batch is delivered while the broker holds it.
func TestClearingSuccessDoesNotHoldTheNextBatch(t *testing.T) {
	kafkatest.RunClearingInBackground(t, adapter, coalescing)
}

// TestStopWritesCoalescedCommit holds the first commit in the broker while
// the consumer handles 10 records in batches of 1, and stops it: the last
// success commit, coalesced behind the held one, is written before Run
// returns.
func TestStopWritesCoalescedCommit(t *testing.T) {
	kc, addrs := newCluster(t, "t", 1)
	produce(t, addrs, "t", 0, 0, 10)
	var (
		release  = make(chan struct{})
		inCommit = make(chan struct{})
		once     sync.Once
		held     sync.Once
		handled  atomic.Int32
	)
	kc.ControlKey(kmsg.OffsetCommit.Int16(), func(kmsg.Request) (kmsg.Response, error, bool) {
		kc.KeepControl()
		held.Do(func() { close(inCommit) })
		kc.SleepControl(func() { <-release })
		return nil, nil, false
	})
	r := start(t, addrs, "g", "t", newProcessor(t, stream.HandlerFunc(func(ctx context.Context, b *stream.Batch) error {
		if b.FirstOffset() == 1 {
			// The first batch's commit is in flight, held: the others
			// are coalesced behind it.
			select {
			case <-inCommit:
			case <-ctx.Done():
				return ctx.Err()
			}
		}
		handled.Add(1)
		return nil
	})), kafkago.WithMaxBatch(1), coalescing)
	deadline := time.Now().Add(wait)
	for handled.Load() < 10 {
		if time.Now().After(deadline) {
			t.Fatalf("%d of 10 batches handled while a commit was held: not coalesced", handled.Load())
		}
		time.Sleep(5 * time.Millisecond)
	}
	// The stop ends the claim while the first commit is held; the held
	// commit is then let go, and the stop writes the last one after it.
	stopped := make(chan error, 1)
	go func() { stopped <- r.Stop(t) }()
	time.Sleep(200 * time.Millisecond)
	once.Do(func() { close(release) })
	if err := <-stopped; err != nil {
		t.Fatal(err)
	}
	if o := committed(t, addrs, "g"); o["t"][0].At != 10 {
		t.Fatalf("the group's checkpoint after the stop is %d, want 10: the coalesced commit was not written", o["t"][0].At)
	}
}

// coalescing is the commit window the package doc recommends: the default
// writes every commit before the next batch.
var coalescing = kafkago.WithCommitWindow(500*time.Millisecond, 50000)
