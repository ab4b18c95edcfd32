package conformance

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/redeliver-go/redeliver/adapters/franz"
	"github.com/redeliver-go/redeliver/redrive"
	"github.com/redeliver-go/redeliver/redrive/pgstore"
	"github.com/redeliver-go/redeliver/stream"
)

// clusterRedriveExpiry is how long a parked record waits before the
// scheduler re-drives it (and a re-driven one before it is re-driven
// again when nobody completed it).
const clusterRedriveExpiry = 30 * time.Second

// clusterRedrive is a cluster scenario's re-drive: given-up records parked
// in PostgreSQL, re-driven to the scenario's topic by a redrive.Scheduler,
// completed by the handler once handled.
type clusterRedrive struct {
	r      *clusterRun
	store  *pgstore.Store
	park   stream.ExhaustionAction
	stop   context.CancelFunc
	done   chan struct{}
	failed atomic.Int64 // publishes and store calls that failed (and were tried again)

	mu        sync.Mutex
	completed map[string]bool
}

// OpenPostgresStore opens a [pgstore.Store] on the PostgreSQL server at
// url in the given schema, which it creates, and at the end of t closes
// the store and drops the schema.
func OpenPostgresStore(ctx context.Context, t testing.TB, url, schema string) *pgstore.Store {
	t.Helper()
	store, err := pgstore.Open(ctx, url, pgstore.WithSchema(schema))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		store.Close()
		conn, err := pgx.Connect(context.Background(), url)
		if err != nil {
			return
		}
		defer conn.Close(context.Background())
		_, _ = conn.Exec(context.Background(), `DROP SCHEMA IF EXISTS `+pgx.Identifier{schema}.Sanitize()+` CASCADE`)
	})
	return store
}

func (r *clusterRun) startRedrive(t *testing.T, url string) *clusterRedrive {
	t.Helper()
	schema := "rd_chaos_" + strconv.FormatInt(time.Now().UnixNano(), 36)
	ctx, cancel := r.ctx(longWait)
	defer cancel()
	store := OpenPostgresStore(ctx, t, url, schema)
	rd := &clusterRedrive{r: r, store: store, done: make(chan struct{}), completed: map[string]bool{}}
	hooks := redrive.Hooks{
		Failed:      func(redrive.EntryEvent) { rd.failed.Add(1) },
		StoreFailed: func(redrive.SweepEvent) { rd.failed.Add(1) },
	}
	park, err := redrive.Park(store, clusterRedriveExpiry, redrive.WithHooks(hooks))
	if err != nil {
		t.Fatal(err)
	}
	rd.park = park
	// The scheduler's own client, through the proxies as the consumers':
	// a broker fault hits its publishes too. The record's key picks the
	// partition.
	cl, err := kgo.NewClient(kgo.SeedBrokers(r.e.b.Addrs...))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cl.Close)
	pub, err := franz.NewPublisher(cl)
	if err != nil {
		t.Fatal(err)
	}
	sch, err := redrive.NewScheduler(store, pub, redrive.WithInterval(200*time.Millisecond), redrive.WithBatchSize(50),
		redrive.WithHooks(hooks))
	if err != nil {
		t.Fatal(err)
	}
	sctx, stop := context.WithCancel(context.Background())
	rd.stop = stop
	go func() {
		defer close(rd.done)
		_ = sch.Run(sctx)
	}()
	t.Cleanup(func() { stop(); <-rd.done })
	return rd
}

// complete completes the entry of a re-driven record once it is handled;
// an error (PostgreSQL restarting) fails the delivery, which is retried.
func (rd *clusterRedrive) complete(ctx context.Context, rec *stream.Record) error {
	key, ok := header(rec.Headers, redrive.HeaderKey)
	if !ok {
		return nil
	}
	cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if _, err := rd.store.Complete(cctx, key, time.Now()); err != nil && !errors.Is(err, redrive.ErrNotFound) && !errors.Is(err, redrive.ErrNotPending) {
		rd.failed.Add(1)
		return fmt.Errorf("complete the entry %s: %w", key, err)
	}
	rd.mu.Lock()
	rd.completed[key] = true
	rd.mu.Unlock()
	return nil
}

func header(hs []stream.Header, key string) (string, bool) {
	for _, h := range hs {
		if h.Key == key {
			return string(h.Value), true
		}
	}
	return "", false
}

// entries lists every entry of the store.
func (rd *clusterRedrive) entries(ctx context.Context) ([]redrive.Entry, error) {
	var all []redrive.Entry
	var after int64
	for {
		es, err := rd.store.List(ctx, redrive.Filter{AfterID: after})
		if err != nil {
			return nil, err
		}
		all = append(all, es...)
		if len(es) < redrive.DefaultListLimit {
			return all, nil
		}
		after = es[len(es)-1].ID
	}
}

