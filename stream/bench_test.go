package stream_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redeliver-go/redeliver/checkpoint"
	"github.com/redeliver-go/redeliver/stream"
	"github.com/redeliver-go/redeliver/stream/streamtest"
)

// BenchmarkSuccessPath compares the Processor on the success path with the
// same fetch/handle/commit loop written by hand. Compare the records/s of
// the sub-benchmarks: "direct" is the bare loop on the generator's own
// type; "guarded" adds only what any at-least-once loop over a Claim must
// pay for the guarantees the Processor gives (calls through the Claim
// interface, no handler call and no commit once the claim's context has
// ended, a handler's panic recovered as a failed delivery); "processor" is
// the engine.
func BenchmarkSuccessPath(b *testing.B) {
	const size = 100
	var sink int
	var h stream.Handler = stream.HandlerFunc(func(_ context.Context, bt *stream.Batch) error {
		for i := range bt.Records {
			sink += len(bt.Records[i].Value)
		}
		return nil
	})
	b.Run("direct", func(b *testing.B) {
		ctx := b.Context()
		c := streamtest.NewGenerator(b.N, size, 100)
		b.ReportAllocs()
		bt := stream.Batch{Topic: c.Topic(), Partition: c.Partition()}
		b.ResetTimer()
		for range b.N {
			recs, _ := c.Fetch(ctx)
			bt.Records = recs
			if err := h.Handle(ctx, &bt); err != nil {
				b.Fatal(err)
			}
			_ = c.Commit(ctx, recs[len(recs)-1].Offset+1, "")
		}
		b.ReportMetric(float64(b.N*size)/b.Elapsed().Seconds(), "records/s")
	})
	b.Run("guarded", func(b *testing.B) {
		ctx := b.Context()
		guardedLoop(b, ctx, claimOf(streamtest.NewGenerator(b.N, size, 100)), h)
		b.ReportMetric(float64(b.N*size)/b.Elapsed().Seconds(), "records/s")
	})
	b.Run("processor", func(b *testing.B) {
		proc, err := stream.NewProcessor(h, stream.WithPolicy(checkpoint.Policy{MaxRetries: 10, Backoff: checkpoint.Exponential(1)}))
		if err != nil {
			b.Fatal(err)
		}
		ctx, cancel := context.WithCancel(b.Context())
		defer cancel()
		c := streamtest.NewGenerator(b.N, size, 100)
		go func() { <-c.Done(); cancel() }()
		b.ReportAllocs()
		b.ResetTimer()
		_ = proc.Process(ctx, c)
		b.StopTimer()
		if last, _ := c.Committed(); last != int64(b.N*size) {
			b.Fatalf("committed %d, want %d", last, b.N*size)
		}
		b.ReportMetric(float64(b.N*size)/b.Elapsed().Seconds(), "records/s")
	})
	_ = sink
}

// BenchmarkEngineCost is BenchmarkSuccessPath with almost nothing but the
// engine: a claim that hands out the same one-record batch and a handler
// that does nothing. ns/op of "processor" less that of "guarded" is the
// engine's own bookkeeping per batch, with less of the noise of a loaded
// machine than the 100-record leaves (whose generator and handler take
// most of their time).
func BenchmarkEngineCost(b *testing.B) {
	h := stream.HandlerFunc(func(context.Context, *stream.Batch) error { return nil })
	b.Run("guarded", func(b *testing.B) {
		ctx := b.Context()
		guardedLoop(b, ctx, claimOfOne(&oneRecordClaim{recs: make([]stream.Record, 1), batches: b.N, done: make(chan struct{})}), h)
	})
	b.Run("processor", func(b *testing.B) {
		proc, err := stream.NewProcessor(h, stream.WithPolicy(checkpoint.Policy{MaxRetries: 10, Backoff: checkpoint.Exponential(1)}))
		if err != nil {
			b.Fatal(err)
		}
		ctx, cancel := context.WithCancel(b.Context())
		defer cancel()
		c := &oneRecordClaim{recs: make([]stream.Record, 1), batches: b.N, done: make(chan struct{})}
		go func() { <-c.done; cancel() }()
		b.ReportAllocs()
		b.ResetTimer()
		_ = proc.Process(ctx, c)
		b.StopTimer()
		if c.last != int64(b.N)+1 {
			b.Fatalf("committed %d, want %d", c.last, b.N+1)
		}
	})
}

