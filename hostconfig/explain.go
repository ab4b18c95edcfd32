package hostconfig

import (
	"fmt"
	"math"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/redeliver-go/redeliver/checkpoint"
)

// shownDelays is how many first retry delays an explanation lists.
const shownDelays = 10

// constRand is a random source that always draws the same number.
type constRand float64

func (r constRand) Float64() float64 { return float64(r) }

const (
	lowDraw  = constRand(0)
	midDraw  = constRand(0.5)
	highDraw = constRand(1 - 1e-12) // the upper end of [0, 1)
)

// Explain describes the configuration in words: the host-wide policy, each
// function's, the redrive, outageBudget and statusPage sections, and the
// warnings (see [RetryPolicy.Explain]). With [Function], it describes the
// policy in force for that function instead, in the terms of the
// function's trigger: through a share group, each record is retried on its
// own, and a record given up is rejected (the broker archives it) once its
// exhaustion action has run; there is no checkpoint. A wrong option is
// described by its error.
func (c *Config) Explain(opts ...Option) string {
	p, s, err := c.selected(opts)
	if err != nil {
		return err.Error() + "\n"
	}
	if s.hasFunction {
		t, ok := c.Trigger(s.function)
		return p.explain(ok && t.ShareGroup != "")
	}
	var b strings.Builder
	if c.Host == nil {
		b.WriteString("No host-wide retry policy: a failed batch is not retried and the stream moves on.\n")
	} else {
		b.WriteString(c.Host.Explain())
		b.WriteString(explainSettings(c.Settings("")))
	}
	names := make([]string, 0, len(c.Functions))
	for n := range c.Functions {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		fmt.Fprintf(&b, "\nFunction %s:\n%s", n, c.Explain(Function(n)))
		b.WriteString(explainSettings(c.Settings(n)))
	}
	if c.Redrive != nil {
		b.WriteString("\n" + c.Redrive.Explain())
	}
	if c.OutageBudget != nil {
		b.WriteString("\n" + c.OutageBudget.Explain())
	}
	if c.StatusPage != nil {
		b.WriteString("\n" + c.StatusPage.Explain())
	}
	for _, w := range c.Warnings {
		fmt.Fprintf(&b, "\nWarning: %s\n", w)
	}
	return b.String()
}

// explainSettings says where the values of a policy were written, by
// field name.
func explainSettings(settings []Setting) string {
	if len(settings) == 0 {
		return ""
	}
	parts := make([]string, len(settings))
	for i, s := range settings {
		parts[i] = s.Field + " from " + s.Source
	}
	sort.Strings(parts)
	return "Values: " + strings.Join(parts, "; ") + "; anything else is a default.\n"
}

// Explain describes the policy in words: its limits, its delays, the delays
// before its first retries, its worst-case total waiting time and what
// happens once retries are spent. When maxRetryTime ends the retries
// before retryCount does, even with every delay at its shortest, it says
// how many can start at most, and lists only those. For a strategy that draws random numbers,
// each delay is shown as the range between the lowest and the highest draw,
// and the worst case takes every draw at the upper end of its range. The
// handler's own run time is never included.
func (p *RetryPolicy) Explain() string { return p.explain(false) }

