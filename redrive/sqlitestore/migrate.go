package sqlitestore

import (
	"context"
	"embed"
	"fmt"
	"io/fs"
	"path"
	"sort"
	"strconv"
	"strings"
	"time"
)

//go:embed migration/*.sql
var migrationFS embed.FS

// Migrations returns the embedded migrations, as migration/NNN_name.up.sql
// and migration/NNN_name.down.sql, for those who apply schema changes with
// their own tool.
func Migrations() fs.FS { return migrationFS }

type migration struct {
	version  int
	name     string
	up, down string
}

func migrations() ([]migration, error) {
	files, err := fs.Glob(migrationFS, "migration/*.sql")
	if err != nil {
		return nil, err
	}
	byVersion := map[int]*migration{}
	for _, f := range files {
		base := path.Base(f)
		num, rest, ok := strings.Cut(base, "_")
		v, err := strconv.Atoi(num)
		if !ok || err != nil || v <= 0 {
			return nil, fmt.Errorf("sqlitestore: migration %s: want NNN_name.up.sql or .down.sql", base)
		}
		m := byVersion[v]
		if m == nil {
			m = &migration{version: v}
			byVersion[v] = m
		}
		body, err := fs.ReadFile(migrationFS, f)
		if err != nil {
			return nil, err
		}
		switch {
		case strings.HasSuffix(rest, ".up.sql"):
			m.name, m.up = strings.TrimSuffix(rest, ".up.sql"), string(body)
		case strings.HasSuffix(rest, ".down.sql"):
			m.down = string(body)
		default:
			return nil, fmt.Errorf("sqlitestore: migration %s: want NNN_name.up.sql or .down.sql", base)
		}
	}
	out := make([]migration, 0, len(byVersion))
	for _, m := range byVersion {
		if m.up == "" || m.down == "" {
			return nil, fmt.Errorf("sqlitestore: migration %d lacks its up or down file", m.version)
		}
		out = append(out, *m)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].version < out[j].version })
	for i, m := range out {
		if m.version != i+1 {
			return nil, fmt.Errorf("sqlitestore: migration %d missing", i+1)
		}
	}
	return out, nil
}

// Migrate brings the schema to the latest version; see [Store.MigrateTo].
func (s *Store) Migrate(ctx context.Context) error {
	ms, err := migrations()
	if err != nil {
		return err
	}
	return s.MigrateTo(ctx, len(ms))
}

// MigrateTo applies the up migrations above the schema's version, or the
// down migrations to go below it, until the schema is at version (0 removes
// everything), in one transaction. Versions are recorded in the table
// redrive_migrations.
func (s *Store) MigrateTo(ctx context.Context, version int) error {
	ms, err := migrations()
	if err != nil {
		return err
	}
	if version < 0 || version > len(ms) {
		return fmt.Errorf("sqlitestore: migrate to %d: want 0 to %d", version, len(ms))
	}
	tx, err := s.db.BeginTx(ctx, nil)
	if err != nil {
		return fmt.Errorf("sqlitestore: migrate: %w", err)
	}
	defer tx.Rollback()
	if _, err := tx.ExecContext(ctx, `CREATE TABLE IF NOT EXISTS redrive_migrations (
		version INTEGER PRIMARY KEY, name TEXT NOT NULL, applied_at INTEGER NOT NULL)`); err != nil {
		return fmt.Errorf("sqlitestore: migrate: %w", err)
	}
	var cur int
	if err := tx.QueryRowContext(ctx, `SELECT COALESCE(MAX(version), 0) FROM redrive_migrations`).Scan(&cur); err != nil {
		return fmt.Errorf("sqlitestore: migrate: %w", err)
	}
	if cur > len(ms) {
		return fmt.Errorf("sqlitestore: the schema is at version %d, newer than this package's %d", cur, len(ms))
	}
	for ; cur < version; cur++ {
		m := ms[cur]
		if _, err := tx.ExecContext(ctx, m.up); err != nil {
			return fmt.Errorf("sqlitestore: migration %d %s up: %w", m.version, m.name, err)
		}
		if _, err := tx.ExecContext(ctx, `INSERT INTO redrive_migrations (version, name, applied_at) VALUES (?, ?, ?)`,
			m.version, m.name, time.Now().UnixMicro()); err != nil {
			return fmt.Errorf("sqlitestore: migrate: %w", err)
		}
	}
	for ; cur > version; cur-- {
		m := ms[cur-1]
		if _, err := tx.ExecContext(ctx, m.down); err != nil {
			return fmt.Errorf("sqlitestore: migration %d %s down: %w", m.version, m.name, err)
		}
		if _, err := tx.ExecContext(ctx, `DELETE FROM redrive_migrations WHERE version = ?`, m.version); err != nil {
			return fmt.Errorf("sqlitestore: migrate: %w", err)
		}
	}
	if err := tx.Commit(); err != nil {
		return fmt.Errorf("sqlitestore: migrate: %w", err)
	}
	return nil
}
