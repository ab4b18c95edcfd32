// Package pgstore keeps re-drive entries in PostgreSQL, through
// jackc/pgx v5 (pgxpool), for a service of several instances:
//
//	store, err := pgstore.Open(ctx, os.Getenv("REDRIVE_DATABASE_URL")) // migrates the schema
//	defer store.Close()
//	park, err := redrive.Park(store, 5*time.Minute) // a processor's exhaustion action
//	sch, err := redrive.NewScheduler(store, pub)    // one in each instance
//
// Several schedulers can share one database: a sweep claims due entries
// with SELECT ... FOR UPDATE SKIP LOCKED, holds them while it publishes,
// and marks them with compare-and-sets on the status and version it read,
// in the same transaction. If the scheduler dies before the commit, the
// server rolls the transaction back and the entries are due again: the
// next sweep publishes them again (at least once; consumers deduplicate on
// the redrive.HeaderKey and redrive.HeaderNumber headers).
//
// The schema is created and migrated by the package: versioned migrations
// are embedded (see [Migrations]) and applied by [Open] unless told
// otherwise, or by [Store.Migrate]. Every statement is fixed text with
// parameters: no SQL is built from data.
//
// The connection string is the caller's: read it from the environment (the
// host.json re-drive section names the variable), never from a file in the
// repository.
package pgstore

import (
	"context"
	"errors"
	"fmt"
	"regexp"
	"strings"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/redeliver-go/redeliver/redrive"
	"github.com/redeliver-go/redeliver/redrive/internal/rowcodec"
)

// Store is a [redrive.Store] in PostgreSQL. It is safe for concurrent use,
// and several Stores (in several processes) can share one database.
//
// The zero Store is not open: use [Open].
type Store struct {
	pool           *pgxpool.Pool
	schema         string
	lazy           bool
	migrateTimeout time.Duration

	migrating chan struct{} // a token held by the call that migrates
	migrated  atomic.Bool
}

// errNotOpen is what the methods of a Store not made by Open return.
var errNotOpen = errors.New("pgstore: the Store is not open: use pgstore.Open(ctx, connString)")

// usable returns an error when s is not open or ctx is nil.
func (s *Store) usable(ctx context.Context) error {
	switch {
	case s == nil || s.pool == nil:
		return errNotOpen
	case ctx == nil:
		return errors.New("pgstore: nil context")
	}
	return nil
}

var _ redrive.KeyLocker = (*Store)(nil)

// Option configures [Open].
type Option interface{ apply(*Store) }

type optionFunc func(*Store)

func (f optionFunc) apply(s *Store) { f(s) }

var identifier = regexp.MustCompile(`^[a-z_][a-z0-9_]{0,62}$`)

// WithSchema keeps the tables in the named schema, created if need be,
// instead of the connection's default (public). The name must be a plain
// lower-case identifier.
func WithSchema(name string) Option { return optionFunc(func(s *Store) { s.schema = name }) }

// WithoutMigrate leaves the schema as it is: call [Store.Migrate], or apply
// [Migrations] yourself. The default migrates on Open.
func WithoutMigrate() Option { return optionFunc(func(s *Store) { s.migrated.Store(true) }) }

// WithDeferredMigrate makes Open return without contacting the database:
// the schema is migrated on first use, and until the database answers,
// every call fails with an error that says why. A scheduler started while
// the database is down then reports each failed sweep and starts working
// when it comes back. One call migrates at a time; the others wait for it
// as long as their context allows, and a migration gives up after the
// migration timeout (see [WithMigrateTimeout]), so a database that accepts
// connections and never answers holds no caller past its deadline. The
// default migrates on Open and fails if it cannot.
func WithDeferredMigrate() Option { return optionFunc(func(s *Store) { s.lazy = true }) }

// DefaultMigrateTimeout bounds a migration of the schema unless
// [WithMigrateTimeout] says otherwise.
const DefaultMigrateTimeout = 30 * time.Second

