package sqlitestore_test

import (
	"context"
	"path/filepath"
	"testing"

	"github.com/redeliver-go/redeliver/redrive"
	"github.com/redeliver-go/redeliver/redrive/redrivetest"
	"github.com/redeliver-go/redeliver/redrive/sqlitestore"
)

// BenchmarkKeyMode is redrivetest.BenchKeyMode on an SQLite store.
func BenchmarkKeyMode(b *testing.B) {
	redrivetest.BenchKeyMode(b, func(b *testing.B) redrive.Store {
		s, err := sqlitestore.Open(context.Background(), filepath.Join(b.TempDir(), "r.db"))
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { s.Close() })
		return s
	})
}
