package host_test

import (
	"context"
	"errors"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/redeliver-go/redeliver/host"
	"github.com/redeliver-go/redeliver/stream"
	"github.com/redeliver-go/redeliver/stream/streamtest"
)

// The status page's actions wait for a stopped partition's worker at most
// 10 seconds, and no longer than their request: a Skip whose checkpoint
// cannot be written (the broker away) answers 504 after 10s, saying that
// the partition is no longer stopped and its checkpoint is being written,
// and the status shows it given up, skipped, until the checkpoint moves; a
// request whose client went away ends its wait at once, the partition
// still stopped. Host.Skip and Host.Resume take the caller's context the
// same way.
func TestActionsWaitNoLongerThanTheirRequest(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h, part := stopsAtOne(t, 3)
		if p, ok := partition(h.Status(), "payments"); !ok || p.State != host.StateStopped || p.FirstOffset != 1 {
			t.Fatalf("payments/0 = %+v, want stopped at 1", p)
		}
		// skip posts the page's Skip over loopback, as a script does.
		skip := func(ctx context.Context) *httptest.ResponseRecorder {
			form := url.Values{"function": {"payments"}, "topic": {"payments"}, "partition": {"0"}}
			local := context.WithValue(ctx, http.LocalAddrContextKey, &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1), Port: 8080})
			req := httptest.NewRequestWithContext(local, "POST", "http://127.0.0.1:8080/actions/skip", strings.NewReader(form.Encode()))
			req.RemoteAddr = "127.0.0.1:40000"
			req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
			req.Header.Set("Accept", "application/json")
			rec := httptest.NewRecorder()
			h.Handler().ServeHTTP(rec, req)
			return rec
		}

		// A client that went away: the wait ends at once, nothing done.
		gone, stop := context.WithCancel(t.Context())
		stop()
		if rec := skip(gone); rec.Code != http.StatusGatewayTimeout || !strings.Contains(rec.Body.String(), "still stopped at offset 1") {
			t.Errorf("skip from a client gone: %d %s; want 504, the partition still stopped", rec.Code, rec.Body)
		}
		for _, op := range []func(context.Context, string, string, int32) error{h.Resume, h.Skip} {
			if err := op(gone, "payments", "payments", 0); !errors.Is(err, context.Canceled) || !strings.Contains(err.Error(), "still stopped at offset 1") {
				t.Errorf("with a cancelled context: %v; want context.Canceled, the partition still stopped", err)
			}
		}
		if p, _ := partition(h.Status(), "payments"); p.State != host.StateStopped {
			t.Fatalf("payments/0 = %+v after the cancelled actions, want still stopped", p)
		}

		// The broker away for minutes: the skip's checkpoint cannot be
		// written, and the action answers after 10s.
		faults := make([]error, 100)
		for i := range faults {
			faults[i] = errors.New("coordinator not available")
		}
		part.FailCommits(faults...)
		began := time.Now()
		rec := skip(t.Context())
		if took := time.Since(began); took != 10*time.Second {
			t.Errorf("the skip's request took %v, want 10s", took)
		}
		if rec.Code != http.StatusGatewayTimeout || !strings.Contains(rec.Body.String(), "no longer stopped") ||
			!strings.Contains(rec.Body.String(), "checkpoint past offset 1 is being written") {
			t.Errorf("skip with the broker away: %d %s; want 504, the partition no longer stopped, its checkpoint being written", rec.Code, rec.Body)
		}
		if p, _ := partition(h.Status(), "payments"); p.State != host.StateExhausted || !strings.Contains(p.Note, "skipped by an operator") || p.Checkpoint != 1 {
			t.Errorf("payments/0 = %+v while its skip's checkpoint is written, want given up (exhausted), skipped by an operator, checkpoint 1", p)
		}

		// The broker back: the checkpoint moves past the record, and on.
		wait, wcancel := context.WithTimeout(t.Context(), time.Hour)
		defer wcancel()
		if err := part.WaitCommitted(wait, 3); err != nil {
			t.Fatal(err)
		}
		synctest.Wait()
		if p, _ := partition(h.Status(), "payments"); p.State != host.StateFlowing || p.Checkpoint != 3 {
			t.Errorf("payments/0 = %+v, want flowing at 3", p)
		}
	})
}

// A skip of a partition's last record leaves it flowing, its checkpoint at
// the end: no later batch is there to show that the checkpoint moved.
func TestSkipOfTheLastRecordFlows(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h, _ := stopsAtOne(t, 2)
		if err := h.Skip(t.Context(), "payments", "payments", 0); err != nil {
			t.Fatal(err)
		}
		synctest.Wait()
		if p, _ := partition(h.Status(), "payments"); p.State != host.StateFlowing || p.Checkpoint != 2 || !strings.Contains(p.Note, "skipped by an operator") {
			t.Errorf("payments/0 = %+v after the skip of its last record, want flowing at 2, skipped by an operator", p)
		}
	})
}

// stopsAtOne runs a host, in the test's bubble and until its end, whose
// function "payments" reads payments/0, of n records, and stops the
// partition at offset 1, whose batch always fails (no retry); Run must
// return nil at the end. It returns once the host is idle.
func stopsAtOne(t *testing.T, n int) (*host.Host, *streamtest.Partition) {
	t.Helper()
	h, err := host.New(parse(t, `{"checkpointRetryPolicy": {"retryCount": 0, "onExhausted": "stop"}}`))
	if err != nil {
		t.Fatal(err)
	}
	part := streamtest.NewPartition("payments", 0, 1)
	part.AppendN(time.Now(), n)
	fail := stream.HandlerFunc(func(_ context.Context, b *stream.Batch) error {
		if b.FirstOffset() == 1 {
			return errBoom
		}
		return nil
	})
	if err := h.Register("payments", fail, memSource("payments", part)); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() { done <- h.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Run: %v", err)
		}
	})
	synctest.Wait()
	return h, part
}
