package hostconfig_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/redeliver-go/redeliver/checkpoint"
	"github.com/redeliver-go/redeliver/hostconfig"
	"github.com/redeliver-go/redeliver/stream"
)

func TestRedriveSection(t *testing.T) {
	cfg, err := noEnv.Parse("host.json", []byte(`{
  "version": "2.0",
  "checkpointRetryPolicy": { "retryCount": 2, "sleepDuration": "00:00:01", "onExhausted": "park" },
  "redrive": {
    "interval": "00:05:00", "expiry": "5m", "retryTimeout": "00:20:00", "maxRedrives": 3,
    "retryTopic": "orders-retry", "replyTopic": "device-replies", "errorCode": "E42", "batchSize": 200,
    "store": { "kind": "postgres", "connection": "REDRIVE_DATABASE_URL", "schema": "redrive" },
  },
}`))
	if err != nil {
		t.Fatal(err)
	}
	r := cfg.Redrive
	if r == nil {
		t.Fatal("no Redrive")
	}
	want := hostconfig.Redrive{Origin: r.Origin, Interval: 5 * time.Minute, Expiry: 5 * time.Minute, RetryTimeout: 20 * time.Minute, MaxRedrives: 3,
		RetryTopic: "orders-retry", ReplyTopic: "device-replies", ErrorCode: "E42", BatchSize: 200,
		Store: hostconfig.RedriveStore{Kind: "postgres", Connection: "REDRIVE_DATABASE_URL", Schema: "redrive", Origin: r.Store.Origin}}
	if *r != want {
		t.Fatalf("Redrive = %+v\nwant      %+v", *r, want)
	}
	if !strings.Contains(r.Origin, "host.json:4:") || !strings.Contains(r.Store.Origin, "host.json:7:") {
		t.Fatalf("origins %q %q", r.Origin, r.Store.Origin)
	}
	if cfg.Host.OnExhausted.Action != hostconfig.ActionPark || cfg.Host.OnExhausted.Action.String() != "park" {
		t.Fatalf("onExhausted = %v", cfg.Host.OnExhausted.Action)
	}
	if got := cfg.Explain(); !strings.Contains(got, "parked for a re-drive") || !strings.Contains(got, "REDRIVE_DATABASE_URL") || !strings.Contains(got, `"orders-retry"`) {
		t.Fatalf("Explain:\n%s", got)
	}

	env := map[string]string{"REDRIVE_DATABASE_URL": "postgres://u:pw@127.0.0.1/db"}
	lookup := func(k string) (string, bool) { v, ok := env[k]; return v, ok }
	if s, err := r.Store.ConnectionString(lookup); err != nil || s != env["REDRIVE_DATABASE_URL"] {
		t.Fatalf("ConnectionString = %q, %v", s, err)
	}
	delete(env, "REDRIVE_DATABASE_URL")
	if _, err := r.Store.ConnectionString(lookup); err == nil || !strings.Contains(err.Error(), "REDRIVE_DATABASE_URL") || !strings.Contains(err.Error(), "not set") {
		t.Fatalf("ConnectionString with the variable unset: %v", err)
	}

	// park needs the action from package redrive.
	if _, err := cfg.Options(nil); err == nil || !strings.Contains(err.Error(), "park") {
		t.Fatalf("Options with onExhausted park and no park action: %v", err)
	}
	parked := 0
	park := func(context.Context, *stream.Batch, *checkpoint.ExhaustedError) error { parked++; return nil }
	opts, err := cfg.Options(nil, hostconfig.Park(park))
	if err != nil || len(opts) != 2 {
		t.Fatalf("Options with Park: %d options, %v", len(opts), err)
	}
}

func TestRedriveDefaults(t *testing.T) {
	cfg, err := noEnv.Parse("host.json", []byte(`{"redrive": {}}`))
	if err != nil {
		t.Fatal(err)
	}
	r := cfg.Redrive
	if r.Interval != 5*time.Minute || r.Expiry != 5*time.Minute || r.RetryTimeout != 20*time.Minute || r.MaxRedrives != 0 ||
		r.BatchSize != 500 || r.ErrorCode != "REDRIVE_TIMEOUT" || r.Store.Kind != "sqlite" || r.Store.Path != "redrive.db" {
		t.Fatalf("defaults: %+v", r)
	}
	if cfg, _ := noEnv.Parse("host.json", []byte(`{}`)); cfg.Redrive != nil {
		t.Fatal("Redrive set without a section")
	}
	// store=postgres is short for store__kind=postgres, so a connection
	// beside it completes it.
	cfg, err = withEnv("AzureFunctionsJobHost__redrive__interval=00:00:30", "AzureFunctionsJobHost__redrive__store=postgres",
		"AzureFunctionsJobHost__redrive__store__connection=PGURL").Parse("host.json", []byte(`{"redrive": {"store": "sqlite"}}`))
	if err != nil || cfg.Redrive.Store.Kind != "postgres" || cfg.Redrive.Store.Connection != "PGURL" {
		t.Fatalf("environment overrides: %+v, %v", cfg.Redrive, err)
	}
	cfg, err = withEnv("AzureFunctionsJobHost__redrive__interval=00:00:30", "AzureFunctionsJobHost__redrive__store__kind=postgres",
		"AzureFunctionsJobHost__redrive__store__connection=PGURL").Parse("host.json", []byte(`{"redrive": {"store": {"kind": "sqlite"}}}`))
	if err != nil || cfg.Redrive.Interval != 30*time.Second || cfg.Redrive.Store.Kind != "postgres" || cfg.Redrive.Store.Connection != "PGURL" {
		t.Fatalf("environment overrides: %+v, %v", cfg.Redrive, err)
	}
}