// drain waits, once the producer has stopped, until the consumers have
// handled every record and no entry waits parked (each was re-driven),
// then stops the scheduler: the topic's end no longer moves.
func (rd *clusterRedrive) drain(t *testing.T) {
	t.Helper()
	deadline := time.Now().Add(longWait)
	for {
		ctx, cancel := rd.r.ctx(30 * time.Second)
		ends, err1 := rd.r.e.adm.ListEndOffsets(ctx, rd.r.e.topic)
		got, err2 := rd.r.e.tryCommitted()
		parked, err3 := rd.store.List(ctx, redrive.Filter{Status: redrive.Parked, Limit: 1})
		cancel()
		if err := errors.Join(err1, ends.Error(), err2, err3); err == nil && len(parked) == 0 {
			caught := true
			for p, o := range ends[rd.r.e.topic] {
				if got[p].At != o.Offset {
					caught = false
				}
			}
			if caught {
				break
			}
		}
		if time.Now().After(deadline) {
			t.Errorf("re-drive: not drained within %v (parked %d, errors %v %v %v)", longWait, len(parked), err1, err2, err3)
			break
		}
		time.Sleep(500 * time.Millisecond)
	}
	rd.stop()
	<-rd.done
}

// check reads the store and the topic at the end: every entry was
// re-driven (none left parked), and counts the entries by status and the
// re-drives published twice (the same entry and number twice in the
// topic: the documented at-least-once window).
func (rd *clusterRedrive) check(t *testing.T) string {
	t.Helper()
	ctx, cancel := rd.r.ctx(longWait)
	defer cancel()
	es, err := rd.entries(ctx)
	if err != nil {
		t.Errorf("re-drive: list the entries: %v", err)
		return "redrive=?"
	}
	by := map[redrive.Status]int{}
	redrives := 0
	for _, e := range es {
		by[e.Status]++
		redrives += e.Redrives
		if e.Status == redrive.Parked {
			t.Errorf("re-drive: entry %s still parked at the end: never re-driven", e.Key)
		}
	}
	pairs := rd.r.readRedriven(t)
	twice := 0
	for _, n := range pairs {
		if n > 1 {
			twice += n - 1
		}
	}
	if len(pairs) != redrives {
		// A re-drive published but not marked (PostgreSQL restarting)
		// is published again with the same number: the topic has no
		// fewer pairs than the store counts re-drives.
		if len(pairs) < redrives {
			t.Errorf("re-drive: the entries count %d re-drives, the topic holds %d", redrives, len(pairs))
		}
	}
	return fmt.Sprintf("parked=%d done=%d retrying=%d timed-out=%d redrives=%d redriven-twice=%d store-failures=%d",
		len(es), by[redrive.Done], by[redrive.Retrying], by[redrive.TimedOut], redrives, twice, rd.failed.Load())
}

// readRedriven reads the scenario's topic and returns how many times each
// re-drive (entry key, number) is in it.
func (r *clusterRun) readRedriven(t *testing.T) map[[2]string]int {
	t.Helper()
	ends := r.endOffsets(t, r.e.topic)
	got := map[[2]string]int{}
	cl, err := kgo.NewClient(kgo.SeedBrokers(r.c.Direct...), kgo.ConsumeTopics(r.e.topic), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	ctx, cancel := r.ctx(longWait)
	defer cancel()
	seen := map[int32]int64{}
	for {
		done := true
		for p, end := range ends {
			if seen[p] < end {
				done = false
			}
		}
		if done {
			return got
		}
		fs := cl.PollFetches(ctx)
		if ctx.Err() != nil {
			t.Errorf("%s: read %v of %v", r.e.topic, seen, ends)
			return got
		}
		fs.EachRecord(func(rec *kgo.Record) {
			seen[rec.Partition] = max(seen[rec.Partition], rec.Offset+1)
			var k [2]string
			for _, h := range rec.Headers {
				switch h.Key {
				case redrive.HeaderKey:
					k[0] = string(h.Value)
				case redrive.HeaderNumber:
					k[1] = string(h.Value)
				}
			}
			if k[0] != "" {
				got[k]++
			}
		})
	}
}

// restartPostgres restarts the PostgreSQL server of integration/postgres.sh
// (next to kafka-cluster.sh; its run directory from REDELIVER_POSTGRES_DIR).
func (r *clusterRun) restartPostgres() error {
	script := filepath.Join(filepath.Dir(r.c.Script), "postgres.sh")
	ctx, cancel := r.ctx(2 * time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "bash", script, "restart")
	cmd.Env = os.Environ()
	out, err := cmd.CombinedOutput()
	if err != nil {
		return fmt.Errorf("postgres.sh restart: %v\n%s", err, out)
	}
	return nil
}
