package hostconfig

import (
	"fmt"
	"os"
	"strings"
	"time"
)

// Redrive is host.json's redrive section: the scheduled re-drive of parked
// records (package redrive), after the time-based retry processor
// design that re-drives stuck records from a database.
//
//	"redrive": {
//	  "interval": "00:05:00",      // a sweep every 5 minutes
//	  "expiry": "00:05:00",        // parked this long before a re-drive (the park action's)
//	  "retryTimeout": "00:20:00",  // timed out this long after being parked
//	  "maxRedrives": 3,            // 0: no limit but the retry timeout
//	  "retryTopic": "orders-retry",
//	  "replyTopic": "device-replies",
//	  "store": { "kind": "postgres", "connection": "REDRIVE_DATABASE_URL" }
//	}
//
// The database's connection string is never written in host.json: store
// names the environment variable that holds it, as an Azure Functions
// binding names an app setting.
type Redrive struct {
	// Origin says where the section was read, e.g. "redrive (host.json:9:14)".
	Origin string
	// Interval is the time between the starts of two sweeps (default 5m).
	Interval time.Duration
	// Expiry is how long a record parked by onExhausted park waits before
	// its re-drive (default 5m).
	Expiry time.Duration
	// RetryTimeout is how long after being parked a retrying entry is
	// timed out (default 20m).
	RetryTimeout time.Duration
	// MaxRedrives ends the re-drives of an entry after this many; 0 (the
	// default) sets no limit but the retry timeout.
	MaxRedrives int
	// RetryTopic receives re-driven records; "" (the default) sends each
	// back to its own topic.
	RetryTopic string
	// ReplyTopic receives the report of a timed-out entry; "" (the
	// default) reports through hooks and the log only.
	ReplyTopic string
	// ErrorCode is the error code of a reply (default "REDRIVE_TIMEOUT").
	ErrorCode string
	// BatchSize is the number of entries claimed at a time (default 500).
	BatchSize int
	// Store says where entries are kept.
	Store RedriveStore
}

// RedriveStore is the store of the redrive section.
type RedriveStore struct {
	// Kind is "sqlite" (the default: an embedded file, one instance) or
	// "postgres" (several instances).
	Kind string
	// Connection is the NAME of the environment variable that holds the
	// PostgreSQL connection string (postgres only).
	Connection string
	// Schema is the PostgreSQL schema of the tables; "" uses the
	// connection's default (postgres only).
	Schema string
	// Path is the SQLite file (sqlite only; default "redrive.db").
	Path string
	// Origin says where the store was read, for errors.
	Origin string
}

// The store kinds of the redrive section.
const (
	StoreSQLite   = "sqlite"
	StorePostgres = "postgres"
)

// ConnectionString returns the PostgreSQL connection string from the
// environment variable the section names; lookup is os.LookupEnv when nil.
// The error names the variable and where it was named, never a value.
func (s RedriveStore) ConnectionString(lookup func(string) (string, bool)) (string, error) {
	if s.Kind != StorePostgres {
		return "", fmt.Errorf("hostconfig: %s: the %s store has no connection string", s.Origin, s.Kind)
	}
	if lookup == nil {
		lookup = os.LookupEnv
	}
	v, ok := lookup(s.Connection)
	switch {
	case !ok:
		return "", fmt.Errorf("hostconfig: %s: the environment variable %s, which should hold the database's connection string, is not set", s.Origin, s.Connection)
	case strings.TrimSpace(v) == "":
		return "", fmt.Errorf("hostconfig: %s: the environment variable %s, which should hold the database's connection string, is empty", s.Origin, s.Connection)
	}
	return v, nil
}

var redriveFields = []string{"interval", "expiry", "retryTimeout", "maxRedrives", "retryTopic", "replyTopic", "errorCode", "batchSize", "store"}

var storeFields = []string{"kind", "connection", "schema", "path"}

