package main

import (
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
)

// TestExplainExamples runs explain on every host.json under examples/ and
// docs/ and checks that it states only what will happen: each file loads
// without a warning (a warning is a setting not in force as written), each
// policy lists no more first delays than the retries it says can happen
// and none when it says it never retries, each trigger names its consumer
// or share group, every section of the file is explained, and the whole
// output is the one in testdata/explain_example_*.golden, read and checked
// by hand against the examples' programs and READMEs.
func TestExplainExamples(t *testing.T) {
	var files []string
	for _, root := range []string{"../../examples", "../../docs"} {
		err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
			if err != nil {
				return err
			}
			if !d.IsDir() && strings.HasPrefix(d.Name(), "host") && strings.HasSuffix(d.Name(), ".json") {
				files = append(files, path)
			}
			return nil
		})
		if err != nil && !os.IsNotExist(err) {
			t.Fatal(err)
		}
	}
	if len(files) < 3 {
		t.Fatalf("found %q: want the host.json of each example", files)
	}
	headline := regexp.MustCompile(`(?m): (never retries|retries a failed (?:batch|record) (?:at most |up to )?(\d+ times|once|without limit))`)
	for _, file := range files {
		t.Run(file, func(t *testing.T) {
			got, code := runCLI([]string{"explain", file})
			if code != 0 {
				t.Fatalf("exit status %d\n%s", code, got)
			}
			if strings.Contains(got, "Warning:") {
				t.Errorf("the example has a warning: a setting that is not in force as written\n%s", got)
			}
			for _, policy := range strings.Split(got, "\n\n") {
				m := headline.FindStringSubmatch(policy)
				if m == nil {
					continue
				}
				delays := ""
				if i := strings.Index(policy, "First retry delays: "); i >= 0 {
					delays = policy[i : i+strings.Index(policy[i:], "\n")]
				}
				n := strings.Count(delays, ",") + 1
				if delays == "" {
					n = 0
				}
				switch retries := m[2]; {
				case m[1] == "never retries":
					if n != 0 {
						t.Errorf("a policy that never retries lists delays:\n%s", policy)
					}
				case retries == "once":
					if n != 1 {
						t.Errorf("a policy that retries once lists %d delays:\n%s", n, policy)
					}
				case strings.HasSuffix(retries, " times"):
					k, _ := strconv.Atoi(strings.TrimSuffix(retries, " times"))
					if n > k || k <= 10 && n != k {
						t.Errorf("a policy that retries %d times lists %d delays:\n%s", k, n, policy)
					}
				}
			}
			for _, line := range strings.Split(got, "\n") {
				if strings.Contains(line, "  Trigger ") && !regexp.MustCompile(`, (consumer|share) group [^ ,]+, through (franz|kafkago)$`).MatchString(line) {
					t.Errorf("trigger line without its group: %q", line)
				}
			}
			data, err := os.ReadFile(file)
			if err != nil {
				t.Fatal(err)
			}
			for section, says := range map[string]string{`"redrive"`: "Re-drive: ", `"outageBudget"`: "Outage budget: ", `"statusPage"`: "Status page: "} {
				if strings.Contains(string(data), section) && !strings.Contains(got, says) {
					t.Errorf("the file has a %s section and explain does not say %q", section, says)
				}
			}
			name := "explain_example_" + filepath.Base(filepath.Dir(file))
			checkGolden(t, name, got, code, 0)
		})
	}
}
