package sqlitestore_test

import (
	"context"
	"database/sql"
	"path/filepath"
	"testing"
	"time"

	"github.com/redeliver-go/redeliver/redrive"
	"github.com/redeliver-go/redeliver/redrive/sqlitestore"
)

// TestUpgradeOrderKey: an entry written at schema version 3 (before order
// keys) reads with an empty order key after the migration, and is claimed
// as before; migrating down to 3 and up again works.
func TestUpgradeOrderKey(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	path := filepath.Join(t.TempDir(), "r.db")
	s, err := sqlitestore.Open(ctx, path, sqlitestore.WithoutMigrate())
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if err := s.MigrateTo(ctx, 3); err != nil {
		t.Fatal(err)
	}
	db, err := sql.Open("sqlite", path)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	now := time.Now().UnixMicro()
	if _, err := db.ExecContext(ctx, `INSERT INTO redrive_entries
		(key, base, status, state, state_time, created, expiry, due_at, topic, partition, "offset")
		VALUES ('orders/0/5', 'REDELIVER_PARKED', 'parked', 'REDELIVER_PARKED', ?, ?, 60000000000, ?, 'orders', 0, 5)`, now, now, now); err != nil {
		t.Fatal(err)
	}
	db.Close()
	if err := s.Migrate(ctx); err != nil {
		t.Fatalf("migrating the entries of version 3: %v", err)
	}
	e, err := s.Get(ctx, "orders/0/5")
	if err != nil || e.OrderKey != "" || e.Status != redrive.Parked {
		t.Fatalf("entry after the upgrade: %+v, %v", e, err)
	}
	claimed, _, err := s.Claim(ctx, time.Now().Add(time.Minute), 10, func(context.Context, []redrive.Entry) []redrive.Change { return nil })
	if err != nil || claimed != 1 {
		t.Fatalf("Claim after the upgrade: %d, %v; want the old entry", claimed, err)
	}
	if err := s.MigrateTo(ctx, 3); err != nil {
		t.Fatalf("MigrateTo(3): %v", err)
	}
	if err := s.Migrate(ctx); err != nil {
		t.Fatalf("Migrate after down: %v", err)
	}
}
