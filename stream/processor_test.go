package stream_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/redeliver-go/redeliver/checkpoint"
	"github.com/redeliver-go/redeliver/stream"
	"github.com/redeliver-go/redeliver/stream/streamtest"
)

var errTransient = errors.New("transient")

// events collects hook events; safe for concurrent use.
type events struct {
	mu          sync.Mutex
	retries     []stream.RetryEvent
	exhausted   []stream.ExhaustedEvent
	checkpoints []stream.CheckpointEvent
	abandoned   []stream.AbandonedEvent
	delivered   []stream.DeliveredEvent
}

func (e *events) hooks() stream.Hooks {
	return stream.Hooks{
		Delivered:      func(ev stream.DeliveredEvent) { e.mu.Lock(); e.delivered = append(e.delivered, ev); e.mu.Unlock() },
		RetryScheduled: func(ev stream.RetryEvent) { e.mu.Lock(); e.retries = append(e.retries, ev); e.mu.Unlock() },
		Exhausted:      func(ev stream.ExhaustedEvent) { e.mu.Lock(); e.exhausted = append(e.exhausted, ev); e.mu.Unlock() },
		Checkpointed:   func(ev stream.CheckpointEvent) { e.mu.Lock(); e.checkpoints = append(e.checkpoints, ev); e.mu.Unlock() },
		Abandoned:      func(ev stream.AbandonedEvent) { e.mu.Lock(); e.abandoned = append(e.abandoned, ev); e.mu.Unlock() },
	}
}

// harness runs a processor over partitions in the background of a synctest
// bubble.
type harness struct {
	t      *testing.T
	proc   *stream.Processor
	rec    *streamtest.Recorder
	ev     *events
	parts  []*streamtest.Partition
	cancel context.CancelFunc
	done   chan error
}

// start builds a processor of h (wrapped in a recorder) and runs it over
// parts until stop.
func start(t *testing.T, h stream.Handler, parts []*streamtest.Partition, opts ...stream.Option) *harness {
	t.Helper()
	hs := &harness{t: t, rec: &streamtest.Recorder{}, ev: &events{}, parts: parts, done: make(chan error, 1)}
	// Quiet unless the test gives a logger of its own (a later option wins).
	opts = append([]stream.Option{stream.WithHooks(hs.ev.hooks()), stream.WithLogger(slog.New(slog.DiscardHandler))}, opts...)
	proc, err := stream.NewProcessor(stream.Chain(h, hs.rec.Middleware()), opts...)
	if err != nil {
		t.Fatal(err)
	}
	hs.proc = proc
	ctx, cancel := context.WithCancel(t.Context())
	hs.cancel = cancel
	go func() { hs.done <- streamtest.Run(ctx, proc, parts...) }()
	return hs
}

// waitAll waits until every partition is committed to its end.
func (hs *harness) waitAll() {
	hs.t.Helper()
	ctx, cancel := context.WithTimeout(hs.t.Context(), 24*time.Hour) // fake time
	defer cancel()
	for _, p := range hs.parts {
		if err := p.WaitCommitted(ctx, p.End()); err != nil {
			hs.t.Fatal(err)
		}
	}
}

func (hs *harness) stop() {
	hs.t.Helper()
	hs.cancel()
	if err := <-hs.done; err != nil {
		hs.t.Fatalf("run: %v", err)
	}
}

func fixed(retries int, d time.Duration) stream.Option {
	return stream.WithPolicy(checkpoint.Policy{MaxRetries: retries, Backoff: checkpoint.Fixed(d)})
}

// advancing returns the offsets of the commits that moved the checkpoint
// past a batch (those without retry state).
func advancing(cs []streamtest.Commit) []int64 {
	var out []int64
	for _, c := range cs {
		if c.Err == nil && c.Metadata == "" {
			out = append(out, c.Next)
		}
	}
	return out
}

// deliveriesPerBatch counts deliveries by first offset.
func deliveriesPerBatch(ds []streamtest.Delivery) map[int64]int {
	n := map[int64]int{}
	for _, d := range ds {
		n[d.FirstOffset]++
	}
	return n
}

