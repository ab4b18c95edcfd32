// Package sqlitestore keeps re-drive entries in an SQLite file, through
// the pure-Go driver modernc.org/sqlite: no server and no C compiler. It is
// the embedded default, for one process and for examples.
//
//	store, err := sqlitestore.Open(ctx, "redrive.db") // creates the file and its schema
//	defer store.Close()
//	park, err := redrive.Park(store, 5*time.Minute)    // a processor's exhaustion action
//	sch, err := redrive.NewScheduler(store, pub)
//
// What it does not give: several scheduler instances. Claims are exclusive
// within one Store (one process) only; two processes sweeping the same file
// could publish an entry twice for one due time. Use pgstore for several
// instances.
//
// The schema is created and migrated by the package: versioned migrations
// are embedded (see [Migrations]) and applied by [Open] unless
// [WithoutMigrate] is given, or by [Store.Migrate].
package sqlitestore

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"io/fs"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/redeliver-go/redeliver/redrive"
	"github.com/redeliver-go/redeliver/redrive/internal/rowcodec"

	_ "modernc.org/sqlite" // registers the "sqlite" driver
)

// Store is a [redrive.Store] in an SQLite file. It is safe for concurrent
// use within one process. The zero Store is not open: use [Open].
type Store struct {
	db    *sql.DB
	claim chan struct{} // a token held through a claim: claims are exclusive within the process, and completions wait for them
}

// errNotOpen is what the methods of a Store not made by Open return.
var errNotOpen = errors.New("sqlitestore: the Store is not open: use sqlitestore.Open(ctx, path)")

// usable returns an error when s is not open or ctx is nil.
func (s *Store) usable(ctx context.Context) error {
	switch {
	case s == nil || s.db == nil:
		return errNotOpen
	case ctx == nil:
		return errors.New("sqlitestore: nil context")
	}
	return nil
}

// lockClaims waits until no claim runs and keeps others from starting,
// or returns ctx's error; unlockClaims ends it.
func (s *Store) lockClaims(ctx context.Context, op string) error {
	select {
	case s.claim <- struct{}{}:
		return nil
	case <-ctx.Done():
		return fmt.Errorf("sqlitestore: %s: waiting for a sweep's claim to end: %w", op, context.Cause(ctx))
	}
}

func (s *Store) unlockClaims() { <-s.claim }

var _ redrive.KeyLocker = (*Store)(nil)

// Option configures [Open].
type Option interface{ apply(*options) }

type options struct{ noMigrate bool }

type optionFunc func(*options)

func (f optionFunc) apply(o *options) { f(o) }

// WithoutMigrate leaves the schema as it is: call [Store.Migrate], or apply
// [Migrations] yourself. The default migrates on Open.
func WithoutMigrate() Option { return optionFunc(func(o *options) { o.noMigrate = true }) }

// Open opens (creating it if need be) the SQLite database at path, in WAL
// mode with a busy timeout of 5 seconds, and migrates its schema to the
// latest version. path is a file's path, whatever bytes it holds ('?',
// '#' and '%' included), not a URI: one that starts with "file:" is
// refused. ":memory:" gives a database that lives as long as the Store.
func Open(ctx context.Context, path string, opts ...Option) (*Store, error) {
	var o options
	for i, opt := range opts {
		if opt == nil {
			return nil, fmt.Errorf("sqlitestore: Open: option %d of %d is nil", i+1, len(opts))
		}
		opt.apply(&o)
	}
	switch {
	case ctx == nil:
		return nil, errors.New("sqlitestore: Open: nil context")
	case path == "":
		return nil, errors.New("sqlitestore: empty path")
	case strings.ContainsRune(path, 0):
		return nil, fmt.Errorf("sqlitestore: path %q holds a NUL", path)
	case strings.HasPrefix(path, "file:"):
		return nil, fmt.Errorf("sqlitestore: path %q is a URI: give the file's path (a file whose name starts with file: as ./%s), or \":memory:\"", path, path)
	}
	q := url.Values{}
	q.Add("_pragma", "busy_timeout(5000)")
	q.Add("_pragma", "foreign_keys(1)")
	if path != ":memory:" {
		q.Add("_pragma", "journal_mode(WAL)")
		q.Add("_pragma", "synchronous(NORMAL)")
	}
	q.Set("_txlock", "immediate")
	db, err := sql.Open("sqlite", "file:"+uriPath(path)+"?"+q.Encode())
	if err != nil {
		return nil, fmt.Errorf("sqlitestore: open %s: %w", path, err)
	}
	// One connection: SQLite has one writer at a time anyway, and a
	// ":memory:" database exists per connection.
	db.SetMaxOpenConns(1)
	db.SetConnMaxLifetime(0)
	db.SetConnMaxIdleTime(0)
	if err := db.PingContext(ctx); err != nil {
		db.Close()
		if why := whyNot(path); why != "" {
			return nil, fmt.Errorf("sqlitestore: open %s: %s: %w", path, why, err)
		}
		return nil, fmt.Errorf("sqlitestore: open %s: %w", path, err)
	}
	s := &Store{db: db, claim: make(chan struct{}, 1)}
	if !o.noMigrate {
		if err := s.Migrate(ctx); err != nil {
			db.Close()
			return nil, err
		}
	}
	return s, nil
}

