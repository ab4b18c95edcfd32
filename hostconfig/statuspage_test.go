package hostconfig_test

import (
	"reflect"
	"strings"
	"testing"

	"github.com/redeliver-go/redeliver/hostconfig"
)

func TestStatusPageSection(t *testing.T) {
	cfg, err := noEnv.Parse("host.json", []byte(`{
  "version": "2.0",
  "statusPage": { "allowedHosts": ["Ops.Example.com", ".internal.example.", "10.0.0.5"] },
}`))
	if err != nil {
		t.Fatal(err)
	}
	s := cfg.StatusPage
	if s == nil {
		t.Fatal("no StatusPage")
	}
	if want := []string{"ops.example.com", ".internal.example", "10.0.0.5"}; !reflect.DeepEqual(s.AllowedHosts, want) {
		t.Errorf("AllowedHosts = %q, want %q", s.AllowedHosts, want)
	}
	if s.Origin != "statusPage (host.json:3:17)" || len(s.Settings) != 1 || s.Settings[0].Source != "host.json:3:35" {
		t.Errorf("origin %q, settings %+v", s.Origin, s.Settings)
	}
	if ex := cfg.Explain(); !strings.Contains(ex, "Status page: answers to loopback names, IP addresses, the name of its listen address and ops.example.com, .internal.example, 10.0.0.5 (allowedHosts, host.json:3:35)") {
		t.Errorf("Explain:\n%s", ex)
	}

	// An environment override gives the names separated by commas, and
	// replaces the file's list.
	env := hostconfig.Loader{Environ: func() []string {
		return []string{"AzureFunctionsJobHost__statusPage__allowedHosts=a.example, b.example"}
	}}
	cfg, err = env.Parse("host.json", []byte(`{"statusPage": {"allowedHosts": ["ops.example.com"]}}`))
	if err != nil {
		t.Fatal(err)
	}
	if want := []string{"a.example", "b.example"}; !reflect.DeepEqual(cfg.StatusPage.AllowedHosts, want) {
		t.Errorf("AllowedHosts from the environment = %q, want %q", cfg.StatusPage.AllowedHosts, want)
	}
}

func TestStatusPageSectionErrors(t *testing.T) {
	for _, tc := range []struct{ doc, want string }{
		{`{"statusPage": {"allowedHosts": ["http://ops.example.com:8080/"]}}`,
			`host.json:1:34: statusPage.allowedHosts[0]: "http://ops.example.com:8080/" is a URL: want the host name alone: write "ops.example.com"`},
		{`{"statusPage": {"allowedHosts": ["ok.example", "ops.example.com:8443"]}}`,
			`host.json:1:48: statusPage.allowedHosts[1]: "ops.example.com:8443" has a port: write "ops.example.com" (the port is not checked)`},
		{`{"statusPage": {"allowedHosts": ["*"]}}`, `statusPage.allowedHosts[0]: "*": a wildcard would admit names the list is there to refuse`},
		{`{"statusPage": {"allowedHosts": [""]}}`, `statusPage.allowedHosts[0]: empty name`},
		{`{"statusPage": {"allowedHosts": ["ops example"]}}`, `' ' is not allowed in a host name`},
		{`{"statusPage": {"allowedHosts": [3]}}`, `statusPage.allowedHosts[0]: want a host name in a string, got the number 3`},
		{`{"statusPage": {"allowedHosts": true}}`, `statusPage.allowedHosts: want a list of host names such as ["ops.example.com"], got true`},
		{`{"statusPage": {"allowedHost": ["a"]}}`, `unknown field "allowedHost": did you mean allowedHosts?`},
	} {
		_, err := noEnv.Parse("host.json", []byte(tc.doc))
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s:\n got %v\nwant %s", tc.doc, err, tc.want)
		}
	}
	_, err := noEnv.Parse("host.json", []byte(`{"statusPag": {}}`))
	if err == nil || !strings.Contains(err.Error(), "did you mean statusPage?") {
		t.Errorf("a misspelt section: %v, want an error suggesting statusPage", err)
	}
}
