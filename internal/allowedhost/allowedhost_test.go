package allowedhost

import "testing"

func TestAllows(t *testing.T) {
	var l List
	for _, n := range []string{"Ops.Example.com", ".internal.example", "[::1]"} {
		if err := l.Add(n); err != nil {
			t.Fatalf("Add(%q): %v", n, err)
		}
	}
	for host, want := range map[string]bool{
		"127.0.0.1:8080":         true,
		"127.0.0.1":              true,
		"[::1]:8080":             true,
		"10.1.2.3:80":            true, // an address cannot come from a rebinding page
		"localhost:8080":         true,
		"LOCALHOST.":             true,
		"app.localhost:8080":     true,
		"ops.example.com:443":    true,
		"OPS.EXAMPLE.COM.":       true,
		"internal.example":       true,
		"a.b.internal.example":   true,
		"evil.example:8080":      false,
		"example.com":            false,
		"xops.example.com":       false,
		"notinternal.example":    false,
		"localhost.evil.example": false,
		"":                       false,
		"2130706433":             false, // 127.0.0.1 as a number: not an address a browser sends
	} {
		if got := l.Allows(host); got != want {
			t.Errorf("Allows(%q) = %v, want %v", host, got, want)
		}
	}
	var zero List
	if zero.Allows("ops.example.com") || !zero.Allows("localhost:1") {
		t.Error("the zero List admits more or less than its defaults")
	}
}

func TestParse(t *testing.T) {
	for in, want := range map[string]string{
		" Ops.Example.COM. ": "ops.example.com",
		".Example.com":       ".example.com",
		"[::1]":              "::1",
		"10.0.0.5":           "10.0.0.5",
		"my_host":            "my_host",
	} {
		if got, err := Parse(in); err != nil || got != want {
			t.Errorf("Parse(%q) = %q, %v; want %q", in, got, err, want)
		}
	}
	for _, in := range []string{"", " ", ".", "*", "*.example.com", "https://x.example", "x.example:80", "a..b", "a/b", "é.example", "a b"} {
		if got, err := Parse(in); err == nil {
			t.Errorf("Parse(%q) = %q, want an error", in, got)
		}
	}
}
