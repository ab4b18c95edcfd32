package main

import (
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"text/tabwriter"

	"github.com/redeliver-go/redeliver/hostconfig"
)

// The policy fields of checkpointRetryPolicy, with what an unset one means.
var policyDefaults = []struct{ field, meaning string }{
	{"retryCount", "0: no retries"},
	{"maxDelay", "no cap on a delay"},
	{"maxRetryTime", "no time budget"},
	{"maxRecordAge", "no record age limit"},
	{"onExhausted", "skip: the checkpoint moves past a batch that is given up"},
}

// explained is the JSON form of one policy.
type explained struct {
	Function string            `json:"function,omitempty"`
	Own      bool              `json:"ownPolicy"` // the function has a policy of its own
	Origin   string            `json:"origin,omitempty"`
	Text     string            `json:"explanation"`
	Settings []setting         `json:"settings"`
	Defaults map[string]string `json:"defaults"`
	Trigger  *trigger          `json:"trigger,omitempty"`
	// Note says that the file does not name the function, which then runs
	// under the host-wide policy; empty for a function the file names.
	Note string `json:"note,omitempty"`
}

// setting is the JSON form of a [hostconfig.Setting], in the casing of the
// rest of the CLI's JSON.
type setting struct {
	Field     string `json:"field"`
	Value     string `json:"value"`
	Source    string `json:"source"`
	Inherited bool   `json:"inherited,omitempty"` // the host-wide policy's, in force for a function
}

func settingsOf(s []hostconfig.Setting) []setting {
	out := make([]setting, 0, len(s))
	for _, v := range s {
		out = append(out, setting{Field: v.Field, Value: v.Value, Source: v.Source, Inherited: v.Inherited})
	}
	return out
}

// trigger is the JSON form of a function's [hostconfig.Trigger]: the
// values in force, defaults included, and the settings the file or the
// environment gave.
type trigger struct {
	Origin        string    `json:"origin"`
	Type          string    `json:"type"`
	Adapter       string    `json:"adapter"`
	Topic         string    `json:"topic"`
	ConsumerGroup string    `json:"consumerGroup,omitempty"`
	ShareGroup    string    `json:"shareGroup,omitempty"`
	MaxBatchSize  int       `json:"maxBatchSize"`
	Settings      []setting `json:"settings"`
}

// adapterMaxBatch is the most records a batch holds when the trigger does
// not say: both adapters' default.
const adapterMaxBatch = 500

func triggerOf(t hostconfig.Trigger) *trigger {
	max := t.MaxBatchSize
	if max == 0 {
		max = adapterMaxBatch
	}
	return &trigger{Origin: t.Origin, Type: t.Type, Adapter: t.Adapter, Topic: t.Topic, ConsumerGroup: t.ConsumerGroup,
		ShareGroup: t.ShareGroup, MaxBatchSize: max, Settings: settingsOf(t.Settings)}
}

