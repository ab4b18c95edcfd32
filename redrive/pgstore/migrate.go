package pgstore

import (
	"context"
	"embed"
	"fmt"
	"io/fs"

	"github.com/jackc/pgx/v5"

	"github.com/redeliver-go/redeliver/redrive"
)

//go:embed migration/*.sql
var migrationFS embed.FS

// Migrations returns the embedded migrations, as migration/NNN_name.up.sql
// and migration/NNN_name.down.sql, for those who apply schema changes with
// their own tool (then open the store with [WithoutMigrate]).
func Migrations() fs.FS { return migrationFS }

func migrations() ([]redrive.Migration, error) {
	ms, err := redrive.ReadMigrations(migrationFS, "migration")
	if err != nil {
		return nil, fmt.Errorf("pgstore: %w", err)
	}
	return ms, nil
}

// migrateLock is the key of the advisory lock that keeps two stores from
// migrating one schema at once.
const migrateLock = 0x72656472697665 // "redrive"

// Migrate brings the schema to the latest version; see [Store.MigrateTo].
func (s *Store) Migrate(ctx context.Context) error {
	if err := s.usable(ctx); err != nil {
		return err
	}
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
// if it does not exist. It gives up after the migration timeout (see
// [WithMigrateTimeout]) with an error that says so.
func (s *Store) MigrateTo(ctx context.Context, version int) error {
	if err := s.usable(ctx); err != nil {
		return err
	}
	timeout := fmt.Errorf("pgstore: the database did not finish the schema's migration within %v (see pgstore.WithMigrateTimeout): %w", s.migrateTimeout, context.DeadlineExceeded)
	mctx, cancel := context.WithTimeoutCause(ctx, s.migrateTimeout, timeout)
	defer cancel()
	err := s.migrateTo(mctx, version)
	if err != nil && ctx.Err() == nil && context.Cause(mctx) == timeout {
		return fmt.Errorf("%w (%v)", timeout, err)
	}
	return err
}

func (s *Store) migrateTo(ctx context.Context, version int) error {
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
	defer func() {
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), markTimeout)
		defer cancel()
		tx.Rollback(rctx)
	}()
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
		if _, err := tx.Exec(ctx, m.Up); err != nil {
			return wrap(fmt.Sprintf("migration %d %s up", m.Version, m.Name), err)
		}
		if _, err := tx.Exec(ctx, `INSERT INTO redrive_migrations (version, name) VALUES ($1, $2)`, m.Version, m.Name); err != nil {
			return wrap("migrate", err)
		}
	}
	for ; cur > version; cur-- {
		m := ms[cur-1]
		if _, err := tx.Exec(ctx, m.Down); err != nil {
			return wrap(fmt.Sprintf("migration %d %s down", m.Version, m.Name), err)
		}
		if _, err := tx.Exec(ctx, `DELETE FROM redrive_migrations WHERE version = $1`, m.Version); err != nil {
			return wrap("migrate", err)
		}
	}
	return wrap("migrate", tx.Commit(ctx))
}
