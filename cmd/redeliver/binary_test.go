package main

import (
	"bytes"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"
)

// The tool built once for the tests that run it as a user does.
var (
	buildOnce sync.Once
	buildDir  string
	toolPath  string
	buildErr  error
)

func TestMain(m *testing.M) {
	code := m.Run()
	if buildDir != "" {
		os.RemoveAll(buildDir)
	}
	os.Exit(code)
}

// tool returns the path of the redeliver binary built from this package.
func tool(t *testing.T) string {
	t.Helper()
	buildOnce.Do(func() {
		if buildDir, buildErr = os.MkdirTemp("", "redeliver-cli-"); buildErr != nil {
			return
		}
		toolPath = filepath.Join(buildDir, "redeliver")
		cmd := exec.Command("go", "build", "-o", toolPath, ".")
		var out []byte
		if out, buildErr = cmd.CombinedOutput(); buildErr != nil {
			buildErr = errors.New(buildErr.Error() + ": " + string(out))
		}
	})
	if buildErr != nil {
		t.Fatalf("building the tool: %v", buildErr)
	}
	return toolPath
}

// runTool runs the built tool with args, with no environment overrides,
// and returns its output and exit status; it fails the test after 60s.
func runTool(t *testing.T, args ...string) (stdout, stderr string, code int) {
	t.Helper()
	cmd := exec.Command(tool(t), args...)
	cmd.Env = []string{"PATH=" + os.Getenv("PATH"), "HOME=" + os.Getenv("HOME")}
	var o, e bytes.Buffer
	cmd.Stdout, cmd.Stderr = &o, &e
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	select {
	case err := <-done:
		var exit *exec.ExitError
		switch {
		case errors.As(err, &exit):
			code = exit.ExitCode()
		case err != nil:
			t.Fatal(err)
		}
	case <-time.After(60 * time.Second):
		cmd.Process.Kill()
		<-done
		t.Fatalf("redeliver %s: still running after 60s", strings.Join(args, " "))
	}
	return o.String(), e.String(), code
}

// The commands of the first hour, run as a user runs them: the exit status
// a CI gate or a script reads, and the words that say what to do.
func TestBinary(t *testing.T) {
	for _, tc := range []struct {
		name string
		args []string
		code int
		want []string // in stdout
	}{
		// A misspelt section would turn retries off: it fails the check.
		{"misspelt section", []string{"check", "testdata/misspelt_section.json"}, 1,
			[]string{`"checkpointRetryPolcy" is not a section redeliver reads: did you mean checkpointRetryPolicy?`, "1 problem"}},
		// Retrying for ever without waiting fails the check.
		{"spin", []string{"check", "testdata/spin.json"}, 1,
			[]string{"retryCount -1 with no delay between retries (immediate)"}},
		// -strict fails on warnings, as a CI gate wants; without it they
		// pass.
		{"strict", []string{"check", "-strict", "testdata/warnings.json"}, 1, []string{"2 warnings (-strict fails on warnings)"}},
		{"not strict", []string{"check", "testdata/warnings.json"}, 0, []string{"ok, 2 warnings"}},
		// A function the file does not name runs under the host-wide
		// policy: shown, saying so.
		{"explain unnamed function", []string{"explain", "testdata/app.json", "paymnts"}, 0,
			[]string{"Function paymnts: the host-wide policy", `names no function "paymnts": did you mean payments?`, "retries a failed batch up to 10 times"}},
		{"version", []string{"version"}, 0, []string{"redeliver github.com/redeliver-go/redeliver/cmd/redeliver ", runtime.Version()}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			out, errOut, code := runTool(t, tc.args...)
			if code != tc.code {
				t.Errorf("exit status %d, want %d\n%s%s", code, tc.code, out, errOut)
			}
			for _, w := range tc.want {
				if !strings.Contains(out, w) {
					t.Errorf("stdout does not say %q:\n%s%s", w, out, errOut)
				}
			}
		})
	}
}

// offsets on a group the brokers do not know fails and names the group
// meant, instead of showing an empty group and exiting 0.
func TestBinaryOffsetsMisspeltGroup(t *testing.T) {
	brokers := strings.Join(kfakeBrokers(t, "orders"), ",")
	seedGroup(t, strings.Split(brokers, ","), "orders-app", "orders")
	out, errOut, code := runTool(t, "offsets", "-brokers", brokers, "-group", "ordres-app")
	if code != 1 || !strings.Contains(errOut, "group ordres-app does not exist: did you mean orders-app?") {
		t.Errorf("exit status %d, want 1 with a did-you-mean on stderr:\n%s%s", code, out, errOut)
	}
	out, errOut, code = runTool(t, "offsets", "-brokers", brokers, "-group", "nobody-at-all")
	if code != 1 || !strings.Contains(errOut, "group nobody-at-all does not exist: the brokers' groups are orders-app") {
		t.Errorf("exit status %d, want 1 listing the groups:\n%s%s", code, out, errOut)
	}
	out, errOut, code = runTool(t, "offsets", "-brokers", brokers, "-group", "orders-app")
	if code != 0 || !strings.Contains(out, "orders") {
		t.Errorf("the group that exists: exit status %d:\n%s%s", code, out, errOut)
	}
}
