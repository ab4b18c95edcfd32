package hostconfig_test

import (
	"fmt"
	"runtime"
	"strings"
	"testing"
	"time"
)

// bigHostJSON returns a one-line host.json of about size bytes: n
// policies and n triggers, as many as fit, for the same n functions, or
// with apart for 2n functions (a policy no trigger names, a trigger of a
// function without a policy, each name one or two edits from many
// others). The policies retry at once under a time budget, some without
// limit of count, so that nothing checked about a policy's effect may
// count its retries one by one.
func bigHostJSON(size int, apart bool) (doc []byte, n int) {
	trigger := "fn"
	if apart {
		trigger = "tr"
	}
	var policies, triggers strings.Builder
	for ; policies.Len()+triggers.Len() < size; n++ {
		i := n
		if i > 0 {
			policies.WriteString(", ")
			triggers.WriteString(", ")
		}
		fmt.Fprintf(&policies, `"fn%06d": {"retryCount": %d}`, i, i%7-1)
		fmt.Fprintf(&triggers, `"%s%06d": {"type": "kafka", "topic": "t%d", "consumerGroup": "g"}`, trigger, i, i)
	}
	return []byte(`{"version": "2.0", "checkpointRetryPolicy": {"retryCount": 3, "strategy": "immediate", "maxRetryTime": "00:01:00", "maxDelay": "1s", "functions": {` +
		policies.String() + `}}, "triggers": {` + triggers.String() + `}}`), n
}

// TestLoadTimeIsLinear checks that loading takes time linear in the
// file's size: eight times the size takes about eight times as long, not
// sixty-four (each place in an error or a setting used to be found by
// counting the lines from the start of the file, and each function name
// checked against every other one). The sizes are loaded in turn, five
// times each, after a garbage collection, and the fastest load of each
// counts; only the ratio is checked, never a time, so that a busy machine
// does not fail the test (a load far beyond any delay stops it: a hang).
func TestLoadTimeIsLinear(t *testing.T) {
	if testing.Short() {
		t.Skip("loads 24 MB of host.json")
	}
	t.Run("policies and triggers of the same functions", func(t *testing.T) { loadTimeIsLinear(t, false) })
	// Each policy's name is compared with the triggers' for a misspelling.
	t.Run("policies and triggers of other functions", func(t *testing.T) { loadTimeIsLinear(t, true) })
}

func loadTimeIsLinear(t *testing.T, apart bool) {
	bound := raceSlowdown * time.Second
	load := func(doc []byte, n int) time.Duration {
		runtime.GC()
		start := time.Now()
		cfg, err := noEnv.Parse("host.json", doc)
		took := time.Since(start)
		if err != nil {
			t.Fatal(err)
		}
		if len(cfg.Functions) != n || len(cfg.Triggers) != n {
			t.Fatalf("%d functions, %d triggers: want %d of each", len(cfg.Functions), len(cfg.Triggers), n)
		}
		if took > 15*bound {
			// Far beyond any busy machine's delay: stop instead of
			// waiting minutes for the other loads.
			t.Fatalf("a load of %d bytes took %v", len(doc), took)
		}
		return took
	}
	// Under the race detector, which slows every load about tenfold, an
	// eighth of the sizes: the same ratio tells linear from quadratic.
	size := 256 << 10
	if raceSlowdown > 1 {
		size = 32 << 10
	}
	small, nSmall := bigHostJSON(size, apart)
	large, nLarge := bigHostJSON(8*size, apart)
	load(small, nSmall) // warm
	tSmall, tLarge := time.Duration(1<<63-1), time.Duration(1<<63-1)
	for range 5 {
		tSmall = min(tSmall, load(small, nSmall))
		tLarge = min(tLarge, load(large, nLarge))
	}
	t.Logf("%d KB: %v, %d KB: %v (%.2fx)", len(small)>>10, tSmall, len(large)>>10, tLarge, float64(tLarge)/float64(tSmall))
	// Linear is about 8 (15 seen here: the larger heap costs more to
	// collect); quadratic about 64.
	if tLarge > 32*tSmall {
		t.Errorf("%d KB took %v, %d KB %v: %.1f times as long for eight times the size, want about 8 (linear)", len(large)>>10, tLarge, len(small)>>10, tSmall, float64(tLarge)/float64(tSmall))
	}
}
