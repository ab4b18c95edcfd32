package franz_test

import (
	"context"
	"errors"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/redeliver-go/redeliver/adapters/franz"
	"github.com/redeliver-go/redeliver/checkpoint"
	"github.com/redeliver-go/redeliver/stream"
	"github.com/redeliver-go/redeliver/stream/streamtest"
)

func newProcessor(t *testing.T, h stream.Handler, opts ...stream.Option) *stream.Processor {
	t.Helper()
	p, err := stream.NewProcessor(h, opts...)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// TestBackoffKeepsBufferedOrder fails the first delivery of one batch with
// a backoff while many more records are buffered behind it, and checks that
// the partition stays in the client's fetches during the backoff (its buffer
// has room: pausing it would make it wait for the fetch in flight when it
// resumes), that the other partition goes on meanwhile, and that nothing
// buffered is lost or reordered.
func TestBackoffKeepsBufferedOrder(t *testing.T) {
	addrs := newCluster(t, "t", 2)
	produce(t, addrs, "t", 0, 0, 3000)
	produce(t, addrs, "t", 1, 0, 100)

	cl := boundClient(t, addrs, kgo.FetchMaxWait(50*time.Millisecond))

	var (
		rec          streamtest.Recorder
		pausedSeen   atomic.Bool
		p1DoneInWait atomic.Bool
		once         sync.Once
		retried      = make(chan struct{})
	)
	h := stream.HandlerFunc(func(ctx context.Context, b *stream.Batch) error {
		if b.Partition == 0 && b.FirstOffset() == 20 && b.Attempt.Retries == 0 {
			return errors.New("fail once")
		}
		if b.Partition == 0 && b.FirstOffset() == 20 {
			once.Do(func() { close(retried) })
		}
		return nil
	})
	hooks := stream.Hooks{RetryScheduled: func(stream.RetryEvent) {
		// The engine pauses the claim right after this hook; look from
		// another goroutine while the backoff runs.
		go func() {
			deadline := time.Now().Add(150 * time.Millisecond)
			for time.Now().Before(deadline) {
				if ps := cl.PauseFetchPartitions(nil); len(ps["t"]) == 1 && ps["t"][0] == 0 {
					pausedSeen.Store(true)
					return
				}
				time.Sleep(5 * time.Millisecond)
			}
		}()
	}}
	proc := newProcessor(t, stream.Chain(h, rec.Middleware()), stream.WithHooks(hooks),
		stream.WithPolicy(checkpoint.Policy{MaxRetries: 3, Backoff: checkpoint.Fixed(400 * time.Millisecond)}))
	c, err := franz.New(proc, franz.WithClient(cl), franz.WithMaxBatch(10))
	if err != nil {
		t.Fatal(err)
	}
	startConsumer(t, c)

	select {
	case <-retried:
	case <-time.After(wait):
		t.Fatal("batch 20-29 was not retried")
	}
	// Partition 1 finished while partition 0 waited: its commit is there
	// by the time the retry ran.
	if o, ok := committed(t, addrs, "g").Lookup("t", 1); ok && o.At == 100 {
		p1DoneInWait.Store(true)
	}
	waitCommitted(t, addrs, "g", "t", map[int32]int64{0: 3000, 1: 100})
	checkHistory(t, rec.Of("t", 0), 3000)
	checkHistory(t, rec.Of("t", 1), 100)
	if pausedSeen.Load() {
		t.Error("partition 0 was paused in the client during its backoff, though its buffer had room")
	}
	if !p1DoneInWait.Load() {
		t.Error("partition 1 was not done while partition 0 waited out a 400ms backoff")
	}
	if ps := cl.PauseFetchPartitions(nil); len(ps) != 0 {
		t.Errorf("paused after the retry: %v", ps)
	}
}

// TestRevocationCancelsAndWaits has a second consumer join while the first
// one's handlers block: the first consumer's revoked partitions see their
// context cancelled with stream.ErrRevoked, and nothing is committed for
// them by the first consumer.
func TestRevocationCancelsAndWaits(t *testing.T) {
	addrs := newCluster(t, "t", 4)
	for p := range int32(4) {
		produce(t, addrs, "t", p, 0, 10)
	}
	var (
		mu      sync.Mutex
		causes  = map[int32]error{}
		entered = make(chan int32, 16)
	)
	blocking := stream.HandlerFunc(func(ctx context.Context, b *stream.Batch) error {
		entered <- b.Partition
		<-ctx.Done()
		mu.Lock()
		causes[b.Partition] = context.Cause(ctx)
		mu.Unlock()
		return ctx.Err()
	})
	first := start(t, addrs, "g", "t", newProcessor(t, blocking), kgo.SessionTimeout(time.Second), kgo.HeartbeatInterval(100*time.Millisecond))
	seen := map[int32]bool{}
	for len(seen) < 4 {
		select {
		case p := <-entered:
			seen[p] = true
		case <-time.After(wait):
			t.Fatalf("first consumer entered the handler for %v only", seen)
		}
	}

	var rec streamtest.Recorder
	start(t, addrs, "g", "t", newProcessor(t, stream.Chain(streamtest.Succeed, rec.Middleware())),
		kgo.SessionTimeout(time.Second), kgo.HeartbeatInterval(100*time.Millisecond))

	// The second consumer gets some partitions and commits them; the
	// first keeps the rest blocked.
	deadline := time.Now().Add(wait)
	for {
		mu.Lock()
		n := len(causes)
		mu.Unlock()
		if n > 0 && len(rec.Deliveries()) > 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no revocation seen: causes %v, second consumer's deliveries %v", causes, rec.Deliveries())
		}
		time.Sleep(10 * time.Millisecond)
	}
	mu.Lock()
	for p, cause := range causes {
		if !errors.Is(cause, stream.ErrRevoked) {
			t.Errorf("partition %d: cause %v, want stream.ErrRevoked", p, cause)
		}
	}
	revoked := len(causes)
	mu.Unlock()
	if revoked != 2 {
		t.Errorf("%d partitions revoked from the first consumer, want 2 of 4", revoked)
	}
	want := map[int32]int64{}
	for _, d := range rec.Deliveries() {
		want[d.Partition] = 10
	}
	waitCommitted(t, addrs, "g", "t", want)

	if err := first.Stop(t); err != nil {
		t.Errorf("Run returned %v, want nil: a clean shutdown", err)
	}
	// The first consumer's partitions went to the second on its leave.
	waitCommitted(t, addrs, "g", "t", map[int32]int64{0: 10, 1: 10, 2: 10, 3: 10})
	for p := range int32(4) {
		checkHistory(t, rec.Of("t", p), 10)
	}
}

