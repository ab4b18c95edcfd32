package main

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"
)

// The environment variables -url and the token default to, so that a
// token stays off the command line.
const (
	urlEnv   = "REDELIVER_URL"
	tokenEnv = "REDELIVER_TOKEN"
)

const hostDoc = `The host is reached at the address of its status page (-url, or $` + urlEnv + `):
what host.WithHTTP, host.WithListener or host.json's statusPage serves, such
as http://127.0.0.1:8080. stopped reads its /status.json; resume and skip
post to its /actions/resume and /actions/skip, the status page's own
buttons, and wait for the host's answer (the host waits at most 10 s for
the partition's worker).

A host given a token (host.WithToken) needs it for resume and skip: it is
read from $` + tokenEnv + `, or from the file -token-file names (its last newline
dropped), and sent as "Authorization: Bearer <token>", never written on the
command line. A host without a token takes the actions only over the
loopback interface.`

// The host's JSON, as far as these commands read it (host.Status).
type hostStatus struct {
	Functions []struct {
		Name       string `json:"name"`
		Topic      string `json:"topic"`
		Group      string `json:"group"`
		Partitions []struct {
			Topic          string    `json:"topic"`
			Partition      int32     `json:"partition"`
			State          string    `json:"state"`
			Checkpoint     int64     `json:"checkpoint"`
			FirstOffset    int64     `json:"firstOffset"`
			LastOffset     int64     `json:"lastOffset"`
			Retry          int       `json:"retry"`
			LastError      string    `json:"lastError"`
			Since          time.Time `json:"since"`
			StoppedRecords []int64   `json:"stoppedRecords"`
			StoppedKeys    []string  `json:"stoppedKeys"`
		} `json:"partitions"`
	} `json:"functions"`
}

// stoppedUnit is one stopped unit a host shows: a partition (partition
// ordering), or a record (key ordering, where its key is stopped, and a
// share group).
type stoppedUnit struct {
	Function  string `json:"function"`
	Topic     string `json:"topic"`
	Partition int32  `json:"partition"`
	// Offset is the stopped record's, or for a partition the first
	// offset of the batch it stopped at.
	Offset int64 `json:"offset"`
	// Record says that the unit is a record (Offset names it): resume
	// and skip address it with -key or -offset.
	Record bool `json:"record"`
	// Key is the key stopped, in key ordering; HasKey says there is one
	// (a key may be empty).
	Key       string    `json:"key,omitempty"`
	HasKey    bool      `json:"keyed,omitempty"`
	Retry     int       `json:"retry,omitempty"`
	Since     time.Time `json:"since,omitzero"`
	LastError string    `json:"lastError,omitempty"`
}

// units lists the stopped units of st, of function fn when it is not "".
func (st *hostStatus) units(fn string) []stoppedUnit {
	var out []stoppedUnit
	for _, f := range st.Functions {
		if fn != "" && f.Name != fn {
			continue
		}
		for _, p := range f.Partitions {
			base := stoppedUnit{Function: f.Name, Topic: p.Topic, Partition: p.Partition, Retry: p.Retry, Since: p.Since, LastError: p.LastError}
			switch {
			case len(p.StoppedRecords) > 0:
				for i, o := range p.StoppedRecords {
					u := base
					u.Offset, u.Record = o, true
					if i < len(p.StoppedKeys) {
						u.Key, u.HasKey = p.StoppedKeys[i], true
					}
					out = append(out, u)
				}
			case p.State == "stopped":
				u := base
				u.Offset = p.FirstOffset
				out = append(out, u)
			}
		}
	}
	return out
}

// hostClient talks to a host's HTTP endpoints.
type hostClient struct {
	base  *url.URL
	token string
	http  *http.Client
}

