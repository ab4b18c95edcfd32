package hostconfig_test

import (
	"math"
	"strings"
	"testing"
	"time"

	"github.com/redeliver-go/redeliver/hostconfig"
)

func TestParseDuration(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want time.Duration
	}{
		{"00:00:05", 5 * time.Second},
		{"0:0:5", 5 * time.Second},
		{"00:05", 5 * time.Minute},
		{"23:59", 23*time.Hour + 59*time.Minute},
		{"1.02:03", 26*time.Hour + 3*time.Minute},
		{"1.02:03:04", 26*time.Hour + 3*time.Minute + 4*time.Second},
		{"1:02:03:04", 26*time.Hour + 3*time.Minute + 4*time.Second},
		{"1:02:03:04.5", 26*time.Hour + 3*time.Minute + 4500*time.Millisecond},
		{"00:00:00.5", 500 * time.Millisecond},
		{"00:00:00.80", 800 * time.Millisecond},
		{"00:00:00.1234567", 123456700 * time.Nanosecond},
		{"00:00:00.0000001", 100 * time.Nanosecond},
		{"23:59:59.9999999", 24*time.Hour - 100*time.Nanosecond},
		{"-00:00:05", -5 * time.Second},
		{"-1.00:00:00", -24 * time.Hour},
		{" \t00:00:05 ", 5 * time.Second},
		{"00000001.00:00", 24 * time.Hour},
		{"106751.23:47:16.8547758", math.MaxInt64 - 7},
		{"-106751.23:47:16.8547758", -(math.MaxInt64 - 7)},
		{"0", 0},
		{"1m30s", 90 * time.Second},
		{"500ms", 500 * time.Millisecond},
		{"1h", time.Hour},
		{"-5s", -5 * time.Second},
		{"1.5h", 90 * time.Minute},
		// .NET reads an empty seconds group before a fraction as 0 seconds.
		{"1:1:.1", time.Hour + time.Minute + 100*time.Millisecond},
		{"00:00:.5", 500 * time.Millisecond},
		{"1.02:03:.0000001", 26*time.Hour + 3*time.Minute + 100},
		{"1:02:03:.25", 26*time.Hour + 3*time.Minute + 250*time.Millisecond},
	} {
		got, err := hostconfig.ParseDuration(tc.in)
		if err != nil || got != tc.want {
			t.Errorf("ParseDuration(%q) = %v, %v; want %v", tc.in, got, err, tc.want)
		}
	}
}

func TestParseDurationErrors(t *testing.T) {
	for _, tc := range []struct {
		in, want string
	}{
		{"", "empty interval"},
		{"   ", "empty interval"},
		{"24:00:00", "hours: 24 is out of range: want 0 to 23"},
		{"1.24:00", "hours: 24 is out of range"},
		{"00:60:00", "minutes: 60 is out of range: want 0 to 59"},
		{"00:60", "minutes: 60 is out of range"},
		{"00:00:60", "seconds: 60 is out of range: want 0 to 59"},
		{"000:00:05", "hours: 000 has more than 2 digits"},
		{"00:000:05", "minutes: 000 has more than 2 digits"},
		{"00:00:05.12345678", "fraction of a second: want one to seven digits"},
		{"00:00:05.", "fraction of a second: want one to seven digits"},
		{"106752.00:00:00", "days: 106752 is out of range: want 0 to 106751"},
		{"106751.23:47:16.8547759", "out of range: the longest interval is 106751.23:47:16.8547758"},
		{"10675199.02:48:05.4775807", "days: 10675199 is out of range"},
		{"123456789.00:00:00", "days: 123456789 has more than 8 digits"},
		{"5", `a bare number is ambiguous (.NET reads "5" as 5 days): write "5s" for seconds or "5.00:00:00" for days`},
		{"-5", "a bare number is ambiguous"},
		{"1.5", "not an interval"},
		{"soon", "not an interval"},
		{"1d", "not an interval"},
		{"00:00:", "seconds: missing"},
		{"00:00:.", "fraction of a second: want one to seven digits"},
		{"00::.5", "minutes: missing"},
		{":00", "hours: missing"},
		{"00::05", "minutes: missing"},
		{"1.2.3:00", "not a TimeSpan"},
		{"1:2:3:4:5", "not a TimeSpan"},
		{"1.02", "not an interval"},
		{"+00:00:05", `unexpected '+' in a TimeSpan`},
		{"--00:00:05", `unexpected '-' in a TimeSpan`},
		{"00:00:05x", `unexpected 'x' in a TimeSpan`},
		{"０:00", `unexpected '０' in a TimeSpan`},
		{"00 :00", `unexpected ' ' in a TimeSpan`},
		{"1m30", "not an interval"},
		{"3000000h", "not an interval"},
	} {
		_, err := hostconfig.ParseDuration(tc.in)
		if err == nil {
			t.Errorf("ParseDuration(%q) succeeded, want an error", tc.in)
			continue
		}
		if !strings.HasPrefix(err.Error(), "hostconfig: ") || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("ParseDuration(%q) = %v, want an error containing %q", tc.in, err, tc.want)
		}
	}
}
