package sqlitestore_test

import (
	"context"
	"path/filepath"
	"testing"

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