// redrive decodes the redrive section.
func (d *decoder) redrive(n *node) *Redrive {
	r := &Redrive{
		Origin: n.path + " (" + d.pos(n) + ")", Interval: 5 * time.Minute, Expiry: 5 * time.Minute, RetryTimeout: 20 * time.Minute,
		ErrorCode: "REDRIVE_TIMEOUT", BatchSize: 500,
		Store: RedriveStore{Kind: StoreSQLite, Path: "redrive.db", Origin: n.path + " (" + d.pos(n) + ")"},
	}
	f := d.fields(n, append(redriveFields[:len(redriveFields):len(redriveFields)], "connectionString"))
	if f == nil {
		return r
	}
	if m := f["connectionString"]; m != nil {
		d.addKey(m, m.val.path, "a connection string is never written in host.json: put it in an environment variable and name that variable in store.connection")
	}
	positive := func(key string, into *time.Duration) {
		if m := f[key]; m != nil {
			v := d.duration(m.val)
			if v == 0 && !d.failedAt(m.val) {
				d.add(m.val, "want an interval greater than 0")
			}
			*into = v
		}
	}
	positive("interval", &r.Interval)
	positive("expiry", &r.Expiry)
	positive("retryTimeout", &r.RetryTimeout)
	if m := f["maxRedrives"]; m != nil {
		if v, ok := d.integer(m.val); ok {
			if v < 0 {
				d.add(m.val, "%d is below 0: want 0 (no limit but the retry timeout) or a number of re-drives", v)
			}
			r.MaxRedrives = v
		}
	}
	if m := f["batchSize"]; m != nil {
		if v, ok := d.integer(m.val); ok {
			if v <= 0 {
				d.add(m.val, "%d: want a number of entries greater than 0", v)
			}
			r.BatchSize = v
		}
	}
	text := func(key, what string, into *string) {
		if m := f[key]; m != nil {
			switch {
			case !m.val.isText():
				d.add(m.val, "want %s, got %s", what, describe(m.val))
			case strings.TrimSpace(m.val.text) == "":
				d.add(m.val, "empty: want %s", what)
			default:
				*into = m.val.text
			}
		}
	}
	text("retryTopic", "a topic name", &r.RetryTopic)
	text("replyTopic", "a topic name", &r.ReplyTopic)
	if r.RetryTopic != "" {
		r.RetryTopic = d.topic(f["retryTopic"].val)
	}
	if r.ReplyTopic != "" {
		r.ReplyTopic = d.topic(f["replyTopic"].val)
	}
	text("errorCode", "an error code", &r.ErrorCode)
	if m := f["store"]; m != nil {
		r.Store = d.redriveStore(m.val)
	}
	return r
}

// failedAt reports whether a problem was reported at n already.
func (d *decoder) failedAt(n *node) bool {
	line, col := d.lineCol(n.off)
	for _, p := range d.problems {
		if p.Path == n.path && (n.fromEnv() && p.Env == n.env || p.Line == line && p.Col == col) {
			return true
		}
	}
	return false
}

