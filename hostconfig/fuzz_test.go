package hostconfig

import (
	"errors"
	"math"
	"math/big"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"
)

// FuzzLoad feeds the loader arbitrary documents and environments: it must
// never panic, and it must return either a usable Config or an *Error whose
// problems are all located.
func FuzzLoad(f *testing.F) {
	files, _ := filepath.Glob(filepath.Join("testdata", "*.json"))
	for _, name := range files {
		data, err := os.ReadFile(name)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(data, "")
	}
	f.Add([]byte(`{"checkpointRetryPolicy": {"retryCount": 3, "strategy": "exponential"}}`),
		"AzureFunctionsJobHost__checkpointRetryPolicy__strategy__initialDelay=1s")
	f.Add([]byte(`{"checkpointRetryPolicy": {"retryCount": 3, "sleepDuration": "5s", "maxRetryTime": "1s", "onExhausted": "deadLetter"},
  "redrive": {"store": "postgres"}, "triggers": {"a": {"type": "kafka", "topic": "t ", "shareGroup": "g"}}}`),
		"AzureFunctionsJobHost__checkpointRetryPolicy__onExhausted__topic=dlq\nAzureFunctionsJobHost__redrive__store__connection=X\nAzureFunctionsJobHost__trigers__a__topic=t")
	f.Fuzz(func(t *testing.T, data []byte, env string) {
		l := Loader{Environ: func() []string { return strings.Split(env, "\n") }}
		cfg, err := l.Parse("host.json", data)
		if (cfg == nil) == (err == nil) {
			t.Fatalf("Parse = %v, %v: want exactly one of a Config and an error", cfg, err)
		}
		if err != nil {
			var e *Error
			if !errors.As(err, &e) || len(e.Problems) == 0 {
				t.Fatalf("err = %v, want an *Error with problems", err)
			}
			for _, p := range e.Problems {
				if p.File != "host.json" || p.Env == "" && (p.Line < 1 || p.Col < 1) || p.Msg == "" {
					t.Fatalf("problem %+v is not located", p)
				}
			}
			return
		}
		if _, err := cfg.Policy(); err != nil {
			t.Fatalf("Policy of a loaded Config: %v", err)
		}
		for name := range cfg.Functions {
			if _, err := cfg.Policy(Function(name)); err != nil {
				t.Fatalf("Policy(Function(%q)) of a loaded Config: %v", name, err)
			}
		}
		if cfg.Explain() == "" {
			t.Fatal("empty explanation")
		}
		for _, name := range cfg.FunctionNames() {
			if cfg.Explain(Function(name)) == "" {
				t.Fatalf("empty explanation of function %q", name)
			}
		}
	})
}

// FuzzTimeSpan checks ParseDuration against a second, independent reading
// of the TimeSpan grammar, and that every TimeSpan it reads formats and
// reads back to the same value.
func FuzzTimeSpan(f *testing.F) {
	for _, s := range []string{"00:00:05", "1.02:03:04.5", "1:02:03:04", "-00:01", "24:00", "00:00:00.1234567",
		"106751.23:47:16.8547758", "1m30s", "5", "", "0", " 00:00:01 ", "10675199.02:48:05.4775807", "1:1:.1"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		got, err := parseDuration(s)
		trimmed := strings.Trim(s, " \t")
		if strings.ContainsRune(trimmed, ':') {
			want, ok := referenceTimeSpan(trimmed)
			if ok != (err == nil) || ok && got != want {
				t.Fatalf("parseDuration(%q) = %v, %v; the reference reads %v, %v", s, got, err, want, ok)
			}
		}
		if err != nil {
			if err.Error() == "" {
				t.Fatalf("parseDuration(%q): empty error", s)
			}
			return
		}
		ticks := got / 100 * 100 // toward zero, as TimeSpan's resolution
		back, err := parseDuration(formatTimeSpan(got))
		if err != nil || back != ticks {
			t.Fatalf("parseDuration(formatTimeSpan(%v) = %q) = %v, %v; want %v", got, formatTimeSpan(got), back, err, ticks)
		}
	})
}

// timeSpanForms are the TimeSpan layouts ParseDuration documents, each with
// the units of its groups.
var timeSpanForms = []struct {
	re    *regexp.Regexp
	units []time.Duration
}{
	{regexp.MustCompile(`^(-?)(\d{1,2}):(\d{1,2})$`), []time.Duration{time.Hour, time.Minute}},
	{regexp.MustCompile(`^(-?)(\d{1,2}):(\d{1,2}):(\d{1,2})$`), []time.Duration{time.Hour, time.Minute, time.Second}},
	{regexp.MustCompile(`^(-?)(\d{1,2}):(\d{1,2}):(\d{0,2})\.(\d{1,7})$`), []time.Duration{time.Hour, time.Minute, time.Second, 0}},
	{regexp.MustCompile(`^(-?)(\d{1,8})\.(\d{1,2}):(\d{1,2})$`), []time.Duration{24 * time.Hour, time.Hour, time.Minute}},
	{regexp.MustCompile(`^(-?)(\d{1,8})\.(\d{1,2}):(\d{1,2}):(\d{1,2})$`), []time.Duration{24 * time.Hour, time.Hour, time.Minute, time.Second}},
	{regexp.MustCompile(`^(-?)(\d{1,8})\.(\d{1,2}):(\d{1,2}):(\d{0,2})\.(\d{1,7})$`), []time.Duration{24 * time.Hour, time.Hour, time.Minute, time.Second, 0}},
	{regexp.MustCompile(`^(-?)(\d{1,8}):(\d{1,2}):(\d{1,2}):(\d{1,2})$`), []time.Duration{24 * time.Hour, time.Hour, time.Minute, time.Second}},
	{regexp.MustCompile(`^(-?)(\d{1,8}):(\d{1,2}):(\d{1,2}):(\d{0,2})\.(\d{1,7})$`), []time.Duration{24 * time.Hour, time.Hour, time.Minute, time.Second, 0}},
}

// referenceTimeSpan reads s with regular expressions and big integers.
func referenceTimeSpan(s string) (time.Duration, bool) {
	for _, form := range timeSpanForms {
		m := form.re.FindStringSubmatch(s)
		if m == nil {
			continue
		}
		total := new(big.Int)
		for i, unit := range form.units {
			v, _ := new(big.Int).SetString("0"+m[i+2], 10) // empty seconds before a fraction are 0
			switch unit {
			case 0: // the fraction, in 100ns ticks
				v.SetString(m[i+2]+strings.Repeat("0", 7-len(m[i+2])), 10)
				v.Mul(v, big.NewInt(100))
			case time.Hour:
				if v.Int64() > 23 {
					return 0, false
				}
			case time.Minute, time.Second:
				if v.Int64() > 59 {
					return 0, false
				}
			}
			if unit != 0 {
				v.Mul(v, big.NewInt(int64(unit)))
			}
			total.Add(total, v)
		}
		if total.Cmp(big.NewInt(math.MaxInt64)) > 0 {
			return 0, false
		}
		d := time.Duration(total.Int64())
		if m[1] == "-" {
			d = -d
		}
		return d, true
	}
	return 0, false
}
