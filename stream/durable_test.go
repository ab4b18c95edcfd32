package stream_test

import (
	"bytes"
	"log/slog"
	"strconv"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/redeliver-go/redeliver/stream"
	"github.com/redeliver-go/redeliver/stream/streamtest"
)

// moveAfter runs a batch that always fails under retryCount 10 and moves
// its partition to a new owner during the backoff that follows its 4th
// delivery: with durable state, once that retry's state is written. It
// returns the deliveries of both owners together.
func moveAfter(t *testing.T, memory bool) int {
	p := streamtest.NewPartition("t", 0, 5)
	p.AppendN(time.Now(), 5)
	var opts []stream.Option
	revoke := stream.Hooks{
		Checkpointed: func(e stream.CheckpointEvent) {
			if strings.HasPrefix(e.Metadata, "rd1;o=0;r=4;") {
				p.Revoke()
			}
		},
	}
	if memory {
		opts = append(opts, stream.WithInMemoryState())
		revoke = stream.Hooks{
			RetryScheduled: func(e stream.RetryEvent) {
				if e.Retry == 4 {
					p.Revoke()
				}
			},
		}
	}
	h := streamtest.FailFirst(-1, nil)(streamtest.Succeed)
	first := start(t, h, []*streamtest.Partition{p}, append(opts, fixed(10, time.Second), stream.WithHooks(revoke))...)
	if err := <-first.done; err != nil {
		t.Fatalf("first owner: %v", err)
	}
	second := start(t, h, []*streamtest.Partition{p}, append(opts, fixed(10, time.Second))...)
	second.waitAll()
	second.stop()
	return len(first.rec.Deliveries()) + len(second.rec.Deliveries())
}

// With durable state, a batch set to 10 retries whose partition moves after
// its 4th delivery is delivered at most 11 times in all.
func TestDurableStateKeepsRetryBudgetAcrossRebalance(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		if got := moveAfter(t, false); got != 11 {
			t.Fatalf("%d deliveries in all, want 11 (retryCount 10)", got)
		}
	})
}

// In memory, the same move starts the count over: seed 004's flaw.
func TestInMemoryStateOverrunsAcrossRebalance(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		if got := moveAfter(t, true); got != 15 {
			t.Fatalf("%d deliveries in all, want 15 (4 + 11: the count starts over)", got)
		}
	})
}

// The next owner waits out what is left of the backoff, and the handler sees
// the retries so far.
func TestDurableStateResumesBackoffAndAttempt(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p := streamtest.NewPartition("t", 0, 5)
		p.AppendN(time.Now(), 5)
		first := time.Now().Add(-time.Minute)
		next := time.Now().Add(30 * time.Second)
		p.SetCheckpoint(0, "rd1;r=3;f="+itoa(first.UnixMilli())+";d=60000;n="+itoa(next.UnixMilli()))
		begin := time.Now()
		hs := start(t, streamtest.Succeed, []*streamtest.Partition{p}, fixed(10, time.Minute))
		hs.waitAll()
		hs.stop()
		ds := hs.rec.Deliveries()
		if len(ds) != 1 {
			t.Fatalf("%d deliveries", len(ds))
		}
		a := ds[0].Attempt
		if a.Retries != 3 || !a.FirstFailure.Equal(time.UnixMilli(first.UnixMilli())) {
			t.Fatalf("attempt %+v, want retry 3 with the stored first failure", a)
		}
		if c, md := p.Committed(); c != 5 || md != "" {
			t.Fatalf("checkpoint %d %q, want 5 with the state cleared", c, md)
		}
		// Fake time, whose clock starts on a whole second: the stored due
		// time (whole milliseconds) is exact, and so is the wait.
		if waited := time.Since(begin); waited != 30*time.Second {
			t.Fatalf("redelivered after %v, want the 30s left of the backoff", waited)
		}
	})
}

// Metadata written by another tool, or damaged, is ignored: the batch starts
// its count at 0 and nothing fails.
func TestForeignOrDamagedMetadataIgnored(t *testing.T) {
	for _, md := range []string{`{"owner":"other-app"}`, "rd1;r=banana"} {
		t.Run(md, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				p := streamtest.NewPartition("t", 0, 5)
				p.AppendN(time.Now(), 5)
				p.SetCheckpoint(0, md)
				var logs bytes.Buffer
				log := slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
				hs := start(t, streamtest.FailFirst(-1, nil)(streamtest.Succeed), []*streamtest.Partition{p}, fixed(2, time.Second), stream.WithLogger(log))
				hs.waitAll()
				hs.stop()
				if got := len(hs.rec.Deliveries()); got != 3 {
					t.Fatalf("%d deliveries, want 3", got)
				}
				if !strings.Contains(logs.String(), "ignored") {
					t.Fatalf("nothing logged about the metadata:\n%s", logs.String())
				}
			})
		})
	}
}

func itoa(n int64) string { return strconv.FormatInt(n, 10) }
