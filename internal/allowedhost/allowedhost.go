// Package allowedhost holds the rules of the host names a redeliver host's
// status page answers to, shared by host.json's statusPage section and the
// host's option, so that both accept and refuse the same names.
//
// A DNS rebinding page (evil.example re-resolved to 127.0.0.1) reaches a
// local server with its own name in the Host header: the server refuses
// names it was not told about. An IP address in the Host header cannot come
// from a rebinding page, whose address is its own name, so addresses are
// always admitted; so are "localhost" and the names under ".localhost",
// which browsers resolve to the loopback interface themselves.
package allowedhost

import (
	"fmt"
	"net"
	"net/netip"
	"net/url"
	"strings"
)

// Parse checks one allowed name as an operator writes it and returns it in
// the form [List] matches: lower case, without a trailing dot. A name
// starting with a dot admits the name and every name under it
// (".example.com": example.com, ops.example.com, a.b.example.com). IP
// addresses are accepted and change nothing, since every address is
// admitted.
func Parse(name string) (string, error) {
	s := strings.ToLower(strings.TrimSpace(name))
	switch {
	case s == "":
		return "", fmt.Errorf("empty name: want a host name such as %q", "ops.example.com")
	case strings.Contains(s, "*"):
		return "", fmt.Errorf("%q: a wildcard would admit names the list is there to refuse: write %q to admit example.com and the names under it", name, ".example.com")
	case strings.Contains(s, "://"):
		hint := ""
		if u, err := url.Parse(s); err == nil && u.Hostname() != "" {
			hint = fmt.Sprintf(": write %q", u.Hostname())
		}
		return "", fmt.Errorf("%q is a URL: want the host name alone%s", name, hint)
	}
	if _, err := netip.ParseAddr(strings.Trim(s, "[]")); err == nil {
		return strings.Trim(s, "[]"), nil
	}
	if h, _, err := net.SplitHostPort(s); err == nil {
		return "", fmt.Errorf("%q has a port: write %q (the port is not checked)", name, h)
	}
	dot := strings.HasPrefix(s, ".")
	s = strings.TrimSuffix(strings.TrimPrefix(s, "."), ".")
	if s == "" {
		return "", fmt.Errorf("%q: want a host name such as %q", name, "ops.example.com")
	}
	for _, label := range strings.Split(s, ".") {
		if label == "" {
			return "", fmt.Errorf("%q: empty label between dots", name)
		}
		for _, r := range label {
			if !(r >= 'a' && r <= 'z' || r >= '0' && r <= '9' || r == '-' || r == '_') {
				return "", fmt.Errorf("%q: %q is not allowed in a host name: want letters, digits, '-' and '.' (a name in another script in its xn-- form)", name, r)
			}
		}
	}
	if dot {
		s = "." + s
	}
	return s, nil
}

// List is a set of allowed names. Its zero value admits addresses,
// "localhost" and the names under ".localhost" only.
type List struct {
	names    map[string]bool
	suffixes []string // ".example.com"
}

// Add adds a name as [Parse] reads it.
func (l *List) Add(name string) error {
	s, err := Parse(name)
	if err != nil {
		return err
	}
	if strings.HasPrefix(s, ".") {
		l.suffixes = append(l.suffixes, s)
		return nil
	}
	if l.names == nil {
		l.names = map[string]bool{}
	}
	l.names[s] = true
	return nil
}

// Name returns the host name of a Host header: without its port and its
// brackets, in lower case, without a trailing dot.
func Name(hostHeader string) string {
	h := hostHeader
	if host, _, err := net.SplitHostPort(h); err == nil {
		h = host
	}
	return strings.TrimSuffix(strings.ToLower(strings.Trim(h, "[]")), ".")
}

// Allows reports whether a request whose Host header is hostHeader is
// meant for this server.
func (l *List) Allows(hostHeader string) bool {
	name := Name(hostHeader)
	switch {
	case name == "":
		return false
	case name == "localhost" || strings.HasSuffix(name, ".localhost"):
		return true
	case l.names[name]:
		return true
	}
	if _, err := netip.ParseAddr(name); err == nil {
		return true
	}
	for _, s := range l.suffixes {
		if name == s[1:] || strings.HasSuffix(name, s) {
			return true
		}
	}
	return false
}