// explain is Explain, for records of a share group when share is set.
func (p *RetryPolicy) explain(share bool) string {
	unit := "batch"
	if share {
		unit = "record"
	}
	if p == nil {
		if share {
			return "No retry policy: a failed record is rejected at once (the broker archives it).\n"
		}
		return "No retry policy: a failed batch is not retried and the stream moves on.\n"
	}
	var b strings.Builder
	fmt.Fprintf(&b, "%s: ", p.Origin)
	cp, err := p.Policy()
	if err != nil {
		fmt.Fprintf(&b, "invalid: %v\n", err)
		return b.String()
	}
	allowed, cut := budgetRetries(cp)
	switch {
	case p.RetryCount == 0:
		fmt.Fprintf(&b, "never retries a failed %s.\n", unit)
	case allowed == 0:
		fmt.Fprintf(&b, "never retries a failed %s: the first retry would wait %s, and no retry starts %v or more after the first failure (maxRetryTime), so retryCount (%s) is never used.\n",
			unit, shortest(cp), show(p.MaxRetryTime), countText(p.RetryCount))
	case cut:
		fmt.Fprintf(&b, "retries a failed %s at most %s (at most %s deliveries): retryCount (%s) allows more, but no more retries start before maxRetryTime (%v) ends them.\n",
			unit, times(allowed), deliveries(allowed), countText(p.RetryCount), show(p.MaxRetryTime))
	case p.RetryCount == checkpoint.Infinite:
		fmt.Fprintf(&b, "retries a failed %s without limit of count.\n", unit)
	default:
		fmt.Fprintf(&b, "retries a failed %s %s (at most %s deliveries).\n", unit, upTo(p.RetryCount), deliveries(p.RetryCount))
	}
	def := lookupStrategy(p.Strategy.Name)
	if p.RetryCount != 0 && allowed != 0 {
		fmt.Fprintf(&b, "It %s (strategy %s).\n", def.describe(p.Strategy), def.name)
		if p.MaxDelay > 0 {
			fmt.Fprintf(&b, "No delay is longer than %v.\n", show(p.MaxDelay))
		}
		if p.MaxRetryTime > 0 {
			fmt.Fprintf(&b, "No retry starts %v or more after the %s's first failure.\n", show(p.MaxRetryTime), unit)
		}
		if p.MaxRecordAge > 0 {
			if share {
				fmt.Fprintf(&b, "No retry starts once the record is %v old.\n", show(p.MaxRecordAge))
			} else {
				fmt.Fprintf(&b, "No retry starts once the batch's oldest record is %v old.\n", show(p.MaxRecordAge))
			}
		}
		if p.IgnoreRetryAfter {
			b.WriteString("Retry-after hints of errors are ignored (honorRetryAfter: false).\n")
		}
		hi := cp
		if def.upper != nil {
			hi.Backoff = def.upper(p.Strategy)
		}
		b.WriteString(firstDelays(cp, hi, def.random, allowed))
		b.WriteString(worstCase(hi, def.random).String())
	}
	if share {
		switch p.OnExhausted.Action {
		case ActionDeadLetter:
			fmt.Fprintf(&b, "Then the record is sent to topic %q and, once it is, rejected: the broker archives it.\n", p.OnExhausted.Topic)
		case ActionStop:
			b.WriteString("Then the record is held, its lock renewed, until the consumer stops, and then released to the broker.\n")
		case ActionPark:
			b.WriteString("Then the record is parked for a re-drive (see the redrive section) and, once it is, rejected: the broker archives it.\n")
		default:
			b.WriteString("Then the record is rejected: the broker archives it.\n")
		}
		return b.String()
	}
	switch p.OnExhausted.Action {
	case ActionDeadLetter:
		fmt.Fprintf(&b, "Then the batch is sent to topic %q and the checkpoint advances past it.\n", p.OnExhausted.Topic)
	case ActionStop:
		b.WriteString("Then the partition stops, its checkpoint before the batch.\n")
	case ActionPark:
		b.WriteString("Then the batch's records are parked for a re-drive (see the redrive section) and the checkpoint advances past it.\n")
	default:
		b.WriteString("Then the batch is skipped: the checkpoint advances past it.\n")
	}
	return b.String()
}

