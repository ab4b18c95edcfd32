package main

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"os"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/redeliver-go/redeliver/checkpoint"
	"github.com/redeliver-go/redeliver/hostconfig"
	"github.com/redeliver-go/redeliver/internal/retrystate"
)

// overdue is how long past its due time a retry that has not happened is
// reported as overdue.
const overdue = time.Minute

// offsetRow is one partition of the offsets command's output.
type offsetRow struct {
	Topic     string `json:"topic"`
	Partition int32  `json:"partition"`
	// Committed is the committed offset, -1 for none; End the partition's
	// end offset, -1 when unknown.
	Committed int64  `json:"committed"`
	End       int64  `json:"end"`
	Lag       int64  `json:"lag"`
	Metadata  string `json:"metadata,omitempty"`
	// Withheld reports a checkpoint withheld at a record being retried,
	// given up or stopped at (see GivenUp and Halted); StateOffset is that
	// record's offset, which the state names (absent for a state written
	// before states named their record).
	Withheld    bool   `json:"withheld"`
	StateOffset *int64 `json:"stateOffset,omitempty"`
	// Retries is the number of the retry due or started, or, for a record
	// given up, the retries it was given up after.
	Retries int `json:"retries,omitempty"`
	// MaxRetries is the retry limit in force: the handler's RetryResult
	// when the state holds one, else the policy's (with -config).
	MaxRetries *int `json:"maxRetries,omitempty"`
	// RetryResult is the handler's own request for retries, which
	// replaces the policy for the batch.
	RetryResult  *retryResult `json:"retryResult,omitempty"`
	Started      bool         `json:"started,omitempty"`
	NextAt       time.Time    `json:"nextAt,omitzero"`
	FirstFailure time.Time    `json:"firstFailure,omitzero"`
	Overdue      bool         `json:"overdue,omitempty"`
	// OutageTime is the time the record waited out outages of the
	// downstream since its first failure, which maxRetryTime does not
	// count.
	OutageTime string `json:"outageTime,omitempty"`
	// GivenUp is why the record was given up ("retries spent", ...): its
	// exhaustion action has not succeeded yet, or, with Halted, it stopped
	// the partition at the record (StopPartition) until an operator
	// resumes or skips it. LastError is the record's last error as the
	// state keeps it (its first 128 bytes).
	GivenUp   string `json:"givenUp,omitempty"`
	Halted    bool   `json:"halted,omitempty"`
	LastError string `json:"lastError,omitempty"`
	State     string `json:"state"`
	// Window is, for a commit of key (or no) ordering (metadata "rd2:"),
	// the window a next owner reads (docs/KEYS.md): the records from the
	// committed offset to Next, Unfinished of them not finished (a next
	// owner delivers those again and skips the others), and the records
	// among them that hold a state, each as a row of its own (Committed
	// is the record's offset there).
	Window *windowRow `json:"window,omitempty"`
}

// windowRow is the window of a key ordering's commit.
type windowRow struct {
	Next       int64       `json:"next"`
	Unfinished int         `json:"unfinished"`
	Records    []offsetRow `json:"records,omitempty"`
}

