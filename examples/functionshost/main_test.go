package main

import (
	"bytes"
	"context"
	"os/exec"
	"strings"
	"testing"
	"time"
)

// The example as a user runs it, with a host.json whose trigger names a
// function the code does not register: it prints the host's own error
// (with the name meant) as soon as Run returns it, and exits 1, instead of
// waiting out -timeout and printing "waiting for ... deadline exceeded".
// The example's -timeout is 2 minutes; the test allows the build (the
// first "go run" of the example builds for minutes) plus far less than
// that timeout for the run.
func TestMisspeltTriggerFailsAtOnce(t *testing.T) {
	ctx, cancel := context.WithTimeout(t.Context(), 8*time.Minute)
	defer cancel()
	// Build first, so that the run itself can be timed.
	build := exec.CommandContext(ctx, "go", "build", "-o", t.TempDir()+"/functionshost", ".")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	cmd := exec.CommandContext(ctx, "go", "run", ".", "-config", "testdata/misspelt-trigger.json", "-timeout", "2m")
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	start := time.Now()
	err := cmd.Run()
	took := time.Since(start)
	if ee, ok := err.(*exec.ExitError); !ok || ee.ExitCode() != 1 {
		t.Fatalf("go run: %v, want exit status 1\n%s", err, out.String())
	}
	const want = `triggers.paymnets: a trigger for function "paymnets", which the host does not run: did you mean payments?`
	if !strings.Contains(out.String(), want) || strings.Contains(out.String(), "waiting for") {
		t.Errorf("output does not give the host's error %q at once:\n%s", want, out.String())
	}
	if took > time.Minute {
		t.Errorf("go run took %v after the build: the example waited instead of returning the host's error", took)
	}
}
