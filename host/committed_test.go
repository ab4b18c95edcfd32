package host_test

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/redeliver-go/redeliver/checkpoint"
	"github.com/redeliver-go/redeliver/host"
	"github.com/redeliver-go/redeliver/internal/retrystate"
	"github.com/redeliver-go/redeliver/stream"
	"github.com/redeliver-go/redeliver/stream/streamtest"
)

// TestCommittedStateShown: partitions claimed with the retry state a
// previous owner committed show what the engine does with it, on the page
// and in /status.json, with the committed state decoded: a partition the
// previous owner stopped is delivered again with a fresh count (and says
// why it was stopped), a record given up whose exhaustion action had not
// succeeded is given up again (here the action stops the partition: it
// shows stopped, with the record's error), a state of another record than
// the one at the checkpoint is ignored, and a retry in backoff names its
// record and the time it waited out outages.
func TestCommittedStateShown(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		cfg := parse(t, `{"checkpointRetryPolicy": {"retryCount": 3, "sleepDuration": "00:00:01", "onExhausted": "stop"}}`)
		h, err := host.New(cfg)
		if err != nil {
			t.Fatal(err)
		}
		now := time.Now()
		states := []struct {
			at int64
			s  retrystate.State
		}{
			// Stopped at offset 3 by the previous owner.
			{3, retrystate.State{Offset: 3, Retries: 2, FirstFailure: now.Add(-time.Minute), Started: true,
				GivenUp: checkpoint.RetriesSpent, LastError: "timeout", Halted: true, Records: 1, Alone: true}},
			// Given up at offset 2, its exhaustion action not done.
			{2, retrystate.State{Offset: 2, Retries: 0, FirstFailure: now.Add(-time.Minute), Started: true,
				GivenUp: checkpoint.NotRetryable, LastError: "bad; record"}},
			// The state of the record at 6, with the checkpoint at 4.
			{4, retrystate.State{Offset: 6, Retries: 2, FirstFailure: now.Add(-time.Minute), NextAt: now.Add(time.Hour)}},
			// Retry 2 of the record at 1, due in an hour, after a minute of outages.
			{1, retrystate.State{Offset: 1, Retries: 2, FirstFailure: now.Add(-time.Minute), LastDelay: time.Second,
				NextAt: now.Add(time.Hour), OutageTime: time.Minute, Records: 5}},
		}
		var parts []*streamtest.Partition
		for i, st := range states {
			p := streamtest.NewPartition("orders", int32(i), 1)
			p.AppendN(now, 10)
			p.SetCheckpoint(st.at, retrystate.EncodeState(st.s))
			parts = append(parts, p)
		}
		delivered := make(chan int32, len(parts))
		hold := stream.HandlerFunc(func(ctx context.Context, b *stream.Batch) error {
			delivered <- b.Partition
			<-ctx.Done()
			return ctx.Err()
		})
		if err := h.Register("orders", hold, memSource("orders", parts...)); err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithCancel(t.Context())
		done := make(chan error, 1)
		go func() { done <- h.Run(ctx) }()
		// Before the restored retry is due (the policy caps its wait at
		// 1s from the claim).
		time.Sleep(500 * time.Millisecond)
		synctest.Wait()

		// /status.json as a script reads it.
		_, body := get(t, h.Handler(), "/status.json")
		var st struct {
			Functions []struct {
				Partitions []struct {
					Partition      int32  `json:"partition"`
					State          string `json:"state"`
					Checkpoint     int64  `json:"checkpoint"`
					Retry          int    `json:"retry"`
					LastError      string `json:"lastError"`
					Note           string `json:"note"`
					CommittedState *struct {
						Offset     int64  `json:"offset"`
						Applies    bool   `json:"applies"`
						Retries    int    `json:"retries"`
						OutageTime string `json:"outageTime"`
						GivenUp    string `json:"givenUp"`
						LastError  string `json:"lastError"`
						Halted     bool   `json:"halted"`
						Summary    string `json:"summary"`
					} `json:"committedState"`
				} `json:"partitions"`
			} `json:"functions"`
		}
		if err := json.Unmarshal([]byte(body), &st); err != nil || len(st.Functions) != 1 || len(st.Functions[0].Partitions) != 4 {
			t.Fatalf("%v: want one function with 4 partitions\n%s", err, body)
		}
		ps := st.Functions[0].Partitions
		// How many records each state covers, as "redeliver offsets" says.
		var covers struct {
			Functions []struct {
				Partitions []struct {
					CommittedState *struct {
						Records int  `json:"records"`
						Alone   bool `json:"alone"`
					} `json:"committedState"`
				} `json:"partitions"`
			} `json:"functions"`
		}
		if err := json.Unmarshal([]byte(body), &covers); err != nil {
			t.Fatal(err)
		}
		for i, want := range map[int]struct {
			records int
			alone   bool
		}{0: {1, true}, 2: {0, false}, 3: {5, false}} {
			c := covers.Functions[0].Partitions[i].CommittedState
			if c == nil || c.Records != want.records || c.Alone != want.alone {
				t.Errorf("orders/%d committed state covers %+v, want records %d, alone %v", i, c, want.records, want.alone)
			}
		}
		for i, p := range ps {
			if p.CommittedState == nil {
				t.Errorf("orders/%d: no committedState in /status.json", i)
				ps[i].CommittedState = &struct {
					Offset     int64  `json:"offset"`
					Applies    bool   `json:"applies"`
					Retries    int    `json:"retries"`
					OutageTime string `json:"outageTime"`
					GivenUp    string `json:"givenUp"`
					LastError  string `json:"lastError"`
					Halted     bool   `json:"halted"`
					Summary    string `json:"summary"`
				}{Offset: -2}
			}
		}

		// Stopped by the previous owner: delivered again with a fresh count.
		if p := ps[0]; p.State != host.StateFlowing || !strings.Contains(p.Note, "stopped") || !strings.Contains(p.Note, "fresh count") ||
			!strings.Contains(p.LastError, "timeout") {
			t.Errorf("orders/0 = %+v\nwant flowing, delivered again with a fresh count, saying the previous owner stopped it and why", p)
		}
		if c := ps[0].CommittedState; c.Offset != 3 || !c.Applies || !c.Halted || c.GivenUp != "retries spent" || c.LastError != "timeout" ||
			!strings.Contains(c.Summary, "stopped") {
			t.Errorf("orders/0 committed state = %+v, want the record at 3, halted, given up (retries spent) with its error", c)
		}
		// Given up again at once: the action stops the partition.
		if p := ps[1]; p.State != host.StateStopped || p.Checkpoint != 2 || !strings.Contains(p.LastError, "bad; record") {
			t.Errorf("orders/1 = %+v\nwant stopped at 2 with the record's error", p)
		}
		if c := ps[1].CommittedState; c.Offset != 2 || !c.Applies || !c.Halted || c.GivenUp != "error not retryable" || c.LastError != "bad; record" {
			t.Errorf("orders/1 committed state = %+v, want the record at 2, stopped, given up (error not retryable) with its error", c)
		}
		// Another record's state: ignored, the record at the checkpoint is
		// delivered as a first delivery.
		if p := ps[2]; p.State != host.StateFlowing || p.Retry != 0 || !strings.Contains(p.Note, "ignored") {
			t.Errorf("orders/2 = %+v\nwant flowing, the state of the record at 6 ignored", p)
		}
		if c := ps[2].CommittedState; c.Offset != 6 || c.Applies || !strings.Contains(c.Summary, "ignored") {
			t.Errorf("orders/2 committed state = %+v, want the record at 6, not applied", c)
		}
		// In backoff: retry 2 of the record at 1, a minute of outages.
		if p := ps[3]; p.State != host.StateBackoff || p.Retry != 2 {
			t.Errorf("orders/3 = %+v\nwant retry 2 in backoff", p)
		}
		if c := ps[3].CommittedState; c.Offset != 1 || !c.Applies || c.Retries != 2 || c.OutageTime != "1m0s" || c.Halted || c.GivenUp != "" {
			t.Errorf("orders/3 committed state = %+v, want retry 2 of the record at 1 after 1m0s of outages", c)
		}
		// Delivered: the fresh count and the ignored state, nothing else.
		got := map[int32]bool{}
		for len(delivered) > 0 {
			got[<-delivered] = true
		}
		if len(got) != 2 || !got[0] || !got[2] {
			t.Errorf("partitions %v delivered, want 0 and 2", got)
		}

		// The page says the same.
		_, page := get(t, h.Handler(), "/")
		for _, want := range []string{
			`id="p-orders-orders-1" class="stopped-row"`, "bad; record", "1 stopped",
			"committed state: record at offset 3: stopped", "fresh count",
			"committed state: retry state of the record at offset 6",
			"committed state: record at offset 1: retry 2 of 3", "1m0s waited out in outages",
		} {
			if !strings.Contains(page, want) {
				t.Errorf("the page lacks %q", want)
			}
		}
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Run: %v", err)
		}
	})
}
