package tests

import (
	"strings"
	"testing"
	"time"

	"github.com/redeliver-go/redeliver/adapters/internal/kafkatest"
	"github.com/redeliver-go/redeliver/internal/lifecycle"
	"github.com/redeliver-go/redeliver/stream/streamtest"
)

// Under the cooperative protocol a partition revoked while its handler
// holds it is reported on its own; when the member's session then ends
// with the handler still running (the broker takes the member out of the
// group past its rebalance timeout), the session's report names every
// partition still held, this one among them, and the partition's own
// report stops: each wait is reported once. Both reported it side by side.
func TestCooperativeRevocationReportedOnceAfterTheSessionEnds(t *testing.T) {
	t.Cleanup(lifecycle.SetRevokeReport(200*time.Millisecond, 400*time.Millisecond))
	var logs kafkatest.LogBuffer
	opts := adapter.Cooperative
	addrs, _, release := kafkatest.HoldBoth(t, adapter, kafkatest.Config{Logger: logs.Logger(), Options: opts})
	kafkatest.Start(t, adapter, kafkatest.Config{Addrs: addrs, Group: "g", Topic: "t",
		Processor: kafkatest.NewProcessor(t, streamtest.Succeed), Options: opts})

	// The revocation of one partition, then (the session's end) both.
	const report = `level=WARN msg="redeliver: a rebalance waits for partitions whose handlers have not returned`
	logs.WaitFor(t, report, kafkatest.Wait)
	logs.WaitFor(t, "partitions=t/0,t/1 ", kafkatest.Wait)
	time.Sleep(time.Second) // two more reports' time
	release()
	logs.WaitFor(t, `msg="redeliver: the rebalance's wait is over"`, kafkatest.Wait)

	var single, both int
	for _, line := range strings.Split(logs.String(), "\n") {
		if !strings.Contains(line, report) {
			continue
		}
		switch {
		case strings.Contains(line, "partitions=t/0,t/1 "):
			both++
		case both > 0:
			t.Errorf("a report of one partition after the session's report began (%d of them): the wait is reported twice: %s", both, line)
		default:
			single++
		}
	}
	if single == 0 {
		t.Errorf("no report of the revoked partition alone before the session ended:\n%s", logs.String())
	}
	kafkatest.WaitCommitted(t, addrs, "g", "t", map[int32]int64{0: 10, 1: 10})
}