func runOffsets(args []string, e env) int {
	fs := newFlags("offsets", e)
	brokers := fs.String("brokers", "", "comma-separated seed `brokers` (host:port)")
	group := fs.String("group", "", "the consumer `group`")
	topic := fs.String("topic", "", "show this `topic` only")
	config := fs.String("config", "", "a `host.json` whose policy gives the retry limit")
	function := fs.String("function", "", "the `function` of the host.json whose policy is in force for this group (default: the host-wide policy)")
	timeout := fs.Duration("timeout", 10*time.Second, "how long to wait for the brokers")
	asJSON := fs.Bool("json", false, "print the result as JSON")
	pos, code := parseArgs(fs, args, e)
	if code >= 0 {
		return code
	}
	switch {
	case len(pos) > 0:
		return usageError(fs, "unexpected argument %q", pos[0])
	case *brokers == "":
		return usageError(fs, "-brokers is required")
	case *group == "":
		return usageError(fs, "-group is required")
	case *function != "" && *config == "":
		return usageError(fs, "-function needs -config")
	case *timeout <= 0:
		return usageError(fs, "-timeout must be more than 0")
	}
	maxRetries := (*int)(nil)
	if *config != "" {
		data, err := os.ReadFile(*config)
		if err != nil {
			fmt.Fprintf(e.stderr, "redeliver offsets: %v\n", err)
			return exitProblems
		}
		cfg, err := hostconfig.Loader{Environ: e.environ}.Parse(*config, data)
		if err != nil {
			fmt.Fprintf(e.stderr, "%v\n%s has problems: run 'redeliver check %s'\n", err, *config, *config)
			return exitProblems
		}
		if *function != "" {
			if err := namedFunction(cfg, *function, "leave -function out for it"); err != nil {
				fmt.Fprintf(e.stderr, "redeliver offsets: %v\n", err)
				return exitProblems
			}
		}
		p, err := cfg.Function(*function).Policy() // the function's own, else the host-wide policy
		if err != nil {
			fmt.Fprintf(e.stderr, "redeliver offsets: %v\n", err)
			return exitProblems
		}
		maxRetries = &p.MaxRetries
	}

	ctx, cancel := context.WithTimeout(context.Background(), *timeout)
	defer cancel()
	rows, err := offsets(ctx, strings.Split(*brokers, ","), *group, *topic)
	if err != nil {
		fmt.Fprintf(e.stderr, "redeliver offsets: %v\n", err)
		return exitProblems
	}
	now := e.now()
	for i := range rows {
		describeRow(&rows[i], maxRetries, now)
	}
	if *asJSON {
		printJSON(e.stdout, map[string]any{"group": *group, "partitions": rows})
		return exitOK
	}
	if len(rows) == 0 {
		fmt.Fprintf(e.stdout, "group %s has no committed offsets%s\n", *group, map[bool]string{true: " for topic " + *topic}[*topic != ""])
		return exitOK
	}
	withheld, givenUp, stopped := 0, 0, 0
	for _, r := range rows {
		switch {
		case r.Halted:
			stopped++
		case r.GivenUp != "":
			givenUp++
		case r.Withheld:
			withheld++
		}
	}
	fmt.Fprintf(e.stdout, "group %s: %d %s, %d withheld by a retry", *group, len(rows), plural(len(rows), "partition"), withheld)
	if givenUp > 0 {
		fmt.Fprintf(e.stdout, ", %d at a record given up", givenUp)
	}
	if stopped > 0 {
		fmt.Fprintf(e.stdout, ", %d stopped", stopped)
	}
	fmt.Fprintln(e.stdout)
	tw := tabwriter.NewWriter(e.stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "TOPIC\tPARTITION\tCOMMITTED\tEND\tLAG\tSTATE")
	for _, r := range rows {
		fmt.Fprintf(tw, "%s\t%d\t%s\t%s\t%s\t%s\n", r.Topic, r.Partition, num(r.Committed), num(r.End), num(r.Lag), r.State)
	}
	tw.Flush()
	return exitOK
}

func num(n int64) string {
	if n < 0 {
		return "-"
	}
	return fmt.Sprint(n)
}

