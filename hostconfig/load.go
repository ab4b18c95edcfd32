package hostconfig

import (
	"bytes"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"unicode"
	"unicode/utf8"

	"github.com/tailscale/hujson"
)

// DefaultEnvPrefix starts the names of the environment variables that
// override a host.json, unless [Loader.EnvPrefix] names another, as Azure
// Functions app settings do:
// AzureFunctionsJobHost__checkpointRetryPolicy__retryCount=3. A double
// underscore separates the prefix and the keys of the path; names match
// case-insensitively.
const DefaultEnvPrefix = "AzureFunctionsJobHost"

// Loader reads host.json files. The zero Loader reads the process
// environment for overrides named with [DefaultEnvPrefix]. A Loader is safe
// for concurrent use if its Environ is.
type Loader struct {
	// Environ returns the environment as "key=value" strings, as
	// [os.Environ] does; nil means os.Environ. Return nil to ignore the
	// environment.
	Environ func() []string

	// EnvPrefix starts the names of the overriding environment variables,
	// e.g. "ORDERS" for ORDERS__checkpointRetryPolicy__retryCount; ""
	// means [DefaultEnvPrefix]. A trailing "__" is optional.
	EnvPrefix string
}

// prefix returns the environment prefix with its "__".
func (l Loader) prefix() string {
	p := strings.TrimSuffix(l.EnvPrefix, "__")
	if p == "" {
		p = DefaultEnvPrefix
	}
	return p + "__"
}

// Load reads the host.json at path with the zero [Loader]: overrides come
// from environment variables named AzureFunctionsJobHost__... (use a
// Loader with EnvPrefix for another prefix).
//
// Check the Config's Warnings: they name what was read but is not in force,
// such as an environment variable that looks like an override but is not
// one. (A section name spelt almost like one of ours is an error.) Print them or log
// them at start-up:
//
//	cfg, err := hostconfig.Load("host.json")
//	if err != nil {
//		log.Fatal(err)
//	}
//	for _, w := range cfg.Warnings {
//		log.Print("host.json: warning: ", w)
//	}
func Load(path string) (*Config, error) { return Loader{}.Load(path) }

// Parse reads a host.json held in data with the zero [Loader]; name is the
// file name errors show.
func Parse(name string, data []byte) (*Config, error) { return Loader{}.Parse(name, data) }

// Read reads a host.json from r with the zero [Loader]; name is the file
// name errors show.
func Read(name string, r io.Reader) (*Config, error) { return Loader{}.Read(name, r) }

// Load reads the host.json at path; errors name it by its base name.
func (l Loader) Load(path string) (*Config, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("hostconfig: %w", err)
	}
	return l.Parse(filepath.Base(path), data)
}

// Read reads a host.json from r; name is the file name errors show.
func (l Loader) Read(name string, r io.Reader) (*Config, error) {
	data, err := io.ReadAll(r)
	if err != nil {
		return nil, fmt.Errorf("hostconfig: reading %s: %w", name, err)
	}
	return l.Parse(name, data)
}

// Parse reads a host.json held in data; name is the file name errors show.
// The error, when not nil, is an [*Error] listing every problem found.
func (l Loader) Parse(name string, data []byte) (*Config, error) {
	environ := l.Environ
	if environ == nil {
		environ = os.Environ
	}
	d := &decoder{file: name, src: data, prefix: l.prefix()}
	root := d.parse(data)
	if root != nil {
		d.overlay(root, environ())
	}
	cfg := d.config(root)
	if len(d.problems) > 0 {
		sort.SliceStable(d.problems, func(i, j int) bool { return d.problems[i].before(d.problems[j]) })
		return nil, &Error{Problems: d.problems, Warnings: d.warnings}
	}
	return cfg, nil
}

// Problem is one thing wrong with a host.json or its environment overrides.
type Problem struct {
	// File is the host.json's name; Line and Col (1-based, Col in bytes)
	// locate the problem in it. Line is 0 when the value came from the
	// environment.
	File      string
	Line, Col int
	// Env is the environment variable the value came from, or "".
	Env string
	// Path is the JSON path of the setting, e.g.
	// "checkpointRetryPolicy.sleepDuration"; "" for a syntax error.
	Path string
	// Msg says what is wrong and what was expected.
	Msg string
}

