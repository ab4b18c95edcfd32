package redrive_test

import (
	"strings"
	"testing"
	"testing/fstest"

	"github.com/redeliver-go/redeliver/redrive"
)

func TestReadMigrations(t *testing.T) {
	file := func(s string) *fstest.MapFile { return &fstest.MapFile{Data: []byte(s)} }
	ms, err := redrive.ReadMigrations(fstest.MapFS{
		"m/002_more.up.sql": file("B"), "m/002_more.down.sql": file("b"),
		"m/001_entries.up.sql": file("A"), "m/001_entries.down.sql": file("a"),
	}, "m")
	if err != nil || len(ms) != 2 || ms[0] != (redrive.Migration{Version: 1, Name: "entries", Up: "A", Down: "a"}) || ms[1].Name != "more" {
		t.Fatalf("ReadMigrations = %+v, %v", ms, err)
	}
	for _, tc := range []struct {
		files fstest.MapFS
		want  string
	}{
		{fstest.MapFS{"m/x_a.up.sql": file("A")}, "migration x_a.up.sql: want NNN_name.up.sql or .down.sql"},
		{fstest.MapFS{"m/001_a.sideways.sql": file("A")}, "want NNN_name.up.sql or .down.sql"},
		{fstest.MapFS{"m/001_a.up.sql": file("A")}, "migration 1 lacks its up or down file"},
		{fstest.MapFS{"m/002_a.up.sql": file("A"), "m/002_a.down.sql": file("a")}, "migration 1 missing"},
	} {
		if _, err := redrive.ReadMigrations(tc.files, "m"); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("ReadMigrations(%v) = %v, want %q", tc.files, err, tc.want)
		}
	}
}