// redriveStore decodes redrive.store: a kind name, or an object.
func (d *decoder) redriveStore(n *node) RedriveStore {
	s := RedriveStore{Kind: StoreSQLite, Path: "redrive.db", Origin: n.path + " (" + d.pos(n) + ")"}
	kinds := []string{StoreSQLite, StorePostgres}
	var kind *node
	f := map[string]*member{}
	switch {
	case n.isText():
		kind = n
	case n.kind == '{':
		if f = d.fields(n, append(storeFields[:len(storeFields):len(storeFields)], "connectionString")); f == nil {
			return s
		}
		if m := f["connectionString"]; m != nil {
			d.addKey(m, m.val.path, "a connection string is never written in host.json: put it in an environment variable and name that variable in connection")
		}
		if m := f["kind"]; m != nil {
			kind = m.val
		}
	default:
		d.add(n, `want "sqlite", "postgres" or an object such as {"kind": "postgres", "connection": "REDRIVE_DATABASE_URL"}, got %s`, describe(n))
		return s
	}
	if kind != nil {
		switch k := canonical(strings.TrimSpace(kind.textOr()), kinds); {
		case !kind.isText():
			d.add(kind, "want sqlite or postgres, got %s", describe(kind))
		case k == "":
			hint := ""
			if sg := suggest(kind.text, kinds); sg != "" {
				hint = ": did you mean " + sg + "?"
			}
			d.add(kind, "unknown store %q%s: want sqlite or postgres", kind.text, hint)
		default:
			s.Kind = k
		}
	}
	only := func(key, kind string) {
		if m := f[key]; m != nil && s.Kind != kind {
			d.addKey(m, m.val.path, "%s only applies to the %s store, not %s", key, kind, s.Kind)
		}
	}
	only("connection", StorePostgres)
	only("schema", StorePostgres)
	only("path", StoreSQLite)
	switch s.Kind {
	case StorePostgres:
		s.Path = ""
		m := f["connection"]
		if m == nil {
			d.add(n, `the postgres store needs connection: the name of the environment variable that holds the connection string, e.g. "connection": "REDRIVE_DATABASE_URL"`)
			break
		}
		switch v := m.val; {
		case !v.isText():
			d.add(v, "want the name of an environment variable, got %s", describe(v))
		case strings.ContainsAny(v.text, ":/=@ ;"):
			d.add(v, "this looks like a connection string itself: it is never written in host.json; write the name of the environment variable that holds it")
		case strings.TrimSpace(v.text) == "":
			d.add(v, "empty: want the name of the environment variable that holds the connection string")
		default:
			s.Connection = v.text
		}
		if m := f["schema"]; m != nil {
			switch v := m.val; {
			case !v.isText() || !isIdentifier(v.text):
				d.add(v, "want a schema name of lower-case letters, digits and _, got %s", describe(v))
			default:
				s.Schema = v.text
			}
		}
	case StoreSQLite:
		if m := f["path"]; m != nil {
			switch v := m.val; {
			case !v.isText() || strings.TrimSpace(v.text) == "":
				d.add(v, "want a file path, got %s", describe(v))
			default:
				s.Path = v.text
			}
		}
	}
	return s
}

// textOr returns a text node's text, else "".
func (n *node) textOr() string {
	if n.isText() {
		return n.text
	}
	return ""
}

func isIdentifier(s string) bool {
	if s == "" || len(s) > 63 || s[0] >= '0' && s[0] <= '9' {
		return false
	}
	for _, r := range s {
		if !(r == '_' || r >= 'a' && r <= 'z' || r >= '0' && r <= '9') {
			return false
		}
	}
	return true
}

// Explain describes the re-drive in words.
func (r *Redrive) Explain() string {
	var b strings.Builder
	fmt.Fprintf(&b, "Re-drive: a sweep every %v. A parked record is re-published after %v", show(r.Interval), show(r.Expiry))
	if r.RetryTopic != "" {
		fmt.Fprintf(&b, " to topic %q", r.RetryTopic)
	} else {
		b.WriteString(" to its own topic")
	}
	fmt.Fprintf(&b, ", again every expiry until it is completed. One that is not is timed out once %v have passed since it was parked", show(r.RetryTimeout))
	if r.MaxRedrives > 0 {
		fmt.Fprintf(&b, ", or one expiry after its re-drive number %d, whichever comes first", r.MaxRedrives)
	}
	fmt.Fprintf(&b, " (a record parked for longer is re-driven once, then gets one expiry)")
	if r.ReplyTopic != "" {
		fmt.Fprintf(&b, ", and reported to topic %q with error code %s", r.ReplyTopic, r.ErrorCode)
	} else {
		b.WriteString(", and reported through the scheduler's hooks and log")
	}
	b.WriteString(".\n")
	switch r.Store.Kind {
	case StorePostgres:
		fmt.Fprintf(&b, "Entries are kept in PostgreSQL; the connection string is read from the environment variable %s.\n", r.Store.Connection)
	default:
		fmt.Fprintf(&b, "Entries are kept in the SQLite file %s (one instance).\n", r.Store.Path)
	}
	return b.String()
}
