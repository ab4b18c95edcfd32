package tests

import (
	"strings"
	"testing"
	"time"

	"github.com/redeliver-go/redeliver/adapters/kafkago"
	"github.com/redeliver-go/redeliver/stream/streamtest"
)

// waitLogged waits for a message logged at level that contains s, within.
func waitLogged(t *testing.T, lr *logRecorder, level, s string, within time.Duration) {
	t.Helper()
	deadline := time.Now().Add(within)
	for {
		for _, m := range lr.matching(s) {
			if strings.HasPrefix(m, level+" ") {
				return
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("no %s message with %q in %v; log:\n%q", level, s, within, lr.matching("redeliver"))
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// A partition whose fetches fail is reported by Health. (The start checks
// every adapter makes are in kafkatest.Run.)
func TestHealthReportsFailingFetches(t *testing.T) {
	_, addrs := newCluster(t, "t", 1)
	produce(t, addrs, "t", 0, 0, 3)
	r := start(t, addrs, "g", "t", newProcessor(t, streamtest.Succeed))
	waitCommitted(t, addrs, "g", "t", map[int32]int64{0: 3})
	if err := r.C.Health(); err != nil {
		t.Fatalf("Health of a consumer that works: %v", err)
	}
	deleteTopic(t, addrs, "t")
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		err := r.C.Health()
		if err != nil && strings.Contains(err.Error(), "fetching t/0 fails") {
			t.Log(err)
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("Health says %v after the topic was deleted, want the partition's failing fetches", err)
		}
	}
	var zero kafkago.Consumer
	if err := zero.Health(); err == nil {
		t.Error("Health of a zero Consumer returned nil")
	}
}
