package tests

import (
	"bytes"
	"context"
	"errors"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/redeliver-go/redeliver/host"
	"github.com/redeliver-go/redeliver/stream"
)

// cliTool builds the redeliver command (cmd/redeliver) once per test
// binary, as a user builds it.
var cliTool = sync.OnceValues(func() (string, error) {
	dir, err := os.MkdirTemp("", "redeliver-cli-")
	if err != nil {
		return "", err
	}
	path := filepath.Join(dir, "redeliver")
	cmd := exec.Command("go", "build", "-o", path, ".")
	cmd.Dir = filepath.Join("..", "..", "cmd", "redeliver")
	if out, err := cmd.CombinedOutput(); err != nil {
		return "", errors.New(err.Error() + ": " + string(out))
	}
	return path, nil
})

// runCLI runs the built tool with args and only the environment given
// (and PATH, HOME); it returns its output and exit status, and fails the
// test after a minute.
func runCLI(t *testing.T, environ []string, args ...string) (stdout, stderr string, code int) {
	t.Helper()
	path, err := cliTool()
	if err != nil {
		t.Fatalf("building the tool: %v", err)
	}
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, path, args...)
	cmd.Env = append([]string{"PATH=" + os.Getenv("PATH"), "HOME=" + os.Getenv("HOME")}, environ...)
	var o, e bytes.Buffer
	cmd.Stdout, cmd.Stderr = &o, &e
	err = cmd.Run()
	var exit *exec.ExitError
	switch {
	case ctx.Err() != nil:
		t.Fatalf("redeliver %s: still running after a minute", strings.Join(args, " "))
	case errors.As(err, &exit):
		code = exit.ExitCode()
	case err != nil:
		t.Fatal(err)
	}
	return o.String(), e.String(), code
}

