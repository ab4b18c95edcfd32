package main

import (
	"bytes"
	"flag"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/redeliver-go/redeliver/checkpoint"
	"github.com/redeliver-go/redeliver/internal/retrystate"
)

var update = flag.Bool("update", false, "rewrite the testdata/*.golden files with the commands' output")

// fixedNow is the time the tests run at.
var fixedNow = time.Date(2026, 11, 23, 10, 0, 0, 0, time.UTC)

// runCLI runs the tool with args and the given environment and returns
// its output as a golden file holds it.
func runCLI(args []string, environ ...string) (string, int) {
	var stdout, stderr bytes.Buffer
	code := run(args, env{stdout: &stdout, stderr: &stderr, environ: func() []string { return environ }, now: func() time.Time { return fixedNow }})
	var b strings.Builder
	quoted := make([]string, len(args))
	for i, a := range args {
		quoted[i] = shellQuote(a)
	}
	fmt.Fprintf(&b, "$ redeliver %s\n", strings.Join(quoted, " "))
	for _, kv := range environ {
		fmt.Fprintf(&b, "# env %s\n", kv)
	}
	b.WriteString(stdout.String())
	if stderr.Len() > 0 {
		b.WriteString("--- stderr\n" + stderr.String())
	}
	fmt.Fprintf(&b, "--- exit %d\n", code)
	return b.String(), code
}

// shellQuote quotes a for a shell when it needs it.
func shellQuote(a string) string {
	if a != "" && !strings.ContainsAny(a, " ;'\"$&|<>()*?`\\") {
		return a
	}
	return "'" + strings.ReplaceAll(a, "'", `'\''`) + "'"
}

