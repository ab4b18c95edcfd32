package sqlitestore_test

import (
	"context"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/redeliver-go/redeliver/redrive"
	"github.com/redeliver-go/redeliver/redrive/redrivetest"
	"github.com/redeliver-go/redeliver/redrive/sqlitestore"
)

func open(t *testing.T, path string) *sqlitestore.Store {
	t.Helper()
	s, err := sqlitestore.Open(context.Background(), path)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

func TestConformance(t *testing.T) {
	redrivetest.Run(t, func(t *testing.T) redrive.Store {
		return open(t, filepath.Join(t.TempDir(), "redrive.db"))
	})
}

func TestConformanceInMemory(t *testing.T) {
	redrivetest.Run(t, func(t *testing.T) redrive.Store { return open(t, ":memory:") })
}

// TestZeroAndNil: a Store not made by Open, a nil option and a nil context
// give errors that say what to do, never a panic.
func TestZeroAndNil(t *testing.T) {
	var zero sqlitestore.Store
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
		"List":    func() error { _, err := zero.List(ctx, redrive.Filter{}); return err }(),
		"Migrate": zero.Migrate(ctx),
	} {
		if err == nil || !strings.Contains(err.Error(), "sqlitestore.Open") {
			t.Errorf("%s on a zero Store: %v, want an error that says to use sqlitestore.Open", name, err)
		}
	}
	if err := zero.Close(); err != nil {
		t.Errorf("Close on a zero Store: %v", err)
	}
	var nilStore *sqlitestore.Store
	if _, err := nilStore.Get(ctx, "k"); err == nil {
		t.Error("Get on a nil *Store: no error")
	}
	if _, err := sqlitestore.Open(ctx, filepath.Join(t.TempDir(), "x.db"), sqlitestore.WithoutMigrate(), nil); err == nil || err.Error() != "sqlitestore: Open: option 2 of 2 is nil" {
		t.Errorf("Open with a nil option: %v", err)
	}
	s, err := sqlitestore.Open(ctx, filepath.Join(t.TempDir(), "x.db"), sqlitestore.WithoutMigrate())
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if _, err := sqlitestore.Open(nil, "x.db"); err == nil || !strings.Contains(err.Error(), "nil context") {
		t.Errorf("Open with a nil context: %v", err)
	}
	if _, err := s.Get(nil, "k"); err == nil || !strings.Contains(err.Error(), "nil context") {
		t.Errorf("Get with a nil context: %v", err)
	}
	if _, _, err := s.Claim(ctx, time.Now(), 1, nil); err == nil || !strings.Contains(err.Error(), "nil function") {
		t.Errorf("Claim with a nil function: %v", err)
	}
}