// TestCLIReleasesStoppedKeys: an operator sees and releases, with the
// redeliver command, the keys that "stop" stopped in a host's key-ordered
// function on Kafka (kfake), through the host's own HTTP endpoints and
// token: "stopped" lists the keys, "resume -key" delivers one's record
// again, "skip -key" goes past the other's, and each key's later records
// follow in order. A wrong function, key, partition or address, a
// partition named without its key, and a missing token each fail with
// exit status 1 and say what is stopped or what was meant.
func TestCLIReleasesStoppedKeys(t *testing.T) {
	addrs := newCluster(t, 1, "orders")
	cl, err := kgo.NewClient(kgo.SeedBrokers(addrs...), kgo.RecordPartitioner(kgo.ManualPartitioner()))
	if err != nil {
		t.Fatal(err)
	}
	var recs []*kgo.Record
	for i, k := range []string{"a", "b", "a", "c", "b", "d"} {
		recs = append(recs, &kgo.Record{Topic: "orders", Key: []byte(k), Value: []byte{byte('0' + i)}})
	}
	ctx, cancel := context.WithTimeout(t.Context(), wait)
	err = cl.ProduceSync(ctx, recs...).FirstErr()
	cancel()
	cl.Close()
	if err != nil {
		t.Fatal(err)
	}
	cfg := parse(t, `{"checkpointRetryPolicy": {"retryCount": 0, "onExhausted": "stop"},
		"triggers": {"orders": {"type": "kafka", "topic": "orders", "consumerGroup": "orders-app", "ordering": "key"}}}`)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	h, err := host.New(cfg, onKafka(t, addrs, host.WithListener(ln), host.WithToken(token))...)
	if err != nil {
		t.Fatal(err)
	}
	var (
		mu      sync.Mutex
		handled []int64
		healed  bool // record 0 (key a) succeeds once set
	)
	if err := h.Register("orders", stream.HandlerFunc(func(_ context.Context, b *stream.Batch) error {
		mu.Lock()
		defer mu.Unlock()
		o := b.FirstOffset()
		if o == 1 || o == 0 && !healed {
			return errBoom
		}
		handled = append(handled, o)
		return nil
	})); err != nil {
		t.Fatal(err)
	}
	start(t, h)
	url := "http://" + ln.Addr().String()
	waitFor(t, "keys a and b stopped", func() bool {
		ps, ok := partition(h.Status(), "orders")
		return ok && slices.Equal(ps.StoppedKeys, []string{"a", "b"})
	})
	withToken := []string{"REDELIVER_TOKEN=" + token}

	check := func(name string, environ []string, args []string, code int, wantOut, wantErr []string) {
		t.Helper()
		out, errOut, got := runCLI(t, environ, args...)
		t.Logf("%s: redeliver %s\n%s%s--- exit %d", name, strings.Join(args, " "), out, errOut, got)
		if got != code {
			t.Errorf("%s: exit status %d, want %d\n%s%s", name, got, code, out, errOut)
		}
		for _, w := range wantOut {
			if !strings.Contains(out, w) {
				t.Errorf("%s: stdout does not say %q:\n%s--- stderr\n%s", name, w, out, errOut)
			}
		}
		for _, w := range wantErr {
			if !strings.Contains(errOut, w) {
				t.Errorf("%s: stderr does not say %q:\n%s--- stderr\n%s", name, w, out, errOut)
			}
		}
	}
	check("list", nil, []string{"stopped", "-url", url}, 0,
		[]string{url + ": 2 keys stopped", "orders    orders/0   key      0       \"a\"", "orders    orders/0   key      1       \"b\"",
			"redeliver resume -url " + url + " orders orders/0 -key a"}, nil)
	check("list by $REDELIVER_URL, JSON", []string{"REDELIVER_URL=" + url}, []string{"stopped", "-json", "-function", "orders"}, 0,
		[]string{`"key": "a"`, `"offset": 1`, `"record": true`}, nil)
	check("misspelt function", nil, []string{"stopped", "-url", url, "-function", "ordres"}, 1,
		nil, []string{`the host has no function "ordres": did you mean orders?`})
	check("wrong address", nil, []string{"stopped", "-url", url + "/nowhere"}, 1,
		nil, []string{url + "/nowhere/status.json answered 404"})
	check("partition without its key", withToken, []string{"resume", "-url", url, "orders", "orders/0"}, 1,
		nil, []string{`orders/0 of function orders has 2 records stopped: key "a" at offset 0, key "b" at offset 1; name one with -key`})
	check("key not stopped", withToken, []string{"resume", "-url", url, "orders", "orders/0", "-key", "aa"}, 1,
		nil, []string{`key "aa" is not stopped on orders/0 of function orders: did you mean "a"?`})
	check("partition not stopped", withToken, []string{"skip", "-url", url, "orders", "orders/1", "-key", "a"}, 1,
		nil, []string{"orders/1 of function orders is not stopped: did you mean orders/0?"})
	check("misspelt function, skip", withToken, []string{"skip", "-url", url, "-key", "a", "ordrs", "orders/0"}, 1,
		nil, []string{`the host has no function "ordrs": did you mean orders?`})
	check("no token", nil, []string{"resume", "-url", url, "-key", "a", "orders", "orders/0"}, 1,
		nil, []string{"the host answered 401 Unauthorized", "set $REDELIVER_TOKEN or give -token-file"})
	check("usage", nil, []string{"resume", "-url", url, "-key", "a", "-offset", "0", "orders", "orders/0"}, 2,
		nil, []string{"give -key or -offset, not both"})
	if ps, _ := partition(h.Status(), "orders"); !slices.Equal(ps.StoppedKeys, []string{"a", "b"}) {
		t.Fatalf("stopped keys %q after the refusals, want [a b]: something was released", ps.StoppedKeys)
	}

	mu.Lock()
	healed = true
	mu.Unlock()
	check("resume", withToken, []string{"resume", "-url", url, "orders", "orders/0", "-key", "a"}, 0,
		[]string{`resumed key "a" of orders/0 of orders (its record at offset 0)`}, nil)
	tokenFile := filepath.Join(t.TempDir(), "token")
	if err := os.WriteFile(tokenFile, []byte(token+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	check("skip", nil, []string{"skip", "-url", url, "-token-file", tokenFile, "orders", "orders/0", "-key", "b"}, 0,
		[]string{`skipped key "b" of orders/0 of orders (its record at offset 1)`}, nil)
	waitCommitted(t, addrs, "orders-app", "orders", 0, 6)
	mu.Lock()
	if i, j := slices.Index(handled, 0), slices.Index(handled, 2); i < 0 || j < i || !slices.Contains(handled, 4) || slices.Contains(handled, 1) {
		t.Errorf("handled %v after resume of key a and skip of key b, want 0 then 2 (key a), 4 (key b), never 1", handled)
	}
	mu.Unlock()
	check("nothing stopped", nil, []string{"stopped", "-url", url}, 0, []string{url + ": nothing stopped"}, nil)
	check("resume what is not stopped", withToken, []string{"resume", "-url", url, "orders", "orders/0", "-key", "a"}, 1,
		nil, []string{"orders/0 of function orders is not stopped: nothing of the function is stopped"})
}