// oneRecordClaim hands out the same one-record batch, batches times, with
// offsets from 1; the commit of the last closes done.
type oneRecordClaim struct {
	recs       []stream.Record
	n, batches int
	last       int64
	done       chan struct{}
}

func (c *oneRecordClaim) Topic() string              { return "one" }
func (c *oneRecordClaim) Partition() int32           { return 0 }
func (c *oneRecordClaim) Committed() (int64, string) { return -1, "" }
func (c *oneRecordClaim) Pause()                     {}
func (c *oneRecordClaim) Resume()                    {}

func (c *oneRecordClaim) Fetch(ctx context.Context) ([]stream.Record, error) {
	if c.n == c.batches {
		<-ctx.Done()
		return nil, context.Cause(ctx)
	}
	c.n++
	c.recs[0].Offset = int64(c.n)
	return c.recs, nil
}

func (c *oneRecordClaim) Commit(_ context.Context, next int64, _ string) error {
	c.last = next
	if c.n == c.batches && next == int64(c.n)+1 {
		close(c.done)
	}
	return nil
}

// claimOfOne returns c as a stream.Claim, out of line, as claimOf does.
//
//go:noinline
func claimOfOne(c *oneRecordClaim) stream.Claim { return c }

// claimOf returns g as a stream.Claim, out of line, so that the guarded
// loop calls it through the interface as the Processor does.
//
//go:noinline
func claimOf(g *streamtest.Generator) stream.Claim { return g }

// guardedLoop is the direct loop plus what any at-least-once loop over a
// Claim pays for the Processor's guarantees: calls through the interface, a
// context check before the handler and before the commit, a recovered
// panic. It runs b.N batches of c.
func guardedLoop(b *testing.B, ctx context.Context, c stream.Claim, h stream.Handler) {
	b.ReportAllocs()
	bt := stream.Batch{Topic: c.Topic(), Partition: c.Partition()}
	b.ResetTimer()
	for range b.N {
		recs, err := c.Fetch(ctx)
		if err != nil || ctx.Err() != nil {
			b.Fatal(err, ctx.Err())
		}
		bt.Records = recs
		if err := handleRecovered(ctx, h, &bt); err != nil {
			b.Fatal(err)
		}
		if ctx.Err() != nil {
			b.Fatal(ctx.Err())
		}
		_ = c.Commit(ctx, recs[len(recs)-1].Offset+1, "")
	}
}

// handleRecovered calls h, a panic returned as an error.
func handleRecovered(ctx context.Context, h stream.Handler, b *stream.Batch) (err error) {
	defer func() {
		if v := recover(); v != nil {
			err = fmt.Errorf("handler panicked: %v", v)
		}
	}()
	return h.Handle(ctx, b)
}

// BenchmarkRedeliveryLateness measures how late a redelivery comes after
// the time its backoff ends (1ms backoffs), against how late a bare
// time.Timer of 1ms fires, as p50 and p99 in microseconds.
func BenchmarkRedeliveryLateness(b *testing.B) {
	const delay = time.Millisecond
	b.Run("timer", func(b *testing.B) {
		late := make([]time.Duration, 0, b.N)
		for range b.N {
			due := time.Now().Add(delay)
			t := time.NewTimer(delay)
			<-t.C
			late = append(late, time.Since(due))
		}
		reportPercentiles(b, late)
	})
	b.Run("redelivery", func(b *testing.B) {
		late := make([]time.Duration, 0, b.N)
		var due time.Time
		h := stream.HandlerFunc(func(_ context.Context, bt *stream.Batch) error {
			if !due.IsZero() {
				late = append(late, time.Since(due))
			}
			if bt.Attempt.Retries < b.N {
				return errTransient
			}
			return nil
		})
		proc, err := stream.NewProcessor(h, stream.WithInMemoryState(),
			stream.WithPolicy(checkpoint.Policy{MaxRetries: checkpoint.Infinite, Backoff: checkpoint.Fixed(delay)}),
			stream.WithHooks(stream.Hooks{RetryScheduled: func(e stream.RetryEvent) { due = e.At }}))
		if err != nil {
			b.Fatal(err)
		}
		ctx, cancel := context.WithCancel(b.Context())
		defer cancel()
		c := streamtest.NewGenerator(1, 10, 10)
		go func() { <-c.Done(); cancel() }()
		b.ResetTimer()
		_ = proc.Process(ctx, c)
		reportPercentiles(b, late)
	})
}

