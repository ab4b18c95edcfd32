package pgstore_test

import (
	"context"
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