// newHostClient checks raw, the -url given, and reads the token.
func newHostClient(raw, tokenFile string, timeout time.Duration, e env) (*hostClient, error) {
	if raw == "" {
		raw = lookupEnv(e, urlEnv)
	}
	if raw == "" {
		return nil, fmt.Errorf("no host: give -url http://HOST:PORT (the address of the host's status page), or set $%s", urlEnv)
	}
	if !strings.Contains(raw, "://") {
		raw = "http://" + raw
	}
	u, err := url.Parse(raw)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return nil, fmt.Errorf("-url %q: want the address of the host's status page, such as http://127.0.0.1:8080", raw)
	}
	u.Path = strings.TrimSuffix(strings.TrimSuffix(u.Path, "/status.json"), "/")
	u.RawQuery, u.Fragment = "", ""
	c := &hostClient{base: u, http: &http.Client{Timeout: timeout}}
	c.token = lookupEnv(e, tokenEnv)
	if tokenFile != "" {
		b, err := os.ReadFile(tokenFile)
		if err != nil {
			return nil, fmt.Errorf("-token-file: %v", err)
		}
		c.token = strings.TrimRight(string(b), "\r\n")
		if c.token == "" {
			return nil, fmt.Errorf("-token-file %s: the file is empty", tokenFile)
		}
	}
	return c, nil
}

func (c *hostClient) url(path string) string {
	u := *c.base
	u.Path += path
	return u.String()
}

// status reads the host's /status.json.
func (c *hostClient) status(ctx context.Context) (*hostStatus, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, c.url("/status.json"), nil)
	if err != nil {
		return nil, err
	}
	req.Header.Set("Accept", "application/json")
	resp, err := c.http.Do(req)
	if err != nil {
		return nil, fmt.Errorf("cannot reach the host at %s: %v (is it the address of the host's status page, and is the host running?)", c.base, unwrapURLError(err))
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(io.LimitReader(resp.Body, 64<<20))
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("%s answered %s: %s", c.url("/status.json"), resp.Status, answerText(body))
	}
	var st hostStatus
	if err := json.Unmarshal(body, &st); err != nil || st.Functions == nil {
		return nil, fmt.Errorf("%s is not a redeliver host's status (%s): is %s the address of the host's status page?", c.url("/status.json"), notJSON(err), c.base)
	}
	return &st, nil
}

