package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/redeliver-go/redeliver/redrive"
	"github.com/redeliver-go/redeliver/redrive/pgstore"
	"github.com/redeliver-go/redeliver/redrive/sqlitestore"
	"github.com/redeliver-go/redeliver/stream"
)

// seedStore fills an empty store with one entry in each state, at times
// around fixedNow, inserted in this order (so with IDs 1 to 5):
//
//	1 orders/0/5     parked by the park action 2m ago, due in 3m
//	2 orders/1/12    re-driven once 1m ago, retrying, due in 4m
//	3 orders/1/13    timed out after 3 re-drives
//	4 payments/0/7   parked by the park action, due in 1m
//	5 device-42      an application's NONCE_PUBLISHED, completed
func seedStore(t *testing.T, st redrive.Store) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	park := func(topic string, p int32, off int64, created, due time.Time, lastErr string) redrive.Entry {
		return redrive.Entry{Key: redrive.RecordKey(topic, p, off), Base: redrive.ParkedState, Status: redrive.Parked,
			StateTime: created, Created: created, Expiry: 5 * time.Minute, DueAt: due, LastError: lastErr,
			Message: stream.Record{Topic: topic, Partition: p, Offset: off, Key: []byte("k"), Value: []byte("v"), Timestamp: created.Add(-time.Second)}}
	}
	long := "checkpoint: retries exhausted after 3 retries: payment service: 503 Service Unavailable\n(upstream: connection reset by peer while reading the response body of POST /charges)"
	es := []redrive.Entry{
		park("orders", 0, 5, fixedNow.Add(-2*time.Minute), fixedNow.Add(3*time.Minute), "payment service: 503"),
		park("orders", 1, 12, fixedNow.Add(-10*time.Minute), fixedNow.Add(-5*time.Minute), long),
		park("orders", 1, 13, fixedNow.Add(-30*time.Minute), fixedNow.Add(-25*time.Minute), "payment service: 503"),
		park("payments", 0, 7, fixedNow.Add(-4*time.Minute), fixedNow.Add(time.Minute), "card declined: insufficient funds"),
		{Key: "device-42", Base: "NONCE_PUBLISHED", Status: redrive.Parked, StateTime: fixedNow.Add(-time.Hour), Created: fixedNow.Add(-time.Hour),
			Expiry: 10 * time.Minute, DueAt: fixedNow.Add(-50 * time.Minute), Message: stream.Record{Topic: "onboarding", Offset: 99}},
	}
	for _, x := range es { // one at a time, so that the IDs follow the list
		if _, err := st.Park(ctx, []redrive.Entry{x}); err != nil {
			t.Fatal(err)
		}
	}
	at := fixedNow.Add(-time.Minute)
	_, applied, err := st.Claim(ctx, at, 10, func(_ context.Context, due []redrive.Entry) []redrive.Change {
		var cs []redrive.Change
		for _, x := range due {
			switch x.Key {
			case "orders/1/12":
				cs = append(cs, redrive.Change{ID: x.ID, Status: x.Status, Version: x.Version, To: redrive.Retrying,
					StateTime: at, DueAt: fixedNow.Add(4 * time.Minute), Redrives: 1, LastError: x.LastError})
			case "orders/1/13":
				cs = append(cs, redrive.Change{ID: x.ID, Status: x.Status, Version: x.Version, To: redrive.TimedOut,
					StateTime: at, Redrives: 3, LastError: "retry timeout 20m0s passed since it was parked, after 3 re-drives"})
			}
		}
		return cs
	})
	if err != nil || len(applied) != 2 {
		t.Fatalf("seeding: %d changes applied, %v", len(applied), err)
	}
	if _, err := st.Complete(ctx, "device-42", fixedNow.Add(-40*time.Minute)); err != nil {
		t.Fatal(err)
	}
}

