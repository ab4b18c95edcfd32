package hostconfig

import (
	"cmp"
	"fmt"
	"slices"
	"sort"
	"strconv"
	"strings"

	"github.com/redeliver-go/redeliver/internal/kafkatopic"
)

// sectionTriggers is the section that binds functions to what triggers
// them.
const sectionTriggers = "triggers"

// The fields of a trigger.
var triggerFields = []string{"type", "adapter", "topic", "consumerGroup", "shareGroup", "maxBatchSize", "ordering"}

// The trigger types and the adapters of each.
var (
	triggerTypes  = []string{"kafka"}
	kafkaAdapters = []string{"franz", "kafkago", "sarama", "confluent"}
	orderings     = []string{"partition", "key", "none"}
)

// clientNames names the client of each adapter, for messages.
var clientNames = map[string]string{"kafkago": "kafka-go", "sarama": "sarama", "confluent": "confluent-kafka-go"}

// fieldAliases are names other tools give our fields, for the message about
// an unknown one.
var fieldAliases = map[string]string{
	"group": "consumerGroup", "groupid": "consumerGroup", "consumergroupid": "consumerGroup", "sharegroupid": "shareGroup", "queue": "shareGroup",
	"batchsize": "maxBatchSize", "maxbatch": "maxBatchSize", "topics": "topic",
	"client": "adapter", "trigger": "type", "kind": "type",
	"order": "ordering", "orderingmode": "ordering", "orderby": "ordering",
}

// Trigger is what starts one function of a host: a Kafka topic read by a
// consumer group, or by a share group, as the triggers section of a
// host.json binds it.
//
//	"triggers": {
//	  "orders": {"type": "kafka", "adapter": "franz", "topic": "orders", "consumerGroup": "orders-app", "maxBatchSize": 100},
//	  "payments": {"type": "kafka", "topic": "payments", "consumerGroup": "payments-app", "ordering": "key"},
//	  "emails": {"type": "kafka", "topic": "emails", "shareGroup": "emails-app"}
//	}
//
// A consumer group keeps each partition's order and retries whole batches
// with the checkpoint withheld; a share group (Kafka 4.2 and later, franz
// adapter only) hands records of one partition to several consumers,
// acknowledged one by one, and retries each failed record on its own (see
// package adapters/franz/share). A share group starts at the latest offset
// unless its share.auto.offset.reset configuration says earliest.
//
// A consumer group's "ordering" is "partition" (the default: batches, in
// order, a failing batch holds its partition back), "key" (records of one
// key one at a time in order, different keys at once: a failing record
// holds back its key only) or "none" (records at once, in no order); see
// stream.WithOrdering and docs/KEYS.md.
type Trigger struct {
	// Function is the function's name as the file writes it.
	Function string
	// Origin says where the trigger was read, e.g.
	// "triggers.orders (host.json:12:15)".
	Origin string
	// Type is "kafka".
	Type string
	// Adapter is the Kafka client: "franz" (twmb/franz-go, the default),
	// "kafkago" (segmentio/kafka-go), "sarama" (IBM/sarama) or "confluent"
	// (confluent-kafka-go).
	Adapter string
	// Topic is the topic the function consumes.
	Topic string
	// ConsumerGroup is the consumer group its consumer joins; empty when
	// the trigger reads through a share group.
	ConsumerGroup string
	// ShareGroup is the share group its consumer joins; empty when the
	// trigger reads through a consumer group.
	ShareGroup string
	// MaxBatchSize is the most records a batch holds; 0 means the
	// adapter's default.
	MaxBatchSize int
	// Ordering is "partition" (the default, also when the file sets
	// none), "key" or "none": the stream.Ordering of the function's
	// processor. A share group has none but "partition".
	Ordering string
	// Settings lists each field in the order of triggerFields, with where
	// it was written.
	Settings []Setting
}

// Setting is one value in force and where it was written.
type Setting struct {
	// Field names the setting inside its policy or trigger, e.g.
	// "retryCount" or "strategy.initialDelay".
	Field string
	// Value is the value as written: a string's text, a number's literal.
	Value string
	// Source is "host.json:7:21" or "environment NAME".
	Source string
	// Inherited reports a function's setting taken from the host-wide
	// policy.
	Inherited bool
}

// Trigger returns the trigger of the function called name (names match
// case-insensitively) and whether the file has one.
func (c *Config) Trigger(name string) (Trigger, bool) {
	if t, ok := c.Triggers[name]; ok {
		return t, true
	}
	for n, t := range c.Triggers {
		if strings.EqualFold(n, name) {
			return t, true
		}
	}
	return Trigger{}, false
}