// Scenario 1 of seed 004: no error, no RetryResult: every batch is delivered
// once and the checkpoint follows each batch.
func TestScenario1SuccessAdvancesCheckpoint(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p := streamtest.NewPartition("orders", 0, 10)
		p.AppendN(time.Now(), 35)
		hs := start(t, streamtest.Succeed, []*streamtest.Partition{p}, fixed(10, 5*time.Second))
		hs.waitAll()
		hs.stop()

		for first, n := range deliveriesPerBatch(hs.rec.Deliveries()) {
			if n != 1 {
				t.Errorf("batch at %d delivered %d times", first, n)
			}
		}
		if got, want := fmt.Sprint(advancing(p.Commits())), "[10 20 30 35]"; got != want {
			t.Fatalf("commits %s, want %s", got, want)
		}
		if len(hs.ev.retries)+len(hs.ev.exhausted) != 0 {
			t.Fatalf("retries %d, exhausted %d", len(hs.ev.retries), len(hs.ev.exhausted))
		}
	})
}

// Scenario 2: an error and no retry policy: the delivery fails and the stream
// moves on to the next batch.
func TestScenario2ErrorWithoutPolicyMovesOn(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p := streamtest.NewPartition("orders", 0, 10)
		p.AppendN(time.Now(), 30)
		failing := stream.HandlerFunc(func(_ context.Context, b *stream.Batch) error {
			if b.FirstOffset() == 10 {
				return errTransient
			}
			return nil
		})
		hs := start(t, failing, []*streamtest.Partition{p}) // zero policy: no retries
		hs.waitAll()
		hs.stop()

		if got := deliveriesPerBatch(hs.rec.Deliveries()); got[0] != 1 || got[10] != 1 || got[20] != 1 {
			t.Fatalf("deliveries per batch %v, want one each", got)
		}
		if len(hs.ev.exhausted) != 1 || hs.ev.exhausted[0].FirstOffset != 10 || !errors.Is(hs.ev.exhausted[0].Err, errTransient) {
			t.Fatalf("exhausted events %+v", hs.ev.exhausted)
		}
		if hs.ev.exhausted[0].Err.Reason != checkpoint.RetriesSpent {
			t.Fatalf("reason %v", hs.ev.exhausted[0].Err.Reason)
		}
		if c, _ := p.Committed(); c != 30 {
			t.Fatalf("checkpoint %d, want 30", c)
		}
	})
}

// Scenario 3: an error with a retry policy: the checkpoint is withheld, the
// same batch comes back after sleepDuration until the retries are spent, then
// the stream moves on.
func TestScenario3ErrorWithPolicyWithholdsCheckpoint(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p := streamtest.NewPartition("orders", 0, 10)
		p.AppendN(time.Now(), 20)
		var (
			mu    sync.Mutex
			times []time.Time
			seen  []int64 // checkpoint seen during each delivery of batch 0
		)
		h := stream.HandlerFunc(func(_ context.Context, b *stream.Batch) error {
			if b.FirstOffset() != 0 {
				return nil
			}
			c, _ := p.Committed()
			mu.Lock()
			times = append(times, time.Now())
			seen = append(seen, c)
			mu.Unlock()
			return errTransient
		})
		hs := start(t, h, []*streamtest.Partition{p}, fixed(3, 5*time.Second))
		begin := time.Now()
		hs.waitAll()
		hs.stop()

		if len(times) != 4 {
			t.Fatalf("batch delivered %d times, want 4 (1 + retryCount 3)", len(times))
		}
		for i, at := range times {
			if got := at.Sub(begin); got != time.Duration(i)*5*time.Second {
				t.Errorf("delivery %d at +%v, want +%v", i+1, got, time.Duration(i)*5*time.Second)
			}
			if seen[i] > 0 {
				t.Errorf("delivery %d saw checkpoint %d, want it withheld at or before the batch's first offset 0", i+1, seen[i])
			}
		}
		if len(hs.ev.retries) != 3 || len(hs.ev.exhausted) != 1 {
			t.Fatalf("retries %d, exhausted %d; want 3, 1", len(hs.ev.retries), len(hs.ev.exhausted))
		}
		if c, _ := p.Committed(); c != 20 {
			t.Fatalf("checkpoint %d, want 20", c)
		}
		if _, pauses := p.Paused(); pauses != 1 {
			t.Fatalf("paused %d times during the backoffs, want 1", pauses)
		}
	})
}