// parkedCases are the golden cases of the parked command. In args, $STORE
// stands for the store's flags and $DIR for the test's directory; a case
// may run several commands on the same store, one after the other.
var parkedCases = []struct {
	name    string
	cmds    [][]string
	environ []string
	code    int // of the last command
	pg      bool
	more    bool // seedMore after seedStore
}{
	{"parked_list", [][]string{{"parked", "list", "$STORE"}}, nil, 0, true, false},
	{"parked_list_all", [][]string{{"parked", "list", "$STORE", "-status", "all", "-topic", "orders"}}, nil, 0, false, false},
	{"parked_list_partition_json", [][]string{{"parked", "list", "$STORE", "-topic", "orders", "-partition", "1", "-json"}}, nil, 0, true, false},
	{"parked_list_keys", [][]string{{"parked", "list", "$STORE", "device-42", "nope", "-id", "4,77"}}, nil, 1, false, false},
	{"parked_list_limit", [][]string{{"parked", "list", "$STORE", "-limit", "2"}}, nil, 0, false, false},
	{"parked_list_function", [][]string{{"parked", "list", "-config", "testdata/parked.json", "-function", "Payments"}},
		[]string{"AzureFunctionsJobHost__redrive__store__path=$DIR/redrive.db"}, 0, false, false},
	{"parked_requeue", [][]string{{"parked", "requeue", "$STORE", "orders/1/13", "device-42"}, {"parked", "list", "$STORE", "-topic", "orders"}}, nil, 0, true, false},
	{"parked_requeue_all", [][]string{{"parked", "requeue", "$STORE", "-status", "timed_out,retrying", "-all"}, {"parked", "list", "$STORE", "-status", "parked"}}, nil, 0, false, false},
	{"parked_complete", [][]string{{"parked", "complete", "$STORE", "-id", "1,3"}, {"parked", "list", "$STORE", "-id", "1,3", "-json"}}, nil, 0, true, false},
	{"parked_complete_function", [][]string{{"parked", "complete", "-config", "testdata/parked.json", "-function", "payments", "-all", "-json"}},
		[]string{"AzureFunctionsJobHost__redrive__store__path=$DIR/redrive.db"}, 0, false, false},
	{"parked_complete_no_all", [][]string{{"parked", "complete", "$STORE", "-topic", "orders"}}, nil, 2, false, false},
	{"parked_nothing_selected", [][]string{{"parked", "requeue", "$STORE", "-topic", "refunds", "-all"}}, nil, 0, false, false},
	{"parked_function_unknown", [][]string{{"parked", "list", "-config", "testdata/parked.json", "-function", "paymnts"}},
		[]string{"AzureFunctionsJobHost__redrive__store__path=$DIR/redrive.db"}, 1, false, false},
	{"parked_function_no_config", [][]string{{"parked", "list", "$STORE", "-function", "orders"}}, nil, 2, false, false},
	{"parked_no_store", [][]string{{"parked", "list"}}, nil, 2, false, false},
	{"parked_store_from_env", [][]string{{"parked", "list", "-topic", "payments"}}, []string{"REDELIVER_STORE=sqlite:$DIR/redrive.db"}, 0, false, false},
	{"parked_missing_file", [][]string{{"parked", "list", "-store", "sqlite:$DIR/none.db"}}, nil, 1, false, false},
	{"parked_bad_store", [][]string{{"parked", "list", "-store", "mysql://app:secret@db/redrive"}}, nil, 1, false, false},
	{"parked_bad_status", [][]string{{"parked", "list", "$STORE", "-status", "parkd"}}, nil, 2, false, false},
	{"parked_unknown_verb", [][]string{{"parked", "remove", "orders/0/5"}}, nil, 2, false, false},
	{"parked_no_verb", [][]string{{"parked"}}, nil, 2, false, false},
	{"parked_list_multiplied", [][]string{{"parked", "list", "$STORE"}, {"parked", "list", "$STORE", "-topic", "orders", "-partition", "0", "-json"}}, nil, 0, true, true},
}

// seedMore adds to seedStore's entries what an operator must see: entry 2's
// re-drive failed again and was handed back to it (a re-park), and a
// re-drive of entry 1 that a consumer dropping the re-drive's headers
// parked as entry 6, of its own.
func seedMore(t *testing.T, st redrive.Store) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if _, _, err := st.Repark(ctx, "orders/1/12", 1, "re-drive 1 failed again: payment service: 503"); err != nil {
		t.Fatal(err)
	}
	at := fixedNow.Add(-30 * time.Second)
	copyOf := redrive.Entry{Key: "orders/0/21", Base: redrive.ParkedState, Status: redrive.Parked, StateTime: at, Created: at,
		Expiry: 5 * time.Minute, DueAt: at.Add(5 * time.Minute), LastError: "payment service: 503",
		Message: stream.Record{Topic: "orders", Partition: 0, Offset: 21, Value: []byte("v"), Headers: []stream.Header{
			{Key: stream.HeaderTopic, Value: []byte("orders")}, {Key: stream.HeaderPartition, Value: []byte("0")}, {Key: stream.HeaderOffset, Value: []byte("5")}}}}
	if _, err := st.Park(ctx, []redrive.Entry{copyOf}); err != nil {
		t.Fatal(err)
	}
}

