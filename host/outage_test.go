package host_test

import (
	"context"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/redeliver-go/redeliver/host"
	"github.com/redeliver-go/redeliver/stream"
	"github.com/redeliver-go/redeliver/stream/streamtest"
)

// TestOutageState: with an outage budget, the partitions held back by an
// outage of the downstream show the outage state, on the page and in
// /status.json, with the outage itself on their function; once a probe
// succeeds, they flow again.
func TestOutageState(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		// Two tokens: the second partition's failure runs the budget out.
		cfg := parse(t, `{
  "checkpointRetryPolicy": {"retryCount": 3, "sleepDuration": "00:00:01"},
  "outageBudget": {"maxTokens": 2, "probeDelay": "00:00:05", "maxProbeDelay": "00:00:05"},
}`)
		h, err := host.New(cfg)
		if err != nil {
			t.Fatal(err)
		}
		var parts []*streamtest.Partition
		for i := range 3 {
			p := streamtest.NewPartition("orders", int32(i), 5)
			p.AppendN(time.Now(), 5)
			parts = append(parts, p)
		}
		recovery := time.Now().Add(12 * time.Second)
		down := stream.HandlerFunc(func(_ context.Context, b *stream.Batch) error {
			time.Sleep(10 * time.Millisecond) // one partition at a time: p0 fails first
			if time.Now().Before(recovery) {
				return errBoom
			}
			return nil
		})
		if err := h.Register("orders", down, memSource("orders", parts...)); err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithCancel(t.Context())
		done := make(chan error, 1)
		go func() { done <- h.Run(ctx) }()

		// By 3s the outage holds every partition: the ones whose failure
		// it did not count, and the one whose retry fell due in it.
		time.Sleep(3 * time.Second)
		synctest.Wait()
		st := status(t, h.Handler())
		f := st.Functions[0]
		if f.Outage == nil || f.Outage.Since.IsZero() {
			t.Fatalf("function status %+v, want the outage in force", f)
		}
		if len(f.Partitions) != 3 {
			t.Fatalf("partitions %+v, want 3", f.Partitions)
		}
		for _, p := range f.Partitions {
			if p.State != host.StateOutage || p.Checkpoint > 0 || p.FirstOffset != 0 {
				t.Errorf("orders/%d: state %s at checkpoint %d, batch from %d; want %s, the checkpoint withheld before the batch from 0 (%+v)",
					p.Partition, p.State, p.Checkpoint, p.FirstOffset, host.StateOutage, p)
			}
		}
		_, body := get(t, h.Handler(), "/status.json")
		if n := strings.Count(body, `"state": "outage"`); n != 3 {
			t.Errorf("/status.json shows %d partitions in the outage state, want 3:\n%s", n, body)
		}
		_, page := get(t, h.Handler(), "/")
		for _, want := range []string{`data-state="outage"`, "waiting out an outage of the downstream", "downstream outage since", "3 waiting out an outage"} {
			if !strings.Contains(page, want) {
				t.Errorf("the page lacks %q", want)
			}
		}

		// The probe at 15s succeeds: the outage ends and every partition
		// flows to its end.
		for _, p := range parts {
			if err := p.WaitCommitted(ctx, 5); err != nil {
				t.Fatal(err)
			}
		}
		synctest.Wait()
		f = status(t, h.Handler()).Functions[0]
		if f.Outage != nil {
			t.Errorf("outage %+v after it ended", f.Outage)
		}
		for _, p := range f.Partitions {
			if p.State != host.StateFlowing || p.Checkpoint != 5 || p.LastError != "" || p.Retry != 0 || !p.FirstFailure.IsZero() {
				t.Errorf("orders/%d after the outage: %s at %d (%+v), want flowing at 5 with no error or retry left", p.Partition, p.State, p.Checkpoint, p)
			}
		}
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Run = %v, want nil", err)
		}
	})
}