// Scenario 4: no error but a RetryResult: the delivery succeeded, the
// checkpoint is withheld and the batch comes back per the RetryResult, which
// overrides host.json's policy; when its count is spent the stream moves on.
func TestScenario4RetryResultOverridesPolicy(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p := streamtest.NewPartition("orders", 0, 10)
		p.AppendN(time.Now(), 20)
		h := stream.HandlerFunc(func(_ context.Context, b *stream.Batch) error {
			if b.FirstOffset() == 0 {
				return stream.Retry(2, time.Second)
			}
			return nil
		})
		// host.json says 10 retries every 5s; the RetryResult says 2 every 1s.
		hs := start(t, h, []*streamtest.Partition{p}, fixed(10, 5*time.Second))
		begin := time.Now()
		hs.waitAll()
		elapsed := time.Since(begin)
		hs.stop()

		if got := deliveriesPerBatch(hs.rec.Deliveries())[0]; got != 3 {
			t.Fatalf("batch delivered %d times, want 3 (1 + RetryResult's 2)", got)
		}
		if elapsed != 2*time.Second {
			t.Fatalf("took %v, want 2s (the RetryResult's delays)", elapsed)
		}
		for _, d := range hs.ev.delivered {
			if d.FirstOffset == 0 && d.Outcome != stream.RetryRequested {
				t.Fatalf("outcome %v, want retry requested", d.Outcome)
			}
		}
		if len(hs.ev.exhausted) != 0 {
			t.Fatal("a RetryResult that ran out fired the exhausted hook: it succeeded")
		}
		if got := advancing(p.Commits()); fmt.Sprint(got) != "[10 20]" {
			t.Fatalf("advancing commits %v, want [10 20]", got)
		}
	})
}

// A per-record handler that fails on one record reports it (FailedAt): the
// records before it are done, and the batch from that record on is
// delivered again whole.
func TestPerRecordFailureRetriesFromTheFailedRecord(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p := streamtest.NewPartition("orders", 0, 5)
		p.AppendN(time.Now(), 5)
		var (
			mu       sync.Mutex
			calls    = map[int64]int{}
			failOnce = true
		)
		h := stream.PerRecord(func(_ context.Context, r *stream.Record) error {
			mu.Lock()
			defer mu.Unlock()
			calls[r.Offset]++
			if r.Offset == 3 && failOnce {
				failOnce = false
				return errTransient
			}
			return nil
		})
		hs := start(t, h, []*streamtest.Partition{p}, fixed(3, time.Second))
		hs.waitAll()
		hs.stop()

		want := map[int64]int{0: 1, 1: 1, 2: 1, 3: 2, 4: 1}
		if fmt.Sprint(calls) != fmt.Sprint(want) {
			t.Fatalf("calls per record %v, want %v", calls, want)
		}
		ds := hs.rec.Deliveries()
		if len(ds) != 2 || ds[0].FirstOffset != 0 || ds[1].FirstOffset != 3 || ds[1].LastOffset != 4 {
			t.Fatalf("deliveries %+v: want 0-4, then 3-4", ds)
		}
		if got := advancing(p.Commits()); fmt.Sprint(got) != "[3 5]" {
			t.Fatalf("advancing commits %v, want [3 5]", got)
		}
	})
}

