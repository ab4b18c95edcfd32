package host

import (
	"context"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	_ "embed"
	"encoding/base64"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"html/template"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/redeliver-go/redeliver/hostconfig"
	"github.com/redeliver-go/redeliver/internal/allowedhost"
)

// Handler returns the host's HTTP endpoints, for a caller that serves them
// on a server of its own (with [WithHTTP] the host serves them itself):
//
//	GET  /healthz                 200 while the process runs
//	GET  /readyz                  200 once every function's consumer has joined its group and has its
//	                              assignment, while none reports a problem ([Host.Ready]); 503 before,
//	                              while one does, and while the host stops
//	GET  /                        the status page, HTML that reloads itself
//	GET  /status.json             the same as JSON (a [Status])
//	POST /actions/resume          form or query: function, topic, partition, and offset for a record
//	                              held in share mode; [Host.Resume], [Host.ResumeRecord] with offset
//	POST /actions/skip            the same; [Host.Skip], [Host.SkipRecord] with offset
//	POST /actions/signin          form: token; sets a cookie the actions accept
//
// The CLI's "redeliver stopped", "redeliver resume" and "redeliver skip"
// (cmd/redeliver) read /status.json and post to the actions, with the
// token as "Authorization: Bearer <token>" and "Accept: application/json".
//
// An action waits for its outcome at most 10 seconds, and no longer than
// its request lasts: past that it answers 504 Gateway Timeout with the
// state the partition is in (still stopped, or, for a skip the worker
// took, its checkpoint past the batch being written).
//
// Anyone who reaches /healthz and /readyz may read them; by a name the
// status page does not answer to (below), /readyz names the functions that
// are not ready but not what their adapters found wrong (topics, brokers,
// error texts), which the page's names get. Every other path
// answers only to the names it is meant for, so that a web page cannot
// reach it through DNS rebinding: a request whose Host header names
// anything but an IP address, "localhost" (or a name under .localhost),
// the name of the [WithHTTP] address or a name of [WithAllowedHosts] or
// host.json's statusPage.allowedHosts gets 403 and a message naming those
// settings.
//
// The actions and the sign-in are refused (403) from another origin, by
// the standard library's [http.CrossOriginProtection]. With [WithToken],
// they need the token, as "Authorization: Bearer <token>" or the cookie of
// a sign-in, which holds for [SignInFor] and only in this process; wrong
// tokens are limited to 5 at once from a client (an IPv4 address or an
// IPv6 /64), then one more every 6 seconds, and 429 answers the rest.
// Without a token, the actions answer only to requests that reach the host
// over the loopback interface and not through a proxy (no Forwarded, Via,
// X-Real-IP or X-Forwarded-* header), unless [WithUnauthenticatedActions]
// is given; a proxy that adds none of these looks like a local client, so
// give a token behind any proxy. A browser's form post gets a redirect
// back to the page; a request that accepts JSON gets {"ok": true} or
// {"error": ...}.
func (h *Host) Handler() http.Handler {
	if err := h.usable(); err != nil {
		return failing(err)
	}
	return h.http
}

// WithHTTP serves the HTTP endpoints (see [Host.Handler]) on addr while Run
// runs. An address without a host (":8080") listens on the loopback
// interface 127.0.0.1 only; name a host ("0.0.0.0:8080") to serve beyond
// the machine, which needs [WithToken] (or [WithUnauthenticatedActions]):
// Run refuses to start without one. A host given by name
// ("ops.example.com:8080") is a name the page answers to. The default
// serves nothing.
func WithHTTP(addr string) Option {
	return hostOption(func(c *config) { c.httpAddr = addr })
}

// WithListener serves the HTTP endpoints on ln while Run runs, for a
// caller that needs the address before Run starts. Run closes ln. As with
// [WithHTTP], a listener beyond the loopback interface needs a token.
func WithListener(ln net.Listener) Option {
	return hostOption(func(c *config) { c.listener = ln })
}

// MinTokenLen is the shortest token [WithToken] accepts, in bytes.
const MinTokenLen = 16

