package e2e

import (
	"fmt"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redeliver-go/redeliver/redrive"
	"github.com/redeliver-go/redeliver/stream/streamtest"
)

// TestSchedulersShareOnePostgres runs two and then four schedulers, each
// with its own connection pool and Kafka client, on one PostgreSQL schema
// holding thousands of entries, over three due times: every entry is
// re-published exactly once per due time (re-drive numbers 1, 2, 3), read
// back from the retry topic.
func TestSchedulersShareOnePostgres(t *testing.T) {
	u := pgURL(t)
	for _, k := range []int{2, 4} {
		t.Run(strconv.Itoa(k), func(t *testing.T) { shareOnePostgres(t, u, k, 3000, 3) })
	}
}

func shareOnePostgres(t *testing.T, url string, schedulers, entries, rounds int) {
	env := kafkaEnvs()[0]
	seeds := env.seeds(t)
	retryTopic := "retry-" + suffix()
	createTopics(t, seeds, 4, retryTopic)
	schema := newSchema(t, url)
	start := time.Date(2026, 3, 1, 9, 0, 0, 0, time.UTC)
	expiry := time.Minute
	if n, err := openPG(t, url, schema).Park(ctxFor(t, 60*time.Second), parkedEntries(entries, start, expiry)); err != nil || n != entries {
		t.Fatalf("Park: %d, %v", n, err)
	}

	clock := streamtest.NewClock(start)
	type worker struct {
		sch      *redrive.Scheduler
		redriven atomic.Int64
	}
	ws := make([]*worker, schedulers)
	for i := range ws {
		w := &worker{}
		sch, err := redrive.NewScheduler(openPG(t, url, schema), publisher(t, seeds), redrive.WithClock(clock), redrive.WithRetryTopic(retryTopic),
			redrive.WithBatchSize(100), redrive.WithRetryTimeout(24*time.Hour),
			redrive.WithHooks(redrive.Hooks{Redriven: func(redrive.EntryEvent) { w.redriven.Add(1) }}))
		if err != nil {
			t.Fatal(err)
		}
		w.sch, ws[i] = sch, w
	}
	for round := 1; round <= rounds; round++ {
		var wg sync.WaitGroup
		evs := make([]redrive.SweepEvent, schedulers)
		for i, w := range ws {
			wg.Go(func() { evs[i] = w.sch.Sweep(ctxFor(t, 120*time.Second)) })
		}
		wg.Wait()
		total := 0
		for i, ev := range evs {
			if ev.Err != nil {
				t.Fatalf("round %d, scheduler %d: %v", round, i, ev.Err)
			}
			total += ev.Redriven
		}
		if total != entries {
			t.Fatalf("round %d: %d re-drives by %d schedulers, want %d: %+v", round, total, schedulers, entries, evs)
		}
		clock.Advance(expiry)
	}
	var shares []int64
	for _, w := range ws {
		shares = append(shares, w.redriven.Load())
	}
	t.Logf("%d schedulers, %d entries, %d rounds: re-drives by scheduler %v", schedulers, entries, rounds, shares)

	recs := readAll(t, seeds, retryTopic, entries*rounds, 60*time.Second)
	count := map[string]int{}
	for _, r := range recs {
		count[header(r, redrive.HeaderKey)+"#"+header(r, redrive.HeaderNumber)]++
	}
	if len(recs) != entries*rounds {
		t.Errorf("%d records on the retry topic, want %d", len(recs), entries*rounds)
	}
	for i := range entries {
		for round := 1; round <= rounds; round++ {
			k := fmt.Sprintf("e-%06d#%d", i, round)
			if count[k] != 1 {
				t.Fatalf("%s published %d times, want once", k, count[k])
			}
		}
	}
}
