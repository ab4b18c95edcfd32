package tests

import (
	"context"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redeliver-go/redeliver/host"
	"github.com/redeliver-go/redeliver/stream"
)

// statusHost runs two functions on kfake: "slow", whose batch at offset 2
// waits out a one-hour backoff, and "stopper", whose batch at offset 2
// fails until fixed is set and stops its partition once its one retry is
// spent.
func statusHost(t *testing.T, opts ...host.Option) (*host.Host, []string, *atomic.Bool) {
	t.Helper()
	addrs := newCluster(t, 1, "slow", "stopper")
	produce(t, addrs, "slow", 0, 5)
	produce(t, addrs, "stopper", 0, 5)
	cfg := parse(t, `{
  "checkpointRetryPolicy": {
    "retryCount": 3, "sleepDuration": "01:00:00",
    "functions": {"stopper": {"retryCount": 1, "sleepDuration": "10ms", "onExhausted": "stop"}},
  },
  "triggers": {
    "slow": {"type": "kafka", "topic": "slow", "consumerGroup": "slow-app", "maxBatchSize": 1},
    "stopper": {"type": "kafka", "adapter": "kafkago", "topic": "stopper", "consumerGroup": "stopper-app", "maxBatchSize": 1},
  },
}`)
	h, err := host.New(cfg, onKafka(t, addrs, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	var fixed atomic.Bool
	failAt2 := func(fixed *atomic.Bool) stream.Handler {
		return stream.HandlerFunc(func(_ context.Context, b *stream.Batch) error {
			if b.FirstOffset() == 2 && (fixed == nil || !fixed.Load()) {
				return errBoom
			}
			return nil
		})
	}
	if err := h.Register("slow", failAt2(nil)); err != nil {
		t.Fatal(err)
	}
	if err := h.Register("stopper", failAt2(&fixed)); err != nil {
		t.Fatal(err)
	}
	return h, addrs, &fixed
}

func TestHealthAndReadiness(t *testing.T) {
	h, _, _ := statusHost(t)
	hd := h.Handler()
	if code, body := get(t, hd, "/healthz"); code != 200 || body != "ok\n" {
		t.Errorf("/healthz = %d %q", code, body)
	}
	if code, body := get(t, hd, "/readyz"); code != 503 || body != "not running\n" {
		t.Errorf("/readyz before Run = %d %q, want 503", code, body)
	}
	r := start(t, h)
	for deadline := time.Now().Add(wait); ; time.Sleep(20 * time.Millisecond) {
		code, body := get(t, hd, "/readyz")
		if code == 200 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("/readyz still %d %q after %v", code, body, wait)
		}
	}
	r.Stop(t)
	if code, _ := get(t, hd, "/readyz"); code != 503 {
		t.Errorf("/readyz after Run = %d, want 503", code)
	}
}

// TestReadinessReflectsStartChecks: a function whose trigger names a
// topic that does not exist is not ready, on either adapter, and /readyz
// says which function and which topic, as the adapter's start check
// found; kafka-go's group, assigned nothing, was reported ready.
func TestReadinessReflectsStartChecks(t *testing.T) {
	for _, adapter := range []string{"franz", "kafkago"} {
		t.Run(adapter, func(t *testing.T) {
			addrs := newCluster(t, 1, "orders")
			cfg := parse(t, `{"triggers": {"orders": {"type": "kafka", "adapter": "`+adapter+`", "topic": "ordrs", "consumerGroup": "orders-app"}}}`)
			h, err := host.New(cfg, onKafka(t, addrs)...)
			if err != nil {
				t.Fatal(err)
			}
			if err := h.Register("orders", stream.HandlerFunc(func(context.Context, *stream.Batch) error { return nil })); err != nil {
				t.Fatal(err)
			}
			hd := h.Handler()
			r := start(t, h)
			defer r.Stop(t)
			var code int
			var body string
			waitFor(t, "/readyz to name the missing topic", func() bool {
				code, body = get(t, hd, "/readyz")
				return strings.Contains(body, `"ordrs"`)
			})
			if code != 503 || !strings.Contains(body, "orders:") {
				t.Errorf("/readyz = %d %q, want 503 naming the function and the topic", code, body)
			}
			// It stays so: the check is not a moment of the start.
			time.Sleep(time.Second)
			if code, body := get(t, hd, "/readyz"); code != 503 {
				t.Errorf("/readyz a second later = %d %q, want 503", code, body)
			}
			if st := status(t, hd); st.Ready || !strings.Contains(st.Reason, `"ordrs"`) {
				t.Errorf("status.json: ready %v, reason %q, want not ready naming the topic", st.Ready, st.Reason)
			}
			// /readyz answers to any name, a rebinding page's too: by a
			// name the host does not answer to, it names the function,
			// not what its adapter found (topics, brokers, error texts).
			req := httptest.NewRequest("GET", "http://evil.example:8080/readyz", nil)
			rec := httptest.NewRecorder()
			hd.ServeHTTP(rec, req)
			if body := rec.Body.String(); rec.Code != 503 || !strings.Contains(body, "orders") || strings.Contains(body, "ordrs") || strings.Contains(body, "kafka") {
				t.Errorf("/readyz by evil.example = %d %q, want 503 naming the function and nothing its adapter found", rec.Code, body)
			}
		})
	}
}

func TestStatusAndActions(t *testing.T) {
	h, addrs, fixed := statusHost(t, host.WithToken(token))
	hd := h.Handler()
	start(t, h)

	// The backoff shows before its retry state is committed (the
	// RetryScheduled hook comes first): wait for both.
	waitFor(t, "slow in backoff with its state committed, and stopper stopped", func() bool {
		st := status(t, hd)
		slow, ok1 := partition(st, "slow")
		stop, ok2 := partition(st, "stopper")
		return ok1 && ok2 && slow.State == host.StateBackoff && slow.Metadata != "" && stop.State == host.StateStopped
	})
	st := status(t, hd)
	slow, _ := partition(st, "slow")
	if slow.Retry != 1 || slow.MaxRetries != 3 || slow.NextAt.IsZero() || slow.FirstFailure.IsZero() ||
		slow.LastError != "boom" || slow.FirstOffset != 2 || slow.Checkpoint != 2 || !strings.HasPrefix(slow.Metadata, "rd1;o=2;r=1") {
		t.Errorf("slow = %+v, want retry 1 of 3 of offset 2, due, with its first failure and error", slow)
	}
	stop, _ := partition(st, "stopper")
	if stop.Retry != 1 || stop.Checkpoint != 2 || !strings.Contains(stop.LastError, "boom") {
		t.Errorf("stopper = %+v, want stopped at 2 after 1 retry", stop)
	}
	if f := st.Functions[1]; f.Adapter != "kafkago" || f.Group != "stopper-app" || !strings.HasPrefix(f.TriggerFrom, "triggers.stopper (host.json:") ||
		f.Policy != "1 retry, 10ms apart, then stop" {
		t.Errorf("stopper function = %+v", f)
	}

	code, page := get(t, hd, "/")
	for _, want := range []string{"retry 1 of 3", "stopped after 1 retry", `action="/actions/resume"`, "token for actions"} {
		if code != 200 || !strings.Contains(page, want) {
			t.Errorf("page (%d) lacks %q", code, want)
		}
	}

	resume := url.Values{"function": {"stopper"}, "topic": {"stopper"}, "partition": {"0"}}
	for _, tc := range []struct {
		name   string
		header map[string]string
		code   int
	}{
		{"cross-site", map[string]string{"Sec-Fetch-Site": "cross-site", "Authorization": "Bearer " + token}, 403},
		{"other origin", map[string]string{"Origin": "http://evil.example", "Authorization": "Bearer " + token}, 403},
		{"no token", map[string]string{"Accept": "application/json"}, 401},
		{"wrong token", map[string]string{"Authorization": "Bearer nope"}, 401},
	} {
		if rec := post(hd, "/actions/resume", resume, tc.header); rec.Code != tc.code {
			t.Errorf("%s: resume = %d %s, want %d", tc.name, rec.Code, rec.Body, tc.code)
		}
	}
	if p, _ := partition(status(t, hd), "stopper"); p.State != host.StateStopped {
		t.Fatalf("a refused resume released the partition: %+v", p)
	}
	if rec := post(hd, "/actions/resume", url.Values{"function": {"nope"}, "topic": {"stopper"}, "partition": {"0"}},
		map[string]string{"Authorization": "Bearer " + token, "Accept": "application/json"}); rec.Code != 404 {
		t.Errorf("resume of an unknown function = %d %s, want 404", rec.Code, rec.Body)
	}

	// A signed-in browser: the cookie of the sign-in authorizes the form.
	rec := post(hd, "/actions/signin", url.Values{"token": {token}}, map[string]string{"Sec-Fetch-Site": "same-origin"})
	cookies := rec.Result().Cookies()
	if rec.Code != http.StatusSeeOther || len(cookies) != 1 || !cookies[0].HttpOnly || strings.Contains(cookies[0].Value, token) {
		t.Fatalf("signin = %d, cookies %v", rec.Code, cookies)
	}
	fixed.Store(true)
	rec = post(hd, "/actions/resume", resume, map[string]string{"Sec-Fetch-Site": "same-origin", "Origin": "http://127.0.0.1:8080",
		"Cookie": cookies[0].Name + "=" + cookies[0].Value})
	if rec.Code != http.StatusSeeOther || !strings.Contains(rec.Header().Get("Location"), "resumed") {
		t.Fatalf("resume = %d %s %v", rec.Code, rec.Body, rec.Header())
	}
	waitCommitted(t, addrs, "stopper-app", "stopper", 0, 5)
	waitFor(t, "stopper flowing at 5", func() bool {
		p, ok := partition(status(t, hd), "stopper")
		return ok && p.State == host.StateFlowing && p.Checkpoint == 5
	})
	if rec := post(hd, "/actions/skip", resume, map[string]string{"Authorization": "Bearer " + token, "Accept": "application/json"}); rec.Code != 409 {
		t.Errorf("skip of a flowing partition = %d %s, want 409", rec.Code, rec.Body)
	}
}
