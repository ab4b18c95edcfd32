package tests

import (
	"context"
	"errors"
	"log/slog"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/redeliver-go/redeliver/adapters/franz/franzhost"
	"github.com/redeliver-go/redeliver/host"
	"github.com/redeliver-go/redeliver/redrive"
	"github.com/redeliver-go/redeliver/redrive/redrivetest"
	"github.com/redeliver-go/redeliver/stream"
)

// TestPoisonRecordForADay runs a poison record (its handler always fails)
// under the host's default re-drive wiring: onExhausted park, a redrive
// section with at most 2 re-drives and no retry topic, so each re-drive
// goes back to the record's own topic and the same function, which gives
// it up and parks it again. A simulated day on a fake clock (synctest,
// kfake on an in-memory network) ends with one entry, timed out after 2
// re-drives (2 publications), reported once, its 2 failures counted as
// re-parks; the status shows one entry for one record.
func TestPoisonRecordForADay(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var vn kfake.VirtualNetwork
		c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.Ports(19733), kfake.ListenFn(vn.Listen), kfake.SeedTopics(1, "orders"))
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		addrs := c.ListenAddrs()
		dial := kgo.Dialer(vn.DialContext)
		// A day of the consumer's idle long polls, heartbeats, metadata
		// refreshes and metrics pushes is what the test spends its time
		// on: fewer of them make the day cheaper, and a record produced
		// still ends a long poll at once.
		franz, err := franzhost.New(franzhost.WithKgoOptions(dial, kgo.FetchMaxWait(5*time.Second),
			kgo.HeartbeatInterval(10*time.Second), kgo.MetadataMaxAge(time.Hour), kgo.DisableClientMetrics()))
		if err != nil {
			t.Fatal(err)
		}
		cfg := parse(t, `{
  "checkpointRetryPolicy": {"retryCount": 2, "sleepDuration": "00:00:01", "onExhausted": "park"},
  "redrive": {"maxRedrives": 2},
  "triggers": {"orders": {"type": "kafka", "topic": "orders", "consumerGroup": "orders-app"}},
}`)
		var (
			mu       sync.Mutex
			timedOut []redrive.EntryEvent
			reparked int
			offsets  = map[int64]int{} // deliveries per offset
		)
		store := redrivetest.NewMemStore()
		h, err := host.New(cfg, host.WithAdapter(franz), host.WithBrokers(addrs...), host.WithLogger(slog.New(slog.DiscardHandler)),
			host.WithRedrive(store, redrive.WithHooks(redrive.Hooks{
				TimedOut: func(e redrive.EntryEvent) { mu.Lock(); timedOut = append(timedOut, e); mu.Unlock() },
				Reparked: func(redrive.EntryEvent) { mu.Lock(); reparked++; mu.Unlock() },
			})))
		if err != nil {
			t.Fatal(err)
		}
		if err := h.Register("orders", stream.PerRecord(func(_ context.Context, r *stream.Record) error {
			mu.Lock()
			offsets[r.Offset]++
			mu.Unlock()
			return errors.New("poison: cannot decode")
		})); err != nil {
			t.Fatal(err)
		}
		cl, err := kgo.NewClient(kgo.SeedBrokers(addrs...), dial)
		if err != nil {
			t.Fatal(err)
		}
		defer cl.Close()
		if err := cl.ProduceSync(t.Context(), &kgo.Record{Topic: "orders", Key: []byte("k"), Value: []byte("poison")}).FirstErr(); err != nil {
			t.Fatal(err)
		}

		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan error, 1)
		go func() { done <- h.Run(ctx) }()
		defer func() {
			cancel()
			if err := <-done; err != nil {
				t.Errorf("Run after the day: %v, want nil", err)
			}
		}()
		for hour := 1; hour <= 24; hour++ {
			time.Sleep(time.Hour)
			all, err := store.List(t.Context(), redrive.Filter{})
			if err != nil {
				t.Fatal(err)
			}
			if len(all) != 1 {
				t.Fatalf("after %dh: %d entries for one poison record, want 1", hour, len(all))
			}
		}
		synctest.Wait()

		all, _ := store.List(t.Context(), redrive.Filter{})
		e := all[0]
		if e.Key != "orders/0/0" || e.Status != redrive.TimedOut || e.Redrives != 2 || e.Reparks != 2 {
			t.Errorf("the entry after a day: %s %s, %d re-drives, %d re-parks; want orders/0/0 timed out after 2 re-drives, 2 re-parks",
				e.Key, e.State(), e.Redrives, e.Reparks)
		}
		end, err := kadm.NewClient(cl).ListEndOffsets(t.Context(), "orders")
		if err != nil {
			t.Fatal(err)
		}
		if o, _ := end.Lookup("orders", 0); o.Offset != 3 {
			t.Errorf("the topic holds %d records: want the poison record and its 2 re-drives", o.Offset)
		}
		mu.Lock()
		if len(timedOut) != 1 || reparked != 2 {
			t.Errorf("%d timeout reports and %d re-parks, want 1 and 2", len(timedOut), reparked)
		}
		if len(offsets) != 3 || offsets[0] != 3 || offsets[1] != 3 || offsets[2] != 3 {
			t.Errorf("deliveries by offset %v: want 3 records, each delivered 3 times (2 retries)", offsets)
		}
		mu.Unlock()
		st := h.Status()
		if len(st.Functions) != 1 || st.Functions[0].Parked == nil {
			t.Fatalf("status: %+v", st.Functions)
		}
		if p := st.Functions[0].Parked; p.TimedOut != 1 || p.Total() != 1 || p.Records != 1 || p.Reparks != 2 {
			t.Errorf("status of the re-drive store: %+v; want one entry, timed out, for one record, 2 re-parks", p)
		}
	})
}
