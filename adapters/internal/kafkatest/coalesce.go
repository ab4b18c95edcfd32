package kafkatest

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

	"github.com/redeliver-go/redeliver/checkpoint"
	"github.com/redeliver-go/redeliver/stream"
)

// RunCoalesce checks an adapter's coalesced success commits (DESIGN 9.2):
// far fewer commits than batches, a retry state written before the retry
// is delivered, the success that clears it written at once without
// holding the next batch, the window held while a commit is in flight,
// and the coalesced commit written by a stop. window returns the
// adapter's WithCommitWindow option.
func RunCoalesce(t *testing.T, a Adapter, window func(interval time.Duration, records int) any) {
	// The window the adapters' docs recommend; there is none by default.
	on := window(500*time.Millisecond, 50000)
	t.Run("SuccessCommitsCoalesce", func(t *testing.T) { successCommitsCoalesce(t, a, on) })
	t.Run("CommitsWaitBehindTheLogsEnd", func(t *testing.T) { commitsWaitBehindTheLogsEnd(t, a, window) })
	t.Run("RetryStateIsWrittenBeforeTheRetry", func(t *testing.T) { retryStateWrittenFirst(t, a, on) })
	t.Run("ClearingSuccessDoesNotHoldTheNextBatch", func(t *testing.T) { clearingInBackground(t, a, on) })
	t.Run("CoalescingStopsAtTheWindow", func(t *testing.T) { stopsAtTheWindow(t, a, window) })
	t.Run("StopWritesCoalescedCommit", func(t *testing.T) { stopWritesCoalesced(t, a, on) })
	t.Run("SynchronousWithAZeroWindow", func(t *testing.T) { zeroWindow(t, a, window) })
}

func okHandler() stream.Handler {
	return stream.HandlerFunc(func(context.Context, *stream.Batch) error { return nil })
}

// commitsWaitBehindTheLogsEnd: a worker that keeps up empties the
// adapter's buffer after each batch while the client has more of the
// partition to fetch, or fetched ahead; that is not being caught up, and
// a coalesced success commit waits for the window instead of going out at
// once. Before, every emptied buffer could write a commit (the confluent
// adapter wrote one per batch or two; the franz-go adapter 35 for 600
// batches in a benchmark); with a window of a minute, the broker gets the
// commit at the log's end, and at most a few more.
func commitsWaitBehindTheLogsEnd(t *testing.T, a Adapter, window func(time.Duration, int) any) {
	kc, addrs := NewCluster(t, "t", 1)
	Produce(t, addrs, "t", 0, 0, 20000)
	var commits atomic.Int32
	kc.ControlKey(kmsg.OffsetCommit.Int16(), func(kmsg.Request) (kmsg.Response, error, bool) {
		kc.KeepControl()
		commits.Add(1)
		return nil, nil, false
	})
	Start(t, a, Config{Addrs: addrs, Group: "g", Topic: "t", Processor: NewProcessor(t, okHandler()), MaxBatch: 50,
		Options: []any{window(time.Minute, 10_000_000)}})
	WaitCommitted(t, addrs, "g", "t", map[int32]int64{0: 20000})
	if n := commits.Load(); n > 5 {
		t.Errorf("the broker got %d commits for 400 batches of a log produced before the consumer started, want at most 5 (the one at the log's end)", n)
	}
}

// successCommitsCoalesce consumes 2,000 records in batches of 5 and checks
// that the broker gets far fewer commits than batches (400), and that the
// last one, at the end, is written while the consumer runs on (the
// partition is caught up).
func successCommitsCoalesce(t *testing.T, a Adapter, on any) {
	kc, addrs := NewCluster(t, "t", 1)
	Produce(t, addrs, "t", 0, 0, 2000)
	var commits atomic.Int32
	kc.ControlKey(kmsg.OffsetCommit.Int16(), func(kmsg.Request) (kmsg.Response, error, bool) {
		kc.KeepControl()
		commits.Add(1)
		return nil, nil, false
	})
	Start(t, a, Config{Addrs: addrs, Group: "g", Topic: "t", Processor: NewProcessor(t, okHandler()), MaxBatch: 5, Options: []any{on}})
	WaitCommitted(t, addrs, "g", "t", map[int32]int64{0: 2000})
	if n := commits.Load(); n > 100 {
		t.Errorf("the broker got %d commits for 400 batches, want at most 100", n)
	}
}

