package hostconfig

import (
	"fmt"
	"strings"

	"github.com/redeliver-go/redeliver/internal/allowedhost"
)

// sectionStatusPage is the status page's section.
const sectionStatusPage = "statusPage"

// StatusPage is host.json's statusPage section: the host names a host's
// status page, its JSON, its actions and its sign-in answer to, besides
// the loopback names, IP addresses and the name of the listen address,
// which they always answer to:
//
//	"statusPage": {"allowedHosts": ["ops.example.com", ".internal.example"]}
//
// A name starting with a dot admits itself and every name under it. Give
// the names the operators' browsers use to reach the page, such as a
// reverse proxy's public name; a request with any other name in its Host
// header is refused, so that a web page cannot reach the page through DNS
// rebinding. An environment override gives the names separated by commas:
// AzureFunctionsJobHost__statusPage__allowedHosts=ops.example.com,.internal.example.
type StatusPage struct {
	// Origin says where the section was read, e.g. "statusPage (host.json:9:17)".
	Origin string
	// AllowedHosts are the names, in lower case, without a trailing dot.
	AllowedHosts []string
	// Settings lists the fields the section sets, with where each was read.
	Settings []Setting
}

var statusPageFields = []string{"allowedHosts"}

// statusPage decodes the statusPage section.
func (d *decoder) statusPage(n *node) *StatusPage {
	s := &StatusPage{Origin: n.path + " (" + d.pos(n) + ")"}
	f := d.fields(n, statusPageFields)
	if f == nil {
		return s
	}
	s.Settings = d.settingsOf(f, statusPageFields, nil)
	m := f["allowedHosts"]
	if m == nil {
		return s
	}
	add := func(at *node, name string) {
		h, err := allowedhost.Parse(name)
		if err != nil {
			d.add(at, "%v", err)
			return
		}
		s.AllowedHosts = append(s.AllowedHosts, h)
	}
	switch v := m.val; {
	case v.kind == '[':
		for _, e := range v.elems {
			if e.kind != '"' {
				d.add(e, "want a host name in a string, got %s", describe(e))
				continue
			}
			add(e, e.text)
		}
	case v.isText():
		// One string, as an environment override gives it: names
		// separated by commas.
		for name := range strings.SplitSeq(v.text, ",") {
			add(v, name)
		}
	default:
		d.add(v, `want a list of host names such as ["ops.example.com"], got %s`, describe(v))
	}
	return s
}

// Explain says in words which names the status page answers to.
func (s *StatusPage) Explain() string {
	also := "no other name"
	if len(s.AllowedHosts) > 0 {
		also = strings.Join(s.AllowedHosts, ", ")
		for _, st := range s.Settings {
			also += " (" + st.Field + ", " + st.Source + ")"
		}
	}
	return fmt.Sprintf("Status page: answers to loopback names, IP addresses, the name of its listen address and %s; "+
		"a request by any other name is refused (403).\n", also)
}
