package e2e

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/redeliver-go/redeliver/redrive"
	"github.com/redeliver-go/redeliver/stream"
	"github.com/redeliver-go/redeliver/stream/streamtest"
)

// discard is a publisher that accepts everything at once: the sweep
// benchmarks measure the store and the scheduler, not a broker.
type discard struct{}

func (discard) Publish(context.Context, string, []stream.Record) error { return nil }

// BenchmarkPark measures parking on PostgreSQL: entries/s for the park
// action's batches (500 records a call) and for single Await calls.
//
//	go test -run '^$' -bench Park -benchtime 20000x ./redrive/e2e
func BenchmarkPark(b *testing.B) {
	u := pgURL(b)
	for _, batch := range []int{1, 500} {
		b.Run(fmt.Sprintf("batch=%d", batch), func(b *testing.B) {
			s := openPG(b, u, newSchema(b, u))
			now := time.Now()
			es := make([]redrive.Entry, b.N)
			for i := range es {
				es[i] = parkedEntries(1, now, time.Minute)[0]
				es[i].Key = fmt.Sprintf("p-%09d", i)
			}
			ctx := context.Background()
			b.ResetTimer()
			for i := 0; i < b.N; i += batch {
				if _, err := s.Park(ctx, es[i:min(i+batch, b.N)]); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "entries/s")
		})
	}
}

// BenchmarkSweep measures one sweep over 100,000 due entries on
// PostgreSQL, by one and by four schedulers sweeping at once (each with its
// own pool): claim, publish, mark, 500 entries at a time.
//
//	go test -run '^$' -bench Sweep -benchtime 1x ./redrive/e2e
func BenchmarkSweep(b *testing.B) {
	u := pgURL(b)
	const n = 100_000
	for _, k := range []int{1, 4} {
		b.Run(fmt.Sprintf("schedulers=%d", k), func(b *testing.B) {
			for range b.N {
				b.StopTimer()
				schema := newSchema(b, u)
				start := time.Date(2026, 3, 1, 9, 0, 0, 0, time.UTC)
				es := parkedEntries(n, start, time.Hour)
				loader := openPG(b, u, schema)
				for i := 0; i < n; i += 5000 {
					if _, err := loader.Park(context.Background(), es[i:i+5000]); err != nil {
						b.Fatal(err)
					}
				}
				clock := streamtest.NewClock(start)
				schs := make([]*redrive.Scheduler, k)
				for i := range schs {
					sch, err := redrive.NewScheduler(openPG(b, u, schema), discard{}, redrive.WithClock(clock), redrive.WithRetryTopic("retry"), redrive.WithBatchSize(benchBatch))
					if err != nil {
						b.Fatal(err)
					}
					schs[i] = sch
				}
				b.StartTimer()
				t0 := time.Now()
				var wg sync.WaitGroup
				evs := make([]redrive.SweepEvent, k)
				for i, sch := range schs {
					wg.Go(func() { evs[i] = sch.Sweep(context.Background()) })
				}
				wg.Wait()
				d := time.Since(t0)
				b.StopTimer()
				total := 0
				for _, ev := range evs {
					if ev.Err != nil {
						b.Fatal(ev.Err)
					}
					total += ev.Redriven
				}
				if total != n {
					b.Fatalf("%d re-driven, want %d", total, n)
				}
				b.ReportMetric(float64(n)/d.Seconds(), "entries/s")
			}
		})
	}
}

// benchBatch is the scheduler's batch size in BenchmarkSweep; set it with
// REDRIVE_BENCH_BATCH (default 500, the scheduler's default).
var benchBatch = func() int {
	if v, err := strconv.Atoi(os.Getenv("REDRIVE_BENCH_BATCH")); err == nil && v > 0 {
		return v
	}
	return redrive.DefaultBatchSize
}()
