package pgstore_test

import (
	"context"
	"errors"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redeliver-go/redeliver/redrive"
	"github.com/redeliver-go/redeliver/redrive/pgstore"
	"github.com/redeliver-go/redeliver/redrive/redrivetest"
)

// blackhole accepts connections on loopback and never answers: a database
// host that takes the connection and hangs. accepted gets a value for
// each connection.
func blackhole(t *testing.T) (addr string, accepted <-chan struct{}) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var conns []net.Conn
	acc := make(chan struct{}, 100)
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			conns = append(conns, c)
			mu.Unlock()
			select {
			case acc <- struct{}{}:
			default:
			}
		}
	}()
	t.Cleanup(func() {
		ln.Close()
		mu.Lock()
		defer mu.Unlock()
		for _, c := range conns {
			c.Close()
		}
	})
	return ln.Addr().String(), acc
}

// TestDeferredMigrateNeverHangs: with WithDeferredMigrate and a database
// that accepts connections and never answers, a sweep with no deadline
// gives up after the migration timeout with an error that says why, and
// meanwhile a Park or a Complete (a partition, a consumer) returns at its
// own deadline instead of waiting behind the sweep.
func TestDeferredMigrateNeverHangs(t *testing.T) {
	addr, accepted := blackhole(t)
	s, err := pgstore.Open(context.Background(), "postgres://u@"+addr+"/db?sslmode=disable&connect_timeout=600",
		pgstore.WithDeferredMigrate(), pgstore.WithMigrateTimeout(time.Second))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	sch, err := redrive.NewScheduler(s, &redrivetest.Publisher{}, redrive.WithLogger(quiet()))
	if err != nil {
		t.Fatal(err)
	}
	swept := make(chan redrive.SweepEvent, 1)
	start := time.Now()
	go func() { swept <- sch.Sweep(context.Background()) }()
	select { // the sweep is migrating: what is checked is that the others do not wait for it
	case <-accepted:
	case <-time.After(10 * time.Second):
		t.Fatal("the sweep did not connect to the database")
	}

	for name, op := range map[string]func(context.Context) error{
		"Park": func(ctx context.Context) error {
			_, err := s.Park(ctx, []redrive.Entry{{Key: "k", Base: "S", Status: redrive.Parked, StateTime: time.Now(), Created: time.Now(), Expiry: time.Minute}})
			return err
		},
		"Complete": func(ctx context.Context) error { _, err := s.Complete(ctx, "k", time.Now()); return err },
	} {
		ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
		t0 := time.Now()
		res := make(chan error, 1)
		go func() { res <- op(ctx) }()
		select {
		case err := <-res:
			if !errors.Is(err, context.DeadlineExceeded) || time.Since(t0) > 600*time.Millisecond {
				t.Errorf("%s while a sweep migrates against a hung database: %v after %v, want its deadline's error after 200ms", name, err, time.Since(t0))
			}
		case <-time.After(10 * time.Second):
			t.Errorf("%s waited past its deadline of 200ms behind the sweep's migration", name)
		}
		cancel()
	}
	select {
	case ev := <-swept:
		if ev.Err == nil || !strings.Contains(ev.Err.Error(), "did not finish the schema's migration within 1s") {
			t.Errorf("sweep against a hung database: %v, want an error that says the migration timed out", ev.Err)
		}
		if d := time.Since(start); d > 5*time.Second {
			t.Errorf("the sweep took %v, want about the 1s migration timeout", d)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("the sweep against a hung database did not end within 20s (migration timeout 1s)")
	}
}

// TestOpenHungDatabase: Open without WithDeferredMigrate, with no
// deadline, fails after the migration timeout against a hung database.
func TestOpenHungDatabase(t *testing.T) {
	addr, _ := blackhole(t)
	res := make(chan error, 1)
	go func() {
		_, err := pgstore.Open(context.Background(), "postgres://u@"+addr+"/db?sslmode=disable", pgstore.WithMigrateTimeout(500*time.Millisecond))
		res <- err
	}()
	select {
	case err := <-res:
		if err == nil || !strings.Contains(err.Error(), "within 500ms") {
			t.Fatalf("Open against a hung database: %v", err)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("Open against a hung database did not return within 20s (migration timeout 500ms)")
	}
}

// TestZeroAndNil: a Store not made by Open, a nil option and a nil context
// give errors that say what to do, never a panic.
func TestZeroAndNil(t *testing.T) {
	var zero pgstore.Store
	ctx := t.Context()
	for name, err := range map[string]error{
		"Park":     func() error { _, err := zero.Park(ctx, []redrive.Entry{{Key: "k"}}); return err }(),
		"Get":      func() error { _, err := zero.Get(ctx, "k"); return err }(),
		"Complete": func() error { _, err := zero.Complete(ctx, "k", time.Now()); return err }(),
		"Requeue":  func() error { _, err := zero.Requeue(ctx, "k", time.Now()); return err }(),
		"Repark":   func() error { _, _, err := zero.Repark(ctx, "k", 1, ""); return err }(),
		"Claim": func() error {
			_, _, err := zero.Claim(ctx, time.Now(), 1, func(context.Context, []redrive.Entry) []redrive.Change { return nil })
			return err
		}(),
		"List":      func() error { _, err := zero.List(ctx, redrive.Filter{}); return err }(),
		"Migrate":   zero.Migrate(ctx),
		"MigrateTo": zero.MigrateTo(ctx, 0),
	} {
		if err == nil || !strings.Contains(err.Error(), "pgstore.Open") {
			t.Errorf("%s on a zero Store: %v, want an error that says to use pgstore.Open", name, err)
		}
	}
	zero.Close() // no panic
	var nilStore *pgstore.Store
	if _, err := nilStore.Get(ctx, "k"); err == nil {
		t.Error("Get on a nil *Store: no error")
	}
	nilStore.Close()
	if _, err := pgstore.Open(nil, "postgres://127.0.0.1/db"); err == nil || !strings.Contains(err.Error(), "nil context") {
		t.Errorf("Open with a nil context: %v", err)
	}
	if _, err := pgstore.Open(ctx, "postgres://127.0.0.1:1/db", pgstore.WithDeferredMigrate(), nil); err == nil || err.Error() != "pgstore: Open: option 2 of 2 is nil" {
		t.Errorf("Open with a nil option: %v", err)
	}
	s, err := pgstore.Open(ctx, "postgres://127.0.0.1:1/db", pgstore.WithDeferredMigrate())
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if _, err := s.Get(nil, "k"); err == nil || !strings.Contains(err.Error(), "nil context") {
		t.Errorf("Get with a nil context: %v", err)
	}
	if _, _, err := s.Claim(ctx, time.Now(), 1, nil); err == nil || !strings.Contains(err.Error(), "nil function") {
		t.Errorf("Claim with a nil function: %v", err)
	}
	if _, err := pgstore.Open(ctx, "postgres://127.0.0.1:1/db", pgstore.WithMigrateTimeout(0)); err == nil || !strings.Contains(err.Error(), "migrate timeout") {
		t.Errorf("Open with a migration timeout of 0: %v", err)
	}
}

// TestSweepAgainstHungDatabase: a scheduler's sweep runs under Run's
// context, which has no deadline; against a database that stopped
// answering (here one that takes the connection and never replies), its
// claim gives up after its bound with an error that says so, which the
// scheduler logs and reports, instead of stopping every sweep for good
// without a word.
func TestSweepAgainstHungDatabase(t *testing.T) {
	defer pgstore.SetClaimReadTimeout(500 * time.Millisecond)()
	addr, _ := blackhole(t)
	s, err := pgstore.Open(context.Background(), "postgres://u@"+addr+"/db?sslmode=disable", pgstore.WithoutMigrate())
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	var failed []redrive.SweepEvent
	sch, err := redrive.NewScheduler(s, &redrivetest.Publisher{}, redrive.WithLogger(quiet()),
		redrive.WithHooks(redrive.Hooks{StoreFailed: func(e redrive.SweepEvent) { failed = append(failed, e) }}))
	if err != nil {
		t.Fatal(err)
	}
	swept := make(chan redrive.SweepEvent, 1)
	go func() { swept <- sch.Sweep(context.Background()) }()
	select {
	case ev := <-swept:
		if ev.Err == nil || !errors.Is(ev.Err, context.DeadlineExceeded) || !strings.Contains(ev.Err.Error(), "did not answer within 500ms") {
			t.Errorf("sweep against a hung database: %v; want an error that says the database did not answer", ev.Err)
		}
		if len(failed) != 1 {
			t.Errorf("%d StoreFailed reports, want 1", len(failed))
		}
	case <-time.After(20 * time.Second):
		t.Fatal("the sweep against a hung database did not end within 20s (bound 500ms)")
	}
}
