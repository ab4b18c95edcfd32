package hostconfig

import (
	"errors"
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"
)

// The sections of host.json that redeliver reads.
const (
	sectionVersion = "version"
	sectionPolicy  = "checkpointRetryPolicy"
	sectionRetry   = "retry"
	sectionRedrive = "redrive"
)

// sectionOf returns the canonical name of the section called key, or "" when
// the section is not ours.
func sectionOf(key string) string {
	for _, s := range []string{sectionVersion, sectionPolicy, sectionRetry, sectionTriggers, sectionRedrive, sectionOutage, sectionStatusPage} {
		if strings.EqualFold(s, key) {
			return s
		}
	}
	return ""
}

// azureSections are the other sections of an Azure Functions host.json;
// they are ignored without a warning even when they look like ours.
var azureSections = []string{
	"aggregator", "applicationInsights", "blobs", "concurrency", "console",
	"cosmosDb", "customHandler", "durableTask", "eventHub", "extensionBundle",
	"extensions", "fileWatchingEnabled", "functions", "functionTimeout",
	"healthMonitor", "http", "logging", "managedDependency", "queues",
	"sendGrid", "serviceBus", "singleton", "telemetryMode", "tracing",
	"watchDirectories", "watchFiles",
}

// The fields of a checkpointRetryPolicy object and of each of its functions.
var policyFields = []string{"retryCount", "sleepDuration", "strategy", "maxRetryTime", "maxDelay", "maxRecordAge", "honorRetryAfter", "onExhausted"}

// The fields of Azure Functions' retry section.
var retryFields = []string{"strategy", "maxRetryCount", "delayInterval", "minimumInterval", "maximumInterval"}

// config decodes the document root; root is nil when it could not be
// parsed.
func (d *decoder) config(root *node) *Config {
	cfg := &Config{File: d.file}
	if root == nil {
		return cfg
	}
	found := map[string]*member{}
	for i := range root.members {
		m := &root.members[i]
		sec := sectionOf(m.key)
		if sec == "" {
			d.nearSection(m)
			continue
		}
		if first, dup := found[sec]; dup {
			d.addKey(m, m.val.path, "duplicate section: also at %s", d.pos(first.val))
			continue
		}
		found[sec] = m
	}
	if m := found[sectionVersion]; m != nil {
		cfg.Version = d.version(m.val)
	}
	var host, retry *RetryPolicy
	if m := found[sectionPolicy]; m != nil {
		host, cfg.Functions = d.checkpointPolicy(m.val)
	}
	if m := found[sectionRetry]; m != nil {
		retry = d.azureRetry(m.val)
	}
	if m := found[sectionTriggers]; m != nil {
		cfg.Triggers = d.triggers(m.val)
	}
	switch {
	case host != nil:
		cfg.Host = host
		if retry != nil {
			d.warn(found[sectionRetry].val, "retry is ignored: checkpointRetryPolicy (%s) takes precedence", d.pos(found[sectionPolicy].val))
		}
	case retry != nil:
		cfg.Host = retry
		d.retrySettings()
	}
	if m := found[sectionRedrive]; m != nil {
		cfg.Redrive = d.redrive(m.val)
	}
	if m := found[sectionOutage]; m != nil {
		cfg.OutageBudget = d.outageBudget(m.val)
	}
	if m := found[sectionStatusPage]; m != nil {
		cfg.StatusPage = d.statusPage(m.val)
	}
	if found[sectionTriggers] != nil {
		d.nearFunctions()
	}
	cfg.Warnings = d.warnings
	cfg.keys, cfg.settings = d.keys, d.settings
	return cfg
}