func TestRetryCount(t *testing.T) {
	for _, tt := range []struct {
		retries int
		fails   int // the handler fails this many deliveries (-1: always)
		want    int // deliveries
	}{
		{0, -1, 1},
		{1, -1, 2},
		{5, -1, 6},
		{checkpoint.Infinite, 50, 51}, // -1 never gives up: it delivers until success
	} {
		t.Run(fmt.Sprintf("retryCount=%d", tt.retries), func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				p := streamtest.NewPartition("t", 0, 3)
				p.AppendN(time.Now(), 3)
				hs := start(t, stream.Chain(streamtest.Succeed, streamtest.FailFirst(tt.fails, nil)), []*streamtest.Partition{p},
					fixed(tt.retries, time.Second))
				hs.waitAll()
				hs.stop()
				if got := len(hs.rec.Deliveries()); got != tt.want {
					t.Fatalf("%d deliveries, want %d", got, tt.want)
				}
			})
		})
	}
}

// Attempt information reaches the handler.
func TestAttemptInfo(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p := streamtest.NewPartition("t", 0, 3)
		p.AppendN(time.Now(), 3)
		begin := time.Now()
		hs := start(t, streamtest.FailFirst(-1, nil)(streamtest.Succeed), []*streamtest.Partition{p}, fixed(2, time.Second))
		hs.waitAll()
		hs.stop()
		ds := hs.rec.Deliveries()
		if len(ds) != 3 {
			t.Fatalf("%d deliveries", len(ds))
		}
		for i, d := range ds {
			a := d.Attempt
			if a.Retries != i || a.MaxRetries != 2 || a.Last != (i == 2) || a.Number() != i+1 {
				t.Errorf("delivery %d: %+v", i+1, a)
			}
			if i == 0 && (!a.FirstFailure.IsZero() || a.LastError != nil) {
				t.Errorf("first delivery has failure info: %+v", a)
			}
			if i > 0 && (!a.FirstFailure.Equal(begin) || !errors.Is(a.LastError, streamtest.ErrInjected)) {
				t.Errorf("delivery %d: first failure %v, last error %v", i+1, a.FirstFailure, a.LastError)
			}
		}
	})
}

// The time budget ends retrying even with retries left.
func TestTimeBudgetEndsRetrying(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p := streamtest.NewPartition("t", 0, 3)
		p.AppendN(time.Now(), 3)
		pol := checkpoint.Policy{MaxRetries: checkpoint.Infinite, Backoff: checkpoint.Fixed(10 * time.Second), MaxRetryTime: 35 * time.Second}
		hs := start(t, streamtest.FailFirst(-1, nil)(streamtest.Succeed), []*streamtest.Partition{p}, stream.WithPolicy(pol))
		hs.waitAll()
		hs.stop()
		// deliveries at 0, 10, 20, 30s; the retry at 40s is past the budget.
		if got := len(hs.rec.Deliveries()); got != 4 {
			t.Fatalf("%d deliveries, want 4", got)
		}
		if len(hs.ev.exhausted) != 1 || hs.ev.exhausted[0].Err.Reason != checkpoint.TimeBudgetSpent {
			t.Fatalf("exhausted %+v", hs.ev.exhausted)
		}
	})
}

// Errors marked Permanent, or rejected by the error filter, are not retried.
func TestNonRetryableErrors(t *testing.T) {
	errBad := errors.New("bad record")
	for _, tt := range []struct {
		name string
		err  error
		opt  stream.Option
	}{
		{"Permanent", checkpoint.Permanent(errBad), fixed(5, time.Second)},
		{"filter", errBad, stream.WithPolicy(checkpoint.Policy{MaxRetries: 5, Retryable: checkpoint.RetryUnless(errBad)})},
	} {
		t.Run(tt.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				p := streamtest.NewPartition("t", 0, 3)
				p.AppendN(time.Now(), 6)
				h := stream.HandlerFunc(func(_ context.Context, b *stream.Batch) error {
					if b.FirstOffset() == 0 {
						return tt.err
					}
					return nil
				})
				hs := start(t, h, []*streamtest.Partition{p}, tt.opt)
				hs.waitAll()
				hs.stop()
				if got := deliveriesPerBatch(hs.rec.Deliveries())[0]; got != 1 {
					t.Fatalf("delivered %d times, want 1", got)
				}
				if len(hs.ev.exhausted) != 1 || hs.ev.exhausted[0].Err.Reason != checkpoint.NotRetryable || !errors.Is(hs.ev.exhausted[0].Err, errBad) {
					t.Fatalf("exhausted %+v", hs.ev.exhausted)
				}
			})
		})
	}
}