// Error formats the problem as
// "hostconfig: host.json:7:21: checkpointRetryPolicy.sleepDuration: ...".
func (p *Problem) Error() string { return "hostconfig: " + p.text() }

// before orders problems: the file's by position, then the environment's.
func (p *Problem) before(q *Problem) bool {
	if (p.Env == "") != (q.Env == "") {
		return p.Env == ""
	}
	if p.Env != q.Env {
		return p.Env < q.Env
	}
	if p.Line != q.Line {
		return p.Line < q.Line
	}
	return p.Col < q.Col
}

// place names where the problem is: "host.json:7:21", "environment NAME"
// or the file.
func (p *Problem) place() string {
	switch {
	case p.Env != "":
		return "environment " + p.Env
	case p.Line > 0:
		return fmt.Sprintf("%s:%d:%d", p.File, p.Line, p.Col)
	}
	return p.File
}

func (p *Problem) text() string {
	var b strings.Builder
	switch {
	case p.Env != "":
		fmt.Fprintf(&b, "environment %s: ", p.Env)
	case p.Line > 0:
		fmt.Fprintf(&b, "%s:%d:%d: ", p.File, p.Line, p.Col)
	case p.File != "":
		fmt.Fprintf(&b, "%s: ", p.File)
	}
	if p.Path != "" {
		b.WriteString(p.Path + ": ")
	}
	b.WriteString(p.Msg)
	return b.String()
}

// Error lists every problem found in a host.json, in the order of the file.
type Error struct {
	Problems []*Problem
	// Warnings lists what the file and the environment hold that would not
	// be in force even without the problems, as [Config.Warnings] does
	// for a file that loads. Error does not include them.
	Warnings []string
}

// Error returns the problems, one a line.
func (e *Error) Error() string {
	lines := make([]string, len(e.Problems))
	for i, p := range e.Problems {
		lines[i] = p.Error()
	}
	return strings.Join(lines, "\n")
}

// Unwrap returns the problems, so that errors.As finds a [*Problem].
func (e *Error) Unwrap() []error {
	errs := make([]error, len(e.Problems))
	for i, p := range e.Problems {
		errs[i] = p
	}
	return errs
}

// A node is a JSON value of one of our sections: read from the file, or an
// environment variable's string.
type node struct {
	kind    hujson.Kind // 'n', 't', 'f', '"', '0', '{', '[', or envKind
	text    string      // a string's value, a number's literal, an environment value
	members []member    // an object's members, in order
	elems   []*node     // an array's elements, in order
	path    string      // the JSON path where the value is written
	off     int         // byte offset in the file
	env     string      // the environment variable it came from, or ""
}

type member struct {
	key    string
	keyOff int
	val    *node
}

// envKind is the kind of an environment variable's value, which is text
// that each setting reads as its own type.
const envKind hujson.Kind = 0

// isText reports whether n is a string or an environment value.
func (n *node) isText() bool { return n.kind == '"' || n.kind == envKind }

// fromEnv reports whether n was set by an environment variable.
func (n *node) fromEnv() bool { return n.env != "" }

// fold returns s with each letter replaced by the smallest of the letters
// it matches ignoring case: two strings fold to the same key exactly when
// strings.EqualFold says they are equal.
func fold(s string) string {
	return strings.Map(func(r rune) rune {
		least := r
		for f := unicode.SimpleFold(r); f != r; f = unicode.SimpleFold(f) {
			least = min(least, f)
		}
		return least
	}, s)
}

// firsts finds, for each member of an object, the first member with the
// same name ignoring case, in time linear in the number of members.
type firsts map[string]*member

// first returns the first member named as m, which is m itself unless m
// repeats a name.
func (f firsts) first(m *member) *member {
	k := fold(m.key)
	if first, ok := f[k]; ok {
		return first
	}
	f[k] = m
	return m
}

// lookup returns the first member called key, case-insensitively.
func (n *node) lookup(key string) *member {
	for i := range n.members {
		if strings.EqualFold(n.members[i].key, key) {
			return &n.members[i]
		}
	}
	return nil
}