// TestGolden runs the commands on the files of testdata and compares
// their output and exit status with testdata/<name>.golden. Run
// "go test -run TestGolden -update" to rewrite those files after a
// deliberate change, and read the diff.
func TestGolden(t *testing.T) {
	for _, tc := range []struct {
		name    string
		args    []string
		environ []string
		code    int
	}{
		{"check_syntax", []string{"check", "testdata/syntax.json"}, nil, 1},
		// A line separator in a // comment, where an editor shows a second
		// retryCount: refused, as the library refuses it.
		{"check_line_separator", []string{"check", "testdata/separator.json"}, nil, 1},
		{"check_problems", []string{"check", "testdata/problems.json"}, nil, 1},
		{"check_problems_json", []string{"check", "-json", "testdata/problems.json"}, nil, 1},
		{"check_warnings", []string{"check", "testdata/warnings.json"}, nil, 0},
		{"check_problems_and_warnings", []string{"check", "testdata/mixed.json"}, nil, 1},
		{"check_problems_and_warnings_json", []string{"check", "-json", "testdata/mixed.json"}, nil, 1},
		{"check_env", []string{"check", "testdata/app.json"}, []string{"AzureFunctionsJobHost__checkpointRetryPolicy__retryCount=lots", "AzureFunctionsJobHost__triggers__orders__adapter=samara"}, 1},
		{"check_functions", []string{"check", "-functions", "orders,payment", "testdata/app.json"}, nil, 1},
		{"check_several", []string{"check", "testdata/app.json", "testdata/warnings.json"}, nil, 0},
		{"check_missing", []string{"check", "testdata/missing.json"}, nil, 1},
		{"check_no_file", []string{"check"}, nil, 2},
		{"check_bad_flag", []string{"check", "-jsn", "testdata/app.json"}, nil, 2},
		{"explain_app", []string{"explain", "testdata/app.json"}, []string{"AzureFunctionsJobHost__triggers__orders__consumerGroup=orders-blue"}, 0},
		{"explain_function", []string{"explain", "testdata/app.json", "payments"}, []string{"AzureFunctionsJobHost__checkpointRetryPolicy__functions__payments__retryCount=5"}, 0},
		{"explain_inherited", []string{"explain", "testdata/app.json", "orders"}, nil, 0},
		// A function the file does not name runs under the host-wide policy:
		// shown, saying so and naming the function meant.
		{"explain_unknown", []string{"explain", "testdata/app.json", "paymnts"}, nil, 0},
		{"check_misspelt_section", []string{"check", "testdata/misspelt_section.json"}, nil, 1},
		{"check_spin", []string{"check", "testdata/spin.json"}, nil, 1},
		{"check_strict", []string{"check", "-strict", "testdata/warnings.json"}, nil, 1},
		{"check_strict_ok", []string{"check", "-strict", "testdata/app.json"}, nil, 0},
		{"explain_share_group", []string{"explain", "testdata/share.json", "emails"}, nil, 0},
		{"explain_bad_file", []string{"explain", "testdata/problems.json"}, nil, 1},
		// A limit written as 0 is no limit, and says so.
		{"explain_zero_limits", []string{"explain", "testdata/zero_limits.json"}, nil, 0},
		// JSON in one casing, the trigger's values in force (the
		// adapter's batch size when the file sets none).
		{"explain_function_json", []string{"explain", "-json", "testdata/app.json", "payments"}, nil, 0},
		{"explain_share_group_json", []string{"explain", "-json", "testdata/share.json", "emails"}, nil, 0},
		{"state", []string{"state", "rd1;r=3;f=1795427700000;d=5000;n=1795428005000"}, nil, 0},
		{"state_json", []string{"state", "-json", "rd1;r=3;f=1795427700000;d=5000;n=1795428005000"}, nil, 0},
		// The record the state belongs to, and time waited out in outages.
		{"state_record_outage", []string{"state", "rd1;o=40;r=2;f=1795427700000;d=5000;n=1795428005000;w=60000"}, nil, 0},
		{"state_record_outage_json", []string{"state", "-json", "rd1;o=40;r=2;f=1795427700000;d=5000;n=1795428005000;w=60000"}, nil, 0},
		// One retry due: one delivery so far, not one retry.
		{"state_one_retry", []string{"state", "rd1;r=1;f=1795427995000;d=5000;n=1795428005000"}, nil, 0},
		// A started retry and the handler's RetryResult, in words and as JSON.
		{"state_started_retry_result", []string{"state", "rd1;r=1;f=1795427995000;d=5000;s=1;rr=3:2000"}, nil, 0},
		{"state_started_retry_result_json", []string{"state", "-json", "rd1;r=1;f=1795427995000;d=5000;s=1;rr=3:2000"}, nil, 0},
		// A record given up whose exhaustion action has not succeeded, with
		// its last error; one given up on its first delivery; a partition
		// stopped at its record (StopPartition).
		{"state_given_up", []string{"state", "rd1;o=40;r=2;f=1795427700000;d=5000;w=60000;s=1;x=1;e=timeout%3B upstream%3Dorders"}, nil, 0},
		{"state_given_up_json", []string{"state", "-json", "rd1;o=40;r=2;f=1795427700000;d=5000;w=60000;s=1;x=1;e=timeout%3B upstream%3Dorders"}, nil, 0},
		{"state_given_up_first_delivery", []string{"state", "rd1;o=7;r=0;f=1795427995000;s=1;x=4;e=bad payload"}, nil, 0},
		{"state_given_up_first_delivery_json", []string{"state", "-json", "rd1;o=7;r=0;f=1795427995000;s=1;x=4;e=bad payload"}, nil, 0},
		{"state_given_up_records", []string{"state", "rd1;o=40;r=2;f=1795427700000;d=5000;s=1;x=1;c=3;e=timeout"}, nil, 0},
		{"state_given_up_records_json", []string{"state", "-json", "rd1;o=40;r=2;f=1795427700000;d=5000;s=1;x=1;c=3;e=timeout"}, nil, 0},
		{"state_given_up_alone", []string{"state", "rd1;o=41;r=1;f=1795427700000;d=5000;s=1;x=1;c=1;e=timeout"}, nil, 0},
		// What a move carries (issue 46): a retry of a batch that failed
		// as a whole, of a record that failed alone, with its last error.
		{"state_retry_records", []string{"state", "rd1;o=40;r=2;f=1795427700000;d=5000;n=1795428005000;c=5;e=timeout"}, nil, 0},
		{"state_retry_alone", []string{"state", "rd1;o=41;r=2;f=1795427700000;d=5000;s=1;p=1;e=timeout"}, nil, 0},
		{"state_retry_alone_json", []string{"state", "-json", "rd1;o=41;r=2;f=1795427700000;d=5000;s=1;p=1;e=timeout"}, nil, 0},
		{"state_halted", []string{"state", "rd1;o=40;r=3;f=1795427700000;d=5000;s=1;x=1;e=timeout;h=1"}, nil, 0},
		{"state_halted_json", []string{"state", "-json", "rd1;o=40;r=3;f=1795427700000;d=5000;s=1;x=1;e=timeout;h=1"}, nil, 0},
		{"state_foreign", []string{"state", "checkpointed by kcat"}, nil, 1},
		{"state_damaged", []string{"state", "rd1;r=x"}, nil, 1},
		{"state_empty", []string{"state", ""}, nil, 0},
		{"state_no_arg", []string{"state"}, nil, 2},
		{"offsets_no_group", []string{"offsets", "-brokers", "127.0.0.1:1"}, nil, 2},
		// The commands that talk to a running host: usage errors (the
		// rest is tested on a real host, host/tests TestCLIReleasesStoppedKeys).
		{"stopped_no_url", []string{"stopped"}, nil, 2},
		{"stopped_bad_url", []string{"stopped", "-url", "ftp://ops"}, nil, 2},
		{"resume_no_partition", []string{"resume", "-url", "http://127.0.0.1:1", "orders"}, nil, 2},
		{"resume_bad_partition", []string{"resume", "-url", "http://127.0.0.1:1", "orders", "orders"}, nil, 2},
		{"skip_key_and_offset", []string{"skip", "-key", "a", "-offset", "3", "orders", "orders/0"}, []string{"REDELIVER_URL=http://127.0.0.1:1"}, 2},
		{"unknown_command", []string{"parkd"}, nil, 2},
		{"no_command", nil, nil, 2},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, code := runCLI(tc.args, tc.environ...)
			if code != tc.code {
				t.Errorf("exit status %d, want %d\n%s", code, tc.code, got)
			}
			file := filepath.Join("testdata", tc.name+".golden")
			if *update {
				if err := os.WriteFile(file, []byte(got), 0o644); err != nil {
					t.Fatal(err)
				}
				return
			}
			want, err := os.ReadFile(file)
			if err != nil {
				t.Fatalf("%v (run go test -update to write it)", err)
			}
			if got != string(want) {
				t.Errorf("output differs from %s:\n--- got\n%s--- want\n%s", file, got, want)
			}
		})
	}
}

