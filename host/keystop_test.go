package host_test

import (
	"context"
	"encoding/json"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/redeliver-go/redeliver/host"
	"github.com/redeliver-go/redeliver/stream"
	"github.com/redeliver-go/redeliver/stream/streamtest"
)

// TestKeyStoppedShownAndReleased: in key ordering, StopPartition stops a
// key, not the partition. The status JSON and page show each key stopped
// (its record's offset and its key), the committed window as a next owner
// reads it (the records given up, not "another tool's metadata"), and the
// page's Resume and Skip of a record (the actions with its offset) let
// each key go on: the resumed record is delivered again, the skipped one
// is not, and the keys' later records follow, in order.
func TestKeyStoppedShownAndReleased(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		cfg := parse(t, `{"checkpointRetryPolicy": {"retryCount": 0, "onExhausted": "stop"},
			"triggers": {"orders": {"type": "kafka", "topic": "orders", "consumerGroup": "orders-app", "ordering": "key"}}}`)
		p := streamtest.NewPartition("orders", 0, 5)
		p.AppendKeyed(time.Now(), "a", "b", "a", "c", "b", "d")
		franz := &memAdapter{name: "franz", parts: map[string][]*streamtest.Partition{"orders": {p}}}
		h, err := host.New(cfg, host.WithAdapter(franz), host.WithBrokers("b1:9092"))
		if err != nil {
			t.Fatal(err)
		}
		var (
			mu      sync.Mutex
			handled []int64
			healed  bool // record 0 succeeds once resumed
		)
		if err := h.Register("orders", stream.HandlerFunc(func(_ context.Context, b *stream.Batch) error {
			mu.Lock()
			defer mu.Unlock()
			o := b.FirstOffset()
			if o == 1 || o == 0 && !healed {
				return errBoom
			}
			if o == 3 || o == 5 {
				// The other keys finish after the stops.
				mu.Unlock()
				time.Sleep(time.Second)
				mu.Lock()
			}
			handled = append(handled, o)
			return nil
		})); err != nil {
			t.Fatal(err)
		}
		local := context.WithValue(t.Context(), http.LocalAddrContextKey, &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1), Port: 8080})
		get := func(path string) string {
			req := httptest.NewRequestWithContext(local, "GET", "http://127.0.0.1:8080"+path, nil)
			req.RemoteAddr = "127.0.0.1:40000"
			rec := httptest.NewRecorder()
			h.Handler().ServeHTTP(rec, req)
			if rec.Code != http.StatusOK {
				t.Fatalf("GET %s: %d %s", path, rec.Code, rec.Body)
			}
			return rec.Body.String()
		}
		post := func(verb string, offset int64) {
			form := url.Values{"function": {"orders"}, "topic": {"orders"}, "partition": {"0"}, "offset": {strconv.FormatInt(offset, 10)}}
			req := httptest.NewRequestWithContext(local, "POST", "http://127.0.0.1:8080/actions/"+verb, strings.NewReader(form.Encode()))
			req.RemoteAddr = "127.0.0.1:40000"
			req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
			req.Header.Set("Accept", "application/json")
			rec := httptest.NewRecorder()
			h.Handler().ServeHTTP(rec, req)
			if rec.Code != http.StatusOK {
				t.Fatalf("%s of offset %d: %d %s", verb, offset, rec.Code, rec.Body)
			}
		}
		err = runUntil(t, h, func() {
			time.Sleep(2 * time.Second) // the other keys' records finish
			synctest.Wait()
			var st host.Status
			if err := json.Unmarshal([]byte(get("/status.json")), &st); err != nil {
				t.Fatal(err)
			}
			ps, ok := partition(st, "orders")
			if !ok {
				t.Fatal("no status of orders/0")
			}
			if !slices.Equal(ps.StoppedRecords, []int64{0, 1}) || !slices.Equal(ps.StoppedKeys, []string{"a", "b"}) {
				t.Errorf("stopped records %v, keys %q; want [0 1], [a b]", ps.StoppedRecords, ps.StoppedKeys)
			}
			// The keys' other records were delivered after the stops (3
			// and 5, the checkpoint written past them): the row still
			// shows the partition stopped at its first stopped record.
			if ps.State != host.StateStopped || ps.FirstOffset != 0 || ps.LastOffset != 0 || !strings.Contains(ps.LastError, "boom") {
				t.Errorf("state %q at %d-%d (%q), want stopped at record 0 with its error", ps.State, ps.FirstOffset, ps.LastOffset, ps.LastError)
			}
			c := ps.CommittedState
			switch {
			case c == nil || c.Error != "" || c.Window == nil:
				t.Errorf("committed state %+v, want the window read", c)
			case len(c.Window.Records) != 2 || c.Window.Records[0].Offset != 0 || c.Window.Records[0].GivenUp == "" || c.Window.Records[1].Offset != 1:
				t.Errorf("committed window %+v, want records 0 and 1 given up", c.Window)
			case !strings.Contains(c.Summary, "2 given up"):
				t.Errorf("committed state's summary %q, want it to count the records given up", c.Summary)
			}
			mu.Lock()
			if !slices.Equal(slices.Sorted(slices.Values(handled)), []int64{3, 5}) {
				t.Errorf("handled %v while keys a and b are stopped, want [3 5] (the other keys)", handled)
			}
			mu.Unlock()
			page := get("/")
			for _, want := range []string{`offset 0, key &#34;a&#34;`, `offset 1, key &#34;b&#34;`, `name="offset" value="1"`, "2 keys stopped", "the partition's other keys go on"} {
				if !strings.Contains(page, want) {
					t.Errorf("the status page does not show %s", want)
				}
			}

			mu.Lock()
			healed = true
			mu.Unlock()
			post("resume", 0)
			post("skip", 1)
			if err := p.WaitCommitted(t.Context(), 6); err != nil {
				t.Fatal(err)
			}
			synctest.Wait()
			mu.Lock()
			if i, j := slices.Index(handled, 0), slices.Index(handled, 2); i < 0 || j < i || !slices.Contains(handled, 4) || slices.Contains(handled, 1) {
				t.Errorf("handled %v after resume of 0 and skip of 1, want 0 then 2 (key a), 4 (key b), never 1", handled)
			}
			mu.Unlock()
			if ps, _ := partition(h.Status(), "orders"); ps.State != host.StateFlowing || len(ps.StoppedRecords) != 0 || len(ps.StoppedKeys) != 0 {
				t.Errorf("orders/0 = %+v after the resume and the skip, want flowing, nothing stopped", ps)
			}
		})
		if err != nil {
			t.Fatal(err)
		}
	})
}

