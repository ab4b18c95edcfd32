package stream_test

import (
	"testing"
	"testing/synctest"
	"time"

	"github.com/redeliver-go/redeliver/stream"
	"github.com/redeliver-go/redeliver/stream/streamtest"
)

// RetryEvent.Retry announces the retry number the scheduled delivery will
// have as its Attempt.Retries: both count the same way (0 is the first
// delivery, 1 the first retry).
func TestRetryNumbersAgree(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p := streamtest.NewPartition("t", 0, 5)
		p.AppendN(time.Now(), 5)
		var log []string // "d<Attempt.Retries>" and "r<RetryEvent.Retry>", in order
		hooks := stream.Hooks{
			Delivered:      func(e stream.DeliveredEvent) { log = append(log, "d"+itoa(int64(e.Attempt.Retries))) },
			RetryScheduled: func(e stream.RetryEvent) { log = append(log, "r"+itoa(int64(e.Retry))) },
		}
		hs := start(t, streamtest.FailFirst(3, nil)(streamtest.Succeed), []*streamtest.Partition{p}, fixed(5, time.Second), stream.WithHooks(hooks))
		hs.waitAll()
		hs.stop()
		want := []string{"d0", "r1", "d1", "r2", "d2", "r3", "d3"}
		if len(log) != len(want) {
			t.Fatalf("events %v, want %v", log, want)
		}
		for i := range want {
			if log[i] != want[i] {
				t.Fatalf("events %v, want %v", log, want)
			}
		}
		if n := hs.rec.Deliveries()[3].Attempt; n.Retries != 3 || n.Number() != 4 {
			t.Fatalf("last delivery %+v: want Retry 3, Number 4", n)
		}
	})
}
