package main

import (
	"cmp"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/redeliver-go/redeliver/hostconfig"
	"github.com/redeliver-go/redeliver/redrive"
	"github.com/redeliver-go/redeliver/redrive/pgstore"
	"github.com/redeliver-go/redeliver/redrive/sqlitestore"
)

// storeEnv names the environment variable -store defaults to, so that a
// PostgreSQL URL with a password need not be written on the command line.
const storeEnv = "REDELIVER_STORE"

// parkedVerbs are the subcommands of parked, with their usage.
var parkedVerbs = []struct{ name, args, short string }{
	{"list", "[selection flags] [-limit n] [-json] [key...]", "list entries of the re-drive store"},
	{"requeue", "[selection flags] [-json] key... | -all", "make entries parked again and due now: the next sweep re-drives them"},
	{"complete", "[selection flags] [-json] key... | -all", "mark entries done: they are not re-driven any more"},
}

const parkedDoc = `The store is given by -store, or by the redrive section of the host.json
given with -config:

  -store sqlite:PATH           an SQLite file (the file must exist)
  -store postgres://...        a PostgreSQL URL (postgresql:// too); -schema
                               names the schema of the tables, if not the
                               connection's default
  $` + storeEnv + `             the default of -store, so that a password
                               need not be on the command line

With -config and no -store, the store is the one host.json's redrive section
names: its SQLite path (relative to the current directory, as the host opens
it) or the environment variable holding the PostgreSQL connection string.
The tool does not create or migrate a store: it reads and changes the one
the host uses.

Entries are selected by key (the arguments; the park action's keys are
topic/partition/offset), by -id, or by the filters -function (the topic of
the function's trigger in -config), -topic, -partition and -status (a comma
list of parked, retrying, timed_out, done, or all). list shows entries that
are not done by default; requeue acts on parked, retrying and timed-out
entries, complete on parked and retrying ones. requeue and complete need
keys, -id or -all, so that a filter alone never changes every entry.

The exit status is 0 when every selected entry was listed or changed, 1 when
the store cannot be read or an entry is missing or cannot be changed (a done
entry is not requeued; a done or timed-out one is not completed), 2 on a
usage error.`

func runParked(args []string, e env) int {
	if len(args) == 0 || args[0] == "-h" || args[0] == "-help" || args[0] == "--help" || args[0] == "help" {
		w, code := e.stderr, exitUsage
		if len(args) > 0 {
			w, code = e.stdout, exitOK
		}
		fmt.Fprintf(w, "usage: redeliver parked <list|requeue|complete> [flags] [key...]\n\nThe entries of the re-drive store: parked records and where they stand.\n\n")
		for _, v := range parkedVerbs {
			fmt.Fprintf(w, "\tparked %-9s %s\n", v.name, v.short)
		}
		fmt.Fprintf(w, "\n%s\n\nUse \"redeliver parked <verb> -h\" for a verb's flags.\n", parkedDoc)
		return code
	}
	for _, v := range parkedVerbs {
		if v.name == args[0] {
			return runParkedVerb(v.name, args[1:], e)
		}
	}
	fmt.Fprintf(e.stderr, "redeliver parked %s: unknown verb: want list, requeue or complete\nRun 'redeliver parked -h' for usage.\n", args[0])
	return exitUsage
}

// selection is what the flags of a parked verb select.
type selection struct {
	keys      []string
	ids       []int64
	topic     string
	partition int // -1 for all
	statuses  []redrive.Status
	limit     int // 0 for no limit
}