// WithMigrateTimeout bounds every migration of the schema (on Open, on
// first use with [WithDeferredMigrate], and [Store.MigrateTo]), the wait
// for the database and for another store's migration included. The
// default is [DefaultMigrateTimeout] (30 seconds).
func WithMigrateTimeout(d time.Duration) Option {
	return optionFunc(func(s *Store) { s.migrateTimeout = d })
}

// Open connects to the database at connString (a URL or key=value string,
// as pgxpool.ParseConfig reads it, including pool_max_conns) and migrates
// the schema to the latest version.
func Open(ctx context.Context, connString string, opts ...Option) (*Store, error) {
	if ctx == nil {
		return nil, errors.New("pgstore: Open: nil context")
	}
	s := &Store{migrateTimeout: DefaultMigrateTimeout, migrating: make(chan struct{}, 1)}
	for i, o := range opts {
		if o == nil {
			return nil, fmt.Errorf("pgstore: Open: option %d of %d is nil", i+1, len(opts))
		}
		o.apply(s)
	}
	if s.migrateTimeout <= 0 {
		return nil, fmt.Errorf("pgstore: migrate timeout %v: want more than 0", s.migrateTimeout)
	}
	if s.schema != "" && !identifier.MatchString(s.schema) {
		return nil, fmt.Errorf("pgstore: schema %q: want a lower-case identifier (letters, digits, _)", s.schema)
	}
	cfg, err := pgxpool.ParseConfig(connString)
	if err != nil {
		// pgx's message may quote the string, password included.
		return nil, errors.New("pgstore: the connection string cannot be parsed: want a postgres:// URL or key=value pairs")
	}
	if s.schema != "" {
		cfg.ConnConfig.RuntimeParams["search_path"] = s.schema
	}
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return nil, wrap("open", err)
	}
	s.pool = pool
	if !s.lazy {
		if err := s.ready(ctx); err != nil {
			pool.Close()
			return nil, err
		}
	}
	return s, nil
}

// Close closes the store's connections.
func (s *Store) Close() error {
	if s != nil && s.pool != nil {
		s.pool.Close()
	}
	return nil
}

// ready checks s and ctx and migrates the schema once: one call at a time,
// the others waiting as long as their context allows.
func (s *Store) ready(ctx context.Context) error {
	if err := s.usable(ctx); err != nil {
		return err
	}
	if s.migrated.Load() {
		return nil
	}
	select {
	case s.migrating <- struct{}{}:
	case <-ctx.Done():
		return fmt.Errorf("pgstore: waiting for the schema's migration, which another call runs (the database is slow or away): %w", context.Cause(ctx))
	}
	defer func() { <-s.migrating }()
	if s.migrated.Load() {
		return nil
	}
	if err := s.Migrate(ctx); err != nil {
		return err
	}
	s.migrated.Store(true)
	return nil
}

// wrap prefixes err with the operation. It keeps context errors matchable
// and turns the driver's errors into text, so that pgx's types do not
// become part of this package's API.
func wrap(op string, err error) error {
	switch {
	case err == nil:
		return nil
	case errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded):
		return fmt.Errorf("pgstore: %s: %w", op, err)
	}
	return fmt.Errorf("pgstore: %s: %v", op, err)
}

const columns = `id, key, base, status, state_time, created, expiry, due_at, redrives, reparks, last_error, version,
	topic, partition, "offset", msg_key, msg_value, headers, msg_time, order_key`

func scan(r pgx.Row) (redrive.Entry, error) { return scanWith(r) }

// scanWith scans the columns and then extra.
func scanWith(r pgx.Row, extra ...any) (redrive.Entry, error) {
	var (
		e            redrive.Entry
		status       string
		expiry       int64
		due, msgTime *time.Time
		headers      []byte
		lastError    []byte
	)
	err := r.Scan(append([]any{&e.ID, &e.Key, &e.Base, &status, &e.StateTime, &e.Created, &expiry, &due, &e.Redrives, &e.Reparks, &lastError, &e.Version,
		&e.Message.Topic, &e.Message.Partition, &e.Message.Offset, &e.Message.Key, &e.Message.Value, &headers, &msgTime, &e.OrderKey}, extra...)...)
	if err != nil {
		return e, err
	}
	if e.Status, err = redrive.ParseStatus(status); err != nil {
		return e, err
	}
	e.StateTime, e.Created, e.Expiry, e.LastError = e.StateTime.UTC(), e.Created.UTC(), time.Duration(expiry), string(lastError)
	if due != nil {
		e.DueAt = due.UTC()
	}
	if msgTime != nil {
		e.Message.Timestamp = msgTime.UTC()
	}
	if headers != nil {
		if e.Message.Headers, err = rowcodec.ParseHeaders(headers); err != nil {
			return e, fmt.Errorf("entry %d: headers: %v", e.ID, err)
		}
	}
	return e, nil
}