// WithToken makes the status page's actions (Resume, Skip) require token:
// as "Authorization: Bearer <token>", or signed in on the page. The token
// must be at least [MinTokenLen] bytes ("openssl rand -hex 16" makes one
// of 32), without white space at either end: [New] refuses others. The
// default requires none on the loopback interface, and Run refuses to
// serve beyond it without one. Actions are always refused from other
// origins.
func WithToken(token string) Option {
	return hostOption(func(c *config) { c.token = token })
}

// WithUnauthenticatedActions serves the actions without a token to every
// request, from beyond the loopback interface and through proxies too:
// anyone who can reach the address can then resume and skip stopped
// partitions. Give it only where something in front of the host (the
// network, a proxy's own sign-in) admits operators alone. Host names and
// origins are checked all the same.
func WithUnauthenticatedActions() Option {
	return hostOption(func(c *config) { c.open = true })
}

// WithAllowedHosts adds names the status page, its JSON, its actions and
// its sign-in answer to, besides IP addresses, "localhost" and the names
// under .localhost: the names browsers use to reach the host, such as a
// reverse proxy's public name. A name with a leading dot (".example.com")
// admits itself and every name under it. Names are host names alone, with
// no scheme, port or wildcard; [New] refuses others. host.json's
// statusPage.allowedHosts adds names too.
func WithAllowedHosts(names ...string) Option {
	return hostOption(func(c *config) { c.allowed = append(c.allowed, names...) })
}

// WithRefresh sets how often the status page reloads itself; the default
// is 2s.
func WithRefresh(d time.Duration) Option {
	return hostOption(func(c *config) { c.refresh = d })
}

// SignInFor is how long a sign-in on the status page holds. Its cookie is
// signed with a key the process draws when it starts, so a restart also
// ends it.
const SignInFor = 12 * time.Hour

// Wrong tokens allowed at once from one client, and the time after which
// it may try one more.
const (
	signInBurst = 5
	signInEvery = 6 * time.Second
)

// web is what the HTTP endpoints keep besides the host's config.
type web struct {
	hosts  allowedhost.List
	cop    http.CrossOriginProtection
	secret [32]byte // signs the sign-in cookies
	limit  *limiter

	mu      sync.Mutex
	refused map[string]bool // names already logged as refused
}

// newWeb checks the HTTP options and the statusPage section.
func newWeb(c *config, sp *hostconfig.StatusPage) (*web, error) {
	wb := &web{limit: newLimiter(c.now, signInBurst, signInEvery), refused: map[string]bool{}}
	rand.Read(wb.secret[:])
	if c.token != "" {
		switch {
		case strings.TrimSpace(c.token) != c.token:
			return nil, errors.New("host: WithToken: the token has white space at an end (a file's last newline?): trim it")
		case len(c.token) < MinTokenLen:
			return nil, fmt.Errorf("host: WithToken: a token of %d bytes is too short: want %d or more, such as the output of openssl rand -hex 16", len(c.token), MinTokenLen)
		}
	}
	for _, n := range c.allowed {
		if err := wb.hosts.Add(n); err != nil {
			return nil, fmt.Errorf("host: WithAllowedHosts: %w", err)
		}
	}
	if sp != nil {
		for _, n := range sp.AllowedHosts {
			if err := wb.hosts.Add(n); err != nil {
				return nil, fmt.Errorf("host: %s: %w", sp.Origin, err)
			}
		}
	}
	if name, _, err := net.SplitHostPort(c.httpAddr); err == nil && name != "" {
		_ = wb.hosts.Add(name) // a name Listen cannot use fails there
	}
	return wb, nil
}