func runParkedVerb(verb string, args []string, e env) int {
	var v struct{ name, args, short string }
	for _, v = range parkedVerbs {
		if v.name == verb {
			break
		}
	}
	fs := flag.NewFlagSet("parked "+verb, flag.ContinueOnError)
	fs.SetOutput(e.stderr)
	fs.Usage = func() {
		fmt.Fprintf(fs.Output(), "usage: redeliver parked %s %s\n\n%s.\n\n%s\n\nFlags:\n", v.name, v.args, strings.ToUpper(v.short[:1])+v.short[1:], parkedDoc)
		fs.PrintDefaults()
	}
	store := fs.String("store", "", "the re-drive `store`: sqlite:PATH or postgres://... (default $"+storeEnv+")")
	schema := fs.String("schema", "", "the PostgreSQL `schema` of the tables (default: the connection's)")
	config := fs.String("config", "", "a `host.json`: its redrive section's store when -store is not given, and the triggers of -function")
	function := fs.String("function", "", "entries of the topic of this `function`'s trigger (needs -config)")
	topic := fs.String("topic", "", "entries of records from this `topic`")
	partition := fs.Int("partition", -1, "entries of records from this `partition` (default all)")
	status := fs.String("status", "", "comma-separated `statuses`: parked, retrying, timed_out, done, or all")
	idList := fs.String("id", "", "comma-separated entry `ids`")
	timeout := fs.Duration("timeout", 30*time.Second, "how long to wait for the store")
	asJSON := fs.Bool("json", false, "print the result as JSON")
	var limit *int
	var all *bool
	if verb == "list" {
		limit = fs.Int("limit", 100, "show at most `n` entries; 0 shows all")
	} else {
		all = fs.Bool("all", false, "act on every entry the filters select")
	}
	pos, code := parseArgs(fs, args, e)
	if code >= 0 {
		return code
	}

	sel := selection{keys: pos, partition: *partition, topic: *topic}
	if limit != nil {
		sel.limit = *limit
	}
	var err error
	if sel.ids, err = parseIDs(*idList); err != nil {
		return usageError(fs, "-id: %v", err)
	}
	def := map[string][]redrive.Status{
		"list":     {redrive.Parked, redrive.Retrying, redrive.TimedOut},
		"requeue":  {redrive.Parked, redrive.Retrying, redrive.TimedOut},
		"complete": {redrive.Parked, redrive.Retrying},
	}[verb]
	if len(sel.keys) > 0 || len(sel.ids) > 0 {
		// Entries named by key or id are shown or tried whatever their
		// status, unless -status says otherwise: the store then says why
		// one cannot be changed.
		def = []redrive.Status{redrive.Parked, redrive.Retrying, redrive.TimedOut, redrive.Done}
	}
	if sel.statuses, err = parseStatuses(*status, def); err != nil {
		return usageError(fs, "-status: %v", err)
	}
	storeSpec := *store
	if storeSpec == "" && *config == "" {
		storeSpec = lookupEnv(e, storeEnv)
	}
	filtered := *function != "" || *topic != "" || *partition >= 0 || *status != ""
	switch {
	case sel.limit < 0:
		return usageError(fs, "-limit must be 0 (all) or more")
	case *timeout <= 0:
		return usageError(fs, "-timeout must be more than 0")
	case *partition < -1:
		return usageError(fs, "-partition must be 0 or more")
	case *function != "" && *config == "":
		return usageError(fs, "-function needs -config (the host.json that binds the function to its topic)")
	case *function != "" && *topic != "":
		return usageError(fs, "give -function or -topic, not both")
	case storeSpec == "" && *config == "":
		return usageError(fs, "no store: give -store sqlite:PATH or -store postgres://..., set $%s, or give -config host.json", storeEnv)
	case all != nil && *all && (len(sel.keys) > 0 || len(sel.ids) > 0):
		return usageError(fs, "give keys, -id or -all, not several")
	case all != nil && !*all && len(sel.keys) == 0 && len(sel.ids) == 0:
		if filtered {
			return usageError(fs, "the filters select entries but do not say to change them all: add -all")
		}
		return usageError(fs, "want the keys of the entries to %s, -id, or -all with filters", verb)
	}

	var cfg *hostconfig.Config
	if *config != "" {
		data, err := os.ReadFile(*config)
		if err != nil {
			fmt.Fprintf(e.stderr, "redeliver parked %s: %v\n", verb, err)
			return exitProblems
		}
		if cfg, err = (hostconfig.Loader{Environ: e.environ}).Parse(*config, data); err != nil {
			fmt.Fprintf(e.stderr, "%v\n%s has problems: run 'redeliver check %s'\n", err, *config, *config)
			return exitProblems
		}
		if *function != "" {
			t, ok := cfg.Trigger(*function)
			if !ok {
				hint := ""
				if n := nearest(*function, cfg.FunctionNames()); n != "" {
					hint = fmt.Sprintf(" (did you mean %s?)", n)
				}
				fmt.Fprintf(e.stderr, "redeliver parked %s: %s has no trigger for function %s%s: give -topic\n", verb, *config, *function, hint)
				return exitProblems
			}
			sel.topic = t.Topic
		}
	}

	ctx, cancel := context.WithTimeout(context.Background(), *timeout)
	defer cancel()
	st, name, closeStore, err := openStore(ctx, storeSpec, *schema, cfg, e)
	if err != nil {
		fmt.Fprintf(e.stderr, "redeliver parked %s: %v\n", verb, err)
		return exitProblems
	}
	defer closeStore()

	switch verb {
	case "list":
		return parkedList(ctx, st, name, sel, *asJSON, e)
	default:
		return parkedChange(ctx, st, verb, sel, *asJSON, e)
	}
}

