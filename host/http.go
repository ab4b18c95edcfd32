package host

import (
	"crypto/sha256"
	"crypto/subtle"
	_ "embed"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"html/template"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"
)

// Handler returns the host's HTTP endpoints, for a caller that serves them
// on a server of its own (with [WithHTTP] the host serves them itself):
//
//	GET  /healthz                 200 while the process runs
//	GET  /readyz                  200 once every function's consumer has joined its group and has its
//	                              assignment; 503 before, and while the host stops
//	GET  /                        the status page, HTML that reloads itself
//	GET  /status.json             the same as JSON (a [Status])
//	POST /actions/resume          form or query: function, topic, partition; [Host.Resume]
//	POST /actions/skip            the same; [Host.Skip]
//	POST /actions/signin          form: token; sets a cookie the actions accept
//
// The actions are refused (403) from another origin: a request whose
// Sec-Fetch-Site is not same-origin, or whose Origin is not the page's own.
// With [WithToken], they need the token, as "Authorization: Bearer <token>"
// or the cookie of a sign-in. A browser's form post gets a redirect back to
// the page; a request that accepts JSON gets {"ok": true} or {"error": ...}.
func (h *Host) Handler() http.Handler {
	if err := h.usable(); err != nil {
		return failing(err)
	}
	return h.http
}

func (h *Host) newMux() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		fmt.Fprintln(w, "ok")
	})
	mux.HandleFunc("GET /readyz", func(w http.ResponseWriter, r *http.Request) {
		ready, reason := h.Ready()
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		if !ready {
			w.WriteHeader(http.StatusServiceUnavailable)
		}
		fmt.Fprintln(w, reason)
	})
	mux.HandleFunc("GET /{$}", h.page)
	mux.HandleFunc("GET /status.json", func(w http.ResponseWriter, r *http.Request) {
		writeJSON(w, http.StatusOK, h.status(r.Context()))
	})
	mux.HandleFunc("POST /actions/resume", h.action(h.Resume))
	mux.HandleFunc("POST /actions/skip", h.action(h.Skip))
	mux.HandleFunc("POST /actions/signin", h.signin)
	return mux
}

func writeJSON(w http.ResponseWriter, code int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(code)
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	_ = enc.Encode(v)
}

// sameOrigin reports whether r comes from the host's own pages or from no
// browser page at all (a script).
func sameOrigin(r *http.Request) bool {
	switch r.Header.Get("Sec-Fetch-Site") {
	case "", "same-origin", "none":
	default:
		return false
	}
	origin := r.Header.Get("Origin")
	if origin == "" {
		return true
	}
	u, err := url.Parse(origin)
	return err == nil && u.Host == r.Host
}

const cookieName = "redeliver-token"

// cookieValue is what the sign-in cookie holds: a hash of the token, so
// that the token itself is not stored in the browser.
func cookieValue(token string) string {
	sum := sha256.Sum256([]byte("redeliver status page\x00" + token))
	return hex.EncodeToString(sum[:])
}

// authorized reports whether r carries the token, when one is configured.
func (h *Host) authorized(r *http.Request) bool {
	if h.c.token == "" {
		return true
	}
	if auth, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer "); ok {
		return subtle.ConstantTimeCompare([]byte(auth), []byte(h.c.token)) == 1
	}
	if c, err := r.Cookie(cookieName); err == nil {
		return subtle.ConstantTimeCompare([]byte(c.Value), []byte(cookieValue(h.c.token))) == 1
	}
	return false
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
	if code == http.StatusForbidden || code == http.StatusUnauthorized {
		http.Error(w, msg, code)
		return
	}
	http.Redirect(w, r, "/?msg="+url.QueryEscape(msg), http.StatusSeeOther)
}

// action handles a Resume or Skip.
func (h *Host) action(do func(function, topic string, partition int32) error) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		if !sameOrigin(r) {
			reply(w, r, http.StatusForbidden, "refused: the request comes from another origin")
			return
		}
		if !h.authorized(r) {
			reply(w, r, http.StatusUnauthorized, "refused: this action needs the host's token")
			return
		}
		fn, topic := r.FormValue("function"), r.FormValue("topic")
		p, err := strconv.ParseInt(r.FormValue("partition"), 10, 32)
		if fn == "" || topic == "" || err != nil {
			reply(w, r, http.StatusBadRequest, "want function, topic and partition (an integer)")
			return
		}
		verb := strings.TrimPrefix(r.URL.Path, "/actions/")
		if err := do(fn, topic, int32(p)); err != nil {
			code := http.StatusConflict
			if errors.Is(err, ErrUnknownFunction) {
				code = http.StatusNotFound
			}
			reply(w, r, code, fmt.Sprintf("%s %s %s/%d: %v", verb, fn, topic, p, err))
			return
		}
		past := map[string]string{"resume": "resumed", "skip": "skipped"}[verb]
		reply(w, r, http.StatusOK, fmt.Sprintf("%s %s/%d of %s", past, topic, p, fn))
	}
}

// signin sets the token cookie.
func (h *Host) signin(w http.ResponseWriter, r *http.Request) {
	if !sameOrigin(r) {
		reply(w, r, http.StatusForbidden, "refused: the request comes from another origin")
		return
	}
	tok := r.FormValue("token")
	if h.c.token == "" || subtle.ConstantTimeCompare([]byte(tok), []byte(h.c.token)) != 1 {
		reply(w, r, http.StatusUnauthorized, "refused: wrong token")
		return
	}
	http.SetCookie(w, &http.Cookie{Name: cookieName, Value: cookieValue(h.c.token), Path: "/",
		HttpOnly: true, SameSite: http.SameSiteStrictMode})
	reply(w, r, http.StatusOK, "signed in")
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
	d.SignedIn = d.Token && h.authorized(r)
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