func (h *Host) newMux() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		fmt.Fprintln(w, "ok")
	})
	mux.HandleFunc("GET /readyz", func(w http.ResponseWriter, r *http.Request) {
		// Any name may read it; what a function's adapter found only
		// the names of the status page.
		ready, reason := h.readiness(h.web.hosts.Allows(r.Host))
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		if !ready {
			w.WriteHeader(http.StatusServiceUnavailable)
		}
		fmt.Fprintln(w, reason)
	})
	guarded := http.NewServeMux()
	guarded.HandleFunc("GET /{$}", h.page)
	guarded.HandleFunc("GET /status.json", func(w http.ResponseWriter, r *http.Request) {
		writeJSON(w, http.StatusOK, h.status(r.Context()))
	})
	guarded.HandleFunc("POST /actions/resume", h.action(h.Resume, h.ResumeRecord))
	guarded.HandleFunc("POST /actions/skip", h.action(h.Skip, h.SkipRecord))
	guarded.HandleFunc("POST /actions/signin", h.signin)
	mux.Handle("/", h.guard(guarded))
	return mux
}

// guard admits a request to next when its Host header names this host and,
// for a request that may change something, it comes from the host's own
// pages or from no browser page at all.
func (h *Host) guard(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !h.web.hosts.Allows(r.Host) {
			name := allowedhost.Name(r.Host)
			h.web.mu.Lock()
			first := !h.web.refused[name] && len(h.web.refused) < 64
			if first {
				h.web.refused[name] = true
			}
			h.web.mu.Unlock()
			if first {
				h.log.Warn("redeliver: status page refused a request by a name it does not answer to (logged once per name)", "host", r.Host, "path", r.URL.Path, "remote", r.RemoteAddr)
			}
			reply(w, r, http.StatusForbidden, fmt.Sprintf("refused: this host does not answer to the name %q (the request's Host header). "+
				"If browsers should reach it by that name, add it to host.WithAllowedHosts or to host.json's \"statusPage\": {\"allowedHosts\": [...]}.", name))
			return
		}
		if err := h.web.cop.Check(r); err != nil {
			reply(w, r, http.StatusForbidden, "refused: the request comes from another origin ("+err.Error()+")")
			return
		}
		next.ServeHTTP(w, r)
	})
}

func writeJSON(w http.ResponseWriter, code int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(code)
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	_ = enc.Encode(v)
}

// beyondLoopback reports whether r may come from beyond the loopback
// interface: it came through a proxy (which adds a forwarding header:
// Forwarded, Via, X-Real-Ip or any X-Forwarded-*), or to a local address
// that is not loopback, or by no server that says (the handler called in
// the process).
func beyondLoopback(r *http.Request) bool {
	for k := range r.Header {
		switch {
		case k == "Forwarded", k == "Via", k == "X-Real-Ip", strings.HasPrefix(k, "X-Forwarded-"):
			return true
		}
	}
	a, ok := r.Context().Value(http.LocalAddrContextKey).(net.Addr)
	return !ok || !isLoopback(a)
}

// isLoopback reports whether a is an address of the loopback interface or
// a Unix socket.
func isLoopback(a net.Addr) bool {
	switch a := a.(type) {
	case *net.TCPAddr:
		return a.IP.IsLoopback()
	case *net.UnixAddr:
		return true
	}
	ap, err := netip.ParseAddrPort(a.String())
	return err == nil && ap.Addr().IsLoopback()
}

const cookieName = "redeliver-signin"

// cookie returns the value of a sign-in cookie that holds until exp:
// exp and its HMAC under the process's secret.
func (wb *web) cookie(exp time.Time) string {
	at := binary.BigEndian.AppendUint64(nil, uint64(exp.Unix()))
	return base64.RawURLEncoding.EncodeToString(at) + "." + base64.RawURLEncoding.EncodeToString(wb.mac(at))
}

func (wb *web) mac(at []byte) []byte {
	m := hmac.New(sha256.New, wb.secret[:])
	m.Write([]byte("redeliver status page sign-in\x00"))
	m.Write(at)
	return m.Sum(nil)
}