func lookupEnv(e env, name string) string {
	for _, kv := range e.environ() {
		if k, v, ok := strings.Cut(kv, "="); ok && k == name {
			return v
		}
	}
	return ""
}

func parseIDs(s string) ([]int64, error) {
	if s == "" {
		return nil, nil
	}
	var ids []int64
	for f := range strings.SplitSeq(s, ",") {
		id, err := strconv.ParseInt(strings.TrimSpace(f), 10, 64)
		if err != nil || id <= 0 {
			return nil, fmt.Errorf("%q is not an entry id (a number above 0)", f)
		}
		ids = append(ids, id)
	}
	return ids, nil
}

func parseStatuses(s string, def []redrive.Status) ([]redrive.Status, error) {
	if s == "" {
		return def, nil
	}
	if s == "all" {
		return []redrive.Status{redrive.Parked, redrive.Retrying, redrive.TimedOut, redrive.Done}, nil
	}
	var out []redrive.Status
	for f := range strings.SplitSeq(s, ",") {
		st, err := redrive.ParseStatus(strings.TrimSpace(f))
		if err != nil {
			return nil, fmt.Errorf("unknown status %q: want parked, retrying, timed_out, done or all", f)
		}
		if !slices.Contains(out, st) {
			out = append(out, st)
		}
	}
	return out, nil
}