// decoder turns a host.json and its environment into a Config, gathering
// problems and warnings on the way.
type decoder struct {
	file     string
	src      []byte
	problems []*Problem
	seen     map[string]bool // problems already reported
	warnings []string

	keys        []functionKey        // where the file names functions
	settings    map[string][]Setting // by function name, "" for the host-wide policy
	retryFields []Setting            // the retry section's, in force when checkpointRetryPolicy sets no host-wide policy
	prefix      string               // of the environment overrides, with its "__"
	lines       []int                // the offset where each line starts, made by lineCol
}

// setSettings records the settings of the policy of function ("" for the
// host-wide one).
func (d *decoder) setSettings(function string, s []Setting) {
	if d.settings == nil {
		d.settings = map[string][]Setting{}
	}
	d.settings[function] = s
}

// retrySettings makes the retry section's settings the host-wide ones.
func (d *decoder) retrySettings() { d.setSettings("", d.retryFields) }

// parse parses src and converts the document to nodes: the whole tree of
// our sections, only the names of the others.
func (d *decoder) parse(src []byte) *node {
	if bytes.HasPrefix(src, []byte("\uFEFF")) { // a byte order mark, as Windows editors write
		src = append([]byte("   "), src[3:]...)
	}
	deep, sep := scan(src)
	if deep >= 0 {
		d.addAt(deep, "", "nesting deeper than %d levels", maxDepth)
		return nil
	}
	v, err := hujson.Parse(src)
	if sep.off >= 0 && d.separatorFirst(sep, err) {
		r, _ := utf8.DecodeRune(src[sep.off:])
		d.addAt(sep.off, "", `syntax error: invalid character '\u%04x' in line comment`, r)
		return nil
	}
	if err != nil {
		d.syntax(err)
		return nil
	}
	root := convert(&v, "")
	if root.kind != '{' {
		d.addAt(v.StartOffset, "", "the document is %s: want a JSON object", describe(root))
		return nil
	}
	return root
}

// maxDepth bounds the nesting of objects and arrays: the parser recurses
// once per level, and a document nested millions deep would exhaust the
// stack, which no program can recover from.
const maxDepth = 1000

// lineSeparator locates a U+2028 or U+2029 inside a // comment, which the
// loader refuses: JavaScript ends a line comment there, so an editor shows
// the rest of the line as a setting, while the parser reads it as part of
// the comment, up to the newline.
type lineSeparator struct {
	off   int  // of the separator, -1 for none
	start int  // of the comment's "//"
	open  bool // the comment runs to the end of the document with no newline
}

// scan reads src once as the parser does, skipping strings and comments,
// and finds what the parser leaves to us: the offset of the first object or
// array nested deeper than maxDepth (deep, -1 if none; the scan stops there)
// and the first line separator inside a // comment. It leaves every other
// syntax error to the parser.
func scan(src []byte) (deep int, sep lineSeparator) {
	sep.off = -1
	depth := 0
	for i := 0; i < len(src); i++ {
		switch src[i] {
		case '"':
			for i++; i < len(src) && src[i] != '"'; i++ {
				if src[i] == '\\' {
					i++
				}
			}
		case '/':
			switch {
			case i+1 < len(src) && src[i+1] == '/':
				end := bytes.IndexByte(src[i:], '\n')
				open := end < 0
				if open {
					end = len(src) - i
				}
				if sep.off < 0 {
					if k := bytes.IndexFunc(src[i:i+end], isLineSeparator); k >= 0 {
						sep = lineSeparator{off: i + k, start: i, open: open}
					}
				}
				i += end
			case i+1 < len(src) && src[i+1] == '*':
				if j := bytes.Index(src[i+2:], []byte("*/")); j >= 0 {
					i += j + 3
				} else {
					i = len(src)
				}
			}
		case '{', '[':
			if depth++; depth > maxDepth {
				return i, sep
			}
		case '}', ']':
			depth--
		}
	}
	return -1, sep
}

func isLineSeparator(r rune) bool { return r == '\u2028' || r == '\u2029' }

