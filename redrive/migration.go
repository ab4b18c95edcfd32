package redrive

import (
	"errors"
	"fmt"
	"io/fs"
	"path"
	"sort"
	"strconv"
	"strings"
)

// Migration is one versioned schema change of a store, read from a pair
// of files NNN_name.up.sql and NNN_name.down.sql.
type Migration struct {
	Version  int
	Name     string
	Up, Down string // the SQL that applies and that undoes it
}

// ReadMigrations reads the migrations in dir of fsys (a store's embedded
// files), in version order. It returns an error when a file is not named
// NNN_name.up.sql or NNN_name.down.sql, when a version lacks one of its
// two files, or when the versions do not run 1, 2, 3 ... without a gap.
func ReadMigrations(fsys fs.FS, dir string) ([]Migration, error) {
	if fsys == nil {
		return nil, errors.New("redrive: ReadMigrations: nil file system: give a store's embedded migrations")
	}
	files, err := fs.Glob(fsys, path.Join(dir, "*.sql"))
	if err != nil {
		return nil, err
	}
	byVersion := map[int]*Migration{}
	for _, f := range files {
		base := path.Base(f)
		num, rest, ok := strings.Cut(base, "_")
		v, err := strconv.Atoi(num)
		if !ok || err != nil || v <= 0 {
			return nil, fmt.Errorf("migration %s: want NNN_name.up.sql or .down.sql", base)
		}
		m := byVersion[v]
		if m == nil {
			m = &Migration{Version: v}
			byVersion[v] = m
		}
		body, err := fs.ReadFile(fsys, f)
		if err != nil {
			return nil, err
		}
		switch {
		case strings.HasSuffix(rest, ".up.sql"):
			m.Name, m.Up = strings.TrimSuffix(rest, ".up.sql"), string(body)
		case strings.HasSuffix(rest, ".down.sql"):
			m.Down = string(body)
		default:
			return nil, fmt.Errorf("migration %s: want NNN_name.up.sql or .down.sql", base)
		}
	}
	out := make([]Migration, 0, len(byVersion))
	for _, m := range byVersion {
		if m.Up == "" || m.Down == "" {
			return nil, fmt.Errorf("migration %d lacks its up or down file", m.Version)
		}
		out = append(out, *m)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Version < out[j].Version })
	for i, m := range out {
		if m.Version != i+1 {
			return nil, fmt.Errorf("migration %d missing", i+1)
		}
	}
	return out, nil
}