// openStore opens the store spec names, or else the one of cfg's redrive
// section. It returns the store, a name for it that holds no password, and
// its closer.
func openStore(ctx context.Context, spec, schema string, cfg *hostconfig.Config, e env) (redrive.Store, string, func(), error) {
	if spec == "" {
		if cfg.Redrive == nil {
			return nil, "", nil, fmt.Errorf("%s has no redrive section, so it names no store: give -store", cfg.File)
		}
		s := cfg.Redrive.Store
		switch s.Kind {
		case hostconfig.StorePostgres:
			url, err := s.ConnectionString(func(k string) (string, bool) {
				v := lookupEnv(e, k)
				return v, v != ""
			})
			if err != nil {
				return nil, "", nil, errors.New(strings.TrimPrefix(err.Error(), "hostconfig: "))
			}
			spec = url
			if schema == "" {
				schema = s.Schema
			}
		default:
			spec = "sqlite:" + s.Path
		}
	}
	switch {
	case strings.HasPrefix(spec, "sqlite:"):
		path := strings.TrimPrefix(spec, "sqlite:")
		if schema != "" {
			return nil, "", nil, errors.New("-schema only applies to a PostgreSQL store")
		}
		if path == "" {
			return nil, "", nil, errors.New("store sqlite: names no file: want sqlite:PATH")
		}
		if _, err := os.Stat(path); err != nil {
			return nil, "", nil, fmt.Errorf("store %s: %w (the tool opens an existing store only)", spec, err)
		}
		st, err := sqlitestore.Open(ctx, path, sqlitestore.WithoutMigrate())
		if err != nil {
			return nil, "", nil, err
		}
		return st, spec, func() { st.Close() }, nil
	case strings.HasPrefix(spec, "postgres://"), strings.HasPrefix(spec, "postgresql://"):
		var opts []pgstore.Option
		if schema != "" {
			opts = append(opts, pgstore.WithSchema(schema))
		}
		st, err := pgstore.Open(ctx, spec, append(opts, pgstore.WithoutMigrate())...)
		if err != nil {
			return nil, "", nil, err
		}
		name := "postgres"
		if schema != "" {
			name += " schema " + schema
		}
		return st, name, func() { st.Close() }, nil
	}
	shown := spec
	if strings.Contains(spec, "@") || strings.Contains(spec, "password") {
		shown = "(a value with a password, not shown)"
	}
	return nil, "", nil, fmt.Errorf("store %s: want sqlite:PATH or a postgres:// URL", shown)
}

// entryJSON is an entry as the -json output shows it.
type entryJSON struct {
	ID        int64     `json:"id"`
	Key       string    `json:"key"`
	State     string    `json:"state"`
	Status    string    `json:"status"`
	Topic     string    `json:"topic"`
	Partition int32     `json:"partition"`
	Offset    int64     `json:"offset"`
	Created   time.Time `json:"created"`
	StateTime time.Time `json:"stateTime"`
	DueAt     time.Time `json:"dueAt,omitzero"`
	Expiry    string    `json:"expiry"`
	Redrives  int       `json:"redrives"`
	Reparks   int       `json:"reparks"`
	Origin    string    `json:"origin"`
	LastError string    `json:"lastError,omitempty"`
	Version   int64     `json:"version"`
	RecordKey []byte    `json:"recordKey,omitempty"`
	Value     []byte    `json:"value,omitempty"`
}

func toJSON(x redrive.Entry) entryJSON {
	return entryJSON{ID: x.ID, Key: x.Key, State: x.State(), Status: x.Status.String(),
		Topic: x.Message.Topic, Partition: x.Message.Partition, Offset: x.Message.Offset,
		Created: x.Created.UTC(), StateTime: x.StateTime.UTC(), DueAt: x.DueAt.UTC(), Expiry: x.Expiry.String(),
		Redrives: x.Redrives, Reparks: x.Reparks, Origin: origin(x), LastError: x.LastError, Version: x.Version,
		RecordKey: x.Message.Key, Value: x.Message.Value}
}

// origin names the record an entry stands for, as topic/partition/offset.
func origin(x redrive.Entry) string {
	t, p, o := x.Origin()
	return redrive.RecordKey(t, p, o)
}

// multiplied returns the records that more than one of xs stand for, with
// how many each, in the order of their first entry.
func multiplied(xs []redrive.Entry) (records int, many []string) {
	count := map[string]int{}
	var order []string
	for _, x := range xs {
		o := origin(x)
		if count[o] == 0 {
			order = append(order, o)
		}
		count[o]++
	}
	for _, o := range order {
		if count[o] > 1 {
			many = append(many, fmt.Sprintf("%s (%d entries)", o, count[o]))
		}
	}
	return len(order), many
}