// separatorFirst tells whether the line separator sep is the first syntax
// error of the document, given the parser's error err (nil if it read the
// document). Versions of hujson differ here: the newer ones stop at the
// separator with the error we report, the older ones read the comment to
// the newline (or, for a comment left open at the end, report that
// comment as unterminated, at its start). Deciding it here gives every
// program the same answer whichever version its build selects.
func (d *decoder) separatorFirst(sep lineSeparator, err error) bool {
	if err == nil {
		return true
	}
	line, col, ok := syntaxPos(err)
	if !ok {
		return false
	}
	sepLine, sepCol := d.lineCol(sep.off)
	if line > sepLine || line == sepLine && col >= sepCol {
		return true
	}
	startLine, startCol := d.lineCol(sep.start)
	return sep.open && line == startLine && col == startCol
}

// syntax reports a hujson syntax error, which reads
// "hujson: line 3, column 5: invalid character ...".
func (d *decoder) syntax(err error) {
	p := &Problem{File: d.file, Msg: "syntax error: " + strings.TrimPrefix(err.Error(), "hujson: ")}
	if line, col, ok := syntaxPos(err); ok {
		p.Line, p.Col = line, col
		_, rest, _ := strings.Cut(err.Error(), "column ")
		_, rest, _ = strings.Cut(rest, ": ")
		p.Msg = "syntax error: " + rest
	}
	d.problems = append(d.problems, p)
}

// syntaxPos reads the line and column (in bytes) of a hujson syntax error.
func syntaxPos(err error) (line, col int, ok bool) {
	n, _ := fmt.Sscanf(err.Error(), "hujson: line %d, column %d:", &line, &col)
	return line, col, n == 2
}

// convert turns a parsed value into a node at path.
func convert(v *hujson.Value, path string) *node {
	n := &node{kind: v.Value.Kind(), path: path, off: v.StartOffset}
	switch t := v.Value.(type) {
	case *hujson.Object:
		for i := range t.Members {
			m := &t.Members[i]
			key := m.Name.Value.(hujson.Literal).String()
			n.members = append(n.members, member{key: key, keyOff: m.Name.StartOffset, val: convert(&m.Value, join(path, key))})
		}
	case *hujson.Array:
		for i := range t.Elements {
			n.elems = append(n.elems, convert(&t.Elements[i], path+"["+strconv.Itoa(i)+"]"))
		}
	case hujson.Literal:
		if n.kind == '"' {
			n.text = t.String()
		} else {
			n.text = string(t)
		}
	}
	return n
}

// join appends key to a JSON path, quoting keys that are not plain names.
func join(path, key string) string {
	plain := key != ""
	for _, r := range key {
		if !(r == '_' || r == '-' || r >= '0' && r <= '9' || r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z') {
			plain = false
			break
		}
	}
	if !plain {
		return path + "[" + strconv.Quote(key) + "]"
	}
	if path == "" {
		return key
	}
	return path + "." + key
}

// overlay applies the environment overrides of our sections to root.
func (d *decoder) overlay(root *node, environ []string) {
	type override struct {
		name, value string
		keys        []string
	}
	var overrides []override
	prefix := d.prefix
	for _, kv := range environ {
		name, value, _ := strings.Cut(kv, "=")
		if len(name) < len(prefix) || !strings.EqualFold(name[:len(prefix)], prefix) {
			d.nearEnv(name)
			continue
		}
		keys := strings.Split(name[len(prefix):], "__")
		if sectionOf(keys[0]) == "" {
			if near := nearSectionName(keys[0]); near != "" && len(keys) > 1 {
				// Ours by its prefix, with a section name one typo away:
				// as an override of nothing it would be lost in silence.
				d.addEnv(name, "", "%q is not a section redeliver reads: did you mean %s%s__%s?", keys[0], prefix, near, strings.Join(keys[1:], "__"))
				continue
			}
			d.nearEnv(name)
			continue // not ours
		}
		o := override{name: name, value: value, keys: keys}
		if slices.Contains(keys, "") {
			d.addEnv(o.name, "", "empty key in the name: want %sSECTION__KEY with keys separated by a double underscore", prefix)
			continue
		}
		overrides = append(overrides, o)
	}
	sort.Slice(overrides, func(i, j int) bool {
		a, b := strings.ToLower(overrides[i].name), strings.ToLower(overrides[j].name)
		if a != b {
			return a < b
		}
		return overrides[i].name < overrides[j].name
	})
	for i, o := range overrides {
		for _, p := range overrides[:i] {
			if !isPrefix(p.keys, o.keys) || len(p.keys) < len(o.keys) && shorthandKey(p.keys, len(p.keys)-1) != "" {
				continue // a strategy's name and one of its parameters, say
			}
			if len(p.keys) == len(o.keys) {
				d.addEnv(o.name, "", "sets the same setting as %s (names ignore case)", p.name)
			} else {
				d.addEnv(o.name, "", "conflicts with %s, which gives a value where this one sets a key inside it", p.name)
			}
			o.keys = nil
			break
		}
		if o.keys != nil {
			setEnv(root, o.keys, o.value, o.name)
		}
	}
}

