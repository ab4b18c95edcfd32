package franz_test

import (
	"bytes"
	"context"
	"log/slog"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redeliver-go/redeliver/adapters/franz"
	"github.com/redeliver-go/redeliver/adapters/internal/kafkatest"
	"github.com/redeliver-go/redeliver/stream"
)

// goroutineID returns the calling goroutine's ID (the runtime never
// gives one to two goroutines).
func goroutineID() string {
	buf := make([]byte, 64)
	buf = buf[:runtime.Stack(buf, false)]
	id, _, _ := bytes.Cut(bytes.TrimPrefix(buf, []byte("goroutine ")), []byte(" "))
	return string(id)
}

// watchGoroutines samples the process's goroutines every 100µs until the
// returned function is called, which returns the most it saw.
func watchGoroutines() (most func() int) {
	var peak atomic.Int64
	done := make(chan struct{})
	stopped := make(chan struct{})
	go func() {
		defer close(stopped)
		tick := time.NewTicker(100 * time.Microsecond)
		defer tick.Stop()
		for {
			if n := int64(runtime.NumGoroutine()); n > peak.Load() {
				peak.Store(n)
			}
			select {
			case <-done:
				return
			case <-tick.C:
			}
		}
	}()
	return func() int {
		close(done)
		<-stopped
		return int(peak.Load())
	}
}

// stalls counts the workers the consumer's log says it started on
// goroutines of their own after its runners were held up.
type stalls struct {
	slog.Handler
	waiting *atomic.Int64
}

func (s stalls) Enabled(context.Context, slog.Level) bool { return true }

func (s stalls) Handle(ctx context.Context, r slog.Record) error {
	if strings.Contains(r.Message, "held up") {
		r.Attrs(func(a slog.Attr) bool {
			if a.Key == "waiting" {
				s.waiting.Add(a.Value.Int64())
			}
			return true
		})
	}
	return nil
}

func (s stalls) WithAttrs([]slog.Attr) slog.Handler { return s }
func (s stalls) WithGroup(string) slog.Handler      { return s }

// TestManyPartitionsShareWorkerGoroutines: a consumer assigned many
// partitions at once, each with records, runs their workers on a few
// goroutines, not one per partition: with success commits coalesced
// (nothing waits for the broker), the handlers of 300 partitions
// assigned together run on the runners' limit of goroutines (16, or 4 per
// GOMAXPROCS; a commit that a slow broker makes wait lets one more run),
// fewer than half as many as partitions, plus those the consumer logs it
// started for workers held up behind busy ones. With every commit
// synchronous (the default), a worker waiting for its commit's answer
// lets another run meanwhile, so that many partitions' commits are in
// flight together: the handlers run on more goroutines than the limit.
// Either way, the goroutines at once (sampled every 100µs) stay fewer
// than half as many as partitions, plus those logged as held up: neither
// the commits' waits nor the background flushes take a goroutine per
// partition (the runtime keeps every goroutine's descriptor it made,
// about 480 bytes each). Every partition's record is handled and
// committed.
func TestManyPartitionsShareWorkerGoroutines(t *testing.T) {
	const parts = 300
	limit := max(16, 4*runtime.GOMAXPROCS(0))
	for _, window := range []bool{true, false} {
		t.Run(map[bool]string{true: "commit window", false: "synchronous commits"}[window], func(t *testing.T) {
			addrs := newCluster(t, "t", parts)
			produceEach(t, addrs, "t", parts, 0, 1)
			var mu sync.Mutex
			ran := map[string]bool{} // the goroutines handlers ran on
			proc := kafkatest.NewProcessor(t, stream.HandlerFunc(func(context.Context, *stream.Batch) error {
				id := goroutineID()
				mu.Lock()
				ran[id] = true
				mu.Unlock()
				return nil
			}))
			var spilled atomic.Int64
			opts := []any{franz.WithLogger(slog.New(stalls{waiting: &spilled}))}
			if window {
				opts = append(opts, franz.WithCommitWindow(500*time.Millisecond, 50000))
			}
			base := runtime.NumGoroutine()
			peak := watchGoroutines()
			r := start(t, addrs, "g", "t", proc, opts...)
			stopOnceCommitted(t, addrs, r, parts)
			most := peak() - base
			t.Logf("at most %d goroutines more than before it started", most)
			mu.Lock()
			defer mu.Unlock()
			t.Logf("the handlers of %d partitions ran on %d goroutines (%d started for held-up workers)", parts, len(ran), spilled.Load())
			if int64(most) >= parts/2+spilled.Load() {
				t.Errorf("%d goroutines at once more than before the consumer started, want fewer than %d + %d (logged as held up): the commits' waits and the background flushes of %d partitions must not take a goroutine each", most, parts/2, spilled.Load(), parts)
			}
			switch {
			case len(ran) == 0:
				t.Errorf("no handler ran")
			case window && int64(len(ran)) >= parts/2+spilled.Load():
				t.Errorf("the handlers of %d partitions ran on %d goroutines, want fewer than %d + %d (logged as held up)", parts, len(ran), parts/2, spilled.Load())
			case !window && spilled.Load() == 0 && len(ran) <= limit:
				t.Errorf("with synchronous commits, the handlers of %d partitions ran on %d goroutines, want more than the limit (%d): workers waiting for their commits let others run", parts, len(ran), limit)
			}
		})
	}
}