// BenchmarkRedeliveryLatenessMany is BenchmarkRedeliveryLateness with
// 1,000 partitions in backoff at once: every partition's batch fails on
// every delivery, 20 ms apart, until b.N redeliveries were spread over the
// partitions. The baseline, "timers", is 1,000 goroutines that each wait a
// 20 ms timer as many times. Both report how late they start against the
// due time (p50 and p99, in µs).
func BenchmarkRedeliveryLatenessMany(b *testing.B) {
	const (
		partitions = 1000
		delay      = 20 * time.Millisecond
	)
	b.Run("timers", func(b *testing.B) {
		rounds := max(1, b.N/partitions)
		late := make([][]time.Duration, partitions)
		var wg sync.WaitGroup
		for p := range partitions {
			wg.Go(func() {
				for range rounds {
					due := time.Now().Add(delay)
					t := time.NewTimer(delay)
					<-t.C
					late[p] = append(late[p], time.Since(due))
				}
			})
		}
		wg.Wait()
		reportPercentiles(b, slices.Concat(late...))
	})
	b.Run("redeliveries", func(b *testing.B) {
		rounds := max(1, b.N/partitions)
		// Indexed by partition: each is written and read by its
		// partition's worker only (the hook and the handler).
		due := make([]time.Time, partitions)
		late := make([][]time.Duration, partitions)
		h := stream.HandlerFunc(func(_ context.Context, bt *stream.Batch) error {
			p := bt.Partition
			if bt.Attempt.Retries > 0 {
				late[p] = append(late[p], time.Since(due[p]))
			}
			if bt.Attempt.Retries < rounds {
				return errTransient
			}
			return nil
		})
		proc, err := stream.NewProcessor(h, stream.WithInMemoryState(),
			stream.WithPolicy(checkpoint.Policy{MaxRetries: checkpoint.Infinite, Backoff: checkpoint.Fixed(delay)}),
			stream.WithHooks(stream.Hooks{RetryScheduled: func(e stream.RetryEvent) { due[e.Partition] = e.At }}))
		if err != nil {
			b.Fatal(err)
		}
		parts := make([]*streamtest.Partition, partitions)
		for p := range parts {
			parts[p] = streamtest.NewPartition("t", int32(p), 10)
			parts[p].AppendN(time.Now(), 10)
		}
		ctx, cancel := context.WithTimeout(b.Context(), 5*time.Minute)
		defer cancel()
		stopped := make(chan error, 1)
		b.ResetTimer()
		go func() { stopped <- streamtest.Run(ctx, proc, parts...) }()
		for _, p := range parts {
			if err := p.WaitCommitted(ctx, 10); err != nil {
				b.Fatalf("partition %d: %v", p.Partition(), err)
			}
		}
		b.StopTimer()
		cancel()
		<-stopped
		all := slices.Concat(late...)
		if len(all) != rounds*partitions {
			b.Fatalf("%d redeliveries, want %d", len(all), rounds*partitions)
		}
		reportPercentiles(b, all)
	})
}

func reportPercentiles(b *testing.B, d []time.Duration) {
	if len(d) == 0 {
		return
	}
	slices.Sort(d)
	b.ReportMetric(float64(d[len(d)/2].Microseconds()), "p50-late-µs")
	b.ReportMetric(float64(d[len(d)*99/100].Microseconds()), "p99-late-µs")
}

// BenchmarkIsolation measures a healthy partition's throughput while
// another partition of the same Processor waits out backoffs, against the
// healthy partition alone. Compare the records/s of the two.
func BenchmarkIsolation(b *testing.B) {
	const size = 100
	h := stream.HandlerFunc(func(_ context.Context, bt *stream.Batch) error {
		if bt.Topic == "stuck" {
			return errTransient
		}
		return nil
	})
	for _, withStuck := range []bool{false, true} {
		name := "alone"
		if withStuck {
			name = "beside-a-partition-in-backoff"
		}
		b.Run(name, func(b *testing.B) {
			proc, err := stream.NewProcessor(h, stream.WithInMemoryState(),
				stream.WithPolicy(checkpoint.Policy{MaxRetries: checkpoint.Infinite, Backoff: checkpoint.Fixed(time.Millisecond)}))
			if err != nil {
				b.Fatal(err)
			}
			ctx, cancel := context.WithCancel(b.Context())
			defer cancel()
			if withStuck {
				stuck := streamtest.NewPartition("stuck", 1, 10)
				stuck.AppendN(time.Now(), 10)
				go func() { _ = streamtest.Run(ctx, proc, stuck) }()
			}
			c := streamtest.NewGenerator(b.N, size, 100)
			done := make(chan struct{})
			go func() { <-c.Done(); close(done) }()
			pctx, pcancel := context.WithCancel(ctx)
			go func() { <-done; pcancel() }()
			b.ResetTimer()
			_ = proc.Process(pctx, c)
			b.StopTimer()
			b.ReportMetric(float64(b.N*size)/b.Elapsed().Seconds(), "records/s")
		})
	}
}