// Settings returns the settings of the policy in force for the function
// called name ("" for the host-wide policy), in the order of the policy's
// fields (a strategy or onExhausted object's own fields as
// "strategy.initialDelay"), each with where it was written; nil when the
// file sets no policy for it (the defaults are in force). A function
// without a policy of its own has the host-wide settings, marked
// Inherited. A field that is not listed holds its default. This is where
// [Config.Explain] and the redeliver CLI read the origin of each value.
func (c *Config) Settings(function string) []Setting {
	if function != "" {
		if s, ok := c.settings[function]; ok {
			return s
		}
		for n, s := range c.settings {
			if n != "" && strings.EqualFold(n, function) {
				return s
			}
		}
		host := slices.Clone(c.settings[""])
		for i := range host {
			host[i].Inherited = true
		}
		return host
	}
	return c.settings[""]
}

// FunctionNames returns the names of the functions the file names, in
// checkpointRetryPolicy.functions or in triggers, sorted, each once: names
// match case-insensitively, and the policy's spelling is kept.
func (c *Config) FunctionNames() []string {
	seen := map[string]bool{}
	var names []string
	for n := range c.Functions {
		seen[fold(n)] = true
		names = append(names, n)
	}
	for n := range c.Triggers {
		if k := fold(n); !seen[k] {
			seen[k] = true
			names = append(names, n)
		}
	}
	slices.SortFunc(names, func(a, b string) int {
		return cmp.Or(strings.Compare(strings.ToLower(a), strings.ToLower(b)), strings.Compare(a, b))
	})
	return names
}

// CheckFunctions checks the file's triggers and per-function policies
// against the functions a host runs: a trigger or a policy for a function
// not in functions is a [*Problem] at its place in the file, with a
// suggestion when the name looks like a misspelt one. The error, when not
// nil, is an [*Error].
func (c *Config) CheckFunctions(functions []string) error {
	runs := make(map[string]bool, len(functions))
	for _, f := range functions {
		runs[fold(f)] = true
	}
	known := func(name string) bool { return runs[fold(name)] }
	var problems []*Problem
	for _, k := range c.keys {
		if known(k.name) {
			continue
		}
		p := k.at
		what := "a trigger"
		if k.policy {
			what = "a policy"
		}
		p.Msg = fmt.Sprintf("%s for function %q, which the host does not run", what, k.name)
		if s := suggest(k.name, functions); s != "" {
			p.Msg += ": did you mean " + s + "?"
		} else if len(functions) > 0 {
			p.Msg += ": its functions are " + strings.Join(functions, ", ")
		}
		problems = append(problems, &p)
	}
	if len(problems) == 0 {
		return nil
	}
	sort.SliceStable(problems, func(i, j int) bool { return problems[i].before(problems[j]) })
	return &Error{Problems: problems}
}

// nearFunctions warns about a function with a policy of its own that no
// trigger names, when a trigger names a function without a policy of its
// own by almost the same name: one of the two names is misspelt, and the
// policy does not apply to the trigger's function. Past nearPairs pairs
// of such names it warns once, naming the first policy.
func (d *decoder) nearFunctions() {
	var policies, triggers []functionKey
	named := map[bool]map[string]bool{true: {}, false: {}}
	for _, k := range d.keys {
		named[k.policy][fold(k.name)] = true
	}
	var triggerNames []string
	for _, k := range d.keys {
		switch {
		case named[!k.policy][fold(k.name)]:
		case k.policy:
			policies = append(policies, k)
		default:
			triggers = append(triggers, k)
			triggerNames = append(triggerNames, k.name)
		}
	}
	if len(policies)*len(triggers) > nearPairs {
		w := policies[0].at
		more := ""
		if len(policies) > 1 {
			more = fmt.Sprintf(", and %d more such policies", len(policies)-1)
		}
		w.Msg = fmt.Sprintf("a policy for function %q, which no trigger names%s, beside %d triggers of functions without a policy: too many names to look for misspellings among them",
			policies[0].name, more, len(triggers))
		d.warnings = append(d.warnings, w.text())
		return
	}
	for _, p := range policies {
		s := suggest(p.name, triggerNames)
		if s == "" {
			continue
		}
		t := triggers[slices.Index(triggerNames, s)]
		w := p.at
		w.Msg = fmt.Sprintf("a policy for function %q, which no trigger names: did you mean %s (the trigger at %s)?", p.name, s, t.at.place())
		d.warnings = append(d.warnings, w.text())
	}
}