// TestKeyBackoffShownBesideOtherKeys: in key ordering, a key's record in
// backoff is what its partition's row shows while the partition's other
// keys go on (their deliveries do not move the row's offsets), and the row
// is flowing once that record's retry went through.
func TestKeyBackoffShownBesideOtherKeys(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		cfg := parse(t, `{"checkpointRetryPolicy": {"retryCount": 3, "sleepDuration": "00:00:10"},
			"triggers": {"orders": {"type": "kafka", "topic": "orders", "consumerGroup": "orders-app", "ordering": "key"}}}`)
		p := streamtest.NewPartition("orders", 0, 5)
		p.AppendKeyed(time.Now(), "a", "b", "c")
		franz := &memAdapter{name: "franz", parts: map[string][]*streamtest.Partition{"orders": {p}}}
		h, err := host.New(cfg, host.WithAdapter(franz), host.WithBrokers("b1:9092"))
		if err != nil {
			t.Fatal(err)
		}
		var failed atomic.Bool
		if err := h.Register("orders", stream.HandlerFunc(func(_ context.Context, b *stream.Batch) error {
			switch b.FirstOffset() {
			case 0:
				if !failed.Swap(true) {
					return errBoom
				}
			case 1, 2:
				time.Sleep(time.Second) // the other keys finish after record 0 failed
			}
			return nil
		})); err != nil {
			t.Fatal(err)
		}
		err = runUntil(t, h, func() {
			time.Sleep(2 * time.Second)
			synctest.Wait()
			ps, _ := partition(h.Status(), "orders")
			if ps.State != host.StateBackoff || ps.FirstOffset != 0 || ps.LastOffset != 0 || ps.Retry != 1 || !strings.Contains(ps.LastError, "boom") {
				t.Errorf("orders/0 = %+v while record 0 waits for its retry, want backoff at record 0, retry 1", ps)
			}
			time.Sleep(10 * time.Second)
			if err := p.WaitCommitted(t.Context(), 3); err != nil {
				t.Fatal(err)
			}
			synctest.Wait()
			if ps, _ := partition(h.Status(), "orders"); ps.State != host.StateFlowing || ps.LastError != "" || ps.Retry != 0 {
				t.Errorf("orders/0 = %+v after record 0's retry went through, want flowing", ps)
			}
		})
		if err != nil {
			t.Fatal(err)
		}
	})
}