// BenchmarkKeyOrdering measures, over an in-memory partition, the
// records/s of a handler that waits 2ms per record in partition
// ordering (batches of 500, PerRecord) and in key ordering at several
// concurrency limits, 1,000 keys; and in key ordering at concurrency 64
// with one key whose records fail for good (a poison key, retried every
// 100ms, 5 retries, then given up) beside the others, where records/s
// counts the other keys' records until the last of them is handled. Each
// run handles the records of b.N rounds of 2,000.
func BenchmarkKeyOrdering(b *testing.B) {
	const round, nkeys = 2000, 1000
	run := func(b *testing.B, poison bool, opts ...stream.Option) {
		n := b.N * round
		p := streamtest.NewPartition("t", 0, 500)
		keys := make([]string, n)
		for o := range keys {
			keys[o] = "k" + strconv.Itoa(o%nkeys)
		}
		p.AppendKeyed(time.Now(), keys...)
		others := n - n/nkeys
		if !poison {
			others = n
		}
		var handled atomic.Int64
		othersDone := make(chan struct{})
		h := stream.PerRecord(func(_ context.Context, r *stream.Record) error {
			time.Sleep(2 * time.Millisecond)
			if poison && string(r.Key) == "k7" {
				return errors.New("poison")
			}
			if handled.Add(1) == int64(others) {
				close(othersDone)
			}
			return nil
		})
		opts = append(opts, stream.WithLogger(slog.New(slog.DiscardHandler)),
			stream.WithPolicy(checkpoint.Policy{MaxRetries: 5, Backoff: checkpoint.Fixed(100 * time.Millisecond)}))
		proc, err := stream.NewProcessor(h, opts...)
		if err != nil {
			b.Fatal(err)
		}
		ctx, cancel := context.WithCancel(b.Context())
		defer cancel()
		done := make(chan error, 1)
		b.ResetTimer()
		go func() { done <- streamtest.Run(ctx, proc, p) }()
		<-othersDone
		b.StopTimer()
		if err := p.WaitCommitted(b.Context(), int64(n)); err != nil {
			b.Fatal(err)
		}
		cancel()
		<-done
		b.ReportMetric(float64(others)/b.Elapsed().Seconds(), "records/s")
	}
	b.Run("partition", func(b *testing.B) { run(b, false) })
	for _, c := range []int{16, 64, 256} {
		b.Run("key/concurrency="+strconv.Itoa(c), func(b *testing.B) {
			run(b, false, stream.WithOrdering(stream.ByKey), stream.WithConcurrency(c, 0))
		})
	}
	b.Run("key/concurrency=64/poison", func(b *testing.B) {
		run(b, true, stream.WithOrdering(stream.ByKey), stream.WithConcurrency(64, 0))
	})
}

// BenchmarkSleeps measures the machine's own limit under
// BenchmarkKeyOrdering's handler: n goroutines, each sleeping 2ms again
// and again, with no engine; b.N sleeps in all. ms/sleep is the time a
// 2ms sleep takes among n sleepers (the Go runtime wakes sleepers late
// when its threads are idle, and later when many sleep at once); key
// ordering at concurrency n cannot beat n / ms/sleep.
func BenchmarkSleeps(b *testing.B) {
	for _, n := range []int{1, 16, 64, 256} {
		b.Run("goroutines="+strconv.Itoa(n), func(b *testing.B) {
			per := max(b.N/n, 1)
			var wg sync.WaitGroup
			b.ResetTimer()
			for range n {
				wg.Go(func() {
					for range per {
						time.Sleep(2 * time.Millisecond)
					}
				})
			}
			wg.Wait()
			b.StopTimer()
			rate := float64(per*n) / b.Elapsed().Seconds()
			b.ReportMetric(rate, "sleeps/s")
			b.ReportMetric(float64(n)/rate*1e3, "ms/sleep")
		})
	}
}