// A panicking handler is retried like a failing one; the process survives.
func TestPanicIsRetried(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p := streamtest.NewPartition("t", 0, 3)
		p.AppendN(time.Now(), 3)
		var once sync.Once
		h := stream.HandlerFunc(func(context.Context, *stream.Batch) error {
			once.Do(func() { panic("nil map") })
			return nil
		})
		hs := start(t, h, []*streamtest.Partition{p}, fixed(1, time.Second))
		hs.waitAll()
		hs.stop()
		if len(hs.ev.retries) != 1 {
			t.Fatalf("retries %d, want 1", len(hs.ev.retries))
		}
		var pe *stream.PanicError
		if !errors.As(hs.ev.retries[0].Err, &pe) || pe.Value != "nil map" || len(pe.Stack) == 0 {
			t.Fatalf("retry cause %v, want a PanicError", hs.ev.retries[0].Err)
		}
	})
}

// Cancelling during a long backoff returns at once, without a checkpoint.
func TestCancelDuringBackoffReturnsPromptlyWithoutCheckpoint(t *testing.T) {
	// Real time here: the point is the wall-clock bound.
	p := streamtest.NewPartition("t", 0, 3)
	p.AppendN(time.Now(), 3)
	ev := &events{}
	proc, err := stream.NewProcessor(streamtest.FailFirst(-1, nil)(streamtest.Succeed), fixed(10, time.Hour), stream.WithHooks(ev.hooks()))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() { done <- streamtest.Run(ctx, proc, p) }()
	deadline := time.After(10 * time.Second)
	for {
		if paused, _ := p.Paused(); paused {
			break
		}
		select {
		case <-deadline:
			t.Fatal("the batch never entered its backoff")
		case <-time.After(time.Millisecond):
		}
	}
	begin := time.Now()
	cancel()
	select {
	case err := <-done:
		if took := time.Since(begin); took > time.Second {
			t.Fatalf("returned %v after cancel, want < 1s", took)
		}
		if err != nil {
			t.Fatalf("Run returned %v, want nil after cancel", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("Process did not return within 5s of cancel")
	}
	if got := advancing(p.Commits()); len(got) != 0 {
		t.Fatalf("the checkpoint advanced to %v though the batch never succeeded", got)
	}
	if len(ev.abandoned) != 1 || ev.abandoned[0].FirstOffset != 0 {
		t.Fatalf("abandoned events %+v", ev.abandoned)
	}
}

// A partition in backoff does not hold up another partition.
func TestBackoffDoesNotBlockOtherPartitions(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		stuck := streamtest.NewPartition("t", 0, 10)
		stuck.AppendN(time.Now(), 10)
		flowing := streamtest.NewPartition("t", 1, 10)
		flowing.AppendN(time.Now(), 1000)
		h := stream.HandlerFunc(func(_ context.Context, b *stream.Batch) error {
			if b.Partition == 0 {
				return errTransient
			}
			return nil
		})
		hs := start(t, h, []*streamtest.Partition{stuck, flowing}, fixed(checkpoint.Infinite, time.Hour))
		begin := time.Now()
		ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
		defer cancel()
		if err := flowing.WaitCommitted(ctx, 1000); err != nil {
			t.Fatal(err)
		}
		synctest.Wait() // every worker is now blocked: the stuck one in its backoff
		if took := time.Since(begin); took != 0 {
			t.Fatalf("healthy partition took %v of fake time, want 0 (no wait behind the backoff)", took)
		}
		if c, _ := stuck.Committed(); c > 0 {
			t.Fatalf("stuck partition committed %d", c)
		}
		if paused, _ := stuck.Paused(); !paused {
			t.Fatal("stuck partition not paused during its backoff")
		}
		hs.stop()
	})
}