// retryStateWrittenFirst checks, with coalescing on, that the retry state
// of a failed batch is on the broker when the batch is delivered again,
// and that the success after it, which clears it, is written.
func retryStateWrittenFirst(t *testing.T, a Adapter, on any) {
	_, addrs := NewCluster(t, "t", 1)
	Produce(t, addrs, "t", 0, 0, 20)
	var (
		failed   atomic.Bool
		failedAt atomic.Int64 // the failed batch's first and last offsets
		failedTo atomic.Int64
		mu       sync.Mutex
		errs     []error
	)
	note := func(err error) {
		mu.Lock()
		errs = append(errs, err)
		mu.Unlock()
	}
	offsetOf := func() (int64, string) {
		o, err := committedAt(addrs, "g", "t", 0)
		if err != nil {
			note(err)
		}
		return o.At, o.Metadata
	}
	// The batch that holds offset 10 fails once: how a client's deliveries
	// are cut into batches depends on the timing of its fetches.
	h := func(_ context.Context, b *stream.Batch) error {
		first, last := b.FirstOffset(), b.LastOffset()
		has10 := first <= 10 && 10 <= last
		switch {
		case has10 && b.Attempt.Retries == 0 && failed.CompareAndSwap(false, true):
			failedAt.Store(first)
			failedTo.Store(last)
			return errors.New("fails once")
		case has10 && failed.Load():
			if at, md := offsetOf(); at != failedAt.Load() || md == "" {
				note(fmt.Errorf("the retry of %d-%d was delivered before its retry state was written (checkpoint %d %q)", first, last, at, md))
			}
		}
		return nil
	}
	proc := NewProcessor(t, stream.HandlerFunc(h), stream.WithPolicy(checkpoint.Policy{MaxRetries: 3, Backoff: checkpoint.Fixed(time.Millisecond)}))
	Start(t, a, Config{Addrs: addrs, Group: "g", Topic: "t", Processor: proc, MaxBatch: 5, Options: []any{on}})
	WaitCommitted(t, addrs, "g", "t", map[int32]int64{0: 20})
	if _, md := offsetOf(); md != "" {
		note(fmt.Errorf("the retry state %q is still committed at the end: the success after the retry did not clear it", md))
	}
	mu.Lock()
	defer mu.Unlock()
	for _, err := range errs {
		t.Error(err)
	}
	if !failed.Load() {
		t.Fatal("the batch holding offset 10 did not fail")
	}
}