func runExplain(args []string, e env) int {
	fs := newFlags("explain", e)
	asJSON := fs.Bool("json", false, "print the result as JSON")
	pos, code := parseArgs(fs, args, e)
	if code >= 0 {
		return code
	}
	if len(pos) == 0 || len(pos) > 2 {
		return usageError(fs, "want a host.json and at most one function name")
	}
	file := pos[0]
	data, err := os.ReadFile(file)
	if err != nil {
		fmt.Fprintf(e.stderr, "redeliver explain: %v\n", err)
		return exitProblems
	}
	cfg, err := hostconfig.Loader{Environ: e.environ}.Parse(file, data)
	if err != nil {
		var herr *hostconfig.Error
		if errors.As(err, &herr) {
			for _, p := range herr.Problems {
				fmt.Fprintln(e.stderr, strings.TrimPrefix(p.Error(), "hostconfig: "))
			}
		} else {
			fmt.Fprintln(e.stderr, err)
		}
		fmt.Fprintf(e.stderr, "%s has problems: run 'redeliver check %s'\n", file, file)
		return exitProblems
	}

	var out []explained
	if len(pos) == 2 {
		// A function the file does not name runs under the host-wide
		// policy: show that, saying so (and the name it may have meant).
		name := pos[1]
		x := explainFunction(cfg, name)
		if err := namedFunction(cfg, name, "shown below"); err != nil {
			x.Note = err.Error()
			x.Text = cfg.Host.Explain() // the host-wide policy's own words: the function's would be an error
		}
		out = append(out, x)
	} else {
		out = append(out, explainHost(cfg))
		for _, n := range cfg.FunctionNames() {
			out = append(out, explainFunction(cfg, n))
		}
	}
	// The file's other sections, when no function is named.
	var sections [][2]string
	if len(pos) == 1 {
		if r := cfg.Redrive; r != nil {
			sections = append(sections, [2]string{"redrive", r.Explain()})
		}
		if o := cfg.OutageBudget; o != nil {
			sections = append(sections, [2]string{"outageBudget", o.Explain()})
		}
		if sp := cfg.StatusPage; sp != nil {
			sections = append(sections, [2]string{"statusPage", sp.Explain()})
		}
	}
	if *asJSON {
		doc := map[string]any{"file": file, "policies": out, "warnings": append([]string{}, cfg.Warnings...)}
		for _, sec := range sections {
			doc[sec[0]] = sec[1]
		}
		printJSON(e.stdout, doc)
		return exitOK
	}
	for i, x := range out {
		if i > 0 {
			fmt.Fprintln(e.stdout)
		}
		writeExplained(e.stdout, x)
	}
	for _, sec := range sections {
		fmt.Fprintf(e.stdout, "\n%s", sec[1])
	}
	for _, w := range cfg.Warnings {
		fmt.Fprintf(e.stdout, "\nWarning: %s\n", w)
	}
	return exitOK
}

func explainHost(cfg *hostconfig.Config) explained {
	x := explained{Own: cfg.Host != nil, Settings: settingsOf(cfg.Settings("")), Text: cfg.Host.Explain()}
	if cfg.Host != nil {
		x.Origin = cfg.Host.Origin
	}
	x.Defaults = defaultsOf(x.Settings)
	return x
}

// namedFunction returns an error unless the file names the function
// called name, in a policy or a trigger; the error suggests the name meant
// and says that hostWide is the way to the host-wide policy.
func namedFunction(cfg *hostconfig.Config, name, hostWide string) error {
	names := cfg.FunctionNames()
	for _, n := range names {
		if strings.EqualFold(n, name) {
			return nil
		}
	}
	hint := "it names no function"
	switch s := nearest(name, names); {
	case s != "":
		hint = "did you mean " + s + "?"
	case len(names) > 0:
		hint = "its functions are " + strings.Join(names, ", ")
	}
	return fmt.Errorf("%s names no function %q: %s (a function the file does not name runs under the host-wide policy: %s)", cfg.File, name, hint, hostWide)
}

func explainFunction(cfg *hostconfig.Config, name string) explained {
	x := explained{Function: name}
	p := cfg.Function(name)
	x.Own = p != cfg.Host // Function returns the host-wide policy itself for a function without one of its own
	if p != nil {
		x.Origin = p.Origin
	}
	x.Text = cfg.Explain(hostconfig.Function(name)) // in the terms of its trigger (a share group's records, say)
	x.Settings = settingsOf(cfg.Settings(name))     // a function without a policy of its own: the host's, marked inherited
	x.Defaults = defaultsOf(x.Settings)
	if t, ok := cfg.Trigger(name); ok {
		x.Trigger = triggerOf(t)
		if _, ok := x.Defaults["onExhausted"]; ok && t.ShareGroup != "" {
			x.Defaults["onExhausted"] = "skip: a record given up is rejected, and the broker archives it"
		}
	}
	return x
}