func nullTime(t time.Time) *time.Time {
	if t.IsZero() {
		return nil
	}
	return &t
}

// Park inserts the entries whose key is new, in one statement; see
// [redrive.Store.Park].
func (s *Store) Park(ctx context.Context, entries []redrive.Entry) (int, error) {
	if len(entries) == 0 {
		return 0, nil
	}
	if err := s.ready(ctx); err != nil {
		return 0, err
	}
	n := len(entries)
	var (
		keys, bases, statuses, states, topics = make([]string, n), make([]string, n), make([]string, n), make([]string, n), make([]string, n)
		orderKeys                             = make([]string, n)
		stateTimes, created                   = make([]time.Time, n), make([]time.Time, n)
		dues, msgTimes                        = make([]*time.Time, n), make([]*time.Time, n)
		expiries, offsets                     = make([]int64, n), make([]int64, n)
		redrives, reparks, partitions         = make([]int32, n), make([]int32, n), make([]int32, n)
		msgKeys, msgValues, lastErrs          = make([][]byte, n), make([][]byte, n), make([][]byte, n)
		headers                               = make([]*string, n)
	)
	for i, e := range entries {
		keys[i], bases[i], statuses[i], states[i], lastErrs[i], topics[i] = e.Key, e.Base, e.Status.String(), e.State(), []byte(e.LastError), e.Message.Topic
		stateTimes[i], created[i], dues[i], msgTimes[i] = e.StateTime, e.Created, nullTime(e.DueAt), nullTime(e.Message.Timestamp)
		expiries[i], offsets[i], redrives[i], reparks[i], partitions[i] = int64(e.Expiry), e.Message.Offset, int32(e.Redrives), int32(e.Reparks), e.Message.Partition
		msgKeys[i], msgValues[i], orderKeys[i] = e.Message.Key, e.Message.Value, e.OrderKey
		h, ok, err := rowcodec.Headers(e.Message.Headers)
		if err != nil {
			return 0, fmt.Errorf("pgstore: park %q: headers: %w", e.Key, err)
		}
		if ok {
			headers[i] = &h
		}
	}
	tag, err := s.pool.Exec(ctx, `INSERT INTO redrive_entries
		(key, base, status, state, state_time, created, expiry, due_at, redrives, reparks, last_error,
		 topic, partition, "offset", msg_key, msg_value, headers, msg_time, order_key)
		SELECT key, base, status, state, state_time, created, expiry, due_at, redrives, reparks, last_error,
		 topic, partition, "offset", msg_key, msg_value, headers::jsonb, msg_time, order_key
		FROM unnest($1::text[], $2::text[], $3::text[], $4::text[], $5::timestamptz[], $6::timestamptz[], $7::bigint[],
		 $8::timestamptz[], $9::integer[], $10::integer[], $11::bytea[], $12::text[], $13::integer[], $14::bigint[], $15::bytea[], $16::bytea[],
		 $17::text[], $18::timestamptz[], $19::text[])
		 WITH ORDINALITY AS t(key, base, status, state, state_time, created, expiry, due_at, redrives, reparks, last_error,
		 topic, partition, "offset", msg_key, msg_value, headers, msg_time, order_key, ord)
		ORDER BY ord
		ON CONFLICT (key) DO NOTHING`,
		keys, bases, statuses, states, stateTimes, created, expiries, dues, redrives, reparks, lastErrs,
		topics, partitions, offsets, msgKeys, msgValues, headers, msgTimes, orderKeys)
	if err != nil {
		return 0, wrap(fmt.Sprintf("park %d entries", n), err)
	}
	return int(tag.RowsAffected()), nil
}

