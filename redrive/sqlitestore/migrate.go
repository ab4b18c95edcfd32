package sqlitestore

import (
	"context"
	"embed"
	"fmt"
	"io/fs"
	"time"

	"github.com/redeliver-go/redeliver/redrive"
)

//go:embed migration/*.sql
var migrationFS embed.FS

// Migrations returns the embedded migrations, as migration/NNN_name.up.sql
// and migration/NNN_name.down.sql, for those who apply schema changes with
// their own tool.
func Migrations() fs.FS { return migrationFS }

func migrations() ([]redrive.Migration, error) {
	ms, err := redrive.ReadMigrations(migrationFS, "migration")
	if err != nil {
		return nil, fmt.Errorf("sqlitestore: %w", err)
	}
	return ms, nil
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
	if err := s.usable(ctx); err != nil {
		return err
	}
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
		if _, err := tx.ExecContext(ctx, m.Up); err != nil {
			return fmt.Errorf("sqlitestore: migration %d %s up: %w", m.Version, m.Name, err)
		}
		if _, err := tx.ExecContext(ctx, `INSERT INTO redrive_migrations (version, name, applied_at) VALUES (?, ?, ?)`,
			m.Version, m.Name, time.Now().UnixMicro()); err != nil {
			return fmt.Errorf("sqlitestore: migrate: %w", err)
		}
	}
	for ; cur > version; cur-- {
		m := ms[cur-1]
		if _, err := tx.ExecContext(ctx, m.Down); err != nil {
			return fmt.Errorf("sqlitestore: migration %d %s down: %w", m.Version, m.Name, err)
		}
		if _, err := tx.ExecContext(ctx, `DELETE FROM redrive_migrations WHERE version = ?`, m.Version); err != nil {
			return fmt.Errorf("sqlitestore: migrate: %w", err)
		}
	}
	if err := tx.Commit(); err != nil {
		return fmt.Errorf("sqlitestore: migrate: %w", err)
	}
	return nil
}