// whyNot says why SQLite could not open path when the file system tells:
// a directory, or one that does not exist; "" otherwise.
func whyNot(path string) string {
	if fi, err := os.Stat(path); err == nil && fi.IsDir() {
		return "it is a directory, not a database file"
	}
	if dir := filepath.Dir(path); dir != "" {
		if _, err := os.Stat(dir); errors.Is(err, fs.ErrNotExist) {
			return fmt.Sprintf("directory %s does not exist (create it first)", dir)
		}
	}
	return ""
}

// uriPath writes path as the path of a file: URI, so that SQLite opens
// the file named whatever its name holds: a '?' would start the URI's
// query, a '#' its fragment, a '%' an escape, and a leading "//" an
// authority.
func uriPath(path string) string {
	p := strings.NewReplacer("%", "%25", "?", "%3F", "#", "%23").Replace(path)
	if strings.HasPrefix(p, "//") {
		p = "//" + p // an empty authority, then the path
	}
	return p
}

// Close closes the database.
func (s *Store) Close() error {
	if s == nil || s.db == nil {
		return nil
	}
	return s.db.Close()
}

// columns are the columns scan reads, with whether the message's key and
// value are NULL: the driver reads an empty BLOB as nil.
const columns = `id, key, base, status, state_time, created, expiry, due_at, redrives, reparks, last_error, version,
	topic, partition, "offset", msg_key, msg_key IS NULL, msg_value, msg_value IS NULL, headers, msg_time, order_key`

type scanner interface{ Scan(dest ...any) error }

func scan(r scanner) (redrive.Entry, error) { return scanWith(r) }

// scanWith scans the columns and then extra.
func scanWith(r scanner, extra ...any) (redrive.Entry, error) {
	var (
		e                          redrive.Entry
		status                     string
		stateTime, created, expiry int64
		due, msgTime               sql.NullInt64
		headers                    sql.NullString
		key, value                 []byte
		keyNull, valueNull         bool
	)
	err := r.Scan(append([]any{&e.ID, &e.Key, &e.Base, &status, &stateTime, &created, &expiry, &due, &e.Redrives, &e.Reparks, &e.LastError, &e.Version,
		&e.Message.Topic, &e.Message.Partition, &e.Message.Offset, &key, &keyNull, &value, &valueNull, &headers, &msgTime, &e.OrderKey}, extra...)...)
	if err != nil {
		return e, err
	}
	if e.Status, err = redrive.ParseStatus(status); err != nil {
		return e, err
	}
	e.StateTime, e.Created, e.Expiry = fromMicro(stateTime), fromMicro(created), time.Duration(expiry)
	if due.Valid {
		e.DueAt = fromMicro(due.Int64)
	}
	if msgTime.Valid {
		e.Message.Timestamp = fromMicro(msgTime.Int64)
	}
	e.Message.Key, e.Message.Value = present(key, keyNull), present(value, valueNull)
	if headers.Valid {
		if e.Message.Headers, err = rowcodec.ParseHeaders([]byte(headers.String)); err != nil {
			return e, fmt.Errorf("entry %d: headers: %w", e.ID, err)
		}
	}
	return e, nil
}

// present is b, empty rather than nil when the column was not NULL.
func present(b []byte, null bool) []byte {
	if b == nil && !null {
		return []byte{}
	}
	return b
}

func micro(t time.Time) int64 { return t.UnixMicro() }

func fromMicro(us int64) time.Time { return time.UnixMicro(us).UTC() }

func nullMicro(t time.Time) sql.NullInt64 {
	if t.IsZero() {
		return sql.NullInt64{}
	}
	return sql.NullInt64{Int64: t.UnixMicro(), Valid: true}
}