// TestParkedGolden runs the parked command on a real SQLite store, and on
// PostgreSQL when REDELIVER_POSTGRES_URL names a server (the cases marked
// pg, with golden files of their own).
func TestParkedGolden(t *testing.T) {
	for _, tc := range parkedCases {
		t.Run("sqlite/"+tc.name, func(t *testing.T) {
			dir := t.TempDir()
			st, err := sqlitestore.Open(context.Background(), filepath.Join(dir, "redrive.db"))
			if err != nil {
				t.Fatal(err)
			}
			seedStore(t, st)
			if tc.more {
				seedMore(t, st)
			}
			st.Close()
			got, code := runParkedCase(tc.cmds, tc.environ, map[string]string{"$DIR": dir}, []string{"-store", "sqlite:$DIR/redrive.db"})
			checkGolden(t, tc.name, got, code, tc.code)
		})
	}
	url := os.Getenv("REDELIVER_POSTGRES_URL")
	for _, tc := range parkedCases {
		if !tc.pg {
			continue
		}
		t.Run("postgres/"+tc.name, func(t *testing.T) {
			if url == "" {
				t.Skip("REDELIVER_POSTGRES_URL is not set: start a server with `bash integration/postgres.sh start` and export the line it prints")
			}
			schema := pgSchema(t, url)
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			st, err := pgstore.Open(ctx, url, pgstore.WithSchema(schema))
			if err != nil {
				t.Fatal(err)
			}
			seedStore(t, st)
			if tc.more {
				seedMore(t, st)
			}
			st.Close()
			got, code := runParkedCase(tc.cmds, tc.environ, map[string]string{"$REDELIVER_POSTGRES_URL": url, "$SCHEMA": schema},
				[]string{"-store", "$REDELIVER_POSTGRES_URL", "-schema", "$SCHEMA"})
			checkGolden(t, tc.name+"_pg", got, code, tc.code)
		})
	}
}

// runParkedCase runs the commands of a case with $STORE replaced by
// storeArgs and the placeholders of vars by their values, and returns the
// output with the values turned back into their placeholders.
func runParkedCase(cmds [][]string, environ []string, vars map[string]string, storeArgs []string) (string, int) {
	expand := func(s string) string {
		for k, v := range vars {
			s = strings.ReplaceAll(s, k, v)
		}
		return s
	}
	var env []string
	for _, kv := range environ {
		env = append(env, expand(kv))
	}
	var out strings.Builder
	code := 0
	for _, c := range cmds {
		var args []string
		for _, a := range c {
			if a == "$STORE" {
				for _, s := range storeArgs {
					args = append(args, expand(s))
				}
				continue
			}
			args = append(args, expand(a))
		}
		var got string
		got, code = runCLI(args, env...)
		out.WriteString(got)
	}
	s := out.String()
	for k, v := range vars {
		s = strings.ReplaceAll(s, v, k)
	}
	return s, code
}

func checkGolden(t *testing.T, name, got string, code, wantCode int) {
	t.Helper()
	if code != wantCode {
		t.Errorf("exit status %d, want %d\n%s", code, wantCode, got)
	}
	file := filepath.Join("testdata", name+".golden")
	if *update {
		if err := os.WriteFile(file, []byte(got), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(file)
	if err != nil {
		t.Fatalf("%v (run go test -update to write it)", err)
	}
	if got != string(want) {
		t.Errorf("output differs from %s:\n--- got\n%s--- want\n%s", file, got, want)
	}
}

// pgSchema returns a fresh schema name, dropped when the test ends.
func pgSchema(t *testing.T, url string) string {
	b := make([]byte, 6)
	rand.Read(b)
	name := "cli_" + hex.EncodeToString(b)
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		conn, err := pgx.Connect(ctx, url)
		if err != nil {
			t.Logf("dropping schema %s: %v", name, err)
			return
		}
		defer conn.Close(ctx)
		if _, err := conn.Exec(ctx, `DROP SCHEMA IF EXISTS `+pgx.Identifier{name}.Sanitize()+` CASCADE`); err != nil {
			t.Logf("dropping schema %s: %v", name, err)
		}
	})
	return name
}

// TestParkedSQLitePathAsNamed checks that -store sqlite:PATH opens the file
// named, even when its name holds a '?' or a '#', and creates no other.
func TestParkedSQLitePathAsNamed(t *testing.T) {
	dir := t.TempDir()
	st, err := sqlitestore.Open(context.Background(), filepath.Join(dir, "plain.db"))
	if err != nil {
		t.Fatal(err)
	}
	seedStore(t, st)
	st.Close()
	odd := filepath.Join(dir, "re?drive#1.db")
	if err := os.Rename(filepath.Join(dir, "plain.db"), odd); err != nil {
		t.Fatal(err)
	}
	got, code := runCLI([]string{"parked", "list", "-store", "sqlite:" + odd})
	if code != 0 || !strings.Contains(got, "orders/0/5") || !strings.Contains(got, "payments/0/7") {
		t.Errorf("exit %d, want 0 and the seeded entries\n%s", code, got)
	}
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		if e.Name() != filepath.Base(odd) {
			t.Errorf("the tool created %s beside the store", e.Name())
		}
	}
}