// offsets reads the group's committed offsets and the end offsets of the
// topics it committed to (or of topic alone).
func offsets(ctx context.Context, brokers []string, group, topic string) ([]offsetRow, error) {
	cl, err := kgo.NewClient(kgo.SeedBrokers(brokers...))
	if err != nil {
		return nil, err
	}
	defer cl.Close()
	adm := kadm.NewClient(cl)
	committed, err := adm.FetchOffsets(ctx, group)
	if errors.Is(err, kerr.GroupIDNotFound) {
		committed, err = kadm.OffsetResponses{}, nil
	}
	if err != nil {
		return nil, fmt.Errorf("fetching the committed offsets of group %s: %w", group, err)
	}
	if err := committed.Error(); err != nil {
		return nil, fmt.Errorf("fetching the committed offsets of group %s: %w", group, err)
	}
	if len(committed) == 0 {
		if err := groupExists(ctx, adm, group); err != nil {
			return nil, err
		}
	}
	var topics []string
	if topic != "" {
		topics = []string{topic}
	} else {
		for t := range committed {
			topics = append(topics, t)
		}
	}
	if len(topics) == 0 {
		return nil, nil
	}
	ends, err := adm.ListEndOffsets(ctx, topics...)
	if err != nil {
		return nil, fmt.Errorf("listing the end offsets of %s: %w", strings.Join(topics, ", "), err)
	}
	if topic != "" {
		if err := topicExists(ctx, adm, ends, topic); err != nil {
			return nil, err
		}
	}
	var rows []offsetRow
	seen := map[offsetKey]bool{}
	ends.Each(func(o kadm.ListedOffset) {
		if o.Partition < 0 {
			return // a topic the brokers do not know: its committed offsets are listed below
		}
		r := offsetRow{Topic: o.Topic, Partition: o.Partition, Committed: -1, End: -1, Lag: -1}
		if o.Err == nil {
			r.End = o.Offset
		}
		if c, ok := committed.Lookup(o.Topic, o.Partition); ok && c.Err == nil {
			r.Committed, r.Metadata = c.At, c.Metadata
		}
		seen[offsetKey{o.Topic, o.Partition}] = true
		rows = append(rows, r)
	})
	committed.Each(func(c kadm.OffsetResponse) {
		if (topic == "" || c.Topic == topic) && !seen[offsetKey{c.Topic, c.Partition}] {
			rows = append(rows, offsetRow{Topic: c.Topic, Partition: c.Partition, Committed: c.At, End: -1, Lag: -1, Metadata: c.Metadata})
		}
	})
	for i := range rows {
		if r := &rows[i]; r.End >= 0 {
			r.Lag = r.End - max(r.Committed, 0)
		}
	}
	slices.SortFunc(rows, func(a, b offsetRow) int {
		return cmp.Or(cmp.Compare(a.Topic, b.Topic), cmp.Compare(a.Partition, b.Partition))
	})
	return rows, nil
}

// topicExists returns an error, with a suggestion, when the brokers do
// not know topic.
func topicExists(ctx context.Context, adm *kadm.Client, ends kadm.ListedOffsets, topic string) error {
	unknown := false
	ends.Each(func(o kadm.ListedOffset) {
		unknown = unknown || o.Topic == topic && errors.Is(o.Err, kerr.UnknownTopicOrPartition)
	})
	if !unknown {
		return nil
	}
	msg := fmt.Sprintf("topic %s does not exist", topic)
	if all, err := adm.ListTopics(ctx); err == nil {
		var names []string
		for _, d := range all.Sorted() {
			if d.Err == nil {
				names = append(names, d.Topic)
			}
		}
		if s := nearest(topic, names); s != "" {
			msg += ": did you mean " + s + "?"
		}
	}
	return errors.New(msg)
}

// retryResult is the JSON form of a handler's own request for retries.
type retryResult struct {
	MaxRetries int    `json:"maxRetries"` // -1: no limit
	Delay      string `json:"delay"`
}

// retries says "3 retries", "1 retry" or "no limit of retries".
func retries(n int) string {
	if n == checkpoint.Infinite {
		return "no limit of retries"
	}
	return fmt.Sprintf("%d %s", n, map[bool]string{true: "retry", false: "retries"}[n == 1])
}

type offsetKey struct {
	topic     string
	partition int32
}