// budgetRetries returns how many retries of cp can start before its
// retry time budget ends them, when every delay is at its shortest and
// the handler takes no time: no more ever start. cut reports that the
// budget ends them before the retry count does. Without a budget, or when
// the budget allows more retries than can be counted, it returns
// cp.MaxRetries and false.
func budgetRetries(cp checkpoint.Policy) (n int, cut bool) {
	if cp.MaxRetryTime <= 0 || cp.MaxRetries == 0 {
		return cp.MaxRetries, false
	}
	var sum, prev time.Duration
	stable := 0
	for n := 1; (cp.MaxRetries == checkpoint.Infinite || n <= cp.MaxRetries) && n <= maxSteps; n++ {
		d := cp.Delay(n, prev, lowDraw)
		if sum = add(sum, d); sum >= cp.MaxRetryTime {
			return n - 1, true
		}
		if d == prev {
			stable++
		} else {
			stable = 0
		}
		prev = d
		if stable < stableSteps {
			continue
		}
		// The delays stay at d from here (as worstCase assumes): retry
		// n+k starts at sum + k*d, inside the budget while that is less.
		if d == 0 {
			break
		}
		total := n + int((cp.MaxRetryTime-sum-1)/d)
		if cp.MaxRetries != checkpoint.Infinite && total >= cp.MaxRetries {
			break
		}
		return total, true
	}
	return cp.MaxRetries, false
}

// shortest says how long cp's first retry waits at the least.
func shortest(cp checkpoint.Policy) string {
	d := cp.Delay(1, 0, lowDraw)
	if hi := cp.Delay(1, 0, highDraw); hi != d {
		return fmt.Sprintf("at least %v", show(d))
	}
	return show(d).String()
}

// countText writes a retryCount: a number, and for -1, what it means.
func countText(n int) string {
	if n == checkpoint.Infinite {
		return "-1, no limit"
	}
	return fmt.Sprint(n)
}

// times says "once" or "N times".
func times(n int) string {
	if n == 1 {
		return "once"
	}
	return fmt.Sprintf("%d times", n)
}

// upTo says "once" or "up to N times".
func upTo(n int) string {
	if n == 1 {
		return "once"
	}
	return fmt.Sprintf("up to %d times", n)
}

// deliveries returns n+1, the deliveries of n retries, without overflow.
func deliveries(n int) string { return strconv.FormatUint(uint64(n)+1, 10) }

// firstDelays lists the delays before the first retries, at most n of
// them: those of cp, or for a random strategy, the range from those of cp
// with every draw at 0 to those of hi with every draw near 1.
func firstDelays(cp, hi checkpoint.Policy, random bool, n int) string {
	shown := shownDelays
	if n != checkpoint.Infinite {
		shown = min(shown, n)
	}
	high := hi.Schedule(shown, highDraw)
	words := make([]string, len(high))
	if random {
		low := cp.Schedule(shown, lowDraw)
		for i := range high {
			words[i] = show(low[i]).String() + ".." + show(high[i]).String()
		}
	} else {
		for i, d := range high {
			words[i] = show(d).String()
		}
	}
	s := "First retry delays: " + strings.Join(words, ", ")
	if n == checkpoint.Infinite || n > shownDelays {
		s += ", ..."
	}
	if random {
		return s + " (random within each range).\n"
	}
	return strings.TrimSuffix(s, ".") + ".\n"
}

// A total is the worst-case waiting time of a policy.
type total struct {
	wait     time.Duration // saturates at the largest Duration
	retries  int
	forever  bool // retries never stop by count or budget
	budget   bool // the time budget ends the retries
	atLeast  bool // too many retries to add up: wait is a lower bound
	random   bool
	maxAge   time.Duration
	endless0 bool // retries without delay until the budget ends them
	// underBudget: too many retries to add up, but fewer than fit in the
	// budget.
	underBudget bool
	limit       time.Duration
}

// stableSteps is how many equal delays in a row let worstCase extrapolate:
// every strategy's delays, drawn at the upper end, grow until a ceiling and
// stay there.
const stableSteps = 64

// maxSteps bounds the retries worstCase adds up one by one.
const maxSteps = 1 << 17