// act posts verb (resume or skip) for u, and returns the host's message.
func (c *hostClient) act(ctx context.Context, verb string, u stoppedUnit) (string, error) {
	form := url.Values{"function": {u.Function}, "topic": {u.Topic}, "partition": {strconv.FormatInt(int64(u.Partition), 10)}}
	if u.Record {
		form.Set("offset", strconv.FormatInt(u.Offset, 10))
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, c.url("/actions/"+verb), strings.NewReader(form.Encode()))
	if err != nil {
		return "", err
	}
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	req.Header.Set("Accept", "application/json")
	if c.token != "" {
		req.Header.Set("Authorization", "Bearer "+c.token)
	}
	resp, err := c.http.Do(req)
	if err != nil {
		return "", fmt.Errorf("cannot reach the host at %s: %v", c.base, unwrapURLError(err))
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	var ans struct {
		OK      bool   `json:"ok"`
		Message string `json:"message"`
		Error   string `json:"error"`
	}
	_ = json.Unmarshal(body, &ans)
	if resp.StatusCode == http.StatusOK && ans.OK {
		return ans.Message, nil
	}
	msg := cmp.Or(ans.Error, answerText(body))
	switch resp.StatusCode {
	case http.StatusUnauthorized:
		if c.token == "" {
			msg += fmt.Sprintf(" (set $%s or give -token-file with the host's token)", tokenEnv)
		}
	case http.StatusGatewayTimeout:
		msg += fmt.Sprintf(" (run 'redeliver stopped -url %s' to see where it stands)", c.base)
	}
	return "", fmt.Errorf("the host answered %s: %s", resp.Status, msg)
}

func unwrapURLError(err error) error {
	var ue *url.Error
	if errors.As(err, &ue) {
		return ue.Err
	}
	return err
}

func notJSON(err error) string {
	if err != nil {
		return "not its JSON: " + err.Error()
	}
	return "no functions in it"
}

// answerText is a reply's body for an error message: its first line, cut.
func answerText(body []byte) string {
	s := strings.TrimSpace(string(body))
	var ans struct {
		Error string `json:"error"`
	}
	if json.Unmarshal(body, &ans) == nil && ans.Error != "" {
		return ans.Error
	}
	if i := strings.IndexByte(s, '\n'); i >= 0 {
		s = s[:i]
	}
	if len(s) > 200 {
		s = s[:200] + "…"
	}
	if s == "" {
		return "(no body)"
	}
	return s
}

// hostFlags are the flags of the commands that talk to a host.
type hostFlags struct {
	url, tokenFile *string
	timeout        *time.Duration
	json           *bool
}

func addHostFlags(fs *flag.FlagSet) hostFlags {
	return hostFlags{
		url:       fs.String("url", "", "the `address` of the host's status page, such as http://127.0.0.1:8080 (default $"+urlEnv+")"),
		tokenFile: fs.String("token-file", "", "a `file` holding the host's token (default: $"+tokenEnv+")"),
		timeout:   fs.Duration("timeout", 30*time.Second, "how long to wait for the host"),
		json:      fs.Bool("json", false, "print the result as JSON"),
	}
}

func runStopped(args []string, e env) int {
	fs := newFlags("stopped", e)
	hf := addHostFlags(fs)
	function := fs.String("function", "", "show only this `function`'s")
	pos, code := parseArgs(fs, args, e)
	if code >= 0 {
		return code
	}
	if len(pos) > 0 {
		return usageError(fs, "unexpected argument %q: stopped takes flags only", pos[0])
	}
	c, err := newHostClient(*hf.url, *hf.tokenFile, *hf.timeout, e)
	if err != nil {
		return usageError(fs, "%v", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), *hf.timeout)
	defer cancel()
	st, err := c.status(ctx)
	if err != nil {
		fmt.Fprintf(e.stderr, "redeliver stopped: %v\n", err)
		return exitProblems
	}
	if *function != "" {
		if err := st.function(*function); err != nil {
			fmt.Fprintf(e.stderr, "redeliver stopped: %v\n", err)
			return exitProblems
		}
	}
	units := st.units(*function)
	if *hf.json {
		if units == nil {
			units = []stoppedUnit{}
		}
		printJSON(e.stdout, units)
		return exitOK
	}
	printUnits(e.stdout, c.base.String(), units, e.now())
	return exitOK
}

// function returns an error, with the name meant, when st has no function
// fn.
func (st *hostStatus) function(fn string) error {
	var names []string
	for _, f := range st.Functions {
		if f.Name == fn {
			return nil
		}
		names = append(names, f.Name)
	}
	msg := fmt.Sprintf("the host has no function %q", fn)
	switch s := nearest(fn, names); {
	case s != "":
		msg += ": did you mean " + s + "?"
	case len(names) > 0:
		msg += ": its functions are " + strings.Join(names, ", ")
	}
	return errors.New(msg)
}

func printUnits(w io.Writer, host string, units []stoppedUnit, now time.Time) {
	if len(units) == 0 {
		fmt.Fprintf(w, "%s: nothing stopped\n", host)
		return
	}
	keys, records, parts := 0, 0, 0
	for _, u := range units {
		switch {
		case u.HasKey:
			keys++
		case u.Record:
			records++
		default:
			parts++
		}
	}
	var what []string
	for _, n := range []struct {
		n          int
		one, other string
	}{{keys, "key", "keys"}, {records, "record", "records"}, {parts, "partition", "partitions"}} {
		if n.n == 1 {
			what = append(what, "1 "+n.one)
		} else if n.n > 1 {
			what = append(what, fmt.Sprintf("%d %s", n.n, n.other))
		}
	}
	fmt.Fprintf(w, "%s: %s stopped\n", host, strings.Join(what, ", "))
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "FUNCTION\tPARTITION\tSTOPPED\tOFFSET\tKEY\tSINCE\tLAST ERROR")
	for _, u := range units {
		kind, key := "partition", "-"
		switch {
		case u.HasKey:
			kind, key = "key", strconv.Quote(u.Key)
		case u.Record:
			kind = "record"
		}
		since := "-"
		if !u.Since.IsZero() {
			since = now.Sub(u.Since).Truncate(time.Second).String() + " ago"
		}
		fmt.Fprintf(tw, "%s\t%s/%d\t%s\t%d\t%s\t%s\t%s\n", u.Function, u.Topic, u.Partition, kind, u.Offset, key, since, oneLine(u.LastError, 80))
	}
	tw.Flush()
	fmt.Fprintf(w, "Release one with 'redeliver resume' (delivered again, a fresh count) or 'redeliver skip' (past it):\n")
	u := units[0]
	target := fmt.Sprintf("%s %s/%d", u.Function, u.Topic, u.Partition)
	switch {
	case u.HasKey:
		target += " -key " + quoteArg(u.Key)
	case u.Record:
		target += " -offset " + strconv.FormatInt(u.Offset, 10)
	}
	fmt.Fprintf(w, "  redeliver resume -url %s %s\n", host, target)
}

