// Package kafkatopic checks a name against the rules Kafka holds topic
// names to, for host.json's topics and a host's triggers given in code.
package kafkatopic

import (
	"fmt"
	"strconv"
	"strings"
)

// MaxLength is the longest topic name Kafka accepts.
const MaxLength = 249

// Problem says what is wrong with name as a Kafka topic name, or returns
// "" when Kafka accepts it: only ASCII letters, digits, '.', '_' and '-',
// not "." or "..", at most MaxLength characters.
func Problem(name string) string {
	const rule = "a Kafka topic name holds only ASCII letters, digits, '.', '_' and '-'"
	for _, r := range name {
		if r == '.' || r == '_' || r == '-' || r >= '0' && r <= '9' || r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' {
			continue
		}
		what := strconv.QuoteRune(r)
		switch {
		case strings.TrimSpace(name) != name:
			what = "spaces around it"
		case r == ' ':
			what = "a space"
		}
		return fmt.Sprintf("%q: %s, not %s", name, rule, what)
	}
	switch {
	case name == "":
		return "empty: want a topic name"
	case name == "." || name == "..":
		return fmt.Sprintf("%q: Kafka does not accept it as a topic name", name)
	case len(name) > MaxLength:
		return fmt.Sprintf("%q is %d characters long: a Kafka topic name holds at most %d", name, len(name), MaxLength)
	}
	return ""
}