func TestRedriveInvalid(t *testing.T) {
	for _, c := range []struct{ name, doc, want string }{
		{"connection string in the file", `{"redrive": {
  "store": {"kind": "postgres", "connection": "postgres://u:pw@db/x"}}}`,
			`host.json:2:47: redrive.store.connection: this looks like a connection string itself`},
		{"connectionString field", `{"redrive": {"store": {"kind": "postgres", "connectionString": "x", "connection": "X"}}}`,
			`host.json:1:44: redrive.store.connectionString: a connection string is never written in host.json`},
		{"connectionString at the top", `{"redrive": {"connectionString": "x"}}`,
			`host.json:1:14: redrive.connectionString: a connection string is never written`},
		{"postgres without connection", `{"redrive": {"store": {"kind": "postgres"}}}`,
			`host.json:1:23: redrive.store: the postgres store needs connection`},
		{"misspelt field", `{"redrive": {"retryTimeot": "00:20:00"}}`,
			`host.json:1:14: redrive: unknown field "retryTimeot": did you mean retryTimeout?`},
		{"misspelt kind", `{"redrive": {"store": "postgress"}}`,
			`host.json:1:23: redrive.store: unknown store "postgress": did you mean postgres?`},
		{"zero interval", `{"redrive": {"interval": "0s"}}`,
			`host.json:1:26: redrive.interval: want an interval greater than 0`},
		{"bad interval", `{"redrive": {"interval": 300}}`,
			`host.json:1:26: redrive.interval: want a string such as "00:00:05" or "5s", got the number 300 (a bare number is ambiguous)`},
		{"negative maxRedrives", `{"redrive": {"maxRedrives": -1}}`,
			`host.json:1:29: redrive.maxRedrives: -1 is below 0`},
		{"path for postgres", `{"redrive": {"store": {"kind": "postgres", "connection": "X", "path": "a.db"}}}`,
			`host.json:1:63: redrive.store.path: path only applies to the sqlite store, not postgres`},
		{"bad schema", `{"redrive": {"store": {"kind": "postgres", "connection": "X", "schema": "a;b"}}}`,
			`host.json:1:73: redrive.store.schema: want a schema name`},
		{"misspelt park", `{"checkpointRetryPolicy": {"retryCount": 1, "sleepDuration": "1s", "onExhausted": "prak"}}`,
			`unknown action "prak": did you mean park?`},
		{"misspelt section", `{"redrvie": {}}`,
			`host.json:1:2: "redrvie" is not a section redeliver reads: did you mean redrive?`},
	} {
		t.Run(c.name, func(t *testing.T) {
			_, err := noEnv.Parse("host.json", []byte(c.doc))
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("error:\n%v\nwant it to contain:\n%s", err, c.want)
			}
		})
	}
}

// Explain says when an entry is timed out as the scheduler does it: the
// retry timeout since it was parked, or one expiry after its last allowed
// re-drive, and how it is reported.
func TestRedriveExplain(t *testing.T) {
	cfg, err := noEnv.Parse("host.json", []byte(`{"redrive": {"interval": "00:01:00", "expiry": "00:05:00", "retryTimeout": "00:20:00", "maxRedrives": 2}}`))
	if err != nil {
		t.Fatal(err)
	}
	want := "Re-drive: a sweep every 1m0s. A parked record is re-published after 5m0s to its own topic, again every expiry until it is completed. " +
		"One that is not is timed out once 20m0s have passed since it was parked, or one expiry after its re-drive number 2, whichever comes first " +
		"(a record parked for longer is re-driven once, then gets one expiry), and reported through the scheduler's hooks and log.\n" +
		"Entries are kept in the SQLite file redrive.db (one instance).\n"
	if got := cfg.Redrive.Explain(); got != want {
		t.Errorf("Explain =\n%s\nwant\n%s", got, want)
	}
}
