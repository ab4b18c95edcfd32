package pgstore_test

import (
	"context"
	"github.com/jackc/pgx/v5"
	"io/fs"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/redeliver-go/redeliver/redrive"
	"github.com/redeliver-go/redeliver/redrive/pgstore"
)

func TestMigrations(t *testing.T) {
	files, err := fs.Glob(pgstore.Migrations(), "migration/*.sql")
	if err != nil || !slices.Contains(files, "migration/001_entries.up.sql") || !slices.Contains(files, "migration/001_entries.down.sql") {
		t.Fatalf("embedded migrations: %v %v", files, err)
	}
	u := pgURL(t)
	schema := newSchema(t, u)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	// Schedulers starting together migrate once.
	var wg sync.WaitGroup
	errs := make([]error, 4)
	for i := range errs {
		wg.Go(func() {
			s, err := pgstore.Open(ctx, u, pgstore.WithSchema(schema))
			if err == nil {
				s.Close()
			}
			errs[i] = err
		})
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			t.Fatalf("concurrent Open: %v", err)
		}
	}

	s := openStore(t, u, schema, pgstore.WithoutMigrate())
	e := redrive.Entry{Key: "m", Base: "S", Status: redrive.Parked, StateTime: time.Now(), Created: time.Now(), Expiry: time.Minute, DueAt: time.Now()}
	if _, err := s.Park(ctx, []redrive.Entry{e}); err != nil {
		t.Fatalf("Park after the migration: %v", err)
	}
	if err := s.MigrateTo(ctx, 0); err != nil {
		t.Fatalf("MigrateTo(0): %v", err)
	}
	if _, err := s.Get(ctx, "m"); err == nil {
		t.Fatal("the table is still there after migrating down to 0")
	}
	if err := s.Migrate(ctx); err != nil {
		t.Fatalf("Migrate after down: %v", err)
	}
	if _, err := s.Park(ctx, []redrive.Entry{e}); err != nil {
		t.Fatalf("Park after migrating up again: %v", err)
	}
	if err := s.MigrateTo(ctx, 99); err == nil {
		t.Fatal("MigrateTo(99) did not fail")
	}
}

// TestUpgradeKeepsEntries: entries written by a store at schema version 2
// (text errors, headers as plain JSON) read the same after the migration
// to the latest version, with no re-parks.
func TestUpgradeKeepsEntries(t *testing.T) {
	u := pgURL(t)
	schema := newSchema(t, u)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	s := openStore(t, u, schema, pgstore.WithoutMigrate())
	if err := s.MigrateTo(ctx, 2); err != nil {
		t.Fatal(err)
	}
	conn, err := pgx.Connect(ctx, u)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	if _, err := conn.Exec(ctx, `INSERT INTO `+pgx.Identifier{schema, "redrive_entries"}.Sanitize()+`
		(key, base, status, state, state_time, created, expiry, due_at, redrives, last_error, topic, partition, "offset", msg_key, msg_value, headers)
		VALUES ('orders/0/5', 'REDELIVER_PARKED', 'retrying', 'REDELIVER_PARKED_RETRY', now(), now(), 60000000000, now(), 1,
		        'payment service: 503 — « réessayer »', 'orders', 0, 5, 'k', '', '[{"Key":"trace","Value":"AAE="},{"Key":"n","Value":null}]')`); err != nil {
		t.Fatal(err)
	}
	if err := s.Migrate(ctx); err != nil {
		t.Fatalf("migrating the entries of version 2: %v", err)
	}
	e, err := s.Get(ctx, "orders/0/5")
	if err != nil {
		t.Fatal(err)
	}
	h := e.Message.Headers
	if e.LastError != "payment service: 503 — « réessayer »" || e.Reparks != 0 || e.OrderKey != "" || e.Redrives != 1 || e.Status != redrive.Retrying ||
		len(h) != 2 || h[0].Key != "trace" || string(h[0].Value) != "\x00\x01" || h[1].Value != nil || e.Message.Value == nil || len(e.Message.Value) != 0 {
		t.Fatalf("entry after the upgrade: %+v", e)
	}
	if _, counted, err := s.Repark(ctx, "orders/0/5", 1, "again \x00"); err != nil || !counted {
		t.Fatalf("Repark after the upgrade: %v, counted %v", err, counted)
	}
	if err := s.MigrateTo(ctx, 2); err == nil {
		t.Fatal("migrating down to 2 with an error that is not text succeeded")
	}
	if e, err := s.Get(ctx, "orders/0/5"); err != nil || e.LastError != "again \x00" {
		t.Fatalf("after the refused down migration: %q, %v; want the entry unchanged", e.LastError, err)
	}
}