func TestBalancers(t *testing.T) {
	for _, tc := range []struct {
		name      string
		opts      []kgo.Opt
		groupType string // as ListGroups reports it
	}{
		{"cooperative-sticky", nil, "classic"},
		{"range (eager)", []kgo.Opt{kgo.Balancers(kgo.RangeBalancer())}, "classic"},
		{"KIP-848", []kgo.Opt{kgo.Balancers(kgo.StickyBalancer()), kgo.ServerSideBalancer()}, "consumer"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			addrs := newCluster(t, "t", 4)
			for p := range int32(4) {
				produce(t, addrs, "t", p, 0, 50)
			}
			var rec streamtest.Recorder
			proc := newProcessor(t, stream.Chain(streamtest.Succeed, rec.Middleware(), streamtest.FailFirst(1, nil)),
				stream.WithPolicy(checkpoint.Policy{MaxRetries: 2, Backoff: checkpoint.Fixed(10 * time.Millisecond)}))
			opts := []any{franz.WithMaxBatch(20), kgo.SessionTimeout(time.Second), kgo.HeartbeatInterval(100 * time.Millisecond)}
			for _, o := range tc.opts {
				opts = append(opts, o)
			}
			start(t, addrs, "g", "t", proc, opts...)
			waitCommitted(t, addrs, "g", "t", map[int32]int64{0: 25})
			start(t, addrs, "g", "t", proc, opts...) // a second member mid-stream
			waitCommitted(t, addrs, "g", "t", map[int32]int64{0: 50, 1: 50, 2: 50, 3: 50})
			for p := range int32(4) {
				checkHistory(t, rec.Of("t", p), 50)
			}
			cl, err := kgo.NewClient(kgo.SeedBrokers(addrs...))
			if err != nil {
				t.Fatal(err)
			}
			defer cl.Close()
			ctx, cancel := context.WithTimeout(context.Background(), wait)
			defer cancel()
			listed, err := kadm.NewClient(cl).ListGroupsByType(ctx, []string{tc.groupType})
			if err != nil {
				t.Fatal(err)
			}
			if _, ok := listed["g"]; !ok {
				t.Errorf("group g is not a %q group: the protocol was not the one asked for (listed: %v)", tc.groupType, listed.Groups())
			}
		})
	}
}

