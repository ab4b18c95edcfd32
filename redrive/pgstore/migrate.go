package pgstore

import (
	"context"
	"embed"
	"fmt"
	"io/fs"
	"path"
	"sort"
	"strconv"
	"strings"

	"github.com/jackc/pgx/v5"
)

//go:embed migration/*.sql
var migrationFS embed.FS

// Migrations returns the embedded migrations, as migration/NNN_name.up.sql
// and migration/NNN_name.down.sql, for those who apply schema changes with
// their own tool (then open the store with [WithoutMigrate]).
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
			return nil, fmt.Errorf("pgstore: migration %s: want NNN_name.up.sql or .down.sql", base)
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
			return nil, fmt.Errorf("pgstore: migration %s: want NNN_name.up.sql or .down.sql", base)
		}
	}
	out := make([]migration, 0, len(byVersion))
	for _, m := range byVersion {
		if m.up == "" || m.down == "" {
			return nil, fmt.Errorf("pgstore: migration %d lacks its up or down file", m.version)
		}
		out = append(out, *m)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].version < out[j].version })
	for i, m := range out {
		if m.version != i+1 {
			return nil, fmt.Errorf("pgstore: migration %d missing", i+1)
		}
	}
	return out, nil
}

// migrateLock is the key of the advisory lock that keeps two stores from
// migrating one schema at once.
const migrateLock = 0x72656472697665 // "redrive"

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
// the tables), in one transaction under an advisory lock, so that
// schedulers starting together migrate once. Versions are recorded in the
// table redrive_migrations. With [WithSchema], the schema is created first
// if it does not exist.
func (s *Store) MigrateTo(ctx context.Context, version int) error {
	ms, err := migrations()
	if err != nil {
		return err
	}
	if version < 0 || version > len(ms) {
		return fmt.Errorf("pgstore: migrate to %d: want 0 to %d", version, len(ms))
	}
	tx, err := s.pool.Begin(ctx)
	if err != nil {
		return wrap("migrate", err)
	}
	defer tx.Rollback(context.WithoutCancel(ctx))
	if _, err := tx.Exec(ctx, `SELECT pg_advisory_xact_lock($1)`, int64(migrateLock)); err != nil {
		return wrap("migrate", err)
	}
	if s.schema != "" {
		// The schema's name is configuration, checked by WithSchema and
		// quoted as an identifier: no SQL is built from data.
		if _, err := tx.Exec(ctx, `CREATE SCHEMA IF NOT EXISTS `+pgx.Identifier{s.schema}.Sanitize()); err != nil {
			return wrap("migrate", err)
		}
	}
	if _, err := tx.Exec(ctx, `CREATE TABLE IF NOT EXISTS redrive_migrations (
		version integer PRIMARY KEY, name text NOT NULL, applied_at timestamptz NOT NULL DEFAULT now())`); err != nil {
		return wrap("migrate", err)
	}
	var cur int
	if err := tx.QueryRow(ctx, `SELECT COALESCE(MAX(version), 0) FROM redrive_migrations`).Scan(&cur); err != nil {
		return wrap("migrate", err)
	}
	if cur > len(ms) {
		return fmt.Errorf("pgstore: the schema is at version %d, newer than this package's %d", cur, len(ms))
	}
	for ; cur < version; cur++ {
		m := ms[cur]
		if _, err := tx.Exec(ctx, m.up); err != nil {
			return wrap(fmt.Sprintf("migration %d %s up", m.version, m.name), err)
		}
		if _, err := tx.Exec(ctx, `INSERT INTO redrive_migrations (version, name) VALUES ($1, $2)`, m.version, m.name); err != nil {
			return wrap("migrate", err)
		}
	}
	for ; cur > version; cur-- {
		m := ms[cur-1]
		if _, err := tx.Exec(ctx, m.down); err != nil {
			return wrap(fmt.Sprintf("migration %d %s down", m.version, m.name), err)
		}
		if _, err := tx.Exec(ctx, `DELETE FROM redrive_migrations WHERE version = $1`, m.version); err != nil {
			return wrap("migrate", err)
		}
	}
	return wrap("migrate", tx.Commit(ctx))
}