// TestHeldUpWorkersDoNotHoldOthersBack: every handler waits until the
// handlers of all partitions have been called, more partitions than the
// runners' limit. Workers beyond the limit wait behind held-up ones for
// a stall only: then they get goroutines of their own (logged), and all
// are handled.
func TestHeldUpWorkersDoNotHoldOthersBack(t *testing.T) {
	parts := int32(max(16, 4*runtime.GOMAXPROCS(0)) + 24)
	addrs := newCluster(t, "t", parts)
	produceEach(t, addrs, "t", parts, 0, 1)
	var (
		mu      sync.Mutex
		called  = map[int32]bool{}
		all     = make(chan struct{})
		spilled atomic.Int64
	)
	proc := kafkatest.NewProcessor(t, stream.HandlerFunc(func(ctx context.Context, b *stream.Batch) error {
		mu.Lock()
		called[b.Partition] = true
		if len(called) == int(parts) {
			close(all)
		}
		mu.Unlock()
		select {
		case <-all:
			return nil
		case <-ctx.Done():
			return ctx.Err()
		}
	}))
	r := start(t, addrs, "g", "t", proc, franz.WithLogger(slog.New(stalls{waiting: &spilled})))
	select {
	case <-all:
	case <-time.After(wait):
		mu.Lock()
		n := len(called)
		mu.Unlock()
		t.Fatalf("after %v, the handlers of %d of %d partitions were called: workers held back behind held-up ones", wait, n, parts)
	}
	stopOnceCommitted(t, addrs, r, parts)
	if spilled.Load() == 0 {
		t.Errorf("no workers logged as started after their runners were held up")
	}
}

// TestKeyOrderedWorkersKeepTheirGoroutines: under key ordering a worker
// never parks, so it does not take one of the shared goroutines: more
// key-ordered partitions than the runners' limit all start at once, with
// none held up behind the others.
func TestKeyOrderedWorkersKeepTheirGoroutines(t *testing.T) {
	parts := int32(max(16, 4*runtime.GOMAXPROCS(0)) + 24)
	addrs := newCluster(t, "t", parts)
	produceEach(t, addrs, "t", parts, 0, 1)
	var spilled atomic.Int64
	proc := kafkatest.NewProcessor(t, stream.HandlerFunc(func(context.Context, *stream.Batch) error { return nil }),
		stream.WithOrdering(stream.ByKey))
	// Coalesced commits: no worker waits for a commit's answer (which
	// would let another start).
	r := start(t, addrs, "g", "t", proc, franz.WithLogger(slog.New(stalls{waiting: &spilled})),
		franz.WithCommitWindow(500*time.Millisecond, 50000))
	stopOnceCommitted(t, addrs, r, parts)
	if n := spilled.Load(); n != 0 {
		t.Errorf("%d key-ordered workers waited behind others for a shared goroutine, want none", n)
	}
}

// stopOnceCommitted waits until each of the partitions of topic "t" has
// its one record committed by group "g", then stops r.
func stopOnceCommitted(t *testing.T, addrs []string, r *kafkatest.Running, parts int32) {
	t.Helper()
	want := map[int32]int64{}
	for p := range parts {
		want[p] = 1
	}
	waitCommitted(t, addrs, "g", "t", want)
	if err := r.Stop(t); err != nil {
		t.Fatalf("Run: %v", err)
	}
}