// nearSection reports a section that is not ours but is spelt almost like
// one of ours. It is a problem, not a warning: the file loads without the
// section it meant, so a misspelt checkpointRetryPolicy would turn retries
// off with the file passing a check. Keys that are far from every section
// stay quiet (host.json holds other programs' sections too).
func (d *decoder) nearSection(m *member) {
	if name := nearSectionName(m.key); name != "" {
		d.addKey(m, "", "%q is not a section redeliver reads: did you mean %s? (as written the whole section would be ignored)", m.key, name)
	}
}

// nearSectionName returns the section of ours that key, which is none of
// them, looks like a misspelling of, or "". The other sections of Azure
// Functions are never near misses.
func nearSectionName(key string) string {
	for _, s := range azureSections {
		if strings.EqualFold(s, key) {
			return ""
		}
	}
	key = strings.ToLower(key)
	switch {
	case distance(key, sectionRetry) == 1:
		return sectionRetry
	case distance(key, sectionVersion) == 1:
		return sectionVersion
	case distance(key, sectionRedrive) <= 2:
		return sectionRedrive
	case distance(key, strings.ToLower(sectionPolicy)) <= 3:
		return sectionPolicy
	case distance(key, sectionTriggers) <= 2:
		return sectionTriggers
	case distance(key, strings.ToLower(sectionOutage)) <= 3:
		return sectionOutage
	case distance(key, strings.ToLower(sectionStatusPage)) <= 3:
		return sectionStatusPage
	}
	return ""
}

func (d *decoder) version(n *node) string {
	if !n.isText() {
		d.add(n, `want the string "2.0", got %s`, describe(n))
		return ""
	}
	if n.text != "2.0" {
		d.add(n, `want "2.0", got %q: redeliver reads the host.json schema of Azure Functions 2.0 and later`, n.text)
		return ""
	}
	return n.text
}

