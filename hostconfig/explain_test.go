package hostconfig_test

import (
	"strings"
	"testing"

	"github.com/redeliver-go/redeliver/hostconfig"
)

func explain(t *testing.T, doc string) string {
	t.Helper()
	cfg, err := noEnv.Parse("host.json", []byte(doc))
	if err != nil {
		t.Fatal(err)
	}
	return cfg.Explain()
}

func TestExplainSeed(t *testing.T) {
	got := explain(t, `{"checkpointRetryPolicy": {"retryCount": 10, "sleepDuration": "00:00:05"}}`)
	want := `checkpointRetryPolicy (host.json:1:27): retries a failed batch up to 10 times (at most 11 deliveries).
It waits 5s before each retry (strategy fixed).
First retry delays: 5s, 5s, 5s, 5s, 5s, 5s, 5s, 5s, 5s, 5s.
Worst case: 50s of waiting over 10 retries (the handler's run time not included).
Then the batch is skipped: the checkpoint advances past it.
Values: retryCount from host.json:1:42; sleepDuration from host.json:1:63; anything else is a default.
`
	if got != want {
		t.Errorf("Explain =\n%s\nwant\n%s", got, want)
	}
}

func TestExplainJitterBudgetFunctionsWarnings(t *testing.T) {
	got := explain(t, `{
  "checkpointRetryPolicy": {
    "retryCount": 20,
    "strategy": {"name": "exponentialJitter", "initialDelay": "1s", "jitterPercent": 10},
    "maxDelay": "00:01:00",
    "maxRetryTime": "00:05:00",
    "functions": {"b": {"retryCount": 0, "onExhausted": "stop"}, "a": {"retryCount": 1, "onExhausted": {"action": "deadLetter", "topic": "dlq"}}},
  },
  "retry": {"strategy": "fixedDelay", "maxRetryCount": 1, "delayInterval": "1s"},
}`)
	want := `checkpointRetryPolicy (host.json:2:28): retries a failed batch at most 9 times (at most 10 deliveries): retryCount (20) allows more, but no more retries start before maxRetryTime (5m0s) ends them.
It waits 1s * 2^(n-1) before retry n, lengthened at random by up to 10% (strategy exponentialJitter).
No delay is longer than 1m0s.
No retry starts 5m0s or more after the batch's first failure.
First retry delays: 1s..1.1s, 2s..2.2s, 4s..4.4s, 8s..8.8s, 16s..17.6s, 32s..35.2s, 1m0s..1m0s, 1m0s..1m0s, 1m0s..1m0s (random within each range).
Worst case, every random draw at its upper end: 4m9.3s of waiting over 9 retries, when the retry time budget of 5m0s ends them (the handler's run time not included).
Then the batch is skipped: the checkpoint advances past it.
Values: maxDelay from host.json:5:17; maxRetryTime from host.json:6:21; retryCount from host.json:3:19; strategy.initialDelay from host.json:4:63; strategy.jitterPercent from host.json:4:86; strategy.name from host.json:4:26; anything else is a default.

Function a:
checkpointRetryPolicy.functions.a (host.json:7:71): retries a failed batch once (at most 2 deliveries).
It waits 1s * 2^(n-1) before retry n, lengthened at random by up to 10% (strategy exponentialJitter).
No delay is longer than 1m0s.
No retry starts 5m0s or more after the batch's first failure.
First retry delays: 1s..1.1s (random within each range).
Worst case, every random draw at its upper end: 1.1s of waiting over 1 retry (the handler's run time not included).
Then the batch is sent to topic "dlq" and the checkpoint advances past it.
Values: maxDelay from host.json:5:17; maxRetryTime from host.json:6:21; onExhausted.action from host.json:7:115; onExhausted.topic from host.json:7:138; retryCount from host.json:7:86; strategy.initialDelay from host.json:4:63; strategy.jitterPercent from host.json:4:86; strategy.name from host.json:4:26; anything else is a default.

Function b:
checkpointRetryPolicy.functions.b (host.json:7:24): never retries a failed batch.
Then the partition stops, its checkpoint before the batch.
Values: maxDelay from host.json:5:17; maxRetryTime from host.json:6:21; onExhausted from host.json:7:57; retryCount from host.json:7:39; strategy.initialDelay from host.json:4:63; strategy.jitterPercent from host.json:4:86; strategy.name from host.json:4:26; anything else is a default.

Warning: host.json:9:12: retry is ignored: checkpointRetryPolicy (host.json:2:28) takes precedence
`
	if got != want {
		t.Errorf("Explain =\n%s\nwant\n%s", got, want)
	}
}

