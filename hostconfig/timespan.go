package hostconfig

import (
	"errors"
	"fmt"
	"math"
	"strings"
	"time"
	"unicode/utf8"
)

// ParseDuration parses a host.json interval: .NET TimeSpan text as
// TimeSpan.Parse reads it with the invariant culture, or a Go duration.
//
// The TimeSpan forms are [-][d.]hh:mm[:ss[.fffffff]] (the invariant "c"
// format and its short forms, "00:00:05", "1.02:03:04.5") and the general
// [-]d:hh:mm:ss[.fffffff] ("1:02:03:04"). Hours run 0 to 23, minutes and
// seconds 0 to 59, each in one or two digits; the fraction has one to seven
// digits (.NET ticks are 100ns); as in .NET, the seconds may be left empty
// before a fraction ("1:1:.1" is 1h1m0.1s). Go durations are what [time.ParseDuration]
// reads ("1m30s", "500ms"). Leading and trailing spaces and tabs are ignored.
//
// A bare number other than "0" is rejected: .NET reads "5" as five days,
// which is rarely what a host.json author meant. Values beyond the range of a
// [time.Duration] (about 292 years) are rejected too; so is a negative value
// of the smallest magnitude Go can hold but not negate.
func ParseDuration(s string) (time.Duration, error) {
	d, err := parseDuration(s)
	if err != nil {
		return 0, fmt.Errorf("hostconfig: %q: %w", s, err)
	}
	return d, nil
}

// durationHint is what every interval error says it wanted.
const durationHint = `want a TimeSpan such as "00:00:05" or a Go duration such as "5s"`

func parseDuration(s string) (time.Duration, error) {
	t := strings.Trim(s, " \t")
	switch {
	case t == "":
		return 0, errors.New("empty interval: " + durationHint)
	case strings.ContainsRune(t, ':'):
		return parseTimeSpan(t)
	case t == "0":
		return 0, nil
	case isInteger(t):
		return 0, fmt.Errorf("a bare number is ambiguous (.NET reads %q as %s days): write %q for seconds or %q for days", t, t, t+"s", t+".00:00:00")
	}
	d, err := time.ParseDuration(t)
	if err != nil {
		return 0, errors.New("not an interval: " + durationHint)
	}
	return d, nil
}

// isInteger reports whether s is an optional sign followed by ASCII digits.
func isInteger(s string) bool {
	s = strings.TrimLeft(s, "+-")
	return s != "" && strings.Trim(s, "0123456789") == ""
}

// A timeSpanField is one numeric component of a TimeSpan.
type timeSpanField struct {
	name      string
	maxDigits int
	max       uint64        // largest value allowed
	unit      time.Duration // what 1 is worth
}

var (
	daysField    = timeSpanField{"days", 8, math.MaxInt64 / uint64(24*time.Hour), 24 * time.Hour}
	hoursField   = timeSpanField{"hours", 2, 23, time.Hour}
	minutesField = timeSpanField{"minutes", 2, 59, time.Minute}
	secondsField = timeSpanField{"seconds", 2, 59, time.Second}
)

// timeSpanLayouts maps the separators between the digit groups of a
// TimeSpan to the meaning of the groups; a final '.' group is the fraction.
var timeSpanLayouts = map[string][]timeSpanField{
	":":    {hoursField, minutesField},
	"::":   {hoursField, minutesField, secondsField},
	".:":   {daysField, hoursField, minutesField},
	".::":  {daysField, hoursField, minutesField, secondsField},
	":::":  {daysField, hoursField, minutesField, secondsField},
	"::.":  {hoursField, minutesField, secondsField},
	".::.": {daysField, hoursField, minutesField, secondsField},
	":::.": {daysField, hoursField, minutesField, secondsField},
}

const timeSpanHint = "want [-][d.]hh:mm[:ss[.fffffff]]"

// parseTimeSpan parses the TimeSpan forms of ParseDuration; s is trimmed and
// contains a colon.
func parseTimeSpan(s string) (time.Duration, error) {
	neg := strings.HasPrefix(s, "-")
	if neg {
		s = s[1:]
	}
	var groups []string
	var seps strings.Builder
	start := 0
	for i := 0; i < len(s); i++ {
		switch c := s[i]; {
		case c == ':' || c == '.':
			groups = append(groups, s[start:i])
			seps.WriteByte(c)
			start = i + 1
		case c < '0' || c > '9':
			r, _ := utf8.DecodeRuneInString(s[i:])
			return 0, fmt.Errorf("unexpected %q in a TimeSpan: %s", r, timeSpanHint)
		}
	}
	groups = append(groups, s[start:])
	layout := seps.String()
	fields, ok := timeSpanLayouts[layout]
	if !ok {
		return 0, errors.New("not a TimeSpan: " + timeSpanHint)
	}
	var total uint64 // nanoseconds
	for i, g := range groups {
		var v uint64
		var unit time.Duration
		if i == len(fields) { // the fraction of a second
			if g == "" || len(g) > 7 {
				return 0, errors.New("fraction of a second: want one to seven digits")
			}
			v = atou(g + strings.Repeat("0", 7-len(g)))
			unit = 100 // ns per tick
		} else {
			f := fields[i]
			if g == "" && f == secondsField && i == len(groups)-2 {
				// "1:1:.1": .NET reads empty seconds before a fraction as 0.
				continue
			}
			if g == "" {
				return 0, fmt.Errorf("%s: missing: %s", f.name, timeSpanHint)
			}
			if len(g) > f.maxDigits {
				return 0, fmt.Errorf("%s: %s has more than %d digits", f.name, g, f.maxDigits)
			}
			v = atou(g)
			if v > f.max {
				return 0, fmt.Errorf("%s: %d is out of range: want 0 to %d", f.name, v, f.max)
			}
			unit = f.unit
		}
		add := v * uint64(unit) // no overflow: v <= max Duration / unit
		if total > math.MaxInt64-add {
			return 0, errors.New("out of range: the longest interval is " + formatTimeSpan(math.MaxInt64))
		}
		total += add
	}
	if neg {
		return -time.Duration(total), nil
	}
	return time.Duration(total), nil
}

// atou converts at most 8 ASCII digits.
func atou(s string) uint64 {
	var v uint64
	for i := 0; i < len(s); i++ {
		v = v*10 + uint64(s[i]-'0')
	}
	return v
}

// formatTimeSpan writes d in the invariant "c" format: [-][d.]hh:mm:ss[.fffffff],
// truncated to 100ns ticks.
func formatTimeSpan(d time.Duration) string {
	var b strings.Builder
	u := uint64(d)
	if d < 0 {
		b.WriteByte('-')
		u = uint64(-(d + 1)) + 1 // no overflow for math.MinInt64
	}
	days := u / uint64(24*time.Hour)
	u %= uint64(24 * time.Hour)
	if days > 0 {
		fmt.Fprintf(&b, "%d.", days)
	}
	h := u / uint64(time.Hour)
	m := u / uint64(time.Minute) % 60
	sec := u / uint64(time.Second) % 60
	fmt.Fprintf(&b, "%02d:%02d:%02d", h, m, sec)
	if ticks := u % uint64(time.Second) / 100; ticks > 0 {
		fmt.Fprintf(&b, ".%07d", ticks)
	}
	return b.String()
}