// quoteArg quotes a for a shell when it needs it.
func quoteArg(a string) string {
	if a != "" && !strings.ContainsAny(a, " \t\n;'\"$&|<>()*?`\\#~{}[]!") {
		return a
	}
	return "'" + strings.ReplaceAll(a, "'", `'\''`) + "'"
}

func runResume(args []string, e env) int { return runRelease("resume", args, e) }
func runSkip(args []string, e env) int   { return runRelease("skip", args, e) }

// runRelease runs resume or skip.
func runRelease(verb string, args []string, e env) int {
	fs := newFlags(verb, e)
	hf := addHostFlags(fs)
	key := fs.String("key", "", "the stopped `key` (key ordering): its stopped record is released")
	offset := fs.Int64("offset", -1, "the `offset` of the stopped record (key ordering, a share group)")
	pos, code := parseArgs(fs, args, e)
	if code >= 0 {
		return code
	}
	keySet := false
	fs.Visit(func(f *flag.Flag) { keySet = keySet || f.Name == "key" })
	switch {
	case len(pos) == 0:
		return usageError(fs, "want FUNCTION TOPIC/PARTITION, such as orders orders/3")
	case len(pos) == 1:
		return usageError(fs, "want FUNCTION TOPIC/PARTITION, got only %q", pos[0])
	case len(pos) > 2:
		return usageError(fs, "want FUNCTION TOPIC/PARTITION, got %d arguments", len(pos))
	case keySet && *offset >= 0:
		return usageError(fs, "give -key or -offset, not both")
	}
	topic, pstr, ok := cutLast(pos[1], "/")
	p, err := strconv.ParseInt(pstr, 10, 32)
	if !ok || topic == "" || err != nil || p < 0 {
		return usageError(fs, "%q: want TOPIC/PARTITION, such as orders/3", pos[1])
	}
	c, err := newHostClient(*hf.url, *hf.tokenFile, *hf.timeout, e)
	if err != nil {
		return usageError(fs, "%v", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), *hf.timeout)
	defer cancel()
	fail := func(err error) int {
		fmt.Fprintf(e.stderr, "redeliver %s: %v\n", verb, err)
		return exitProblems
	}
	st, err := c.status(ctx)
	if err != nil {
		return fail(err)
	}
	fn := pos[0]
	if err := st.function(fn); err != nil {
		return fail(err)
	}
	u, err := st.target(fn, topic, int32(p), keySet, *key, *offset)
	if err != nil {
		return fail(err)
	}
	msg, err := c.act(ctx, verb, u)
	if err != nil {
		return fail(err)
	}
	if *hf.json {
		printJSON(e.stdout, struct {
			OK      bool   `json:"ok"`
			Message string `json:"message"`
			stoppedUnit
		}{true, msg, u})
		return exitOK
	}
	what := fmt.Sprintf("%s/%d of %s", u.Topic, u.Partition, u.Function)
	switch {
	case u.HasKey:
		what = fmt.Sprintf("key %q of %s (its record at offset %d)", u.Key, what, u.Offset)
	case u.Record:
		what = fmt.Sprintf("the record at offset %d of %s", u.Offset, what)
	}
	past := map[string]string{"resume": "resumed", "skip": "skipped"}[verb]
	fmt.Fprintf(e.stdout, "%s %s\n", past, what)
	return exitOK
}