// Whatever the handler does, no checkpoint is written past a record that
// has not succeeded or been given up.
func TestNoCheckpointPastUnresolvedRecords(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var parts []*streamtest.Partition
		for i := range 4 {
			p := streamtest.NewPartition("t", int32(i), 7)
			p.AppendN(time.Now(), 500)
			parts = append(parts, p)
		}
		// Fail deterministically but irregularly: a batch fails while
		// (offset*31+retry*17) % 5 is 0 or 1.
		h := stream.HandlerFunc(func(_ context.Context, b *stream.Batch) error {
			if (b.FirstOffset()*31+int64(b.Attempt.Retries)*17)%5 < 2 {
				return errTransient
			}
			return nil
		})
		var (
			mu       sync.Mutex
			resolved = map[int32]int64{} // next offset after the last resolved batch
			bad      []string
		)
		hooks := stream.Hooks{
			Delivered: func(ev stream.DeliveredEvent) {
				if ev.Outcome == stream.Succeeded {
					mu.Lock()
					resolved[ev.Partition] = ev.LastOffset + 1
					mu.Unlock()
				}
			},
			Exhausted: func(ev stream.ExhaustedEvent) {
				mu.Lock()
				resolved[ev.Partition] = ev.LastOffset + 1
				mu.Unlock()
			},
			Checkpointed: func(ev stream.CheckpointEvent) {
				mu.Lock()
				if ev.Next > resolved[ev.Partition] {
					bad = append(bad, fmt.Sprintf("partition %d: checkpoint %d past resolved %d", ev.Partition, ev.Next, resolved[ev.Partition]))
				}
				mu.Unlock()
			},
		}
		hs := start(t, h, parts, fixed(2, 100*time.Millisecond), stream.WithHooks(hooks))
		hs.waitAll()
		hs.stop()
		if len(bad) > 0 {
			t.Fatal(bad)
		}
		for _, p := range parts {
			prev := int64(-1)
			for _, c := range p.Commits() {
				if c.Next < prev {
					t.Fatalf("partition %d: checkpoint went back from %d to %d", p.Partition(), prev, c.Next)
				}
				prev = c.Next
			}
		}
	})
}

// A failed commit is tried again; the batch is not delivered again for it.
func TestCommitFailureIsRetried(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p := streamtest.NewPartition("t", 0, 5)
		p.AppendN(time.Now(), 10)
		p.FailCommits(errors.New("coordinator not available"), errors.New("request timed out"))
		hs := start(t, streamtest.Succeed, []*streamtest.Partition{p})
		hs.waitAll()
		hs.stop()
		cs := p.Commits()
		if len(cs) != 4 || cs[0].Err == nil || cs[1].Err == nil || fmt.Sprint(advancing(cs)) != "[5 10]" {
			t.Fatalf("commits %+v", cs)
		}
		if got := len(hs.rec.Deliveries()); got != 2 {
			t.Fatalf("%d deliveries, want 2: a commit failure must not redeliver", got)
		}
	})
}

// A stop while a failed commit waits out its backoff gives the commit up
// with a Warn line that says what the next owner delivers again; it does
// not lose the records: the next owner delivers them again.
func TestCommitGivenUpAtStopIsLogged(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p := streamtest.NewPartition("t", 0, 5)
		p.AppendN(time.Now(), 5)
		p.FailCommits(errors.New("coordinator not available"), errors.New("request timed out"))
		var (
			mu  sync.Mutex
			buf bytes.Buffer
		)
		log := slog.New(slog.NewTextHandler(&lockedWriter{mu: &mu, w: &buf}, nil))
		hs := start(t, streamtest.Succeed, []*streamtest.Partition{p},
			stream.WithLogger(log), stream.WithOperationBackoff(checkpoint.Fixed(time.Minute)))
		synctest.Wait() // the commit failed twice; its next try is a minute away
		hs.stop()
		if c, _ := p.Committed(); c != -1 {
			t.Fatalf("committed %d after the stop, want nothing", c)
		}
		mu.Lock()
		out := buf.String()
		mu.Unlock()
		if !strings.Contains(out, "level=WARN msg=\"redeliver: commit given up") || !strings.Contains(out, "next=5") {
			t.Errorf("no Warn line on the commit given up:\n%s", out)
		}
		hs2 := start(t, streamtest.Succeed, []*streamtest.Partition{p})
		hs2.waitAll()
		hs2.stop()
		if got := deliveriesPerBatch(hs2.rec.Deliveries())[0]; got != 1 {
			t.Fatalf("the next owner delivered batch 0 %d times, want 1", got)
		}
	})
}