// nearPairs bounds the pairs of names nearFunctions compares, so that
// loading takes time linear in the file's size: a file with more policies
// and triggers apart than that (hundreds of each, where a real file has a
// few) gets one warning that names the first policy instead of one for each
// misspelling.
const nearPairs = 1 << 16

// functionKey is where the file names a function: a trigger's or a
// per-function policy's key.
type functionKey struct {
	name   string
	policy bool
	at     Problem // File, Line, Col, Env and Path of the key
}

// keyAt returns the place of m's key, whose path is path, as a Problem
// without a message.
func (d *decoder) keyAt(m *member, path string) Problem {
	p := Problem{File: d.file, Path: path}
	if m.val.fromEnv() {
		p.Env = m.val.env
	} else {
		p.Line, p.Col = d.lineCol(m.keyOff)
	}
	return p
}

// triggers decodes the triggers section.
func (d *decoder) triggers(n *node) map[string]Trigger {
	if n.kind != '{' {
		d.add(n, `want an object of triggers by function name, such as {"orders": {"type": "kafka", "topic": "orders", "consumerGroup": "orders-app"}}, got %s`, describe(n))
		return nil
	}
	out := map[string]Trigger{}
	seen := firsts{}
	var inFile []string // the functions of the file's triggers
	for _, m := range n.members {
		if !m.val.fromEnv() {
			inFile = append(inFile, m.key)
		}
	}
	for i := range n.members {
		m := &n.members[i]
		if strings.TrimSpace(m.key) == "" {
			d.addKey(m, n.path, "empty function name")
			continue
		}
		if first := seen.first(m); first != m {
			d.addKey(m, m.val.path, "duplicate function (names ignore case): also at %s", d.pos(first.val))
			continue
		}
		// A variable for a field of a trigger the file has, with the
		// function's name misspelt, would make a trigger of its own.
		if m.val.fromEnv() && m.val.kind == '{' && m.val.lookup("type") == nil {
			if s := suggest(m.key, inFile); s != "" {
				d.add(m.val, "the file has no trigger for function %q: did you mean %s? (a variable for a field of a trigger needs the function's name as the file spells it, ignoring case)", m.key, s)
				continue
			}
		}
		d.keys = append(d.keys, functionKey{name: m.key, at: d.keyAt(m, m.val.path)})
		if t, ok := d.trigger(m.key, m.val); ok {
			out[m.key] = t
		}
	}
	return out
}

// trigger decodes the trigger of the function called name.
func (d *decoder) trigger(name string, n *node) (Trigger, bool) {
	f := d.triggerFieldsOf(n)
	if f == nil {
		return Trigger{}, false
	}
	t := Trigger{Function: name, Origin: n.path + " (" + d.pos(n) + ")", Settings: d.settingsOf(f, triggerFields, nil)}
	before := len(d.problems)
	if m := f["type"]; m == nil {
		d.add(n, "type is missing: want %s", strings.Join(triggerTypes, " or "))
	} else {
		t.Type = d.choice(m.val, triggerTypes)
	}
	t.Adapter = "franz"
	if m := f["adapter"]; m != nil {
		t.Adapter = d.choice(m.val, kafkaAdapters)
	}
	if t.Topic = d.name(n, f, "topic", "the topic the function consumes"); t.Topic != "" {
		t.Topic = d.topic(f["topic"].val)
	}
	switch cg, sg := f["consumerGroup"], f["shareGroup"]; {
	case cg != nil && sg != nil:
		d.add(sg.val, "a trigger reads through a consumer group or a share group, not both: consumerGroup is also set, at %s", d.pos(cg.val))
	case sg != nil:
		t.ShareGroup = d.name(n, f, "shareGroup", "the share group its consumer joins")
		if m := f["adapter"]; m != nil && t.Adapter != "" && t.Adapter != "franz" {
			d.add(m.val, `%s has no share-group consumer: a shareGroup trigger needs "adapter": "franz" (the default)`, clientNames[t.Adapter])
		}
	default:
		t.ConsumerGroup = d.name(n, f, "consumerGroup", "the consumer group its consumer joins (or shareGroup, to read through a share group)")
	}
	if m := f["maxBatchSize"]; m != nil {
		if v, ok := d.integer(m.val); ok {
			if v < 1 {
				d.add(m.val, "%d: want at least 1 record (leave maxBatchSize out for the adapter's default)", v)
			} else {
				t.MaxBatchSize = v
			}
		}
	}
	t.Ordering = "partition"
	if m := f["ordering"]; m != nil {
		t.Ordering = d.choice(m.val, orderings)
		if t.ShareGroup != "" && t.Ordering != "partition" && t.Ordering != "" {
			d.add(m.val, "a share group acknowledges records one by one and keeps no order: ordering %q applies to a consumerGroup trigger", t.Ordering)
		}
	}
	return t, len(d.problems) == before
}