// clearingInBackground holds in the broker the commit that clears the
// retry state of a batch retried with success, and checks that the batch
// after it is delivered meanwhile: the worker does not wait for that
// commit (DESIGN 9.2: it carries no state; the retry was counted before it
// was delivered). on is the adapter's WithCommitWindow option.
func clearingInBackground(t *testing.T, a Adapter, on any) {
	kc, addrs := NewCluster(t, "t", 1)
	Produce(t, addrs, "t", 0, 0, 20)
	const (
		notYet int32 = iota
		holding
		released
	)
	var (
		failed, retried atomic.Bool
		failedTo        atomic.Int64
		hold            atomic.Int32 // the clearing commit: notYet, holding, released
		next            = make(chan struct{})
		nextOnce        sync.Once
		duringHold      atomic.Bool
	)
	t.Cleanup(func() { nextOnce.Do(func() { close(next) }) })
	kc.ControlKey(kmsg.OffsetCommit.Int16(), func(req kmsg.Request) (kmsg.Response, error, bool) {
		kc.KeepControl()
		if !retried.Load() {
			return nil, nil, false
		}
		for _, tp := range req.(*kmsg.OffsetCommitRequest).Topics {
			for _, p := range tp.Partitions {
				clears := p.Partition == 0 && (p.Metadata == nil || *p.Metadata == "") && p.Offset > failedTo.Load()
				if clears && hold.CompareAndSwap(notYet, holding) {
					// The success after the retry: held until the next
					// batch is delivered, or 5s.
					kc.SleepControl(func() {
						select {
						case <-next:
						case <-time.After(5 * time.Second):
						}
					})
					hold.Store(released)
				}
			}
		}
		return nil, nil, false
	})
	h := func(_ context.Context, b *stream.Batch) error {
		first, last := b.FirstOffset(), b.LastOffset()
		has10 := first <= 10 && 10 <= last
		switch {
		case has10 && b.Attempt.Retries == 0 && failed.CompareAndSwap(false, true):
			failedTo.Store(last)
			return errors.New("fails once")
		case has10 && failed.Load():
			retried.Store(true)
		case retried.Load() && first > failedTo.Load():
			nextOnce.Do(func() {
				// The clearing commit reaches the broker while this
				// batch is delivered, or has been written before it.
				for deadline := time.Now().Add(2 * time.Second); hold.Load() == notYet && time.Now().Before(deadline); {
					time.Sleep(time.Millisecond)
				}
				duringHold.Store(hold.Load() == holding)
				close(next)
			})
		}
		return nil
	}
	proc := NewProcessor(t, stream.HandlerFunc(h), stream.WithPolicy(checkpoint.Policy{MaxRetries: 3, Backoff: checkpoint.Fixed(time.Millisecond)}))
	Start(t, a, Config{Addrs: addrs, Group: "g", Topic: "t", Processor: proc, MaxBatch: 5, Options: []any{on}})
	WaitCommitted(t, addrs, "g", "t", map[int32]int64{0: 20})
	if !retried.Load() {
		t.Fatal("the batch holding offset 10 was not retried")
	}
	if !duringHold.Load() {
		t.Fatal("the batch after the retry was delivered only once the commit that clears the retry state was written: the worker waited for it")
	}
}

// stopsAtTheWindow holds the first commit in the broker with a window of 3
// records: the worker goes on while the records after the commit in
// flight stay within the window, and then waits for it, so that a crash
// would deliver again at most the commit in flight and one window.
func stopsAtTheWindow(t *testing.T, a Adapter, window func(time.Duration, int) any) {
	kc, addrs := NewCluster(t, "t", 1)
	Produce(t, addrs, "t", 0, 0, 10)
	var (
		inCommit = make(chan struct{})
		release  = make(chan struct{})
		once     sync.Once
		relOnce  sync.Once
		handled  atomic.Int32
	)
	rel := func() { relOnce.Do(func() { close(release) }) }
	t.Cleanup(rel)
	kc.ControlKey(kmsg.OffsetCommit.Int16(), func(kmsg.Request) (kmsg.Response, error, bool) {
		kc.DropControl() // hold the first commit only
		once.Do(func() { close(inCommit) })
		kc.SleepControl(func() { <-release })
		return nil, nil, false
	})
	proc := NewProcessor(t, stream.HandlerFunc(func(ctx context.Context, b *stream.Batch) error {
		if b.FirstOffset() == 1 {
			select { // the first batch's commit is in flight
			case <-inCommit:
			case <-ctx.Done():
				return ctx.Err()
			}
		}
		handled.Add(1)
		return nil
	}))
	Start(t, a, Config{Addrs: addrs, Group: "g", Topic: "t", Processor: proc, MaxBatch: 1, Options: []any{window(time.Hour, 3)}})
	deadline := time.Now().Add(Wait)
	for handled.Load() < 4 {
		if time.Now().After(deadline) {
			t.Fatalf("%d batches handled while the first commit was in flight, want 4 or more (the window's)", handled.Load())
		}
		time.Sleep(5 * time.Millisecond)
	}
	time.Sleep(200 * time.Millisecond) // time to go past the window, if it did
	if n := handled.Load(); n > 5 {
		t.Fatalf("%d batches handled while the first commit was in flight, want at most 5 (1 in flight, 3 in the window, 1 waiting)", n)
	}
	rel()
	WaitCommitted(t, addrs, "g", "t", map[int32]int64{0: 10})
}

