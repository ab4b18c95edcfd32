package sqlitestore_test

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"strings"
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

// Open refuses what it cannot open, or would open as something else than
// meant, with an error that says why: a URI (it takes a file's path, and
// would create a file named like the URI), a directory that does not
// exist, a directory given as the file.
func TestOpenRefusesWithReason(t *testing.T) {
	dir := t.TempDir()
	for _, c := range []struct{ path, want string }{
		{"file:redrive.db?cache=shared", "a URI"},
		{"file::memory:", "a URI"},
		{filepath.Join(dir, "missing", "redrive.db"), "does not exist"},
		{dir, "is a directory"},
	} {
		s, err := sqlitestore.Open(context.Background(), c.path)
		if err == nil {
			s.Close()
			t.Errorf("Open(%q) succeeded; want an error that says %q", c.path, c.want)
			continue
		}
		if !strings.Contains(err.Error(), c.want) || !strings.Contains(err.Error(), c.path) {
			t.Errorf("Open(%q): %v; want an error that names the path and says %q", c.path, err, c.want)
		}
	}
	if entries, _ := os.ReadDir("."); slices.ContainsFunc(entries, func(e os.DirEntry) bool { return strings.HasPrefix(e.Name(), "file:") }) {
		t.Error("Open created a file named like a URI in the working directory")
	}
}