// signedIn checks r's sign-in cookie; when it has none or it does not
// hold, it says why.
func (h *Host) signedIn(r *http.Request) (bool, string) {
	c, err := r.Cookie(cookieName)
	if err != nil {
		return false, "refused: this action needs the host's token: sign in on the page, or send Authorization: Bearer <token>"
	}
	a, b, _ := strings.Cut(c.Value, ".")
	at, err1 := base64.RawURLEncoding.DecodeString(a)
	sum, err2 := base64.RawURLEncoding.DecodeString(b)
	if err1 != nil || err2 != nil || len(at) != 8 || !hmac.Equal(sum, h.web.mac(at)) {
		return false, "refused: the sign-in is not one of this host's (it restarted since?): sign in again"
	}
	if exp := time.Unix(int64(binary.BigEndian.Uint64(at)), 0); !h.c.now().Before(exp) {
		return false, fmt.Sprintf("refused: the sign-in expired at %s: sign in again", exp.Format(time.DateTime))
	}
	return true, ""
}

// tryToken compares a token a client gives with the host's, within the
// client's allowance of wrong tokens. It returns the reply's code and
// message when the token does not admit the request.
func (h *Host) tryToken(w http.ResponseWriter, r *http.Request, tok string) (int, string) {
	key := clientKey(r.RemoteAddr)
	if wait, blocked := h.web.limit.take(key); wait > 0 {
		if blocked {
			h.log.Warn("redeliver: status page: too many wrong tokens, refusing more for a while", "remote", r.RemoteAddr, "client", key, "path", r.URL.Path)
		}
		secs := int((wait + time.Second - 1) / time.Second)
		w.Header().Set("Retry-After", strconv.Itoa(secs))
		return http.StatusTooManyRequests, fmt.Sprintf("refused: too many wrong tokens from %s: try again in %ds", key, secs)
	}
	if subtle.ConstantTimeCompare([]byte(tok), []byte(h.c.token)) != 1 {
		h.log.Warn("redeliver: status page: wrong token", "remote", r.RemoteAddr, "path", r.URL.Path)
		return http.StatusUnauthorized, "refused: wrong token"
	}
	h.web.limit.refund(key)
	return 0, ""
}

// authorize answers r and returns false when r may not run an action.
func (h *Host) authorize(w http.ResponseWriter, r *http.Request) bool {
	if h.c.token == "" {
		if h.c.open || !beyondLoopback(r) {
			return true
		}
		reply(w, r, http.StatusForbidden, "refused: without a token, the host's actions answer only to requests over the loopback interface, "+
			"and this one came from another address or through a proxy: give the host a token (host.WithToken), "+
			"or host.WithUnauthenticatedActions() to let anyone who reaches it run them")
		return false
	}
	if auth := r.Header.Get("Authorization"); auth != "" {
		scheme, tok, _ := strings.Cut(auth, " ")
		if !strings.EqualFold(scheme, "Bearer") {
			reply(w, r, http.StatusUnauthorized, "refused: want Authorization: Bearer <token>")
			return false
		}
		if code, msg := h.tryToken(w, r, tok); code != 0 {
			reply(w, r, code, msg)
			return false
		}
		return true
	}
	if ok, why := h.signedIn(r); !ok {
		reply(w, r, http.StatusUnauthorized, why)
		return false
	}
	return true
}

func wantsJSON(r *http.Request) bool {
	return strings.Contains(r.Header.Get("Accept"), "application/json")
}

// reply answers an action: JSON for scripts, a redirect to the page with
// a message for browsers.
func reply(w http.ResponseWriter, r *http.Request, code int, msg string) {
	if wantsJSON(r) {
		if code == http.StatusOK {
			writeJSON(w, code, map[string]any{"ok": true, "message": msg})
		} else {
			writeJSON(w, code, map[string]any{"ok": false, "error": msg})
		}
		return
	}
	switch code {
	case http.StatusForbidden, http.StatusUnauthorized, http.StatusTooManyRequests:
		http.Error(w, msg, code)
		return
	}
	http.Redirect(w, r, "/?msg="+url.QueryEscape(msg), http.StatusSeeOther)
}

// actionWait bounds how long an action's request waits for the partition's
// worker: the command taken, and for a skip the checkpoint written.
const actionWait = 10 * time.Second

