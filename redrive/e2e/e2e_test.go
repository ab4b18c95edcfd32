package e2e

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/redeliver-go/redeliver/adapters/franz"
	"github.com/redeliver-go/redeliver/checkpoint"
	"github.com/redeliver-go/redeliver/redrive"
	"github.com/redeliver-go/redeliver/redrive/sqlitestore"
	"github.com/redeliver-go/redeliver/stream"
)

// TestEndToEnd: a consumer whose handler fails on some records for good
// gives their batches up to the park action and moves on at once; the
// scheduler re-drives the parked records to a retry topic; a consumer of
// that topic, with the completion middleware, handles them; every entry
// ends done. On kfake and the real broker, with the SQLite store and, when
// REDELIVER_POSTGRES_URL is set, PostgreSQL.
func TestEndToEnd(t *testing.T) {
	stores := []struct {
		name string
		open func(t *testing.T) redrive.Store
	}{
		{"sqlite", func(t *testing.T) redrive.Store {
			s, err := sqlitestore.Open(context.Background(), filepath.Join(t.TempDir(), "redrive.db"))
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { s.Close() })
			return s
		}},
		{"postgres", func(t *testing.T) redrive.Store {
			u := pgURL(t)
			return openPG(t, u, newSchema(t, u))
		}},
	}
	for _, k := range kafkaEnvs() {
		for _, st := range stores {
			t.Run(k.name+"/"+st.name, func(t *testing.T) { endToEnd(t, k.seeds(t), st.open(t)) })
		}
	}
}

func endToEnd(t *testing.T, seeds []string, store redrive.Store) {
	ctx := ctxFor(t, 120*time.Second)
	sfx := suffix()
	topic, retryTopic := "orders-"+sfx, "orders-retry-"+sfx
	createTopics(t, seeds, 2, topic, retryTopic)

	// 60 records over 2 partitions; every 7th fails for good in the main
	// consumer (a downstream that is down for these keys).
	const n = 60
	poison := map[string]bool{}
	prod := client(t, seeds, kgo.RecordPartitioner(kgo.ManualPartitioner()))
	var recs []*kgo.Record
	for i := range n {
		key := fmt.Sprintf("order-%02d", i)
		if i%7 == 3 {
			poison[key] = true
		}
		recs = append(recs, &kgo.Record{Topic: topic, Partition: int32(i % 2), Key: []byte(key), Value: []byte("v" + key)})
	}
	if err := prod.ProduceSync(ctx, recs...).FirstErr(); err != nil {
		t.Fatal(err)
	}

	// The main consumer: one retry, then park.
	park, err := redrive.Park(store, 300*time.Millisecond)
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	handled := map[string]bool{}
	mainProc, err := stream.NewProcessor(stream.PerRecord(func(_ context.Context, r *stream.Record) error {
		if poison[string(r.Key)] {
			return errors.New("downstream refused " + string(r.Key))
		}
		mu.Lock()
		handled[string(r.Key)] = true
		mu.Unlock()
		return nil
	}), stream.WithPolicy(checkpoint.Policy{MaxRetries: 1, Backoff: checkpoint.Fixed(10 * time.Millisecond)}), stream.WithExhaustionAction(park))
	if err != nil {
		t.Fatal(err)
	}
	mainGroup := "main-" + sfx
	mainCons, err := franz.New(mainProc, franz.WithKgoOptions(kgo.SeedBrokers(seeds...), kgo.ConsumerGroup(mainGroup), kgo.ConsumeTopics(topic),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart())), franz.WithMaxBatch(5))
	if err != nil {
		t.Fatal(err)
	}
	stopMain := runUntilStopped(t, ctx, "main consumer", mainCons.Run)
	defer stopMain()

	// The partitions move on at once: the group's commits reach the end of
	// both partitions with the given-up records parked, before any
	// scheduler runs.
	adm := kadm.NewClient(client(t, seeds))
	waitUntil(t, ctx, "the main group's commits at the end of both partitions", func() bool {
		offs, err := adm.FetchOffsets(ctx, mainGroup)
		if err != nil {
			return false
		}
		o0, ok0 := offs.Lookup(topic, 0)
		o1, ok1 := offs.Lookup(topic, 1)
		return ok0 && ok1 && o0.At == n/2 && o1.At == n/2
	})
	if got := countStatus(t, store, redrive.Parked); got < len(poison) {
		t.Fatalf("%d entries parked, want at least the %d records that failed (their batches are parked whole)", got, len(poison))
	}
	parked, err := store.List(ctx, redrive.Filter{})
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range parked {
		if e.Message.Topic != topic || !strings.Contains(e.LastError, "downstream refused") {
			t.Fatalf("parked entry %s: topic %s, error %q", e.Key, e.Message.Topic, e.LastError)
		}
	}
	for k := range poison {
		if handled[k] {
			t.Fatalf("%s was handled by the main consumer", k)
		}
	}

	// The retry consumer: the downstream is back, so everything succeeds.
	var seen sync.Map
	retryProc, err := stream.NewProcessor(stream.Chain(stream.PerRecord(func(_ context.Context, r *stream.Record) error {
		for _, h := range r.Headers {
			if h.Key == redrive.HeaderKey {
				seen.Store(string(h.Value), true)
			}
		}
		return nil
	}), redrive.CompleteOnSuccess(store)))
	if err != nil {
		t.Fatal(err)
	}
	retryCons, err := franz.New(retryProc, franz.WithKgoOptions(kgo.SeedBrokers(seeds...), kgo.ConsumerGroup("retry-"+sfx), kgo.ConsumeTopics(retryTopic),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart())))
	if err != nil {
		t.Fatal(err)
	}
	stopRetry := runUntilStopped(t, ctx, "retry consumer", retryCons.Run)
	defer stopRetry()

	sch, err := redrive.NewScheduler(store, publisher(t, seeds), redrive.WithInterval(100*time.Millisecond), redrive.WithRetryTopic(retryTopic),
		redrive.WithRetryTimeout(time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	stopSch := runUntilStopped(t, ctx, "scheduler", sch.Run)
	defer stopSch()

	waitUntil(t, ctx, "every parked entry done", func() bool {
		es, err := store.List(ctx, redrive.Filter{})
		if err != nil {
			return false
		}
		for _, e := range es {
			if e.Status != redrive.Done {
				return false
			}
		}
		return true
	})
	for _, e := range parked {
		if _, ok := seen.Load(e.Key); !ok {
			t.Errorf("entry %s done but its re-driven record was not seen by the retry consumer", e.Key)
		}
		got, err := store.Get(ctx, e.Key)
		if err != nil || got.State() != redrive.ParkedState+redrive.SuffixDone || got.Redrives < 1 {
			t.Errorf("entry %s: %s after %d re-drives, %v", e.Key, got.State(), got.Redrives, err)
		}
	}
	t.Logf("%d records, %d failed for good, %d parked (whole batches), all re-driven and done", n, len(poison), len(parked))
}

func waitUntil(t *testing.T, ctx context.Context, what string, cond func() bool) {
	t.Helper()
	for !cond() {
		select {
		case <-ctx.Done():
			t.Fatalf("timed out waiting for %s", what)
		case <-time.After(20 * time.Millisecond):
		}
	}
}