// TestExplainBounds checks the worst case of policies that are unbounded,
// huge or cut by their budget, and that explaining them is quick.
func TestExplainBounds(t *testing.T) {
	for _, tc := range []struct {
		name, doc, want string
	}{
		{"forever", `{"checkpointRetryPolicy": {"retryCount": -1, "sleepDuration": "1s"}}`,
			"Worst case: it retries forever"},
		{"at once until the budget", `{"checkpointRetryPolicy": {"retryCount": -1, "strategy": "immediate", "maxRetryTime": "1s"}}`,
			"Worst case: it retries without waiting until 1s after the first failure"},
		{"fixed until the budget", `{"checkpointRetryPolicy": {"retryCount": -1, "sleepDuration": "00:00:30", "maxRetryTime": "00:10:00"}}`,
			"Worst case: 9m30s of waiting over 19 retries, when the retry time budget of 10m0s ends them"},
		{"capped, many retries", `{"checkpointRetryPolicy": {"retryCount": 100000000, "strategy": {"name": "exponential", "initialDelay": "1s"}, "maxDelay": "00:00:10"}}`,
			"Worst case: 277777h46m15s of waiting over 100000000 retries"},
		{"saturating", `{"checkpointRetryPolicy": {"retryCount": 2000000000, "strategy": {"name": "decorrelatedJitter", "initialDelay": "1ns"}}}`,
			"Worst case, every random draw at its upper end: more than 292 years of waiting over 2000000000 retries"},
		{"growing without end, many retries", `{"checkpointRetryPolicy": {"retryCount": 2000000000, "strategy": {"name": "linear", "initialDelay": "1ns"}}}`,
			"Worst case: at least 72h48m55.41s of waiting over 2000000000 retries"},
		{"growing without end, budget", `{"checkpointRetryPolicy": {"retryCount": -1, "strategy": {"name": "linear", "initialDelay": "1ns"}, "maxRetryTime": "1000.00:00:00"}}`,
			"Worst case: less than 24000h0m0s of waiting, when the retry time budget ends the retries"},
		{"record age", `{"checkpointRetryPolicy": {"retryCount": 1, "sleepDuration": "1s", "maxRecordAge": "01:00:00"}}`,
			"(the handler's run time not included; the record age limit of 1h0m0s may end it sooner)"},
		{"backoffAlgorithm's longest delay is its window", `{"checkpointRetryPolicy": {"retryCount": 5, "strategy": {"name": "backoffAlgorithm", "initialDelay": "500ms", "maxDelay": "5s"}}}`,
			"First retry delays: 0s..500ms, 0s..1s, 0s..2s, 0s..4s, 0s..5s (random within each range).\nWorst case, every random draw at its upper end: 12.5s of waiting over 5 retries"},
		{"azure exponentialBackoff", `{"retry": {"strategy": "exponentialBackoff", "maxRetryCount": 5, "minimumInterval": "00:00:10", "maximumInterval": "00:01:00"}}`,
			"First retry delays: 10s..10s, 18s..22s, 26s..34s, 42s..58s, 1m0s..1m0s (random within each range)"},
		{"azureIotJava", `{"checkpointRetryPolicy": {"retryCount": 4, "strategy": "azureIotJava"}}`,
			"First retry delays: 0s..0s, 180ms..219ms, 340ms..457ms, 660ms..933ms (random within each range)"},
		{"azureIotC", `{"checkpointRetryPolicy": {"retryCount": 8, "strategy": "azureIotCExponentialBackoffWithJitter"}}`,
			"First retry delays: 0s..0s, 1s..1s, 2s..2s, 4s..4s, 8s..8s, 16s..16s, 30s..31s, 30s..31s (random within each range)"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := explain(t, tc.doc); !strings.Contains(got, tc.want) {
				t.Errorf("Explain =\n%s\nwant it to contain\n%s", got, tc.want)
			}
		})
	}
}