// Revoking a partition during a backoff stops its worker without a commit;
// the next owner delivers the batch again from the committed offset.
func TestRevokeDuringBackoff(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p := streamtest.NewPartition("t", 0, 5)
		p.AppendN(time.Now(), 10)
		var revoke sync.Once
		hooks := stream.Hooks{RetryScheduled: func(stream.RetryEvent) { revoke.Do(p.Revoke) }}
		hs := start(t, streamtest.FailFirst(1, nil)(streamtest.Succeed), []*streamtest.Partition{p},
			fixed(3, time.Minute), stream.WithHooks(hooks))
		if err := <-hs.done; err != nil {
			t.Fatalf("run: %v", err)
		}
		if cs := p.Commits(); len(cs) != 0 {
			t.Fatalf("commits after revoke: %+v", cs)
		}
		// A new owner: in-memory retry state starts over (seed 004's flaw).
		hs2 := start(t, streamtest.FailFirst(1, nil)(streamtest.Succeed), []*streamtest.Partition{p}, fixed(3, time.Minute))
		hs2.waitAll()
		hs2.stop()
		if got := deliveriesPerBatch(hs2.rec.Deliveries())[0]; got != 2 {
			t.Fatalf("new owner delivered batch 0 %d times, want 2", got)
		}
	})
}

// An exhaustion action that fails holds the checkpoint and is tried again.
func TestExhaustionActionRetriedUntilItSucceeds(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p := streamtest.NewPartition("t", 0, 5)
		p.AppendN(time.Now(), 5)
		var (
			mu    sync.Mutex
			tries int
			seen  []int64
		)
		action := func(_ context.Context, b *stream.Batch, err *checkpoint.ExhaustedError) error {
			mu.Lock()
			defer mu.Unlock()
			tries++
			c, _ := p.Committed()
			seen = append(seen, c)
			if tries < 3 {
				return errors.New("dead-letter topic unavailable")
			}
			return nil
		}
		hs := start(t, streamtest.FailFirst(-1, nil)(streamtest.Succeed), []*streamtest.Partition{p},
			fixed(1, time.Second), stream.WithExhaustionAction(action))
		hs.waitAll()
		hs.stop()
		if tries != 3 || fmt.Sprint(seen) != "[0 0 0]" {
			t.Fatalf("tries %d, checkpoints seen %v", tries, seen)
		}
	})
}

// The manual streamtest.Clock drives backoffs without synctest.
func TestManualClock(t *testing.T) {
	clk := streamtest.NewClock(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	p := streamtest.NewPartition("t", 0, 5)
	p.AppendN(clk.Now(), 5)
	rec := &streamtest.Recorder{}
	proc, err := stream.NewProcessor(stream.Chain(streamtest.Succeed, rec.Middleware(), streamtest.FailFirst(2, nil)),
		fixed(5, 30*time.Second), stream.WithClock(clk))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- streamtest.Run(ctx, proc, p) }()
	for i := range 2 {
		if err := clk.WaitTimers(ctx, 1); err != nil {
			t.Fatal(err)
		}
		if got := len(rec.Deliveries()); got != i+1 {
			t.Fatalf("before advancing: %d deliveries, want %d", got, i+1)
		}
		clk.Advance(30 * time.Second)
	}
	if err := p.WaitCommitted(ctx, 5); err != nil {
		t.Fatal(err)
	}
	cancel()
	<-done
	if got := len(rec.Deliveries()); got != 3 {
		t.Fatalf("%d deliveries, want 3", got)
	}
}