// action handles a Resume or Skip. It waits for the outcome at most
// actionWait, and no longer than the request lasts (a client that goes
// away ends the wait); a wait cut short answers 504 with the state the
// partition is in.
func (h *Host) action(do func(ctx context.Context, function, topic string, partition int32) error,
	doRecord func(ctx context.Context, function, topic string, partition int32, offset int64) error) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		if !h.authorize(w, r) {
			return
		}
		fn, topic := r.FormValue("function"), r.FormValue("topic")
		p, err := strconv.ParseInt(r.FormValue("partition"), 10, 32)
		if fn == "" || topic == "" || err != nil {
			reply(w, r, http.StatusBadRequest, "want function, topic and partition (an integer)")
			return
		}
		offset := int64(-1)
		if v := r.FormValue("offset"); v != "" {
			if offset, err = strconv.ParseInt(v, 10, 64); err != nil || offset < 0 {
				reply(w, r, http.StatusBadRequest, fmt.Sprintf("offset %q: want the offset of a stopped record (an integer, 0 or more), or no offset for the partition", v))
				return
			}
		}
		verb := strings.TrimPrefix(r.URL.Path, "/actions/")
		ctx, cancel := context.WithTimeout(r.Context(), actionWait)
		defer cancel()
		unit := fmt.Sprintf("%s/%d", topic, p)
		if offset >= 0 {
			unit += fmt.Sprintf(" at offset %d", offset)
			err = doRecord(ctx, fn, topic, int32(p), offset)
		} else {
			err = do(ctx, fn, topic, int32(p))
		}
		if err != nil {
			code := http.StatusConflict
			switch {
			case errors.Is(err, ErrUnknownFunction):
				code = http.StatusNotFound
			case ctx.Err() != nil && errors.Is(err, ctx.Err()):
				code = http.StatusGatewayTimeout
			}
			reply(w, r, code, fmt.Sprintf("%s %s %s: %v", verb, fn, unit, err))
			return
		}
		past := map[string]string{"resume": "resumed", "skip": "skipped"}[verb]
		reply(w, r, http.StatusOK, fmt.Sprintf("%s %s of %s", past, unit, fn))
	}
}

// signin sets the sign-in cookie.
func (h *Host) signin(w http.ResponseWriter, r *http.Request) {
	if h.c.token == "" {
		reply(w, r, http.StatusBadRequest, "this host has no token: there is nothing to sign in to")
		return
	}
	if code, msg := h.tryToken(w, r, r.FormValue("token")); code != 0 {
		reply(w, r, code, msg)
		return
	}
	http.SetCookie(w, &http.Cookie{Name: cookieName, Value: h.web.cookie(h.c.now().Add(SignInFor)), Path: "/",
		MaxAge: int(SignInFor / time.Second), HttpOnly: true, SameSite: http.SameSiteStrictMode,
		Secure: r.TLS != nil || strings.EqualFold(r.Header.Get("X-Forwarded-Proto"), "https")})
	reply(w, r, http.StatusOK, "signed in")
}

// limiter limits the wrong tokens of each client: a bucket of burst
// attempts per client, one more each every; a right token gives its
// attempt back. It keeps at most maxClients clients apart; beyond, the
// others share one bucket.
type limiter struct {
	now   func() time.Time
	burst float64
	every time.Duration

	mu      sync.Mutex
	clients map[string]*bucket
}

type bucket struct {
	left    float64 // attempts left at at
	at      time.Time
	blocked bool // the last take was refused
}

const maxClients = 4096

func newLimiter(now func() time.Time, burst int, every time.Duration) *limiter {
	return &limiter{now: now, burst: float64(burst), every: every, clients: map[string]*bucket{}}
}

// fill brings b's attempts up to now.
func (l *limiter) fill(b *bucket, now time.Time) {
	if d := now.Sub(b.at); d > 0 {
		b.left = min(l.burst, b.left+float64(d)/float64(l.every))
	}
	b.at = now
}

