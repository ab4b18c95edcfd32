package host_test

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"net/url"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/redeliver-go/redeliver/host"
	"github.com/redeliver-go/redeliver/stream"
	"github.com/redeliver-go/redeliver/stream/streamtest"
)

// token is a token long enough for WithToken.
const token = "0123456789abcdef-status"

// stoppedHost runs, on a loopback listener, a host whose one function
// "payments" (an in-memory partition, payments/0) stops at offset 0, and
// waits until it has. It returns the host, the page's address and the
// partition.
func stoppedHost(t *testing.T, opts ...host.Option) (*host.Host, string, *streamtest.Partition) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	cfg := parse(t, `{"checkpointRetryPolicy": {"retryCount": 0, "onExhausted": "stop"}}`)
	h, err := host.New(cfg, append([]host.Option{host.WithListener(ln)}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	part := streamtest.NewPartition("payments", 0, 1)
	part.AppendN(time.Now(), 3)
	err = h.Register("payments", stream.HandlerFunc(func(_ context.Context, b *stream.Batch) error {
		if b.FirstOffset() == 0 {
			return errBoom
		}
		return nil
	}), host.Source{Describe: "in-memory payments", Topic: "payments", New: func(proc *stream.Processor) (func(context.Context) error, error) {
		return func(ctx context.Context) error {
			if err := streamtest.Run(ctx, proc, part); err != nil && ctx.Err() == nil {
				return err
			}
			return nil
		}, nil
	}})
	if err != nil {
		t.Fatal(err)
	}
	start(t, h)
	waitFor(t, "payments/0 stopped", func() bool {
		p, ok := partition(h.Status(), "payments")
		return ok && p.State == host.StateStopped
	})
	return h, "http://" + ln.Addr().String(), part
}

// send makes a request to the page's server with the given Host header
// and headers, and returns the status and body.
func send(t *testing.T, base, method, path, hostHeader string, form url.Values, header map[string]string) (int, http.Header, string) {
	t.Helper()
	var body io.Reader
	if form != nil {
		body = strings.NewReader(form.Encode())
	}
	req, err := http.NewRequest(method, base+path, body)
	if err != nil {
		t.Fatal(err)
	}
	if form != nil {
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	}
	if hostHeader != "" {
		req.Host = hostHeader
	}
	for k, v := range header {
		req.Header.Set(k, v)
	}
	cl := &http.Client{Timeout: wait, CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	resp, err := cl.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp.StatusCode, resp.Header, string(b)
}

// short cuts a body for a message.
func short(body string) string {
	if len(body) > 300 {
		return body[:300] + "..."
	}
	return body
}

var stopped = url.Values{"function": {"payments"}, "topic": {"payments"}, "partition": {"0"}}

// TestRebindingRefused sends what a page on evil.example:8080 whose name
// was rebound to 127.0.0.1 sends (its own name in Host, same-origin
// headers) to a host without a token on loopback: the page, the JSON,
// both actions and the sign-in refuse it, reveal nothing of the status,
// and the stopped partition stays stopped. The same request by an
// address is then run, so that the refusal is the Host check's alone.
func TestRebindingRefused(t *testing.T) {
	h, base, part := stoppedHost(t)
	rebound := map[string]string{"Origin": "http://evil.example:8080", "Sec-Fetch-Site": "same-origin", "Referer": "http://evil.example:8080/"}
	for _, rq := range []struct {
		method, path string
		form         url.Values
	}{
		{"GET", "/", nil},
		{"GET", "/status.json", nil},
		{"GET", "/nothing-here", nil},
		{"POST", "/actions/skip", stopped},
		{"POST", "/actions/resume", stopped},
		{"POST", "/actions/signin", url.Values{"token": {"x"}}},
	} {
		code, _, body := send(t, base, rq.method, rq.path, "evil.example:8080", rq.form, rebound)
		if code != http.StatusForbidden || !strings.Contains(body, `does not answer to the name "evil.example"`) ||
			!strings.Contains(body, "host.WithAllowedHosts") || !strings.Contains(body, `"statusPage": {"allowedHosts"`) {
			t.Errorf("%s %s by evil.example = %d %q, want 403 naming the settings that admit it", rq.method, rq.path, code, short(body))
		}
		if strings.Contains(body, "payments") || strings.Contains(body, "boom") {
			t.Errorf("%s %s by evil.example reveals the status: %q", rq.method, rq.path, short(body))
		}
	}
	// JSON for a script.
	code, _, body := send(t, base, "POST", "/actions/skip", "evil.example", stopped, map[string]string{"Accept": "application/json"})
	var js struct {
		OK    bool   `json:"ok"`
		Error string `json:"error"`
	}
	if err := json.Unmarshal([]byte(body), &js); code != 403 || err != nil || js.OK || !strings.Contains(js.Error, "does not answer") {
		t.Errorf("skip by evil.example, JSON = %d %s", code, body)
	}
	if p, _ := partition(h.Status(), "payments"); p.State != host.StateStopped || p.FirstOffset != 0 {
		t.Fatalf("after the rebinding requests, payments/0 = %+v, want still stopped at offset 0", p)
	}
	if c, _ := part.Committed(); c > 0 {
		t.Fatalf("after the rebinding requests, payments/0's checkpoint moved past the stopped batch: %d", c)
	}
	// Health stays open to any name.
	if code, _, body := send(t, base, "GET", "/healthz", "evil.example:8080", nil, rebound); code != 200 || body != "ok\n" {
		t.Errorf("/healthz by evil.example = %d %q, want 200", code, body)
	}
	if code, _, body := send(t, base, "GET", "/readyz", "evil.example:8080", nil, rebound); code != 200 {
		t.Errorf("/readyz by evil.example = %d %q, want 200", code, body)
	}

	// The operator's own click: by the address, the same headers of its
	// own origin.
	own := map[string]string{"Origin": base, "Sec-Fetch-Site": "same-origin"}
	if code, hdr, body := send(t, base, "POST", "/actions/skip", "", stopped, own); code != http.StatusSeeOther || !strings.Contains(hdr.Get("Location"), "skipped") {
		t.Fatalf("skip by the operator = %d %v %q", code, hdr, body)
	}
	waitFor(t, "payments/0 checkpointed past the skipped batch", func() bool {
		c, _ := part.Committed()
		return c == 3
	})
}

// TestAllowedHosts: names from WithAllowedHosts, host.json's statusPage
// section and the WithHTTP address are admitted, others are not, and a
// name that is no host name is an error of New.
func TestAllowedHosts(t *testing.T) {
	cfg := parse(t, `{"statusPage": {"allowedHosts": ["ops.example.com"]}}`)
	h, err := host.New(cfg, host.WithAllowedHosts(".internal.example"), host.WithHTTP("myhost:8080"))
	if err != nil {
		t.Fatal(err)
	}
	for name, want := range map[string]int{
		"ops.example.com":       200,
		"OPS.example.com.:8443": 200,
		"internal.example":      200,
		"a.internal.example":    200,
		"myhost:8080":           200,
		"localhost:8080":        200,
		"app.localhost":         200,
		"127.0.0.1:8080":        200,
		"[::1]:8080":            200,
		"10.0.0.7":              200,
		"example.com":           403,
		"evil.example":          403,
		"ops.example.com.evil":  403,
	} {
		req := httptest.NewRequest("GET", "/status.json", nil)
		req.Host = name
		rec := httptest.NewRecorder()
		h.Handler().ServeHTTP(rec, req)
		if rec.Code != want {
			t.Errorf("/status.json by %q = %d, want %d", name, rec.Code, want)
		}
	}
	for _, tc := range []struct {
		opt  host.Option
		want string
	}{
		{host.WithAllowedHosts("https://ops.example.com/"), `host: WithAllowedHosts: "https://ops.example.com/" is a URL: want the host name alone: write "ops.example.com"`},
		{host.WithAllowedHosts("*"), "a wildcard would admit names the list is there to refuse"},
		{host.WithAllowedHosts("ops.example.com:443"), `has a port: write "ops.example.com"`},
	} {
		if _, err := host.New(nil, tc.opt); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("New = %v, want %q", err, tc.want)
		}
	}
}

// fakeListener is a listener on an address of another interface, that
// never accepts: the host's start checks its address.
type fakeListener struct {
	addr   net.Addr
	closed chan struct{}
	once   sync.Once
}

func newFakeListener(addr string) *fakeListener {
	return &fakeListener{addr: net.TCPAddrFromAddrPort(netip.MustParseAddrPort(addr)), closed: make(chan struct{})}
}

func (l *fakeListener) Accept() (net.Conn, error) { <-l.closed; return nil, net.ErrClosed }
func (l *fakeListener) Close() error              { l.once.Do(func() { close(l.closed) }); return nil }
func (l *fakeListener) Addr() net.Addr            { return l.addr }

func (l *fakeListener) isClosed() bool {
	select {
	case <-l.closed:
		return true
	default:
		return false
	}
}

// idleHost returns a host with one function that waits for its context.
func idleHost(t *testing.T, opts ...host.Option) *host.Host {
	t.Helper()
	h, err := host.New(nil, opts...)
	if err != nil {
		t.Fatal(err)
	}
	err = h.Register("idle", streamtest.Succeed, host.Source{Describe: "idle", New: func(*stream.Processor) (func(context.Context) error, error) {
		return func(ctx context.Context) error { <-ctx.Done(); return nil }, nil
	}})
	if err != nil {
		t.Fatal(err)
	}
	return h
}

// TestNoTokenBeyondLoopbackRefusedAtStart: Run refuses to serve on an
// address beyond the loopback interface without a token, and says what
// to set; with a token, or WithUnauthenticatedActions, it starts.
func TestNoTokenBeyondLoopbackRefusedAtStart(t *testing.T) {
	for _, addr := range []string{"10.1.2.3:8080", "0.0.0.0:8080", "[::]:8080"} {
		ln := newFakeListener(addr)
		h := idleHost(t, host.WithListener(ln))
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second) // the refusal comes at once
		err := h.Run(ctx)
		cancel()
		for _, want := range []string{"is beyond the loopback interface and the host has no token", "host.WithToken (16 bytes or more)", "host.WithUnauthenticatedActions()"} {
			if err == nil || !strings.Contains(err.Error(), want) {
				t.Errorf("%s: Run = %v, want it refused, saying %q", addr, err, want)
			}
		}
		if !ln.isClosed() {
			t.Errorf("%s: the refused listener is left open", addr)
		}
	}
	for name, opt := range map[string]host.Option{"a token": host.WithToken(token), "WithUnauthenticatedActions": host.WithUnauthenticatedActions()} {
		ln := newFakeListener("10.1.2.3:8080")
		h := idleHost(t, host.WithListener(ln), opt)
		r := start(t, h)
		waitFor(t, "the host ready", func() bool { ok, _ := h.Ready(); return ok })
		if err, _ := r.Stop(t); err != nil {
			t.Errorf("with %s: Run = %v, want it to run until cancelled, then nil", name, err)
		}
	}
}