// describeRow decodes the row's retry state into words.
func describeRow(r *offsetRow, maxRetries *int, now time.Time) {
	switch {
	case r.Committed < 0:
		r.State = "nothing committed"
		return
	case r.Metadata == "":
		r.State = "no retry state"
		return
	}
	if strings.HasPrefix(r.Metadata, "rd2:") {
		describeWindow(r, maxRetries, now)
		return
	}
	s, err := retrystate.ReadCommitted(r.Committed, r.Metadata)
	var other *retrystate.OtherRecordError
	switch {
	case errors.Is(err, retrystate.ErrForeignMetadata):
		r.State = fmt.Sprintf("metadata of another tool (%q), ignored", r.Metadata)
		return
	case errors.As(err, &other):
		// The engine applies a state only to the record it names.
		r.State = fmt.Sprintf("retry state of the record at offset %d, not of the one at the checkpoint: ignored, the record at %d starts its count over", other.Offset, r.Committed)
		return
	case err != nil:
		r.State = fmt.Sprintf("damaged retry state, ignored: %v", err)
		return
	case s.Retries == 0 && s.GivenUp == 0:
		r.State = "no retry state"
		return
	}
	r.Withheld, r.Retries = true, s.Retries
	if s.Offset >= 0 {
		r.StateOffset = &s.Offset
	}
	if s.OutageTime > 0 {
		r.OutageTime = s.OutageTime.String()
	}
	r.FirstFailure = s.FirstFailure.UTC()
	if s.FirstFailure.IsZero() {
		r.FirstFailure = time.Time{}
	}
	if s.GivenUp != 0 {
		givenUpRow(r, s, now)
		return
	}
	r.MaxRetries, r.Started = maxRetries, s.Started
	if s.Request != (retrystate.Request{}) {
		r.RetryResult = &retryResult{MaxRetries: s.Request.MaxRetries, Delay: s.Request.Delay.String()}
		r.MaxRetries = &s.Request.MaxRetries // it replaces the policy's limit for this batch
	}
	r.NextAt = s.NextAt.UTC()
	if s.NextAt.IsZero() {
		r.NextAt = time.Time{}
	}
	of := ""
	if r.MaxRetries != nil {
		if *r.MaxRetries == checkpoint.Infinite {
			of = " of unlimited"
		} else {
			of = fmt.Sprintf(" of %d", *r.MaxRetries)
		}
	}
	var b strings.Builder
	fmt.Fprintf(&b, "withheld at %d: retry %d%s", r.Committed, s.Retries, of)
	if r.RetryResult != nil {
		fmt.Fprintf(&b, " (the handler's RetryResult: %s, %v apart)", retries(s.Request.MaxRetries), s.Request.Delay)
	}
	switch {
	case s.Started:
		b.WriteString(", started (its outcome is not committed: the next owner counts it as made)")
	case !s.NextAt.IsZero():
		fmt.Fprintf(&b, ", due %s (%s)", stamp(s.NextAt), relative(now, s.NextAt))
		if now.Sub(s.NextAt) > overdue {
			r.Overdue = true
			// A stopped partition commits its stop (see givenUpRow): a
			// retry this late has no consumer, or an outage holds it.
			b.WriteString(", overdue: no running consumer holds the partition, or an outage of the downstream (the outage budget) holds the retry")
		}
	default:
		b.WriteString(", due now")
	}
	failingSince(&b, r, s, now)
	r.State = b.String()
}

// givenUpRow describes the row of a record given up: its exhaustion action
// not done yet, or, halted, its partition stopped at it.
func givenUpRow(r *offsetRow, s retrystate.State, now time.Time) {
	r.GivenUp, r.Halted, r.LastError = s.GivenUp.String(), s.Halted, s.LastError
	deliveries := fmt.Sprintf("%d %s", deliveriesOf(s), map[bool]string{true: "delivery", false: "deliveries"}[deliveriesOf(s) == 1])
	var b strings.Builder
	if s.Halted {
		fmt.Fprintf(&b, "stopped at %d: given up after %s (%s), its partition stopped (StopPartition) until an operator's Resume or Skip; a next owner delivers the record again with a fresh count",
			r.Committed, deliveries, s.GivenUp)
	} else {
		fmt.Fprintf(&b, "given up at %d after %s (%s), its exhaustion action not done yet: it is tried again, and a next owner gives the record up again at once, without delivering it",
			r.Committed, deliveries, s.GivenUp)
	}
	failingSince(&b, r, s, now)
	if s.LastError != "" {
		fmt.Fprintf(&b, "; last error: %s", s.LastError)
	}
	r.State = b.String()
}