// Explain says what will happen: a time budget shorter than the first
// delay means no retry at all, a budget that ends the retries before the
// count does bounds the count and the delays listed, and the largest
// retry count is counted without overflow.
func TestExplainWhatHappens(t *testing.T) {
	for _, tc := range []struct {
		name, doc, want string
	}{
		{"budget below the first delay", `{"checkpointRetryPolicy": {"retryCount": 10, "sleepDuration": "00:00:05", "maxRetryTime": "00:00:01"}}`,
			`checkpointRetryPolicy (host.json:1:27): never retries a failed batch: the first retry would wait 5s, and no retry starts 1s or more after the first failure (maxRetryTime), so retryCount (10) is never used.
Then the batch is skipped: the checkpoint advances past it.
`},
		{"budget equal to the first delay, random", `{"checkpointRetryPolicy": {"retryCount": -1, "strategy": {"name": "exponentialJitter", "initialDelay": "2s"}, "maxRetryTime": "2s"}}`,
			`checkpointRetryPolicy (host.json:1:27): never retries a failed batch: the first retry would wait at least 2s, and no retry starts 2s or more after the first failure (maxRetryTime), so retryCount (-1, no limit) is never used.
Then the batch is skipped: the checkpoint advances past it.
`},
		{"budget that ends the retries", `{"checkpointRetryPolicy": {"retryCount": 10, "sleepDuration": "00:00:05", "maxRetryTime": "00:00:12"}}`,
			`checkpointRetryPolicy (host.json:1:27): retries a failed batch at most 2 times (at most 3 deliveries): retryCount (10) allows more, but no more retries start before maxRetryTime (12s) ends them.
It waits 5s before each retry (strategy fixed).
No retry starts 12s or more after the batch's first failure.
First retry delays: 5s, 5s.
Worst case: 10s of waiting over 2 retries, when the retry time budget of 12s ends them (the handler's run time not included).
Then the batch is skipped: the checkpoint advances past it.
`},
		{"budget that allows one retry", `{"checkpointRetryPolicy": {"retryCount": -1, "sleepDuration": "00:00:05", "maxRetryTime": "00:00:06"}}`,
			`checkpointRetryPolicy (host.json:1:27): retries a failed batch at most once (at most 2 deliveries): retryCount (-1, no limit) allows more, but no more retries start before maxRetryTime (6s) ends them.`},
		{"budget that ends the retries after many", `{"checkpointRetryPolicy": {"retryCount": -1, "sleepDuration": "00:00:01", "maxRetryTime": "1000.00:00:00"}}`,
			`checkpointRetryPolicy (host.json:1:27): retries a failed batch at most 86399999 times (at most 86400000 deliveries): retryCount (-1, no limit) allows more, but no more retries start before maxRetryTime (24000h0m0s) ends them.`},
		{"budget beyond a large count", `{"checkpointRetryPolicy": {"retryCount": 1000000, "sleepDuration": "00:00:01", "maxRetryTime": "1000.00:00:00"}}`,
			`checkpointRetryPolicy (host.json:1:27): retries a failed batch up to 1000000 times (at most 1000001 deliveries).`},
		{"budget beyond the count", `{"checkpointRetryPolicy": {"retryCount": 3, "sleepDuration": "00:00:05", "maxRetryTime": "00:01:00"}}`,
			`checkpointRetryPolicy (host.json:1:27): retries a failed batch up to 3 times (at most 4 deliveries).`},
		{"largest count", `{"checkpointRetryPolicy": {"retryCount": 9223372036854775807, "strategy": "immediate"}}`,
			`checkpointRetryPolicy (host.json:1:27): retries a failed batch up to 9223372036854775807 times (at most 9223372036854775808 deliveries).`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := explain(t, tc.doc)
			if !strings.HasPrefix(got, tc.want) {
				t.Errorf("Explain =\n%s\nwant it to start with\n%s", got, tc.want)
			}
		})
	}
}

// A function read through a share group has its records retried one by
// one and rejected once given up: its explanation says so, and names no
// batch or checkpoint.
func TestExplainShareGroupFunction(t *testing.T) {
	cfg, err := noEnv.Parse("host.json", []byte(`{
  "checkpointRetryPolicy": {"retryCount": 2, "sleepDuration": "1s", "maxRetryTime": "00:01:00", "maxRecordAge": "01:00:00",
    "functions": {"emails": {"onExhausted": {"action": "deadLetter", "topic": "emails-dlq"}}}},
  "triggers": {
    "emails": {"type": "kafka", "topic": "emails", "shareGroup": "emails-app"},
    "orders": {"type": "kafka", "topic": "orders", "consumerGroup": "orders-app"}
  }
}`))
	if err != nil {
		t.Fatal(err)
	}
	want := `checkpointRetryPolicy.functions.emails (host.json:3:29): retries a failed record up to 2 times (at most 3 deliveries).
It waits 1s before each retry (strategy fixed).
No retry starts 1m0s or more after the record's first failure.
No retry starts once the record is 1h0m0s old.
First retry delays: 1s, 1s.
Worst case: 2s of waiting over 2 retries (the handler's run time not included; the record age limit of 1h0m0s may end it sooner).
Then the record is sent to topic "emails-dlq" and, once it is, rejected: the broker archives it.
`
	if got := cfg.Explain(hostconfig.Function("emails")); got != want {
		t.Errorf("Explain(Function(emails)) =\n%s\nwant\n%s", got, want)
	}
	if got := cfg.Explain(hostconfig.Function("orders")); !strings.Contains(got, "retries a failed batch") || !strings.Contains(got, "the checkpoint advances past it") {
		t.Errorf("Explain(Function(orders)) =\n%s\nwant the batch and its checkpoint", got)
	}
	if got := cfg.Explain(); !strings.Contains(got, "Function emails:\n"+want) {
		t.Errorf("Explain =\n%s\nwant the share group's words for emails", got)
	}
}

func TestExplainNoPolicy(t *testing.T) {
	got := explain(t, `{"version": "2.0"}`)
	if got != "No host-wide retry policy: a failed batch is not retried and the stream moves on.\n" {
		t.Errorf("Explain = %q", got)
	}
}