// Run ends with an error that says so when the client it was given is
// closed under it (the Run rule the adapters share is in kafkatest.Run).
func TestRunEndsWhenTheClientCloses(t *testing.T) {
	addrs := newCluster(t, "t", 1)
	cl, err := kgo.NewClient(append([]kgo.Opt{kgo.SeedBrokers(addrs...), kgo.ConsumerGroup("g"), kgo.ConsumeTopics("t")}, franz.ClientOptions()...)...)
	if err != nil {
		t.Fatal(err)
	}
	c, err := franz.New(newProcessor(t, streamtest.Succeed), franz.WithClient(cl))
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- c.Run(context.Background()) }()
	time.Sleep(50 * time.Millisecond)
	cl.Close()
	select {
	case err := <-done:
		if err == nil || errors.Is(err, context.Canceled) {
			t.Errorf("Run returned %v, want an error saying the client closed", err)
		}
	case <-time.After(wait):
		t.Fatal("Run did not return")
	}
}

func TestNewErrors(t *testing.T) {
	addrs := newCluster(t, "t", 1)
	proc := newProcessor(t, streamtest.Succeed)
	plain, err := kgo.NewClient(kgo.SeedBrokers(addrs...), kgo.ConsumerGroup("g"), kgo.ConsumeTopics("t"))
	if err != nil {
		t.Fatal(err)
	}
	defer plain.Close()
	bound, err := kgo.NewClient(append([]kgo.Opt{kgo.SeedBrokers(addrs...), kgo.ConsumerGroup("g3"), kgo.ConsumeTopics("t")}, franz.ClientOptions()...)...)
	if err != nil {
		t.Fatal(err)
	}
	defer bound.Close()
	first, err := franz.New(proc, franz.WithClient(bound))
	if err != nil {
		t.Fatal(err)
	}
	defer first.Close()

	group := franz.WithKgoOptions(kgo.SeedBrokers(addrs...), kgo.ConsumerGroup("g"), kgo.ConsumeTopics("t"))
	for _, tc := range []struct {
		name string
		proc *stream.Processor
		opts []franz.Option
	}{
		{"nil processor", nil, []franz.Option{group}},
		{"no client", proc, nil},
		{"both clients", proc, []franz.Option{group, franz.WithClient(bound)}},
		{"no group", proc, []franz.Option{franz.WithKgoOptions(kgo.SeedBrokers(addrs...), kgo.ConsumeTopics("t"))}},
		{"client without ClientOptions", proc, []franz.Option{franz.WithClient(plain)}},
		{"client already bound", proc, []franz.Option{franz.WithClient(bound)}},
		{"max batch 0", proc, []franz.Option{group, franz.WithMaxBatch(0)}},
		{"negative max wait", proc, []franz.Option{group, franz.WithMaxWait(-time.Second)}},
		{"commit timeout 0", proc, []franz.Option{group, franz.WithCommitTimeout(0)}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, err := franz.New(tc.proc, tc.opts...)
			if err == nil {
				c.Close()
				t.Fatal("New returned no error")
			}
			t.Log(err)
		})
	}
}