// TestNoTokenActionsOnlyOverLoopback: without a token, an action that did
// not come over the loopback interface (through a proxy, or a handler
// called without a server) is refused; WithUnauthenticatedActions admits
// it.
func TestNoTokenActionsOnlyOverLoopback(t *testing.T) {
	_, base, _ := stoppedHost(t)
	for _, hdr := range []string{"X-Forwarded-For", "Forwarded", "X-Forwarded-Host", "X-Real-Ip", "X-Forwarded-Proto", "X-Forwarded-Port", "X-Forwarded-Server", "Via"} {
		code, _, body := send(t, base, "POST", "/actions/resume", "", stopped, map[string]string{hdr: "203.0.113.9"})
		if code != 403 || !strings.Contains(body, "host.WithToken") || !strings.Contains(body, "host.WithUnauthenticatedActions()") {
			t.Errorf("resume through a proxy (%s) = %d %q, want 403 naming the token", hdr, code, body)
		}
	}
	h, err := host.New(nil)
	if err != nil {
		t.Fatal(err)
	}
	if rec := post(h.Handler(), "/actions/resume", stopped, nil); rec.Code != 403 {
		t.Errorf("resume by a handler called without a server = %d %s, want 403", rec.Code, rec.Body)
	}
	h, err = host.New(nil, host.WithUnauthenticatedActions())
	if err != nil {
		t.Fatal(err)
	}
	if rec := post(h.Handler(), "/actions/resume", stopped, map[string]string{"X-Forwarded-For": "203.0.113.9"}); rec.Code != http.StatusSeeOther ||
		!strings.Contains(rec.Header().Get("Location"), "no+such+function") {
		t.Errorf("resume with WithUnauthenticatedActions = %d %v, want it to reach the action", rec.Code, rec.Header())
	}
}