// nearEnv warns about an environment variable that is not an override but
// looks like one meant for a section of ours: a misspelt prefix or
// section, or keys separated by a single underscore or a colon (the
// separator of .NET's configuration keys, which environment variables
// cannot hold on every system).
func (d *decoder) nearEnv(name string) {
	prefix := strings.TrimSuffix(d.prefix, "__")
	var rest string
	switch {
	case len(name) > len(prefix) && strings.EqualFold(name[:len(prefix)], prefix):
		rest = name[len(prefix):]
	default:
		word, after, ok := cutSeparator(name)
		if !ok {
			return
		}
		w := strings.ToLower(word)
		if distance(w, strings.ToLower(prefix)) > 2 && distance(w, strings.ToLower(DefaultEnvPrefix)) > 2 {
			return
		}
		rest = after
	}
	keys := strings.FieldsFunc(rest, func(r rune) bool { return r == '_' || r == ':' })
	if len(keys) < 2 {
		return
	}
	sec := sectionOf(keys[0])
	if sec == "" {
		sec = nearSectionName(keys[0])
	}
	if sec == "" {
		return
	}
	want := prefix + "__" + sec + "__" + strings.Join(keys[1:], "__")
	if strings.EqualFold(want, name) {
		return
	}
	why := ""
	if strings.ReplaceAll(strings.ReplaceAll(name, "__", ""), "_", "") != strings.ReplaceAll(name, "__", "") || strings.Contains(name, ":") {
		why = "keys are separated by a double underscore: "
	}
	d.warnings = append(d.warnings, fmt.Sprintf("environment %s: ignored: %sdid you mean %s?", name, why, want))
}

// cutSeparator cuts name at its first run of underscores or colons.
func cutSeparator(name string) (before, after string, ok bool) {
	i := strings.IndexAny(name, "_:")
	if i <= 0 {
		return "", "", false
	}
	j := i
	for j < len(name) && (name[j] == '_' || name[j] == ':') {
		j++
	}
	return name[:i], name[j:], j < len(name)
}

// isPrefix reports whether a is a prefix of b or equal to it, ignoring case.
func isPrefix(a, b []string) bool {
	if len(a) > len(b) {
		return false
	}
	for i := range a {
		if !strings.EqualFold(a[i], b[i]) {
			return false
		}
	}
	return true
}

// setEnv sets the value at keys under root to an environment value,
// creating objects on the way and replacing whatever the file had there.
//
// In checkpointRetryPolicy and its functions, sleepDuration and strategy
// are two ways to say one thing: setting one drops the other when the file
// set it, so that an app setting can replace the file's delay.
func setEnv(root *node, keys []string, value, env string) {
	n := root
	for i, k := range keys {
		if isPolicyLevel(keys, i) {
			if other := delayAlternative(k); other != "" {
				n.remove(other, func(m *member) bool { return !m.val.fromEnv() })
			}
		}
		m := n.lookup(k)
		if m == nil {
			n.members = append(n.members, member{key: k, keyOff: -1})
			m = &n.members[len(n.members)-1]
		}
		path := join(n.path, m.key)
		if i == len(keys)-1 {
			m.val = &node{kind: envKind, path: path, text: value, env: env}
			return
		}
		if m.val == nil || m.val.kind != '{' {
			short := m.val
			m.val = &node{kind: '{', path: path, env: env}
			if k := shorthandKey(keys, i); k != "" && short != nil && short.isText() {
				// "strategy": "exponential" is short for
				// {"name": "exponential"}: a variable that sets a
				// parameter keeps the name the file gives.
				short.path = join(path, k)
				m.val.members = []member{{key: k, keyOff: short.off, val: short}}
			}
		}
		n = m.val
	}
}