// TestFullBufferThrottles gives a slow partition and a fast one a tiny
// buffer: the slow one is paused in the client while the fast one starves,
// the fast one finishes first, and neither loses or reorders a record.
func TestFullBufferThrottles(t *testing.T) {
	addrs := newCluster(t, "t", 2)
	produce(t, addrs, "t", 0, 0, 1000)
	produce(t, addrs, "t", 1, 0, 1000)
	cl := boundClient(t, addrs, kgo.FetchMaxWait(50*time.Millisecond), kgo.FetchMaxPartitionBytes(4<<10))
	var (
		rec        streamtest.Recorder
		pausedSeen atomic.Bool
		p1Done     atomic.Bool
		p1First    atomic.Bool
	)
	h := stream.HandlerFunc(func(ctx context.Context, b *stream.Batch) error {
		if b.Partition == 0 {
			if ps := cl.PauseFetchPartitions(nil); slices.Contains(ps["t"], 0) {
				pausedSeen.Store(true)
			}
			if b.LastOffset() == 999 && p1Done.Load() {
				p1First.Store(true)
			}
			time.Sleep(2 * time.Millisecond)
		}
		if b.Partition == 1 && b.LastOffset() == 999 {
			p1Done.Store(true)
		}
		return nil
	})
	c, err := franz.New(newProcessor(t, stream.Chain(h, rec.Middleware())), franz.WithClient(cl), franz.WithMaxBatch(10),
		franz.WithBufferBytes(16<<10))
	if err != nil {
		t.Fatal(err)
	}
	startConsumer(t, c)
	waitCommitted(t, addrs, "g", "t", map[int32]int64{0: 1000, 1: 1000})
	checkHistory(t, rec.Of("t", 0), 1000)
	checkHistory(t, rec.Of("t", 1), 1000)
	if !pausedSeen.Load() {
		t.Error("the slow partition was never paused for a full buffer")
	}
	if !p1First.Load() {
		t.Error("the fast partition did not finish before the slow one")
	}
}

// TestLonePartitionFullInBackoffNotPaused gives the only partition a buffer
// that fills up while its worker waits out a backoff: no other partition
// could take records, so the poll loop is held back instead of the
// partition being paused in the client, which would drop what the client
// fetched for it, to be fetched again (issue 50: at one partition, the
// failure path fetched its records twice).
func TestLonePartitionFullInBackoffNotPaused(t *testing.T) {
	addrs := newCluster(t, "t", 1)
	for i := 0; i < 2000; i += 100 {
		produce(t, addrs, "t", 0, i, 100)
	}
	cl := boundClient(t, addrs, kgo.FetchMaxWait(50*time.Millisecond), kgo.FetchMaxPartitionBytes(4<<10))
	var (
		rec        streamtest.Recorder
		pausedSeen atomic.Bool
		retried    = make(chan struct{}, 1)
	)
	h := stream.HandlerFunc(func(ctx context.Context, b *stream.Batch) error {
		if b.FirstOffset() == 0 {
			if b.Attempt.Retries == 0 {
				return errors.New("fail once")
			}
			select {
			case retried <- struct{}{}:
			default:
			}
		}
		return nil
	})
	hooks := stream.Hooks{RetryScheduled: func(stream.RetryEvent) {
		// Look from another goroutine while the backoff runs.
		go func() {
			deadline := time.Now().Add(400 * time.Millisecond)
			for time.Now().Before(deadline) {
				if ps := cl.PauseFetchPartitions(nil); len(ps["t"]) > 0 {
					pausedSeen.Store(true)
					return
				}
				time.Sleep(5 * time.Millisecond)
			}
		}()
	}}
	proc := newProcessor(t, stream.Chain(h, rec.Middleware()), stream.WithHooks(hooks),
		stream.WithPolicy(checkpoint.Policy{MaxRetries: 3, Backoff: checkpoint.Fixed(500 * time.Millisecond)}))
	// The buffer (16 KiB, each record counting 256 B and more) holds
	// fewer than 64 records: the 2,000 produced overfill it in the backoff.
	c, err := franz.New(proc, franz.WithClient(cl), franz.WithMaxBatch(10), franz.WithBufferBytes(16<<10))
	if err != nil {
		t.Fatal(err)
	}
	startConsumer(t, c)
	select {
	case <-retried:
	case <-time.After(wait):
		t.Fatal("the failed batch was not retried")
	}
	waitCommitted(t, addrs, "g", "t", map[int32]int64{0: 2000})
	checkHistory(t, rec.Of("t", 0), 2000)
	if pausedSeen.Load() {
		t.Error("the only partition was paused in the client with a full buffer in its backoff, though no other partition could take records")
	}
}