func TestTokenChecks(t *testing.T) {
	for tok, want := range map[string]string{
		"s3cret":                 "a token of 6 bytes is too short: want 16 or more",
		"0123456789abcde":        "a token of 15 bytes is too short",
		"0123456789abcdef\n":     "the token has white space at an end",
		" 0123456789abcdef":      "the token has white space at an end",
		"0123456789abcdef":       "",
		"correct horse battery!": "",
	} {
		_, err := host.New(nil, host.WithToken(tok))
		if want == "" && err != nil || want != "" && (err == nil || !strings.Contains(err.Error(), want)) {
			t.Errorf("WithToken(%q): New = %v, want %q", tok, err, want)
		}
	}
}

// signin posts the token from a client at remote.
func signin(hd http.Handler, tok, remote string) *httptest.ResponseRecorder {
	req := httptest.NewRequest("POST", "http://127.0.0.1:8080/actions/signin", strings.NewReader(url.Values{"token": {tok}}.Encode()))
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	req.Header.Set("Sec-Fetch-Site", "same-origin")
	req.RemoteAddr = remote
	rec := httptest.NewRecorder()
	hd.ServeHTTP(rec, req)
	return rec
}

// TestWrongTokensLimited: a client gets 5 wrong tokens at once, by sign-in
// or bearer token, then 429 with Retry-After, even for the right token,
// until 6 seconds have passed; another client is not held back. The clock
// is testing/synctest's: no real sleep.
func TestWrongTokensLimited(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h, err := host.New(nil, host.WithToken(token), host.WithLogger(slog.New(slog.DiscardHandler)))
		if err != nil {
			t.Fatal(err)
		}
		hd := h.Handler()
		const me, other = "192.0.2.7:40000", "192.0.2.8:40000"
		for i := range 4 {
			if rec := signin(hd, "guess", me); rec.Code != 401 || !strings.Contains(rec.Body.String(), "wrong token") {
				t.Fatalf("wrong token %d = %d %s, want 401", i+1, rec.Code, rec.Body)
			}
		}
		// The fifth by bearer token on an action.
		bearer := map[string]string{"Authorization": "Bearer guess", "Accept": "application/json"}
		req := func(hdr map[string]string, remote string) *httptest.ResponseRecorder {
			r := httptest.NewRequest("POST", "http://127.0.0.1:8080/actions/skip", strings.NewReader(stopped.Encode()))
			r.Header.Set("Content-Type", "application/x-www-form-urlencoded")
			for k, v := range hdr {
				r.Header.Set(k, v)
			}
			r.RemoteAddr = remote
			rec := httptest.NewRecorder()
			hd.ServeHTTP(rec, r)
			return rec
		}
		if rec := req(bearer, me); rec.Code != 401 {
			t.Fatalf("wrong bearer token = %d %s, want 401", rec.Code, rec.Body)
		}
		for _, tok := range []string{"guess", token} {
			rec := signin(hd, tok, me)
			if rec.Code != 429 || rec.Header().Get("Retry-After") != "6" || !strings.Contains(rec.Body.String(), "too many wrong tokens from 192.0.2.7: try again in 6s") {
				t.Fatalf("sign-in with %q after 5 wrong = %d %v %s, want 429 Retry-After 6", tok, rec.Code, rec.Header(), rec.Body)
			}
		}
		if rec := req(map[string]string{"Authorization": "Bearer " + token}, me); rec.Code != 429 {
			t.Fatalf("right bearer token while limited = %d, want 429", rec.Code)
		}
		if rec := signin(hd, "guess", other); rec.Code != 401 {
			t.Fatalf("another client's wrong token = %d, want 401 (not limited by the first)", rec.Code)
		}
		time.Sleep(5 * time.Second)
		if rec := signin(hd, token, me); rec.Code != 429 || rec.Header().Get("Retry-After") != "1" {
			t.Fatalf("after 5s = %d %v, want still 429, Retry-After 1", rec.Code, rec.Header())
		}
		time.Sleep(time.Second)
		if rec := signin(hd, token, me); rec.Code != http.StatusSeeOther || len(rec.Result().Cookies()) != 1 {
			t.Fatalf("right token after 6s = %d %s, want signed in", rec.Code, rec.Body)
		}
		// The right token gave its attempt back: one wrong one is
		// answered, the next is limited.
		if rec := signin(hd, "guess", me); rec.Code != 401 {
			t.Fatalf("wrong token after the right one = %d, want 401", rec.Code)
		}
		if rec := signin(hd, "guess", me); rec.Code != 429 {
			t.Fatalf("second wrong token = %d, want 429", rec.Code)
		}
		// IPv6 clients are counted by /64.
		for i := range 5 {
			signin(hd, "guess", "[2001:db8:1:2::"+string(rune('a'+i))+"]:1")
		}
		if rec := signin(hd, token, "[2001:db8:1:2:ffff::1]:1"); rec.Code != 429 {
			t.Fatalf("the same /64 after 5 wrong = %d, want 429", rec.Code)
		}
	})
}