// Park inserts the entries whose key is new; see [redrive.Store.Park].
func (s *Store) Park(ctx context.Context, entries []redrive.Entry) (int, error) {
	if err := s.usable(ctx); err != nil {
		return 0, err
	}
	if len(entries) == 0 {
		return 0, nil
	}
	tx, err := s.db.BeginTx(ctx, nil)
	if err != nil {
		return 0, fmt.Errorf("sqlitestore: park: %w", err)
	}
	defer tx.Rollback()
	stmt, err := tx.PrepareContext(ctx, `INSERT INTO redrive_entries
		(key, base, status, state, state_time, created, expiry, due_at, redrives, reparks, last_error, version,
		 topic, partition, "offset", msg_key, msg_value, headers, msg_time, order_key)
		VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, 1, ?, ?, ?, ?, ?, ?, ?, ?)
		ON CONFLICT (key) DO NOTHING`)
	if err != nil {
		return 0, fmt.Errorf("sqlitestore: park: %w", err)
	}
	defer stmt.Close()
	n := 0
	for _, e := range entries {
		var headers sql.NullString
		headers.String, headers.Valid, err = rowcodec.Headers(e.Message.Headers)
		if err != nil {
			return 0, fmt.Errorf("sqlitestore: park %q: headers: %w", e.Key, err)
		}
		res, err := stmt.ExecContext(ctx, e.Key, e.Base, e.Status.String(), e.State(), micro(e.StateTime), micro(e.Created),
			int64(e.Expiry), nullMicro(e.DueAt), e.Redrives, e.Reparks, e.LastError,
			e.Message.Topic, e.Message.Partition, e.Message.Offset, e.Message.Key, e.Message.Value, headers, nullMicro(e.Message.Timestamp), e.OrderKey)
		if err != nil {
			return 0, fmt.Errorf("sqlitestore: park %q: %w", e.Key, err)
		}
		k, _ := res.RowsAffected()
		n += int(k)
	}
	if err := tx.Commit(); err != nil {
		return 0, fmt.Errorf("sqlitestore: park: %w", err)
	}
	return n, nil
}

// Get returns the entry called key.
func (s *Store) Get(ctx context.Context, key string) (redrive.Entry, error) {
	if err := s.usable(ctx); err != nil {
		return redrive.Entry{}, err
	}
	e, err := scan(s.db.QueryRowContext(ctx, `SELECT `+columns+` FROM redrive_entries WHERE key = ?`, key))
	if errors.Is(err, sql.ErrNoRows) {
		return e, fmt.Errorf("%w: %q", redrive.ErrNotFound, key)
	}
	if err != nil {
		return e, fmt.Errorf("sqlitestore: get %q: %w", key, err)
	}
	return e, nil
}

// Complete moves the entry called key to done; see [redrive.Store.Complete].
// It waits for a claim in progress to apply its changes, as pgstore waits
// for a sweep's row locks: a completion never lands between a re-drive's
// publish and its mark. The wait ends with ctx.
func (s *Store) Complete(ctx context.Context, key string, at time.Time) (redrive.Entry, error) {
	if err := s.usable(ctx); err != nil {
		return redrive.Entry{}, err
	}
	if err := s.lockClaims(ctx, fmt.Sprintf("complete %q", key)); err != nil {
		return redrive.Entry{}, err
	}
	defer s.unlockClaims()
	e, err := scan(s.db.QueryRowContext(ctx, `UPDATE redrive_entries
		SET status = 'done', state = base || ?, state_time = ?, due_at = NULL, version = version + 1
		WHERE key = ? AND status IN ('parked', 'retrying')
		RETURNING `+columns, redrive.SuffixDone, micro(at), key))
	if errors.Is(err, sql.ErrNoRows) {
		e, err := s.Get(ctx, key)
		if err != nil {
			return e, err
		}
		return e, fmt.Errorf("%w: %q is %s", redrive.ErrNotPending, key, e.State())
	}
	if err != nil {
		return e, fmt.Errorf("sqlitestore: complete %q: %w", key, err)
	}
	return e, nil
}

// Requeue makes the entry called key parked and due at at; see
// [redrive.Store.Requeue]. Like Complete, it waits for a claim in progress.
func (s *Store) Requeue(ctx context.Context, key string, at time.Time) (redrive.Entry, error) {
	if err := s.usable(ctx); err != nil {
		return redrive.Entry{}, err
	}
	if err := s.lockClaims(ctx, fmt.Sprintf("requeue %q", key)); err != nil {
		return redrive.Entry{}, err
	}
	defer s.unlockClaims()
	e, err := scan(s.db.QueryRowContext(ctx, `UPDATE redrive_entries
		SET status = 'parked', state = base, state_time = ?, due_at = ?, version = version + 1
		WHERE key = ? AND status IN ('parked', 'retrying', 'timed_out')
		RETURNING `+columns, micro(at), micro(at), key))
	if errors.Is(err, sql.ErrNoRows) {
		e, err := s.Get(ctx, key)
		if err != nil {
			return e, err
		}
		return e, fmt.Errorf("%w: %q is %s: a done entry is not re-driven", redrive.ErrNotPending, key, e.State())
	}
	if err != nil {
		return e, fmt.Errorf("sqlitestore: requeue %q: %w", key, err)
	}
	return e, nil
}