// TestHelp checks that each command and each parked verb describes
// itself once on -h, on stdout, exit status 0, and that a bad flag prints
// its error and the usage once, on stderr, exit status 2.
func TestHelp(t *testing.T) {
	var cmds [][]string
	for _, c := range commands {
		cmds = append(cmds, []string{c.name})
	}
	for _, v := range parkedVerbs {
		cmds = append(cmds, []string{"parked", v.name})
	}
	for _, c := range cmds {
		name := strings.Join(c, " ")
		var stdout, stderr bytes.Buffer
		e := env{stdout: &stdout, stderr: &stderr, environ: func() []string { return nil }, now: func() time.Time { return fixedNow }}
		code := run(append(c, "-h"), e)
		if code != 0 || strings.Count(stdout.String(), "usage: redeliver "+name) != 1 || stderr.Len() > 0 {
			t.Errorf("%s -h: exit %d, want the usage once on stdout, nothing on stderr\n--- stdout\n%s--- stderr\n%s", name, code, &stdout, &stderr)
		}
		if name == "parked" {
			continue // its first argument is a verb, not a flag
		}
		stdout.Reset()
		stderr.Reset()
		code = run(append(c, "-no-such-flag"), e)
		if code != 2 || strings.Count(stderr.String(), "usage: redeliver "+name) != 1 ||
			!strings.Contains(stderr.String(), "flag provided but not defined: -no-such-flag") || stdout.Len() > 0 {
			t.Errorf("%s -no-such-flag: exit %d, want 2, the error and the usage once on stderr\n--- stdout\n%s--- stderr\n%s", name, code, &stdout, &stderr)
		}
	}
}

// deliveriesOf counts a started retry of the largest count without
// overflow.
func TestDeliveriesOfLargestCount(t *testing.T) {
	for _, tc := range []struct {
		s    retrystate.State
		want uint64
	}{
		{retrystate.State{}, 0},
		{retrystate.State{Retries: 1}, 1},
		{retrystate.State{Retries: 1, Started: true}, 2},
		{retrystate.State{Retries: math.MaxInt, Started: true}, 1 << 63},
		// Given up: the first delivery and every retry it was given up after.
		{retrystate.State{Started: true, GivenUp: checkpoint.NotRetryable}, 1},
		{retrystate.State{Retries: 2, Started: true, GivenUp: checkpoint.RetriesSpent, Halted: true}, 3},
		{retrystate.State{Retries: math.MaxInt, Started: true, GivenUp: checkpoint.RetriesSpent}, 1 << 63},
	} {
		if got := deliveriesOf(tc.s); got != tc.want {
			t.Errorf("deliveriesOf(%+v) = %d, want %d", tc.s, got, tc.want)
		}
	}
}