// Get returns the entry called key.
func (s *Store) Get(ctx context.Context, key string) (redrive.Entry, error) {
	if err := s.ready(ctx); err != nil {
		return redrive.Entry{}, err
	}
	e, err := scan(s.pool.QueryRow(ctx, `SELECT `+columns+` FROM redrive_entries WHERE key = $1`, key))
	if errors.Is(err, pgx.ErrNoRows) {
		return e, fmt.Errorf("%w: %q", redrive.ErrNotFound, key)
	}
	if err != nil {
		return e, wrap(fmt.Sprintf("get %q", key), err)
	}
	return e, nil
}

// Complete moves the entry called key to done; see [redrive.Store.Complete].
// It waits for a sweep that holds the entry to commit, and then completes
// it if it is still pending.
func (s *Store) Complete(ctx context.Context, key string, at time.Time) (redrive.Entry, error) {
	if err := s.ready(ctx); err != nil {
		return redrive.Entry{}, err
	}
	e, err := scan(s.pool.QueryRow(ctx, `UPDATE redrive_entries
		SET status = 'done', state = base || $1, state_time = $2, due_at = NULL, version = version + 1
		WHERE key = $3 AND status IN ('parked', 'retrying')
		RETURNING `+columns, redrive.SuffixDone, at, key))
	if errors.Is(err, pgx.ErrNoRows) {
		e, err := s.Get(ctx, key)
		if err != nil {
			return e, err
		}
		return e, fmt.Errorf("%w: %q is %s", redrive.ErrNotPending, key, e.State())
	}
	if err != nil {
		return e, wrap(fmt.Sprintf("complete %q", key), err)
	}
	return e, nil
}

// Requeue makes the entry called key parked and due at at; see
// [redrive.Store.Requeue]. Like Complete, it waits for a sweep that holds
// the entry to commit.
func (s *Store) Requeue(ctx context.Context, key string, at time.Time) (redrive.Entry, error) {
	if err := s.ready(ctx); err != nil {
		return redrive.Entry{}, err
	}
	e, err := scan(s.pool.QueryRow(ctx, `UPDATE redrive_entries
		SET status = 'parked', state = base, state_time = $1, due_at = $1, version = version + 1
		WHERE key = $2 AND status IN ('parked', 'retrying', 'timed_out')
		RETURNING `+columns, at, key))
	if errors.Is(err, pgx.ErrNoRows) {
		e, err := s.Get(ctx, key)
		if err != nil {
			return e, err
		}
		return e, fmt.Errorf("%w: %q is %s: a done entry is not re-driven", redrive.ErrNotPending, key, e.State())
	}
	if err != nil {
		return e, wrap(fmt.Sprintf("requeue %q", key), err)
	}
	return e, nil
}

// Repark hands a re-driven record's failure back to the entry called key;
// see [redrive.Store.Repark]. Like Complete, it waits for a sweep that
// holds the entry to commit.
func (s *Store) Repark(ctx context.Context, key string, number int, lastError string) (redrive.Entry, bool, error) {
	if err := s.ready(ctx); err != nil {
		return redrive.Entry{}, false, err
	}
	var counted bool
	e, err := scanWith(s.pool.QueryRow(ctx, `WITH old AS (
		    SELECT id, $2 > reparked_number AS counted FROM redrive_entries
		    WHERE key = $1 AND status IN ('parked', 'retrying') FOR UPDATE)
		UPDATE redrive_entries AS e
		SET last_error = $3, reparks = e.reparks + old.counted::int, reparked_number = greatest(e.reparked_number, $2),
		    version = e.version + 1
		FROM old WHERE e.id = old.id
		RETURNING `+prefixed("e.")+`, old.counted`, key, number, []byte(lastError)), &counted)
	if errors.Is(err, pgx.ErrNoRows) {
		e, err := s.Get(ctx, key)
		if err != nil {
			return e, false, err
		}
		return e, false, fmt.Errorf("%w: %q is %s", redrive.ErrNotPending, key, e.State())
	}
	if err != nil {
		return e, false, wrap(fmt.Sprintf("repark %q", key), err)
	}
	return e, counted, nil
}