// TestResumeDoesNotWaitForFetchInFlight gives a partition in a backoff a
// buffer that fills up, so that it is paused in the client, while the other
// partition is caught up: the client's fetch in flight is then a long poll
// of the idle partition alone (10s here). When the backoff ends and the
// buffer drains, the partition is resumed and must get its next records at
// once, not when that long poll returns.
func TestResumeDoesNotWaitForFetchInFlight(t *testing.T) {
	const maxWait = 10 * time.Second
	addrs := newCluster(t, "t", 2)
	for i := 0; i < 2000; i += 100 {
		produce(t, addrs, "t", 0, i, 100) // batches of 100: a fetch gets a few
	}
	produce(t, addrs, "t", 1, 0, 10)
	cl := boundClient(t, addrs, kgo.FetchMaxWait(maxWait), kgo.FetchMaxPartitionBytes(4<<10))
	var (
		rec        streamtest.Recorder
		pausedSeen atomic.Bool
		retried    = make(chan time.Time, 1)
	)
	h := stream.HandlerFunc(func(ctx context.Context, b *stream.Batch) error {
		if b.Partition == 0 && b.FirstOffset() == 0 {
			if b.Attempt.Retries == 0 {
				return errors.New("fail once")
			}
			if ps := cl.PauseFetchPartitions(nil); slices.Contains(ps["t"], 0) {
				pausedSeen.Store(true)
			}
			retried <- time.Now()
		}
		return nil
	})
	proc := newProcessor(t, stream.Chain(h, rec.Middleware()),
		stream.WithPolicy(checkpoint.Policy{MaxRetries: 3, Backoff: checkpoint.Fixed(500 * time.Millisecond)}))
	c, err := franz.New(proc, franz.WithClient(cl), franz.WithMaxBatch(10), franz.WithBufferBytes(16<<10))
	if err != nil {
		t.Fatal(err)
	}
	startConsumer(t, c)
	var start time.Time
	select {
	case start = <-retried:
	case <-time.After(wait):
		t.Fatal("the failed batch was not retried")
	}
	if !pausedSeen.Load() {
		t.Fatal("partition 0 was not paused in the client with a full buffer in its backoff: the test does not test")
	}
	waitCommitted(t, addrs, "g", "t", map[int32]int64{0: 2000, 1: 10})
	if d := time.Since(start); d > maxWait/2 {
		t.Errorf("partition 0 took %v after its backoff to finish: it waited for the fetch in flight (max wait %v)", d, maxWait)
	}
	checkHistory(t, rec.Of("t", 0), 2000)
	checkHistory(t, rec.Of("t", 1), 10)
}
