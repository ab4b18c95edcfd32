package sqlitestore_test

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/redeliver-go/redeliver/redrive"
	"github.com/redeliver-go/redeliver/redrive/sqlitestore"
	"github.com/redeliver-go/redeliver/stream"
)

// Open opens the file named, whatever bytes its name holds: a '?', '#' or
// '%' in it is not read as part of a URI, and nothing is created beside it.
func TestOpenPathAsNamed(t *testing.T) {
	for _, name := range []string{"re?drive.db", "a#b.db", "100%25.db", "x?_pragma=journal_mode(DELETE).db", "//double-slash.db"} {
		t.Run(name, func(t *testing.T) {
			dir := t.TempDir()
			path := filepath.Join(dir, name)
			if name[0] == '/' {
				name = name[2:]
				path = "/" + filepath.Join(dir, name) // a path that starts with "//"
			}
			s, err := sqlitestore.Open(context.Background(), path)
			if err != nil {
				t.Fatal(err)
			}
			now := time.Now()
			if _, err := s.Park(context.Background(), []redrive.Entry{{Key: "k", Base: redrive.ParkedState, Status: redrive.Parked,
				StateTime: now, Created: now, Expiry: time.Minute, DueAt: now, Message: stream.Record{Topic: "t"}}}); err != nil {
				t.Fatal(err)
			}
			s.Close()
			entries, err := os.ReadDir(dir)
			if err != nil {
				t.Fatal(err)
			}
			var names []string
			for _, e := range entries {
				names = append(names, e.Name())
			}
			if !slices.Contains(names, name) || len(names) != 1 {
				t.Fatalf("files in the directory: %q, want %q alone", names, name)
			}
			s, err = sqlitestore.Open(context.Background(), path, sqlitestore.WithoutMigrate())
			if err != nil {
				t.Fatal(err)
			}
			defer s.Close()
			got, err := s.Get(context.Background(), "k")
			if err != nil || got.Key != "k" {
				t.Fatalf("Get(k) = %+v, %v: want the entry parked before", got, err)
			}
		})
	}
}
