// Package hosttest holds what the host's tests share: those of the host
// module, on in-memory streams, and those of the module host/tests, on an
// embedded Kafka. It bounds waits, reads a host.json, runs a host for the
// length of a test, and asks a host's HTTP handler for its pages. Only
// tests import it.
package hosttest

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/redeliver-go/redeliver/host"
	"github.com/redeliver-go/redeliver/hostconfig"
)

// Wait bounds every wait of the host's tests.
const Wait = 20 * time.Second

// WaitFor polls cond until it holds, failing the test after Wait.
func WaitFor(t testing.TB, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(Wait)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// Parse reads a host.json from text, ignoring the environment.
func Parse(t testing.TB, doc string) *hostconfig.Config {
	t.Helper()
	cfg, err := hostconfig.Loader{Environ: func() []string { return nil }}.Parse("host.json", []byte(doc))
	if err != nil {
		t.Fatal(err)
	}
	return cfg
}

// Running is a host started by [Start].
type Running struct {
	cancel context.CancelFunc
	done   chan error
}

// Start runs h until the end of the test.
func Start(t testing.TB, h *host.Host) *Running {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	r := &Running{cancel: cancel, done: make(chan error, 1)}
	go func() { r.done <- h.Run(ctx) }()
	t.Cleanup(func() { r.Stop(t) })
	return r
}

// Stop stops the host and returns Run's error and how long it took; it
// may be called again, and returns the same error.
func (r *Running) Stop(t testing.TB) (error, time.Duration) {
	t.Helper()
	begin := time.Now()
	r.cancel()
	select {
	case err := <-r.done:
		r.done <- err
		return err, time.Since(begin)
	case <-time.After(Wait):
		t.Fatal("host did not stop")
		return nil, 0
	}
}

// Get asks hd for path, and returns the answer's status code and body.
func Get(t *testing.T, hd http.Handler, path string) (int, string) {
	t.Helper()
	rec := httptest.NewRecorder()
	hd.ServeHTTP(rec, httptest.NewRequest("GET", "http://127.0.0.1:8080"+path, nil)) // a name the host answers to
	return rec.Code, rec.Body.String()
}

// Status reads hd's /status.json, failing the test unless it answers 200
// with a host.Status.
func Status(t *testing.T, hd http.Handler) host.Status {
	t.Helper()
	code, body := Get(t, hd, "/status.json")
	if code != 200 {
		t.Fatalf("/status.json: %d %s", code, body)
	}
	var st host.Status
	if err := json.Unmarshal([]byte(body), &st); err != nil {
		t.Fatalf("/status.json: %v\n%s", err, body)
	}
	return st
}

// Post sends form to hd's path with the given headers, and returns the
// answer.
func Post(hd http.Handler, path string, form url.Values, header map[string]string) *httptest.ResponseRecorder {
	req := httptest.NewRequest("POST", "http://127.0.0.1:8080"+path, strings.NewReader(form.Encode()))
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	for k, v := range header {
		req.Header.Set(k, v)
	}
	rec := httptest.NewRecorder()
	hd.ServeHTTP(rec, req)
	return rec
}

// Partition returns the status of a function's partition 0.
func Partition(st host.Status, function string) (host.PartitionStatus, bool) {
	for _, f := range st.Functions {
		if f.Name == function && len(f.Partitions) == 1 {
			return f.Partitions[0], true
		}
	}
	return host.PartitionStatus{}, false
}