// Repark hands a re-driven record's failure back to the entry called key;
// see [redrive.Store.Repark]. Like Complete, it waits for a claim in
// progress.
func (s *Store) Repark(ctx context.Context, key string, number int, lastError string) (redrive.Entry, bool, error) {
	if err := s.usable(ctx); err != nil {
		return redrive.Entry{}, false, err
	}
	if err := s.lockClaims(ctx, fmt.Sprintf("repark %q", key)); err != nil {
		return redrive.Entry{}, false, err
	}
	defer s.unlockClaims()
	tx, err := s.db.BeginTx(ctx, nil)
	if err != nil {
		return redrive.Entry{}, false, fmt.Errorf("sqlitestore: repark %q: %w", key, err)
	}
	defer tx.Rollback()
	var counted int64
	e, err := scanWith(tx.QueryRowContext(ctx, `SELECT `+columns+`, ? > reparked_number FROM redrive_entries WHERE key = ?`, number, key), &counted)
	switch {
	case errors.Is(err, sql.ErrNoRows):
		return e, false, fmt.Errorf("%w: %q", redrive.ErrNotFound, key)
	case err != nil:
		return e, false, fmt.Errorf("sqlitestore: repark %q: %w", key, err)
	case !e.Status.Pending():
		return e, false, fmt.Errorf("%w: %q is %s", redrive.ErrNotPending, key, e.State())
	}
	e, err = scan(tx.QueryRowContext(ctx, `UPDATE redrive_entries
		SET last_error = ?, reparks = reparks + ?, reparked_number = max(reparked_number, ?), version = version + 1
		WHERE id = ? RETURNING `+columns, lastError, counted, number, e.ID))
	if err == nil {
		err = tx.Commit()
	}
	if err != nil {
		return e, false, fmt.Errorf("sqlitestore: repark %q: %w", key, err)
	}
	return e, counted == 1, nil
}

// Claim claims due entries; see [redrive.Store.Claim]. The entries are read
// in one transaction, fn runs outside any transaction (so that parking and
// completing go on while it publishes), and the changes are applied as
// compare-and-sets in another. Claims are exclusive within this Store only.
func (s *Store) Claim(ctx context.Context, now time.Time, limit int, fn func(context.Context, []redrive.Entry) []redrive.Change) (int, []redrive.Change, error) {
	if err := s.usable(ctx); err != nil {
		return 0, nil, err
	}
	if fn == nil {
		return 0, nil, errors.New("sqlitestore: claim: nil function")
	}
	if err := s.lockClaims(ctx, "claim"); err != nil {
		return 0, nil, err
	}
	defer s.unlockClaims()
	rows, err := s.db.QueryContext(ctx, `SELECT `+columns+` FROM redrive_entries
		WHERE due_at IS NOT NULL AND due_at <= ? AND status IN ('parked', 'retrying')
		AND (order_key = '' OR NOT EXISTS (SELECT 1 FROM redrive_entries AS b
			WHERE b.order_key = redrive_entries.order_key AND b.order_key <> '' AND b.id < redrive_entries.id
			AND b.status IN ('parked', 'retrying')))
		ORDER BY due_at, id LIMIT ?`, micro(now), limit)
	if err != nil {
		return 0, nil, fmt.Errorf("sqlitestore: claim: %w", err)
	}
	var due []redrive.Entry
	for rows.Next() {
		e, err := scan(rows)
		if err != nil {
			rows.Close()
			return 0, nil, fmt.Errorf("sqlitestore: claim: %w", err)
		}
		due = append(due, e)
	}
	if err := rows.Close(); err != nil {
		return 0, nil, fmt.Errorf("sqlitestore: claim: %w", err)
	}
	if err := rows.Err(); err != nil {
		return 0, nil, fmt.Errorf("sqlitestore: claim: %w", err)
	}
	if len(due) == 0 {
		return 0, nil, nil
	}
	changes := fn(ctx, due)
	if len(changes) == 0 {
		return len(due), nil, nil
	}
	bases := make(map[int64]string, len(due))
	for _, e := range due {
		bases[e.ID] = e.Base
	}
	// The changes must be recorded even when ctx ended during fn: what was
	// published is marked, so it is not published again.
	wctx := context.WithoutCancel(ctx)
	tx, err := s.db.BeginTx(wctx, nil)
	if err != nil {
		return len(due), nil, fmt.Errorf("sqlitestore: claim: %w", err)
	}
	defer tx.Rollback()
	stmt, err := tx.PrepareContext(wctx, `UPDATE redrive_entries
		SET status = ?, state = ?, state_time = ?, due_at = ?, redrives = ?, last_error = ?, version = version + 1
		WHERE id = ? AND status = ? AND version = ?`)
	if err != nil {
		return len(due), nil, fmt.Errorf("sqlitestore: claim: %w", err)
	}
	defer stmt.Close()
	var applied []redrive.Change
	for _, c := range changes {
		res, err := stmt.ExecContext(wctx, c.To.String(), redrive.StateName(bases[c.ID], c.To), micro(c.StateTime), nullMicro(c.DueAt),
			c.Redrives, c.LastError, c.ID, c.Status.String(), c.Version)
		if err != nil {
			return len(due), nil, fmt.Errorf("sqlitestore: claim: mark entry %d: %w", c.ID, err)
		}
		if n, _ := res.RowsAffected(); n == 1 {
			applied = append(applied, c)
		}
	}
	if err := tx.Commit(); err != nil {
		return len(due), nil, fmt.Errorf("sqlitestore: claim: %w", err)
	}
	return len(due), applied, nil
}