// defaultsOf lists the policy fields that no setting gives, with what that
// means.
func defaultsOf(s []setting) map[string]string {
	out := map[string]string{}
	for _, d := range policyDefaults {
		set := false
		for _, v := range s {
			set = set || v.Field == d.field || strings.HasPrefix(v.Field, d.field+".") ||
				d.field == "retryCount" && v.Field == "maxRetryCount"
		}
		if !set {
			out[d.field] = d.meaning
		}
	}
	return out
}

func writeExplained(w io.Writer, x explained) {
	switch {
	case x.Function == "":
		fmt.Fprintln(w, "Host-wide policy")
	case x.Own:
		fmt.Fprintf(w, "Function %s: a policy of its own\n", x.Function)
	default:
		fmt.Fprintf(w, "Function %s: the host-wide policy\n", x.Function)
	}
	if x.Note != "" {
		fmt.Fprintf(w, "  Note: %s\n", x.Note)
	}
	fmt.Fprintln(w, indent(x.Text))
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "  Where each value comes from:")
	for _, s := range x.Settings {
		src := s.Source
		if s.Inherited {
			src += " (host-wide)"
		}
		if m := zeroMeaning(s); m != "" {
			src += " (0: " + m + ")"
		}
		fmt.Fprintf(tw, "    %s\t%s\t%s\n", s.Field, s.Value, src)
	}
	for _, d := range policyDefaults {
		if m, ok := x.Defaults[d.field]; ok {
			fmt.Fprintf(tw, "    %s\t-\tdefault: %s\n", d.field, m)
		}
	}
	if t := x.Trigger; t != nil {
		group := "consumer group " + t.ConsumerGroup
		if t.ShareGroup != "" {
			group = "share group " + t.ShareGroup
		}
		fmt.Fprintf(tw, "  Trigger %s: %s topic %s, %s, through %s\n", t.Origin, t.Type, t.Topic, group, t.Adapter)
		for _, s := range t.Settings {
			fmt.Fprintf(tw, "    %s\t%s\t%s\n", s.Field, s.Value, s.Source)
		}
		if !hasField(t.Settings, "adapter") {
			fmt.Fprintf(tw, "    adapter\t-\tdefault: franz\n")
		}
		if !hasField(t.Settings, "maxBatchSize") {
			fmt.Fprintf(tw, "    maxBatchSize\t-\tdefault: the adapter's (%d)\n", adapterMaxBatch)
		}
	} else if x.Function != "" {
		fmt.Fprintf(tw, "  Trigger: none in the file; the host's code must give one\n")
	}
	tw.Flush()
}

// zeroMeaning returns, for a limit set to 0 (maxDelay, maxRetryTime,
// maxRecordAge), what 0 means: no limit, as when it is left out; else "".
func zeroMeaning(s setting) string {
	for _, d := range policyDefaults {
		if d.field != s.Field || d.field == "retryCount" || d.field == "onExhausted" {
			continue
		}
		if v, err := hostconfig.ParseDuration(strings.Trim(s.Value, `"`)); err == nil && v == 0 {
			return d.meaning
		}
	}
	return ""
}

func hasField(s []setting, field string) bool {
	for _, v := range s {
		if v.Field == field {
			return true
		}
	}
	return false
}

func indent(s string) string {
	s = strings.TrimRight(s, "\n")
	return "  " + strings.ReplaceAll(s, "\n", "\n  ")
}

// nearest returns the name of names closest to name when it is close
// enough to be a misspelling.
func nearest(name string, names []string) string {
	best, bestDist := "", 3
	for _, n := range names {
		if d := distance(strings.ToLower(name), strings.ToLower(n)); d < bestDist {
			best, bestDist = n, d
		}
	}
	return best
}

func distance(a, b string) int {
	prev := make([]int, len(b)+1)
	cur := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
		}
		prev, cur = cur, prev
	}
	return prev[len(b)]
}