// selectEntries returns the entries sel selects, by ascending ID, at most
// sel.limit of them (when not 0), and whether there were more; missing
// lists the keys and ids that name no entry.
func selectEntries(ctx context.Context, st redrive.Store, sel selection) (out []redrive.Entry, more bool, missing []string, err error) {
	match := func(x redrive.Entry) bool {
		return slices.Contains(sel.statuses, x.Status) && (sel.topic == "" || x.Message.Topic == sel.topic) &&
			(sel.partition < 0 || x.Message.Partition == int32(sel.partition))
	}
	if len(sel.keys) > 0 || len(sel.ids) > 0 {
		seen := map[int64]bool{}
		add := func(x redrive.Entry) {
			if !seen[x.ID] && match(x) {
				seen[x.ID] = true
				out = append(out, x)
			}
		}
		for _, k := range sel.keys {
			x, err := st.Get(ctx, k)
			if errors.Is(err, redrive.ErrNotFound) {
				missing = append(missing, "key "+strconv.Quote(k))
				continue
			}
			if err != nil {
				return nil, false, nil, err
			}
			add(x)
		}
		for _, id := range sel.ids {
			xs, err := st.List(ctx, redrive.Filter{AfterID: id - 1, Limit: 1})
			if err != nil {
				return nil, false, nil, err
			}
			if len(xs) == 0 || xs[0].ID != id {
				missing = append(missing, fmt.Sprintf("id %d", id))
				continue
			}
			add(xs[0])
		}
	} else {
		for _, s := range sel.statuses {
			after := int64(0)
			n := 0
			for {
				page, err := st.List(ctx, redrive.Filter{Status: s, Topic: sel.topic, AfterID: after, Limit: redrive.DefaultListLimit})
				if err != nil {
					return nil, false, nil, err
				}
				for _, x := range page {
					if match(x) {
						out = append(out, x)
						n++
					}
				}
				if len(page) < redrive.DefaultListLimit || sel.limit > 0 && n > sel.limit {
					break
				}
				after = page[len(page)-1].ID
			}
		}
	}
	slices.SortFunc(out, func(a, b redrive.Entry) int { return cmp.Compare(a.ID, b.ID) })
	if sel.limit > 0 && len(out) > sel.limit {
		out, more = out[:sel.limit], true
	}
	return out, more, missing, nil
}

func parkedList(ctx context.Context, st redrive.Store, name string, sel selection, asJSON bool, e env) int {
	xs, more, missing, err := selectEntries(ctx, st, sel)
	if err != nil {
		fmt.Fprintf(e.stderr, "redeliver parked list: %v\n", err)
		return exitProblems
	}
	code := exitOK
	for _, m := range missing {
		fmt.Fprintf(e.stderr, "redeliver parked list: no entry with %s\n", m)
		code = exitProblems
	}
	if asJSON {
		js := make([]entryJSON, len(xs))
		for i, x := range xs {
			js[i] = toJSON(x)
		}
		records, _ := multiplied(xs)
		printJSON(e.stdout, map[string]any{"entries": js, "more": more, "records": records})
		return code
	}
	writeEntries(e.stdout, name, xs, more, e.now())
	if _, many := multiplied(xs); len(many) > 0 {
		more := ""
		if len(many) > 5 {
			many, more = many[:5], fmt.Sprintf(" and %d more", len(many)-5)
		}
		fmt.Fprintf(e.stderr, "redeliver parked list: warning: a record was parked more than once, by a consumer that drops the re-drive's headers: %s%s\n",
			strings.Join(many, ", "), more)
	}
	return code
}