func cutLast(s, sep string) (before, after string, ok bool) {
	i := strings.LastIndex(s, sep)
	if i < 0 {
		return s, "", false
	}
	return s[:i], s[i+len(sep):], true
}

// target finds the stopped unit of fn's topic/partition that -key or
// -offset names (nothing: the partition), or says why there is none.
func (st *hostStatus) target(fn, topic string, p int32, keySet bool, key string, offset int64) (stoppedUnit, error) {
	all := st.units(fn)
	var here []stoppedUnit
	var parts []string
	for _, u := range all {
		if u.Topic == topic && u.Partition == p {
			here = append(here, u)
		}
		if s := fmt.Sprintf("%s/%d", u.Topic, u.Partition); !slices.Contains(parts, s) {
			parts = append(parts, s)
		}
	}
	where := fmt.Sprintf("%s/%d of function %s", topic, p, fn)
	if len(here) == 0 {
		msg := where + " is not stopped"
		switch s := nearest(fmt.Sprintf("%s/%d", topic, p), parts); {
		case len(parts) == 0:
			msg += ": nothing of the function is stopped"
		case s != "":
			msg += ": did you mean " + s + "?"
		default:
			msg += ": its stopped partitions are " + strings.Join(parts, ", ")
		}
		return stoppedUnit{}, errors.New(msg)
	}
	list := func() string {
		var s []string
		for _, u := range here {
			if u.HasKey {
				s = append(s, fmt.Sprintf("key %q at offset %d", u.Key, u.Offset))
			} else {
				s = append(s, fmt.Sprintf("offset %d", u.Offset))
			}
		}
		return strings.Join(s, ", ")
	}
	switch {
	case keySet:
		var keys []string
		for _, u := range here {
			if u.HasKey && u.Key == key {
				return u, nil
			}
			if u.HasKey {
				keys = append(keys, u.Key)
			}
		}
		if len(keys) == 0 {
			return stoppedUnit{}, fmt.Errorf("%s has no key stopped (it is not in key ordering): it has %s stopped; give -offset for a record, or neither for the partition", where, list())
		}
		msg := fmt.Sprintf("key %q is not stopped on %s", key, where)
		if s := nearest(key, keys); s != "" {
			msg += fmt.Sprintf(": did you mean %q?", s)
		} else {
			msg += ": its stopped keys are " + list()
		}
		return stoppedUnit{}, errors.New(msg)
	case offset >= 0:
		for _, u := range here {
			if u.Record && u.Offset == offset {
				return u, nil
			}
		}
		return stoppedUnit{}, fmt.Errorf("no record at offset %d is stopped on %s: it has %s stopped", offset, where, list())
	case here[0].Record:
		how := "-offset"
		if here[0].HasKey {
			how = "-key (or -offset)"
		}
		return stoppedUnit{}, fmt.Errorf("%s has %d records stopped: %s; name one with %s", where, len(here), list(), how)
	}
	return here[0], nil
}