// prefixed is columns with each name qualified by p.
func prefixed(p string) string {
	var out []string
	for c := range strings.SplitSeq(columns, ",") {
		out = append(out, p+strings.TrimSpace(c))
	}
	return strings.Join(out, ", ")
}

// markTimeout bounds the marking of a claimed batch once fn has run; it
// goes on after the caller's context ends, so that what was published is
// recorded.
const markTimeout = 30 * time.Second

// claimReadTimeout bounds a claim's read of the due entries (its
// transaction's start and its SELECT), which a scheduler makes under
// Run's context, with no deadline: a database that stopped answering
// fails the sweep, which the scheduler logs, instead of holding it for
// ever. A variable for the tests.
var claimReadTimeout = markTimeout

// Claim claims due entries with FOR UPDATE SKIP LOCKED and applies fn's
// changes in the same transaction; see [redrive.Store.Claim].
func (s *Store) Claim(ctx context.Context, now time.Time, limit int, fn func(context.Context, []redrive.Entry) []redrive.Change) (int, []redrive.Change, error) {
	if fn == nil {
		return 0, nil, errors.New("pgstore: claim: nil function")
	}
	if err := s.ready(ctx); err != nil {
		return 0, nil, err
	}
	// The read is bounded: the transaction outlives rctx (pgx's context
	// bounds each call only).
	rctx, rcancel := context.WithTimeout(ctx, claimReadTimeout)
	defer rcancel()
	read := func(err error) error {
		if ctx.Err() == nil && rctx.Err() != nil {
			return fmt.Errorf("pgstore: claim: the database did not answer within %v: %w", claimReadTimeout, err)
		}
		return wrap("claim", err)
	}
	tx, err := s.pool.Begin(rctx)
	if err != nil {
		return 0, nil, read(err)
	}
	wctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), markTimeout)
	defer cancel()
	defer tx.Rollback(wctx)
	rows, err := tx.Query(rctx, `SELECT `+columns+` FROM redrive_entries
		WHERE due_at <= $1 AND status IN ('parked', 'retrying')
		AND (order_key = '' OR NOT EXISTS (SELECT 1 FROM redrive_entries AS b
			WHERE b.order_key = redrive_entries.order_key AND b.order_key <> '' AND b.id < redrive_entries.id
			AND b.status IN ('parked', 'retrying')))
		ORDER BY due_at, id LIMIT $2
		FOR UPDATE SKIP LOCKED`, now, limit)
	if err != nil {
		return 0, nil, read(err)
	}
	var due []redrive.Entry
	for rows.Next() {
		e, err := scan(rows)
		if err != nil {
			rows.Close()
			return 0, nil, read(err)
		}
		due = append(due, e)
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return 0, nil, read(err)
	}
	rcancel()
	if len(due) == 0 {
		return 0, nil, wrap("claim", tx.Commit(wctx))
	}
	changes := fn(ctx, due)
	if len(changes) == 0 {
		return len(due), nil, wrap("claim", tx.Commit(wctx))
	}
	bases := make(map[int64]string, len(due))
	for _, e := range due {
		bases[e.ID] = e.Base
	}
	n := len(changes)
	var (
		ids, versions      = make([]int64, n), make([]int64, n)
		froms, tos, states = make([]string, n), make([]string, n), make([]string, n)
		lastErrs           = make([][]byte, n)
		stateTimes         = make([]time.Time, n)
		dues               = make([]*time.Time, n)
		redrives           = make([]int32, n)
	)
	for i, c := range changes {
		ids[i], versions[i], froms[i], tos[i] = c.ID, c.Version, c.Status.String(), c.To.String()
		states[i], lastErrs[i], stateTimes[i], dues[i], redrives[i] = redrive.StateName(bases[c.ID], c.To), []byte(c.LastError), c.StateTime, nullTime(c.DueAt), int32(c.Redrives)
	}
	rows, err = tx.Query(wctx, `UPDATE redrive_entries AS e
		SET status = c.to_status, state = c.state, state_time = c.state_time, due_at = c.due_at,
		    redrives = c.redrives, last_error = c.last_error, version = e.version + 1
		FROM unnest($1::bigint[], $2::text[], $3::bigint[], $4::text[], $5::text[], $6::timestamptz[], $7::timestamptz[],
		     $8::integer[], $9::bytea[])
		     AS c(id, from_status, from_version, to_status, state, state_time, due_at, redrives, last_error)
		WHERE e.id = c.id AND e.status = c.from_status AND e.version = c.from_version
		RETURNING e.id`, ids, froms, versions, tos, states, stateTimes, dues, redrives, lastErrs)
	if err != nil {
		return len(due), nil, wrap("claim: mark", err)
	}
	done := map[int64]bool{}
	for rows.Next() {
		var id int64
		if err := rows.Scan(&id); err != nil {
			rows.Close()
			return len(due), nil, wrap("claim: mark", err)
		}
		done[id] = true
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return len(due), nil, wrap("claim: mark", err)
	}
	if err := tx.Commit(wctx); err != nil {
		return len(due), nil, wrap("claim: commit", err)
	}
	var applied []redrive.Change
	for _, c := range changes {
		if done[c.ID] {
			applied = append(applied, c)
			delete(done, c.ID) // one change per entry and version at most
		}
	}
	return len(due), applied, nil
}