// fields checks that n is an object whose keys are among known, and
// returns its members by canonical key; nil when n is not an object.
func (d *decoder) fields(n *node, known []string) map[string]*member {
	if n.kind != '{' {
		d.add(n, "want an object, got %s", describe(n))
		return nil
	}
	out := map[string]*member{}
	for i := range n.members {
		m := &n.members[i]
		k := canonical(m.key, known)
		if k == "" {
			d.addKey(m, n.path, "unknown field %q%s", m.key, unknownHint(m.key, known))
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

// unknownHint completes the message about an unknown field.
func unknownHint(key string, known []string) string {
	if s := suggest(key, known); s != "" {
		return ": did you mean " + s + "?"
	}
	for _, def := range strategies {
		if p, ok := def.param(key); ok && canonical("sleepDuration", known) != "" {
			return fmt.Sprintf(`: %s is a parameter of a strategy, e.g. "strategy": {"name": %q, %q: ...}`, p.name, def.name, p.name)
		}
	}
	return ": want one of " + strings.Join(known, ", ")
}

// canonical returns the element of known equal to key ignoring case, or "".
func canonical(key string, known []string) string {
	for _, k := range known {
		if strings.EqualFold(k, key) {
			return k
		}
	}
	return ""
}

// farApart is more than any distance suggest or nearSection accepts.
const farApart = 16

// suggest returns the element of known closest to key when it is close
// enough to be a misspelling, or "".
func suggest(key string, known []string) string {
	best, bestDist := "", math.MaxInt
	for _, k := range known {
		dist := distance(strings.ToLower(key), strings.ToLower(k))
		if dist < bestDist && (dist <= 2 || dist <= len(k)/3) {
			best, bestDist = k, dist
		}
	}
	return best
}

// distance is the number of edits between a and b, in bytes: a byte
// inserted, deleted or replaced, or two neighbours swapped (the optimal
// string alignment distance, so that "retyr" is one edit from "retry").
// When their lengths differ by more than farApart it returns that
// difference, a lower bound, without the quadratic work: no misspelling
// is that far.
func distance(a, b string) int {
	if diff := len(a) - len(b); diff > farApart || -diff > farApart {
		return max(diff, -diff)
	}
	// Three rows of the table: the one before the previous, the
	// previous and the current.
	prev2 := make([]int, len(b)+1)
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
			if i > 1 && j > 1 && a[i-1] == b[j-2] && a[i-2] == b[j-1] {
				cur[j] = min(cur[j], prev2[j-2]+1)
			}
		}
		prev2, prev, cur = prev, cur, prev2
	}
	return prev[len(b)]
}

// checkpointPolicy decodes checkpointRetryPolicy: the host-wide policy (nil
// when the section holds only functions) and the functions' policies.
func (d *decoder) checkpointPolicy(n *node) (*RetryPolicy, map[string]RetryPolicy) {
	f := d.fields(n, append(policyFields[:len(policyFields):len(policyFields)], "functions"))
	if f == nil {
		return nil, nil
	}
	fm := f["functions"]
	delete(f, "functions")
	var host *RetryPolicy
	if len(f) > 0 || fm == nil {
		p := d.policy(n, f, "")
		host = &p
		d.setSettings("", d.settingsOf(f, policyFields, nil))
		d.effect(n, p, f, f)
	}
	if fm == nil {
		return host, nil
	}
	if fm.val.kind != '{' {
		d.add(fm.val, "want an object of policies by function name, got %s", describe(fm.val))
		return host, nil
	}
	fns := map[string]RetryPolicy{}
	seen := firsts{}
	for i := range fm.val.members {
		m := &fm.val.members[i]
		if strings.TrimSpace(m.key) == "" {
			d.addKey(m, fm.val.path, "empty function name")
			continue
		}
		if first := seen.first(m); first != m {
			d.addKey(m, m.val.path, "duplicate function (names ignore case): also at %s", d.pos(first.val))
			continue
		}
		own := d.fields(m.val, policyFields)
		if own == nil {
			continue
		}
		eff := make(map[string]*member, len(policyFields))
		for k, v := range f {
			eff[k] = v
		}
		if own["sleepDuration"] != nil || own["strategy"] != nil {
			delete(eff, "sleepDuration")
			delete(eff, "strategy")
		}
		for k, v := range own {
			eff[k] = v
		}
		fns[m.key] = d.policy(m.val, eff, " (set it here or in "+sectionPolicy+")")
		d.effect(m.val, fns[m.key], eff, own)
		d.keys = append(d.keys, functionKey{name: m.key, policy: true, at: d.keyAt(m, m.val.path)})
		inherited := map[*member]bool{}
		for k, v := range eff {
			inherited[v] = own[k] == nil
		}
		d.setSettings(m.key, d.settingsOf(eff, policyFields, inherited))
	}
	return host, fns
}

// policy decodes the fields of a checkpointRetryPolicy object or of one of
// its functions; n is the object, inherit completes the message about a
// missing field.
func (d *decoder) policy(n *node, f map[string]*member, inherit string) RetryPolicy {
	p := RetryPolicy{Origin: n.path + " (" + d.pos(n) + ")"}
	rc := f["retryCount"]
	if rc == nil {
		d.add(n, "retryCount is missing%s: want -1 (retry forever), 0 (never) or a number of retries", inherit)
	} else {
		p.RetryCount = d.retryCount(rc.val)
	}
	sleep, strategy := f["sleepDuration"], f["strategy"]
	switch {
	case sleep != nil && strategy != nil:
		second := strategy
		if sleep.val.fromEnv() || !strategy.val.fromEnv() && sleep.keyOff > strategy.keyOff {
			second = sleep
		}
		d.addKey(second, second.val.path, "sleepDuration (%s) and strategy (%s) exclude each other: sleepDuration is the delay of the fixed strategy", d.pos(sleep.val), d.pos(strategy.val))
	case sleep != nil:
		p.Strategy = Strategy{Name: "fixed", Delay: d.duration(sleep.val)}
	case strategy != nil:
		p.Strategy = d.strategy(strategy.val)
	case rc != nil && p.RetryCount != 0:
		d.add(n, `the delay is missing%s: set sleepDuration (e.g. "00:00:05") or strategy`, inherit)
	}
	p.MaxDelay = d.optDuration(f["maxDelay"])
	p.MaxRetryTime = d.optDuration(f["maxRetryTime"])
	p.MaxRecordAge = d.optDuration(f["maxRecordAge"])
	if m := f["honorRetryAfter"]; m != nil {
		p.IgnoreRetryAfter = !d.flag(m.val)
	}
	if m := f["onExhausted"]; m != nil {
		p.OnExhausted = d.exhaustion(m.val)
	}
	return p
}

// effect warns about settings of the valid policy p, decoded from the
// object n with the fields f, that load but cannot take effect as
// written: a time budget that ends the retries before the first one, a
// maxDelay below every delay. A function's policy is warned about only
// when own, its own fields, sets one of the settings involved: otherwise
// the warning about the host-wide policy says it.
func (d *decoder) effect(n *node, p RetryPolicy, f, own map[string]*member) {
	sets := func(keys ...string) bool {
		for _, k := range keys {
			if own[k] != nil {
				return true
			}
		}
		return false
	}
	delay := []string{"retryCount", "sleepDuration", "strategy"}
	if d.spins(p) && sets(append(delay, "maxRetryTime", "maxRecordAge")...) {
		d.add(n, "retryCount -1 with no delay between retries (%s) and no maxRetryTime or maxRecordAge: a batch that always fails would be delivered again without pause, for ever; "+
			`set a delay (sleepDuration or a strategy that waits, e.g. {"name": "exponential", "initialDelay": "00:00:01"} with a maxDelay), a retryCount, or a maxRetryTime`, p.Strategy.Name)
		return
	}
	cp, err := p.Policy()
	if err != nil || p.RetryCount == 0 {
		return
	}
	// Whether the first retry can start: a constant cost, so that loading
	// stays linear in the number of policies.
	if p.MaxRetryTime > 0 && cp.Delay(1, 0, lowDraw) >= p.MaxRetryTime && sets(append(delay, "maxRetryTime")...) {
		d.warn(n, "%s: maxRetryTime %v (%s) is not longer than the first retry's delay (%s): no retry ever starts, so a failed batch is given up at once",
			n.path, show(p.MaxRetryTime), d.pos(f["maxRetryTime"].val), shortest(cp))
	}
	uncapped := cp
	uncapped.MaxDelay = 0
	if first := uncapped.Delay(1, 0, lowDraw); p.MaxDelay > 0 && first > p.MaxDelay && sets(append(delay, "maxDelay")...) {
		d.warn(n, "%s: maxDelay %v (%s) is below the first retry's delay (%v), so every delay is %v",
			n.path, show(p.MaxDelay), d.pos(f["maxDelay"].val), show(first), show(p.MaxDelay))
	}
}

// spins reports whether p retries for ever without waiting, which
// checkpoint.Policy.Validate refuses: said here in host.json's terms.
func (d *decoder) spins(p RetryPolicy) bool {
	if p.RetryCount != -1 || p.MaxRetryTime > 0 || p.MaxRecordAge > 0 || p.Strategy.Name == "" {
		return false
	}
	b, err := p.Strategy.Backoff()
	if err != nil {
		return false // reported where the strategy is decoded
	}
	var prev time.Duration
	for i := 1; i <= 8; i++ {
		if prev = b(i, prev, midDraw); prev > 0 {
			return false
		}
	}
	return true
}

func (d *decoder) retryCount(n *node) int { return d.retryCountOf(n, false) }

// retryCountOf decodes a retry count; text says whether a string holding
// an integer is read too.
func (d *decoder) retryCountOf(n *node, text bool) int {
	var (
		v  int
		ok bool
	)
	if text && n.kind == '"' {
		v, ok = d.parseInteger(n)
	} else {
		v, ok = d.integer(n)
	}
	if ok && v < -1 {
		d.add(n, "%d is below -1: want -1 (retry forever), 0 (never) or a number of retries", v)
		return 0
	}
	return v
}

// strategy decodes checkpointRetryPolicy.strategy: a name, or an object with
// a name and the strategy's parameters.
func (d *decoder) strategy(n *node) Strategy {
	var name *node
	var params []*member
	seen := map[string]*member{}
	switch {
	case n.isText():
		name = n
	case n.kind == '{':
		for i := range n.members {
			m := &n.members[i]
			k := strings.ToLower(m.key)
			if k == "name" && name == nil {
				name = m.val
				continue
			}
			if first, dup := seen[k]; dup || k == "name" {
				at := name
				if dup {
					at = first.val
				}
				d.addKey(m, m.val.path, "duplicate field: also at %s", d.pos(at))
				continue
			}
			seen[k] = m
			params = append(params, m)
		}
		if name == nil {
			d.add(n, "name is missing: want one of %s", strings.Join(strategyNames(), ", "))
			return Strategy{}
		}
	default:
		d.add(n, "want a strategy name or an object with a name and parameters, got %s", describe(n))
		return Strategy{}
	}
	if !name.isText() {
		d.add(name, "want a strategy name, got %s", describe(name))
		return Strategy{}
	}
	def := lookupStrategy(name.text)
	if def == nil {
		hint := ": want one of " + strings.Join(strategyNames(), ", ")
		if s := suggest(name.text, strategyNames()); s != "" {
			hint = ": did you mean " + s + "?"
		}
		d.add(name, "unknown strategy %q%s", name.text, hint)
		return Strategy{}
	}
	return d.fillStrategy(def, n, params)
}

// fillStrategy decodes the parameters of strategy def given in the object n
// (or the string n), in the order they are written.
func (d *decoder) fillStrategy(def *strategyDef, n *node, params []*member) Strategy {
	s := Strategy{Name: def.name}
	for _, p := range def.params {
		switch {
		case p.dur != nil:
			*p.dur(&s) = p.defDur
		case p.num != nil:
			*p.num(&s) = p.defNum
		default:
			*p.flag(&s) = p.defFlag
		}
	}
	before := len(d.problems)
	for _, m := range params {
		p, ok := def.param(m.key)
		switch {
		case !ok:
			d.addKey(m, m.val.path, "%s takes %s: %s", def.name, def.paramNames(), notAParam(m.key, def))
		case p.dur != nil:
			*p.dur(&s) = d.duration(m.val)
		case p.num != nil:
			*p.num(&s) = d.number(m.val, p.lo, p.hi)
		default:
			*p.flag(&s) = d.flag(m.val)
		}
	}
	var missing []string
	for _, p := range def.params {
		given := false
		for _, m := range params {
			given = given || strings.EqualFold(m.key, p.name)
		}
		if p.required && !given {
			missing = append(missing, p.name)
		}
	}
	if len(missing) > 0 {
		d.add(n, "strategy %s needs %s", def.name, strings.Join(missing, " and "))
	} else if len(d.problems) == before {
		if _, err := def.backoff(s); err != nil {
			d.add(n, "strategy %s: %v", def.name, err)
		}
	}
	return s
}

// notAParam explains why key is not a parameter of def.
func notAParam(key string, def *strategyDef) string {
	var names []string
	for _, p := range def.params {
		names = append(names, p.name)
	}
	if s := suggest(key, names); s != "" {
		return fmt.Sprintf("%q is unknown: did you mean %s?", key, s)
	}
	for _, other := range strategies {
		if p, ok := other.param(key); ok {
			return fmt.Sprintf("%s is a parameter of %s", p.name, other.name)
		}
	}
	return fmt.Sprintf("%q is unknown", key)
}

// exhaustion decodes onExhausted: an action name, or an object with an
// action and a topic.
func (d *decoder) exhaustion(n *node) Exhaustion {
	var action, topic *node
	switch {
	case n.kind == '{':
		f := d.fields(n, []string{"action", "topic"})
		if f["action"] == nil {
			d.add(n, "action is missing: want skip, deadLetter, stop or park")
			return Exhaustion{}
		}
		action = f["action"].val
		if t := f["topic"]; t != nil {
			topic = t.val
		}
	case n.isText():
		action = n
	default:
		d.add(n, `want an action name or an object such as {"action": "deadLetter", "topic": "orders-dlq"}, got %s`, describe(n))
		return Exhaustion{}
	}
	if !action.isText() {
		d.add(action, "want skip, deadLetter, stop or park, got %s", describe(action))
		return Exhaustion{}
	}
	var e Exhaustion
	switch {
	case strings.EqualFold(action.text, "skip"):
		e.Action = ActionSkip
	case strings.EqualFold(action.text, "deadLetter"):
		e.Action = ActionDeadLetter
	case strings.EqualFold(action.text, "stop"):
		e.Action = ActionStop
	case strings.EqualFold(action.text, "park"):
		e.Action = ActionPark
	default:
		hint := ""
		if s := suggest(action.text, []string{"skip", "deadLetter", "stop", "park"}); s != "" {
			hint = ": did you mean " + s + "?"
		}
		d.add(action, "unknown action %q%s: want skip, deadLetter, stop or park", action.text, hint)
		return Exhaustion{}
	}
	switch {
	case e.Action == ActionDeadLetter && topic == nil && action.fromEnv():
		// Set by a variable: the topic is another variable.
		base := action.env
		if i := strings.LastIndex(base, "__"); i >= 0 && strings.EqualFold(base[i+2:], "action") {
			base = base[:i]
		}
		d.add(n, "deadLetter needs a topic: set %s__topic=orders-dlq too", base)
	case e.Action == ActionDeadLetter && topic == nil:
		d.add(n, `deadLetter needs a topic: write {"action": "deadLetter", "topic": "orders-dlq"}`)
	case e.Action != ActionDeadLetter && topic != nil:
		d.add(topic, "a topic only applies to deadLetter, not %v", e.Action)
	case topic != nil:
		switch {
		case !topic.isText():
			d.add(topic, "want a topic name, got %s", describe(topic))
		case strings.TrimSpace(topic.text) == "":
			d.add(topic, "empty topic: want the name of the dead-letter topic")
		default:
			e.Topic = d.topic(topic)
		}
	}
	return e
}

// azureRetry decodes Azure Functions' retry section.
func (d *decoder) azureRetry(n *node) *RetryPolicy {
	f := d.fields(n, retryFields)
	if f == nil {
		return nil
	}
	p := RetryPolicy{Origin: n.path + " (" + d.pos(n) + ")"}
	d.retryFields = d.settingsOf(f, retryFields, nil)
	if m := f["maxRetryCount"]; m != nil {
		// The Functions host binds this section with .NET's configuration
		// binder, which reads the string "3" as 3.
		p.RetryCount = d.retryCountOf(m.val, true)
	} else {
		d.add(n, "maxRetryCount is missing: want -1 (retry forever), 0 (never) or a number of retries")
	}
	var params []*member
	for i := range n.members {
		if m := f[canonical(n.members[i].key, retryFields[2:])]; m == &n.members[i] {
			params = append(params, m)
		}
	}
	sm := f["strategy"]
	if sm == nil {
		d.add(n, "strategy is missing: want fixedDelay or exponentialBackoff")
		return &p
	}
	s := sm.val
	if !s.isText() {
		d.add(s, "want fixedDelay or exponentialBackoff, got %s", describe(s))
		return &p
	}
	names := []string{"fixedDelay", "exponentialBackoff"}
	name := canonical(s.text, names)
	if name == "" {
		hint := ""
		if sug := suggest(s.text, names); sug != "" {
			hint = ": did you mean " + sug + "?"
		}
		d.add(s, "unknown strategy %q%s: want fixedDelay or exponentialBackoff", s.text, hint)
		return &p
	}
	p.Strategy = d.fillStrategy(lookupStrategy(name), n, params)
	if d.spins(p) {
		d.add(n, "maxRetryCount -1 with no delay between retries (%s with a zero interval): a batch that always fails would be delivered again without pause, for ever; set a delay or a maxRetryCount", p.Strategy.Name)
	}
	return &p
}

// integer decodes a whole number: a JSON number or an environment value.
func (d *decoder) integer(n *node) (int, bool) {
	if n.kind != '0' && n.kind != envKind {
		d.add(n, "want an integer, got %s", describe(n))
		return 0, false
	}
	return d.parseInteger(n)
}

// parseInteger decodes n's text as a whole number in decimal, with an
// optional sign and surrounding spaces.
func (d *decoder) parseInteger(n *node) (int, bool) {
	v, err := strconv.ParseInt(strings.TrimSpace(n.text), 10, 0)
	switch {
	case errors.Is(err, strconv.ErrRange):
		d.add(n, "%s is out of range", n.text)
		return 0, false
	case err != nil:
		d.add(n, "want an integer, got %s", describe(n))
		return 0, false
	}
	return int(v), true
}

// number decodes a number in [lo, hi].
func (d *decoder) number(n *node, lo, hi float64) float64 {
	if n.kind != '0' && n.kind != envKind {
		d.add(n, "want a number from %v to %v, got %s", lo, hi, describe(n))
		return 0
	}
	v, err := strconv.ParseFloat(strings.TrimSpace(n.text), 64)
	if err != nil || !(v >= lo && v <= hi) {
		d.add(n, "want a number from %v to %v, got %s", lo, hi, describe(n))
		return 0
	}
	return v
}

// flag decodes true or false.
func (d *decoder) flag(n *node) bool {
	switch {
	case n.kind == 't':
		return true
	case n.kind == 'f':
		return false
	case n.kind == envKind:
		switch strings.ToLower(strings.TrimSpace(n.text)) {
		case "true":
			return true
		case "false":
			return false
		}
	}
	d.add(n, "want true or false, got %s", describe(n))
	return false
}

// duration decodes an interval of 0 or more.
func (d *decoder) duration(n *node) time.Duration {
	if !n.isText() {
		hint := ""
		if n.kind == '0' {
			hint = " (a bare number is ambiguous)"
		}
		d.add(n, `want a string such as "00:00:05" or "5s", got %s%s`, describe(n), hint)
		return 0
	}
	v, err := parseDuration(n.text)
	switch {
	case err != nil:
		d.add(n, "%q: %v", n.text, err)
		return 0
	case v < 0:
		d.add(n, "%q is negative: want an interval of 0 or more", n.text)
		return 0
	}
	return v
}

// optDuration decodes an optional interval; 0 when m is nil.
func (d *decoder) optDuration(m *member) time.Duration {
	if m == nil {
		return 0
	}
	return d.duration(m.val)
}

// pos names the place of n: "host.json:4:28" or "environment NAME".
func (d *decoder) pos(n *node) string {
	if n.fromEnv() {
		return "environment " + n.env
	}
	line, col := d.lineCol(n.off)
	return fmt.Sprintf("%s:%d:%d", d.file, line, col)
}

// describe says what a value is, for messages.
func describe(n *node) string {
	if n.kind == envKind {
		return strconv.Quote(n.text)
	}
	switch n.kind {
	case '"':
		return "the string " + strconv.Quote(n.text)
	case '0':
		return "the number " + n.text
	case 't':
		return "true"
	case 'f':
		return "false"
	case 'n':
		return "null"
	case '{':
		return "an object"
	case '[':
		return "an array"
	}
	return "a value"
}