// triggerFieldsOf checks that n is an object of trigger fields and returns
// its members by canonical key, as fields does, with hints for the names
// other tools give them; nil when n is not an object.
func (d *decoder) triggerFieldsOf(n *node) map[string]*member {
	if n.kind != '{' {
		d.add(n, `want an object such as {"type": "kafka", "topic": "orders", "consumerGroup": "orders-app"}, got %s`, describe(n))
		return nil
	}
	out := map[string]*member{}
	for i := range n.members {
		m := &n.members[i]
		k := canonical(m.key, triggerFields)
		if k == "" {
			hint := ": want one of " + strings.Join(triggerFields, ", ")
			if alias, ok := fieldAliases[strings.ToLower(m.key)]; ok {
				hint = ": did you mean " + alias + "?"
			} else if s := suggest(m.key, triggerFields); s != "" {
				hint = ": did you mean " + s + "?"
			}
			d.addKey(m, n.path, "unknown field %q%s", m.key, hint)
			continue
		}
		if first, dup := out[k]; dup {
			d.addKey(m, m.val.path, "duplicate field: also at %s", d.pos(first.val))
			continue
		}
		out[k] = m
	}
	return out
}

// choice decodes one of names, case-insensitively, as the name is spelt in
// names.
func (d *decoder) choice(n *node, names []string) string {
	if !n.isText() {
		d.add(n, "want %s, got %s", strings.Join(names, " or "), describe(n))
		return ""
	}
	if c := canonical(strings.TrimSpace(n.text), names); c != "" {
		return c
	}
	hint := ""
	if s := suggest(n.text, names); s != "" {
		hint = ": did you mean " + s + "?"
	}
	d.add(n, "unknown value %q%s: want %s", n.text, hint, strings.Join(names, " or "))
	return ""
}

// name decodes the required non-empty string field key of n. A name with
// spaces around it is taken as written, with a warning: Kafka takes it so.
func (d *decoder) name(n *node, f map[string]*member, key, what string) string {
	m := f[key]
	switch {
	case m == nil:
		d.add(n, "%s is missing: want %s", key, what)
	case !m.val.isText():
		d.add(m.val, "want a string, %s, got %s", what, describe(m.val))
	case strings.TrimSpace(m.val.text) == "":
		d.add(m.val, "empty %s: want %s", key, what)
	default:
		if t := strings.TrimSpace(m.val.text); t != m.val.text && key != "topic" {
			d.warn(m.val, "%s %q has spaces around it: Kafka takes it as written, a group other than %q", key, m.val.text, t)
		}
		return m.val.text
	}
	return ""
}

// topic checks that the text node n is a topic name Kafka accepts, and
// returns it, or "" after reporting why not (see [kafkatopic.Problem]).
func (d *decoder) topic(n *node) string {
	if p := kafkatopic.Problem(n.text); p != "" {
		d.add(n, "%s", p)
		return ""
	}
	return n.text
}

// settingsOf lists the members of f in the order of order, objects
// flattened to their members ("strategy.initialDelay"); inherited names the
// members taken from the host-wide policy.
func (d *decoder) settingsOf(f map[string]*member, order []string, inherited map[*member]bool) []Setting {
	var out []Setting
	var add func(field string, n *node, inh bool)
	add = func(field string, n *node, inh bool) {
		if n.kind == '{' {
			for i := range n.members {
				add(field+"."+n.members[i].key, n.members[i].val, inh)
			}
			return
		}
		v := n.text
		switch n.kind {
		case 't':
			v = "true"
		case 'f':
			v = "false"
		case 'n':
			v = "null"
		case '[':
			v = "[...]"
		case '"':
			v = strconv.Quote(n.text)
		}
		out = append(out, Setting{Field: field, Value: v, Source: d.pos(n), Inherited: inh})
	}
	for _, k := range order {
		if m := f[k]; m != nil && m.val != nil {
			add(k, m.val, inherited[m])
		}
	}
	return out
}