// writeEntries prints entries as a table under a summary line.
func writeEntries(w io.Writer, name string, xs []redrive.Entry, more bool, now time.Time) {
	counts := map[redrive.Status]int{}
	for _, x := range xs {
		counts[x.Status]++
	}
	var parts []string
	for _, s := range []redrive.Status{redrive.Parked, redrive.Retrying, redrive.TimedOut, redrive.Done} {
		if counts[s] > 0 {
			parts = append(parts, fmt.Sprintf("%d %s", counts[s], strings.ReplaceAll(s.String(), "_", " ")))
		}
	}
	shown := "1 entry"
	if len(xs) != 1 {
		shown = fmt.Sprintf("%d entries", len(xs))
	}
	if more {
		shown = "the first " + shown + " (more with -limit 0)"
	}
	if len(xs) == 0 {
		fmt.Fprintf(w, "%s: no entries selected\n", name)
		return
	}
	if records, _ := multiplied(xs); records != len(xs) {
		shown += fmt.Sprintf(" for %d records", records)
	}
	fmt.Fprintf(w, "%s: %s: %s\n", name, shown, strings.Join(parts, ", "))
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "ID\tKEY\tSTATE\tRECORD\tREDRIVES\tREPARKS\tPARKED\tNEXT RE-DRIVE\tLAST ERROR")
	for _, x := range xs {
		next := "-"
		if !x.DueAt.IsZero() {
			next = relative(now, x.DueAt)
		}
		record := fmt.Sprintf("%s/%d@%d", x.Message.Topic, x.Message.Partition, x.Message.Offset)
		if t, p, o := x.Origin(); t != x.Message.Topic || p != x.Message.Partition || o != x.Message.Offset {
			record += fmt.Sprintf(" (of %s/%d@%d)", t, p, o)
		}
		fmt.Fprintf(tw, "%d\t%s\t%s\t%s\t%d\t%d\t%s\t%s\t%s\n", x.ID, x.Key, x.State(), record,
			x.Redrives, x.Reparks, relative(now, x.Created), next, oneLine(x.LastError, 80))
	}
	tw.Flush()
}

// oneLine shortens s to a line of at most n runes.
func oneLine(s string, n int) string {
	s = strings.Join(strings.Fields(s), " ")
	if r := []rune(s); len(r) > n {
		return string(r[:n-1]) + "…"
	}
	return s
}

// parkedChange requeues or completes the selected entries.
func parkedChange(ctx context.Context, st redrive.Store, verb string, sel selection, asJSON bool, e env) int {
	xs, _, missing, err := selectEntries(ctx, st, sel)
	if err != nil {
		fmt.Fprintf(e.stderr, "redeliver parked %s: %v\n", verb, err)
		return exitProblems
	}
	code := exitOK
	for _, m := range missing {
		fmt.Fprintf(e.stderr, "redeliver parked %s: no entry with %s\n", verb, m)
		code = exitProblems
	}
	now := e.now().Truncate(time.Microsecond)
	var changed []entryJSON
	for _, x := range xs {
		var got redrive.Entry
		if verb == "requeue" {
			got, err = st.Requeue(ctx, x.Key, now)
		} else {
			got, err = st.Complete(ctx, x.Key, now)
		}
		if err != nil {
			msg := err.Error()
			if errors.Is(err, redrive.ErrNotPending) {
				msg = fmt.Sprintf("%s is %s: not %s", x.Key, got.State(), map[string]string{"requeue": "requeued: a done entry is final", "complete": "completed: only a parked or retrying entry is"}[verb])
			}
			fmt.Fprintf(e.stderr, "redeliver parked %s: %s\n", verb, msg)
			code = exitProblems
			continue
		}
		changed = append(changed, toJSON(got))
		if !asJSON {
			switch verb {
			case "requeue":
				fmt.Fprintf(e.stdout, "requeued %s (id %d): %s -> %s, due now (%s)\n", got.Key, got.ID, x.State(), got.State(), stamp(got.DueAt))
			default:
				fmt.Fprintf(e.stdout, "completed %s (id %d): %s -> %s\n", got.Key, got.ID, x.State(), got.State())
			}
		}
	}
	if asJSON {
		if changed == nil {
			changed = []entryJSON{}
		}
		printJSON(e.stdout, map[string]any{"changed": changed})
	} else if len(xs) == 0 && len(missing) == 0 {
		fmt.Fprintf(e.stdout, "no entries selected\n")
	}
	return code
}