// worstCase adds up the delays of every retry cp allows, drawing every
// random number at its upper end, as if each delivery failed at once.
func worstCase(cp checkpoint.Policy, random bool) total {
	t := total{random: random, maxAge: cp.MaxRecordAge, limit: cp.MaxRetryTime}
	finite := cp.MaxRetries != checkpoint.Infinite
	var prev time.Duration
	stable := 0
	for n := 1; !finite || n <= cp.MaxRetries; n++ {
		if stable >= stableSteps || n > maxSteps {
			t.atLeast = stable < stableSteps
			if t.atLeast && cp.MaxRetryTime > 0 {
				t.underBudget = true // growing delays: only the budget bounds them
				return t
			}
			t.extrapolate(cp, prev, n)
			return t
		}
		d := cp.Delay(n, prev, highDraw)
		if cp.MaxRetryTime > 0 && add(t.wait, d) >= cp.MaxRetryTime {
			t.budget = true
			return t
		}
		t.wait = add(t.wait, d)
		t.retries++
		if d == prev {
			stable++
		} else {
			stable = 0
		}
		prev = d
	}
	return t
}

// extrapolate adds the retries from n on, each waiting d.
func (t *total) extrapolate(cp checkpoint.Policy, d time.Duration, n int) {
	finite := cp.MaxRetries != checkpoint.Infinite
	rest := math.MaxInt
	if finite {
		rest = cp.MaxRetries - n + 1
	}
	switch {
	case d == 0 && finite:
		t.retries += rest
	case d == 0 && cp.MaxRetryTime > 0:
		t.endless0 = true
	case d == 0 || cp.MaxRetryTime == 0 && !finite:
		t.forever = true
	case cp.MaxRetryTime > 0:
		k := int((cp.MaxRetryTime - t.wait - 1) / d) // retries whose start stays inside the budget
		if k >= rest {
			k = rest
		} else {
			t.budget = true
		}
		t.wait = add(t.wait, mul(d, k))
		t.retries += k
	default:
		t.wait = add(t.wait, mul(d, rest))
		t.retries += rest
	}
}

func (t total) String() string {
	var b strings.Builder
	b.WriteString("Worst case")
	if t.random {
		b.WriteString(", every random draw at its upper end")
	}
	b.WriteString(": ")
	switch {
	case t.forever:
		b.WriteString("it retries forever")
	case t.endless0:
		fmt.Fprintf(&b, "it retries without waiting until %v after the first failure", show(t.limit))
	case t.underBudget:
		fmt.Fprintf(&b, "less than %v of waiting, when the retry time budget ends the retries", show(t.limit))
	default:
		if t.atLeast {
			b.WriteString("at least ")
		}
		if t.wait == math.MaxInt64 {
			b.WriteString("more than 292 years")
		} else {
			b.WriteString(show(t.wait).String())
		}
		fmt.Fprintf(&b, " of waiting over %d %s", t.retries, plural(t.retries, "retry", "retries"))
		if t.budget {
			fmt.Fprintf(&b, ", when the retry time budget of %v ends them", show(t.limit))
		}
	}
	b.WriteString(" (the handler's run time not included")
	if t.maxAge > 0 {
		fmt.Fprintf(&b, "; the record age limit of %v may end it sooner", show(t.maxAge))
	}
	b.WriteString(").\n")
	return b.String()
}

// add returns a+b, saturating at the largest Duration.
func add(a, b time.Duration) time.Duration {
	if a > math.MaxInt64-b {
		return math.MaxInt64
	}
	return a + b
}

// mul returns d*k, saturating at the largest Duration.
func mul(d time.Duration, k int) time.Duration {
	if k > 0 && d > math.MaxInt64/time.Duration(k) {
		return math.MaxInt64
	}
	return d * time.Duration(k)
}

// show rounds d for reading: to the millisecond from a second up, to the
// microsecond from a millisecond up.
func show(d time.Duration) time.Duration {
	switch {
	case d >= time.Second:
		return d.Round(time.Millisecond)
	case d >= time.Millisecond:
		return d.Round(time.Microsecond)
	}
	return d
}

func plural(n int, one, many string) string {
	if n == 1 {
		return one
	}
	return many
}