func TestNewProcessorRejectsBadInput(t *testing.T) {
	if _, err := stream.NewProcessor(nil); err == nil {
		t.Fatal("nil handler accepted")
	}
	if _, err := stream.NewProcessor(streamtest.Succeed, stream.WithPolicy(checkpoint.Policy{MaxRetries: -5})); err == nil {
		t.Fatal("retryCount -5 accepted")
	}
}

// The Delivered event says when the handler ran: a retry's Start comes
// exactly its backoff after the failed delivery returned (Start +
// Duration), however long the handler took.
func TestDeliveredEventTimes(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p := streamtest.NewPartition("t", 0, 10)
		p.AppendN(time.Now(), 10)
		const took, backoff = 700 * time.Millisecond, 5 * time.Second
		h := stream.HandlerFunc(func(_ context.Context, b *stream.Batch) error {
			time.Sleep(took)
			if b.Attempt.Retries < 2 {
				return errTransient
			}
			return nil
		})
		begin := time.Now()
		hs := start(t, h, []*streamtest.Partition{p}, fixed(3, backoff))
		hs.waitAll()
		hs.stop()

		ds := hs.ev.delivered
		if len(ds) != 3 {
			t.Fatalf("%d deliveries, want 3", len(ds))
		}
		if !ds[0].Start.Equal(begin) {
			t.Errorf("first delivery started at +%v, want +0", ds[0].Start.Sub(begin))
		}
		for i, d := range ds {
			if d.Duration != took {
				t.Errorf("delivery %d: duration %v, want %v", i+1, d.Duration, took)
			}
			if i == 0 {
				continue
			}
			failed := ds[i-1].Start.Add(ds[i-1].Duration)
			if gap := d.Start.Sub(failed); gap != backoff {
				t.Errorf("delivery %d started %v after delivery %d returned, want the %v backoff", i+1, gap, i, backoff)
			}
		}
	})
}

// An error's retry-after hint and a policy's own decision reach the
// Processor's schedule: the retry starts the hint after the failure, and an
// error the decision declines is given up at once.
func TestRetryAfterAndDecideThroughProcessor(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p := streamtest.NewPartition("t", 0, 5)
		p.AppendN(time.Now(), 10)
		errThrottled := errors.New("throttled")
		h := stream.HandlerFunc(func(_ context.Context, b *stream.Batch) error {
			switch {
			case b.FirstOffset() == 0 && b.Attempt.Retries == 0:
				return checkpoint.RetryAfter(errThrottled, 7*time.Second)
			case b.FirstOffset() == 5:
				return errors.New("unknown")
			}
			return nil
		})
		decide := func(n int, err error, _ time.Duration, _ checkpoint.Rand) (time.Duration, bool) {
			return time.Second, errors.Is(err, errThrottled)
		}
		hs := start(t, h, []*streamtest.Partition{p},
			stream.WithPolicy(checkpoint.Policy{MaxRetries: 3, Decide: decide}))
		hs.waitAll()
		hs.stop()
		ds := hs.ev.delivered
		if len(ds) != 3 {
			t.Fatalf("%d deliveries, want 3 (batch 0 twice, batch 5 once)", len(ds))
		}
		if gap := ds[1].Start.Sub(ds[0].Start.Add(ds[0].Duration)); gap != 7*time.Second {
			t.Errorf("retry started %v after the failure, want the 7s hint", gap)
		}
		if len(hs.ev.exhausted) != 1 || hs.ev.exhausted[0].FirstOffset != 5 || hs.ev.exhausted[0].Err.Reason != checkpoint.NotRetryable {
			t.Errorf("exhausted %+v, want batch 5 given up as not retryable", hs.ev.exhausted)
		}
	})
}