// failingSince adds the first failure and the time waited out in outages.
func failingSince(b *strings.Builder, r *offsetRow, s retrystate.State, now time.Time) {
	if !s.FirstFailure.IsZero() {
		fmt.Fprintf(b, "; failing since %s (%s)", stamp(s.FirstFailure), relative(now, s.FirstFailure))
	}
	if r.OutageTime != "" {
		fmt.Fprintf(b, ", %s of it waiting out outages of the downstream", r.OutageTime)
	}
}

// groupExists returns an error naming the group meant when the brokers do
// not know group: a misspelt -group would otherwise show as a group with
// no committed offsets, and exit 0.
func groupExists(ctx context.Context, adm *kadm.Client, group string) error {
	listed, err := adm.ListGroups(ctx)
	if err != nil {
		return fmt.Errorf("listing the consumer groups to find %s: %w", group, err)
	}
	names := listed.Groups()
	if slices.Contains(names, group) {
		return nil
	}
	slices.Sort(names)
	hint := "the brokers know no consumer group"
	switch s := nearest(group, names); {
	case s != "":
		hint = "did you mean " + s + "?"
	case len(names) > 0 && len(names) <= 10:
		hint = "the brokers' groups are " + strings.Join(names, ", ")
	case len(names) > 10:
		hint = fmt.Sprintf("the brokers know %d other groups", len(names))
	}
	return fmt.Errorf("group %s does not exist: %s", group, hint)
}

// describeWindow describes the row of a key (or no) ordering's commit: its
// window, and each record in it that holds a state.
func describeWindow(r *offsetRow, maxRetries *int, now time.Time) {
	w, err := retrystate.RestoreWindow(r.Committed, r.Metadata, checkpoint.WindowLimits{MaxBytes: 1 << 20})
	if err != nil {
		r.State = fmt.Sprintf("damaged window of key ordering, ignored (the records after the checkpoint are delivered again): %v", err)
		return
	}
	win := &windowRow{Next: w.Next(), Unfinished: w.Unfinished()}
	seen := 0
	for o := w.Base(); o < w.Next() && seen < win.Unfinished; o++ {
		if w.Finished(o) {
			continue
		}
		seen++
		st, ok := w.State(o)
		if !ok {
			continue
		}
		rec := offsetRow{Topic: r.Topic, Partition: r.Partition, Committed: o, End: -1, Lag: -1, Metadata: retrystate.EncodeState(st)}
		describeRow(&rec, maxRetries, now)
		if rec.GivenUp != "" && !rec.Halted {
			// A record given up in key ordering whose action is not done:
			// StopPartition stopped its key, or its action fails.
			rec.State = strings.Replace(rec.State, "its exhaustion action not done yet: it is tried again, and a next owner gives the record up again at once, without delivering it",
				"its exhaustion action not done: StopPartition stopped its key until an operator resumes or skips the record (the status page's actions with its offset), or the action is being tried again; the key's later records wait, and a next owner gives the record up again at once", 1)
		}
		rec.State = strings.TrimPrefix(rec.State, fmt.Sprintf("withheld at %d: ", o))
		rec.State = strings.Replace(rec.State, fmt.Sprintf("given up at %d after", o), "given up after", 1)
		rec.Metadata = ""
		win.Records = append(win.Records, rec)
	}
	r.Window = win
	var b strings.Builder
	if win.Unfinished == 0 {
		fmt.Fprintf(&b, "key ordering: every record to %d finished", win.Next)
	} else {
		fmt.Fprintf(&b, "key ordering: %d of the records from %d to %d not finished (a next owner delivers them, and skips the others)", win.Unfinished, r.Committed, win.Next-1)
	}
	for _, rec := range win.Records {
		switch {
		case rec.GivenUp != "":
			r.GivenUp = rec.GivenUp // the row counts as at a record given up
		case rec.Withheld:
			r.Withheld = true
		}
		fmt.Fprintf(&b, "; record %d: %s", rec.Committed, rec.State)
	}
	r.State = b.String()
}