// List returns entries by ascending ID; see [redrive.Store.List].
func (s *Store) List(ctx context.Context, f redrive.Filter) ([]redrive.Entry, error) {
	if err := s.usable(ctx); err != nil {
		return nil, err
	}
	limit := f.Limit
	if limit <= 0 {
		limit = redrive.DefaultListLimit
	}
	rows, err := s.db.QueryContext(ctx, `SELECT `+columns+` FROM redrive_entries
		WHERE (? = '' OR status = ?) AND (? = '' OR topic = ?) AND id > ? ORDER BY id LIMIT ?`,
		statusArg(f.Status), statusArg(f.Status), f.Topic, f.Topic, f.AfterID, limit)
	if err != nil {
		return nil, fmt.Errorf("sqlitestore: list: %w", err)
	}
	defer rows.Close()
	var out []redrive.Entry
	for rows.Next() {
		e, err := scan(rows)
		if err != nil {
			return nil, fmt.Errorf("sqlitestore: list: %w", err)
		}
		out = append(out, e)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("sqlitestore: list: %w", err)
	}
	return out, nil
}

// statusArg is the status a filter selects, "" for all.
func statusArg(st redrive.Status) string {
	if st == 0 {
		return ""
	}
	return st.String()
}

// LockedKeys returns the order keys with a pending entry of a record of
// topic and partition; see [redrive.KeyLocker].
func (s *Store) LockedKeys(ctx context.Context, topic string, partition int32) ([]string, error) {
	if err := s.usable(ctx); err != nil {
		return nil, err
	}
	rows, err := s.db.QueryContext(ctx, `SELECT DISTINCT order_key FROM redrive_entries
		WHERE topic = ? AND partition = ? AND order_key <> '' AND status IN ('parked', 'retrying')`, topic, partition)
	if err != nil {
		return nil, fmt.Errorf("sqlitestore: locked keys of %s/%d: %w", topic, partition, err)
	}
	defer rows.Close()
	var out []string
	for rows.Next() {
		var k string
		if err := rows.Scan(&k); err != nil {
			return nil, fmt.Errorf("sqlitestore: locked keys of %s/%d: %w", topic, partition, err)
		}
		out = append(out, k)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("sqlitestore: locked keys of %s/%d: %w", topic, partition, err)
	}
	return out, nil
}

// KeyLocked reports whether the order key has a pending entry; see
// [redrive.KeyLocker].
func (s *Store) KeyLocked(ctx context.Context, orderKey string) (bool, error) {
	if err := s.usable(ctx); err != nil {
		return false, err
	}
	if orderKey == "" {
		return false, nil
	}
	var n int
	err := s.db.QueryRowContext(ctx, `SELECT count(*) FROM (SELECT 1 FROM redrive_entries
		WHERE order_key = ? AND order_key <> '' AND status IN ('parked', 'retrying') LIMIT 1)`, orderKey).Scan(&n)
	if err != nil {
		return false, fmt.Errorf("sqlitestore: key locked %q: %w", orderKey, err)
	}
	return n > 0, nil
}