// stopWritesCoalesced holds the first commit in the broker while the
// consumer handles 10 records in batches of 1, and stops it: the last
// success commit, coalesced behind the held one, is written before Run
// returns.
func stopWritesCoalesced(t *testing.T, a Adapter, on any) {
	kc, addrs := NewCluster(t, "t", 1)
	Produce(t, addrs, "t", 0, 0, 10)
	var (
		inCommit = make(chan struct{})
		release  = make(chan struct{})
		held     sync.Once
		relOnce  sync.Once
		handled  atomic.Int32
	)
	rel := func() { relOnce.Do(func() { close(release) }) }
	t.Cleanup(rel)
	kc.ControlKey(kmsg.OffsetCommit.Int16(), func(kmsg.Request) (kmsg.Response, error, bool) {
		kc.DropControl() // hold the first commit only
		held.Do(func() { close(inCommit) })
		kc.SleepControl(func() { <-release })
		return nil, nil, false
	})
	proc := NewProcessor(t, stream.HandlerFunc(func(ctx context.Context, b *stream.Batch) error {
		if b.FirstOffset() == 1 {
			select { // the first batch's commit is in flight, held
			case <-inCommit:
			case <-ctx.Done():
				return ctx.Err()
			}
		}
		handled.Add(1)
		return nil
	}))
	r := Start(t, a, Config{Addrs: addrs, Group: "g", Topic: "t", Processor: proc, MaxBatch: 1, Options: []any{on}})
	deadline := time.Now().Add(Wait)
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
	time.Sleep(50 * time.Millisecond)
	rel()
	if err := <-stopped; err != nil {
		t.Fatal(err)
	}
	if o, _ := Committed(t, addrs, "g").Lookup("t", 0); o.At != 10 {
		t.Fatalf("the group's checkpoint after the stop is %d, want 10: the coalesced commit was not written", o.At)
	}
}

// zeroWindow checks that WithCommitWindow(0, 0) writes every commit before
// the next batch: the handler of each batch finds the one before it
// committed.
func zeroWindow(t *testing.T, a Adapter, window func(time.Duration, int) any) {
	_, addrs := NewCluster(t, "t", 1)
	Produce(t, addrs, "t", 0, 0, 6)
	var (
		mu   sync.Mutex
		errs []error
	)
	proc := NewProcessor(t, stream.HandlerFunc(func(_ context.Context, b *stream.Batch) error {
		if first := b.FirstOffset(); first > 0 {
			if o, err := committedAt(addrs, "g", "t", 0); err != nil || o.At != first {
				mu.Lock()
				errs = append(errs, fmt.Errorf("batch at %d delivered with the checkpoint at %d (%v): the commit of the one before it was not written first", first, o.At, err))
				mu.Unlock()
			}
		}
		return nil
	}))
	Start(t, a, Config{Addrs: addrs, Group: "g", Topic: "t", Processor: proc, MaxBatch: 1, Options: []any{window(0, 0)}})
	WaitCommitted(t, addrs, "g", "t", map[int32]int64{0: 6})
	mu.Lock()
	defer mu.Unlock()
	for _, err := range errs {
		t.Error(err)
	}
}

// committedAt reads one partition's committed offset through the broker,
// from any goroutine.
func committedAt(addrs []string, group, topic string, partition int32) (kadm.OffsetResponse, error) {
	cl, err := kgo.NewClient(kgo.SeedBrokers(addrs...))
	if err != nil {
		return kadm.OffsetResponse{}, err
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), Wait)
	defer cancel()
	offs, err := kadm.NewClient(cl).FetchOffsets(ctx, group)
	if err != nil {
		return kadm.OffsetResponse{}, err
	}
	o, _ := offs.Lookup(topic, partition)
	return o, nil
}