// TestSignInCookie: the sign-in cookie admits the actions for SignInFor,
// only in the process that set it, and not when altered.
func TestSignInCookie(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h, err := host.New(nil, host.WithToken(token))
		if err != nil {
			t.Fatal(err)
		}
		rec := signin(h.Handler(), token, "192.0.2.7:1")
		cookies := rec.Result().Cookies()
		if rec.Code != http.StatusSeeOther || len(cookies) != 1 {
			t.Fatalf("sign-in = %d %s", rec.Code, rec.Body)
		}
		c := cookies[0]
		if !c.HttpOnly || c.SameSite != http.SameSiteStrictMode || c.MaxAge != int(host.SignInFor/time.Second) || strings.Contains(c.Value, token) {
			t.Errorf("cookie %+v", c)
		}
		resume := func(h *host.Host, value string) (int, string) {
			rec := post(h.Handler(), "/actions/resume", stopped, map[string]string{"Cookie": c.Name + "=" + value, "Sec-Fetch-Site": "same-origin"})
			return rec.Code, rec.Body.String()
		}
		// Not running: the action answers that the function is unknown,
		// which it reaches only when admitted.
		if code, body := resume(h, c.Value); code != http.StatusSeeOther {
			t.Fatalf("resume with the cookie = %d %s, want the action reached", code, body)
		}
		code, page := get(t, h.Handler(), "/")
		if code != 200 || !strings.Contains(page, "token for actions") {
			t.Errorf("the page without the cookie should offer the sign-in")
		}
		other, err := host.New(nil, host.WithToken(token))
		if err != nil {
			t.Fatal(err)
		}
		if code, body := resume(other, c.Value); code != 401 || !strings.Contains(body, "not one of this host's") {
			t.Errorf("another process's cookie = %d %s, want 401", code, body)
		}
		alt := []byte(c.Value)
		alt[2] ^= 1
		if code, _ := resume(h, string(alt)); code != 401 {
			t.Errorf("an altered cookie = %d, want 401", code)
		}
		time.Sleep(host.SignInFor - time.Second)
		if code, _ := resume(h, c.Value); code != http.StatusSeeOther {
			t.Errorf("resume a second before the sign-in expires = %d", code)
		}
		time.Sleep(time.Second)
		if code, body := resume(h, c.Value); code != 401 || !strings.Contains(body, "the sign-in expired at") {
			t.Errorf("resume once the sign-in expired = %d %s, want 401", code, body)
		}
	})
}