// take spends one attempt of key's; when none is left, it returns how long
// until one is, and whether key was not refused just before.
func (l *limiter) take(key string) (wait time.Duration, newlyBlocked bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	now := l.now()
	b := l.clients[key]
	if b == nil {
		if len(l.clients) >= maxClients {
			for k, c := range l.clients {
				if l.fill(c, now); c.left >= l.burst {
					delete(l.clients, k)
				}
			}
		}
		if len(l.clients) >= maxClients {
			key = "others"
		}
		if b = l.clients[key]; b == nil {
			b = &bucket{left: l.burst, at: now}
			l.clients[key] = b
		}
	}
	l.fill(b, now)
	if b.left < 1 {
		newlyBlocked, b.blocked = !b.blocked, true
		return time.Duration((1 - b.left) * float64(l.every)), newlyBlocked
	}
	b.left--
	b.blocked = false
	return 0, false
}

// refund gives back the attempt a right token took.
func (l *limiter) refund(key string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	b := l.clients[key]
	if b == nil {
		b = l.clients["others"] // where take put it
	}
	if b != nil {
		b.left = min(l.burst, b.left+1)
	}
}

// clientKey names the client of a remote address for the limiter: its IP
// address, or its /64 for IPv6, where one client commonly holds a whole
// /64.
func clientKey(remote string) string {
	ap, err := netip.ParseAddrPort(remote)
	if err != nil {
		return remote
	}
	a := ap.Addr().Unmap()
	if a.Is6() {
		p, _ := a.Prefix(64)
		return p.String()
	}
	return a.String()
}

//go:embed page.html
var pageHTML string

var pageTmpl = template.Must(template.New("page").Funcs(template.FuncMap{
	"ago": func(now, t time.Time) string {
		if t.IsZero() {
			return ""
		}
		d := now.Sub(t).Round(time.Second)
		if d < 0 {
			return "in " + (-d).String()
		}
		return d.String() + " ago"
	},
	"clock": func(t time.Time) string {
		if t.IsZero() {
			return ""
		}
		return t.Format("15:04:05.000")
	},
	"of": func(max int) string {
		if max < 0 {
			return "unlimited"
		}
		return strconv.Itoa(max)
	},
	"since": func(now, t time.Time) string { return now.Sub(t).Round(time.Second).String() },
	"plural": func(n int, one, many string) string {
		if n == 1 {
			return one
		}
		return many
	},
	"offsets": func(first, last int64) string {
		if first == last {
			return fmt.Sprintf("offset %d", first)
		}
		return fmt.Sprintf("offsets %d–%d", first, last)
	},
	"refreshMs": func(d time.Duration) int64 { return d.Milliseconds() },
	"refreshS":  func(d time.Duration) int64 { return max(1, int64(d.Round(time.Second)/time.Second)) },
}).Parse(pageHTML))

type pageData struct {
	Status
	Msg      string
	Refresh  time.Duration
	Token    bool // actions need a token
	SignedIn bool
	Stopped  int
	Backoff  int
	Outage   int // partitions waiting out an outage
	Parked   int // entries not done, in every function's part of the store
}

func (h *Host) page(w http.ResponseWriter, r *http.Request) {
	d := pageData{Status: h.status(r.Context()), Msg: r.URL.Query().Get("msg"), Refresh: h.c.refresh, Token: h.c.token != ""}
	if d.Token {
		d.SignedIn, _ = h.signedIn(r) // the cookie only: a page load is no place to try tokens
	}
	for _, f := range d.Functions {
		if f.Parked != nil {
			d.Parked += f.Parked.Total()
		}
		for _, p := range f.Partitions {
			switch p.State {
			case StateStopped:
				d.Stopped++
			case StateBackoff:
				d.Backoff++
			case StateOutage:
				d.Outage++
			}
		}
	}
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.Header().Set("Cache-Control", "no-store")
	w.Header().Set("X-Frame-Options", "DENY")
	w.Header().Set("Content-Security-Policy", "default-src 'none'; style-src 'unsafe-inline'; script-src 'unsafe-inline'; form-action 'self'; frame-ancestors 'none'")
	if err := pageTmpl.Execute(w, d); err != nil {
		http.Error(w, err.Error(), http.StatusInternalServerError)
	}
}
