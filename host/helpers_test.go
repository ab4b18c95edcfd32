package host_test

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/redeliver-go/redeliver/host"
	"github.com/redeliver-go/redeliver/hostconfig"
)

// The host's tests that need a Kafka broker are in the module host/tests,
// so that this module requires no Kafka client; these run on in-memory
// streams (host.Source, and an Adapter over them).

// wait bounds every wait of these tests.
const wait = 20 * time.Second

var errBoom = errors.New("boom")

// waitFor polls cond until it holds.
func waitFor(t testing.TB, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(wait)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// parse reads a host.json from text, ignoring the environment.
func parse(t testing.TB, doc string) *hostconfig.Config {
	t.Helper()
	cfg, err := hostconfig.Loader{Environ: func() []string { return nil }}.Parse("host.json", []byte(doc))
	if err != nil {
		t.Fatal(err)
	}
	return cfg
}

// running is a host started by start.
type running struct {
	h      *host.Host
	cancel context.CancelFunc
	done   chan error
}

// start runs h until the end of the test.
func start(t testing.TB, h *host.Host) *running {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	r := &running{h: h, cancel: cancel, done: make(chan error, 1)}
	go func() { r.done <- h.Run(ctx) }()
	t.Cleanup(func() { r.stop(t) })
	return r
}

// stop stops the host and returns Run's error and how long it took.
func (r *running) stop(t testing.TB) (error, time.Duration) {
	t.Helper()
	begin := time.Now()
	r.cancel()
	select {
	case err := <-r.done:
		r.done <- err
		return err, time.Since(begin)
	case <-time.After(wait):
		t.Fatal("host did not stop")
		return nil, 0
	}
}

func get(t *testing.T, hd http.Handler, path string) (int, string) {
	t.Helper()
	rec := httptest.NewRecorder()
	hd.ServeHTTP(rec, httptest.NewRequest("GET", "http://127.0.0.1:8080"+path, nil)) // a name the host answers to
	return rec.Code, rec.Body.String()
}

func status(t *testing.T, hd http.Handler) host.Status {
	t.Helper()
	code, body := get(t, hd, "/status.json")
	if code != 200 {
		t.Fatalf("/status.json: %d %s", code, body)
	}
	var st host.Status
	if err := json.Unmarshal([]byte(body), &st); err != nil {
		t.Fatalf("/status.json: %v\n%s", err, body)
	}
	return st
}

func post(hd http.Handler, path string, form url.Values, header map[string]string) *httptest.ResponseRecorder {
	req := httptest.NewRequest("POST", "http://127.0.0.1:8080"+path, strings.NewReader(form.Encode()))
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	for k, v := range header {
		req.Header.Set(k, v)
	}
	rec := httptest.NewRecorder()
	hd.ServeHTTP(rec, req)
	return rec
}

// partition returns the status of a function's partition 0.
func partition(st host.Status, function string) (host.PartitionStatus, bool) {
	for _, f := range st.Functions {
		if f.Name == function && len(f.Partitions) == 1 {
			return f.Partitions[0], true
		}
	}
	return host.PartitionStatus{}, false
}