// List returns entries by ascending ID; see [redrive.Store.List].
func (s *Store) List(ctx context.Context, f redrive.Filter) ([]redrive.Entry, error) {
	if err := s.ready(ctx); err != nil {
		return nil, err
	}
	limit := f.Limit
	if limit <= 0 {
		limit = redrive.DefaultListLimit
	}
	status := ""
	if f.Status != 0 {
		status = f.Status.String()
	}
	rows, err := s.pool.Query(ctx, `SELECT `+columns+` FROM redrive_entries
		WHERE ($1 = '' OR status = $1) AND ($2 = '' OR topic = $2) AND id > $3 ORDER BY id LIMIT $4`, status, f.Topic, f.AfterID, limit)
	if err != nil {
		return nil, wrap("list", err)
	}
	defer rows.Close()
	var out []redrive.Entry
	for rows.Next() {
		e, err := scan(rows)
		if err != nil {
			return nil, wrap("list", err)
		}
		out = append(out, e)
	}
	return out, wrap("list", rows.Err())
}

// LockedKeys returns the order keys with a pending entry of a record of
// topic and partition; see [redrive.KeyLocker].
func (s *Store) LockedKeys(ctx context.Context, topic string, partition int32) ([]string, error) {
	if err := s.ready(ctx); err != nil {
		return nil, err
	}
	op := fmt.Sprintf("locked keys of %s/%d", topic, partition)
	rows, err := s.pool.Query(ctx, `SELECT DISTINCT order_key FROM redrive_entries
		WHERE topic = $1 AND partition = $2 AND order_key <> '' AND status IN ('parked', 'retrying')`, topic, partition)
	if err != nil {
		return nil, wrap(op, err)
	}
	defer rows.Close()
	var out []string
	for rows.Next() {
		var k string
		if err := rows.Scan(&k); err != nil {
			return nil, wrap(op, err)
		}
		out = append(out, k)
	}
	return out, wrap(op, rows.Err())
}

// KeyLocked reports whether the order key has a pending entry; see
// [redrive.KeyLocker].
func (s *Store) KeyLocked(ctx context.Context, orderKey string) (bool, error) {
	if err := s.ready(ctx); err != nil {
		return false, err
	}
	if orderKey == "" {
		return false, nil
	}
	var locked bool
	err := s.pool.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM redrive_entries
		WHERE order_key = $1 AND order_key <> '' AND status IN ('parked', 'retrying'))`, orderKey).Scan(&locked)
	if err != nil {
		return false, wrap(fmt.Sprintf("key locked %q", orderKey), err)
	}
	return locked, nil
}