// shorthandKey returns, when keys[i] names a setting that may be written
// as a string short for an object, the object's key the string stands
// for: a strategy's name, an onExhausted action, a re-drive store's kind.
func shorthandKey(keys []string, i int) string {
	k := keys[i]
	switch {
	case isPolicyLevel(keys, i) && strings.EqualFold(k, "strategy"):
		return "name"
	case isPolicyLevel(keys, i) && strings.EqualFold(k, "onExhausted"):
		return "action"
	case i == 1 && sectionOf(keys[0]) == sectionRedrive && strings.EqualFold(k, "store"):
		return "kind"
	}
	return ""
}

// isPolicyLevel reports whether keys[i] is a key of a policy object:
// checkpointRetryPolicy or one of its functions.
func isPolicyLevel(keys []string, i int) bool {
	if sectionOf(keys[0]) != sectionPolicy {
		return false
	}
	return i == 1 || i == 3 && strings.EqualFold(keys[1], "functions")
}

// delayAlternative returns the other way of giving a delay than key, or "".
func delayAlternative(key string) string {
	switch {
	case strings.EqualFold(key, "sleepDuration"):
		return "strategy"
	case strings.EqualFold(key, "strategy"):
		return "sleepDuration"
	}
	return ""
}

// remove deletes the members called key for which drop is true.
func (n *node) remove(key string, drop func(*member) bool) {
	out := n.members[:0]
	for i := range n.members {
		if m := &n.members[i]; !(strings.EqualFold(m.key, key) && drop(m)) {
			out = append(out, *m)
		}
	}
	n.members = out
}

// lineCol converts a byte offset of the file into a line and a column.
// The first call indexes where the lines start; each call is then a
// binary search, so that a file with many settings (each with its place)
// loads in time linear in its size.
func (d *decoder) lineCol(off int) (line, col int) {
	if off < 0 || off > len(d.src) {
		return 0, 0
	}
	if d.lines == nil {
		d.lines = []int{0}
		for i, c := range d.src {
			if c == '\n' {
				d.lines = append(d.lines, i+1)
			}
		}
	}
	i := sort.SearchInts(d.lines, off+1) - 1 // the last line that starts at or before off
	return i + 1, off - d.lines[i] + 1
}

// add reports a problem with the value n.
func (d *decoder) add(n *node, format string, args ...any) {
	if n.fromEnv() {
		d.addEnv(n.env, n.path, format, args...)
		return
	}
	d.addAt(n.off, n.path, format, args...)
}

// addKey reports a problem with the key of m, whose path is path.
func (d *decoder) addKey(m *member, path string, format string, args ...any) {
	if m.val.fromEnv() {
		d.addEnv(m.val.env, path, format, args...)
		return
	}
	d.addAt(m.keyOff, path, format, args...)
}

func (d *decoder) addAt(off int, path, format string, args ...any) {
	p := &Problem{File: d.file, Path: path, Msg: fmt.Sprintf(format, args...)}
	p.Line, p.Col = d.lineCol(off)
	d.push(p)
}

func (d *decoder) addEnv(env, path, format string, args ...any) {
	d.push(&Problem{File: d.file, Env: env, Path: path, Msg: fmt.Sprintf(format, args...)})
}

// push records p unless the same problem was reported already, as happens
// when several functions inherit one faulty host-wide setting.
func (d *decoder) push(p *Problem) {
	if d.seen == nil {
		d.seen = map[string]bool{}
	}
	if k := p.text(); !d.seen[k] {
		d.seen[k] = true
		d.problems = append(d.problems, p)
	}
}

// warn records a warning about n.
func (d *decoder) warn(n *node, format string, args ...any) {
	d.warnings = append(d.warnings, d.pos(n)+": "+fmt.Sprintf(format, args...))
}
