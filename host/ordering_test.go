package host_test

import (
	"context"
	"errors"
	"slices"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/redeliver-go/redeliver/host"
	"github.com/redeliver-go/redeliver/redrive"
	"github.com/redeliver-go/redeliver/redrive/redrivetest"
	"github.com/redeliver-go/redeliver/stream"
	"github.com/redeliver-go/redeliver/stream/streamtest"
)

// TestTriggerOrderingKey: a host.json trigger's "ordering": "key" reaches
// the adapter's binding and makes the function's processor deliver
// records of one key one at a time, one record per call, other keys at
// once; a code trigger with a share group refuses key ordering.
func TestTriggerOrderingKey(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		cfg := parse(t, `{"triggers": {"orders": {"type": "kafka", "topic": "orders", "consumerGroup": "orders-app", "maxBatchSize": 5, "ordering": "key"}}}`)
		p := streamtest.NewPartition("orders", 0, 5)
		p.AppendKeyed(time.Now(), "a", "b", "a", "c", "b", "a")
		franz := &memAdapter{name: "franz", parts: map[string][]*streamtest.Partition{"orders": {p}}}
		h, err := host.New(cfg, host.WithAdapter(franz), host.WithBrokers("b1:9092"))
		if err != nil {
			t.Fatal(err)
		}
		var mu sync.Mutex
		sizes := map[int]int{}
		if err := h.Register("orders", stream.HandlerFunc(func(_ context.Context, b *stream.Batch) error {
			mu.Lock()
			sizes[len(b.Records)]++
			mu.Unlock()
			return nil
		})); err != nil {
			t.Fatal(err)
		}
		err = runUntil(t, h, func() {
			if err := p.WaitCommitted(t.Context(), 6); err != nil {
				t.Fatal(err)
			}
		})
		if err != nil {
			t.Fatal(err)
		}
		if b := franz.built(); len(b) != 1 || b[0].Trigger.Ordering != stream.ByKey {
			t.Fatalf("bindings %+v, want one in key ordering", b)
		}
		if len(sizes) != 1 || sizes[1] != 6 {
			t.Fatalf("batch sizes %v, want 6 calls of one record", sizes)
		}
	})

	h, err := host.New(parse(t, `{}`), host.WithAdapter(&memAdapter{name: "franz"}), host.WithBrokers("b1:9092"))
	if err != nil {
		t.Fatal(err)
	}
	if err := h.Register("emails", okHandler, host.Kafka{Topic: "emails", Group: "emails-app", Share: true, Ordering: stream.ByKey}); err != nil {
		t.Fatal(err)
	}
	err = h.Run(t.Context())
	if err == nil || !strings.Contains(err.Error(), "keeps no order") {
		t.Fatalf("Run = %v, want an error that says a share group keeps no order", err)
	}
}

// TestTriggerOrderingKeyPark: with "ordering": "key" and onExhausted
// park, the host wires redrive.ParkByKey: a record of a key that is
// parked is parked behind it, never handed to the function, while the
// other keys flow.
func TestTriggerOrderingKeyPark(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		cfg := parse(t, `{"checkpointRetryPolicy": {"retryCount": 0, "onExhausted": "park"},
			"triggers": {"orders": {"type": "kafka", "topic": "orders", "consumerGroup": "orders-app", "ordering": "key"}}}`)
		p := streamtest.NewPartition("orders", 0, 5)
		p.AppendKeyed(time.Now(), "a", "K", "a", "K", "b")
		franz := &memAdapter{name: "franz", parts: map[string][]*streamtest.Partition{"orders": {p}}, pub: &redrivetest.Publisher{}}
		store := redrivetest.NewMemStore()
		h, err := host.New(cfg, host.WithAdapter(franz), host.WithBrokers("b1:9092"), host.WithRedrive(store))
		if err != nil {
			t.Fatal(err)
		}
		var mu sync.Mutex
		var seen []int64
		if err := h.Register("orders", stream.HandlerFunc(func(_ context.Context, b *stream.Batch) error {
			r := b.Records[0]
			mu.Lock()
			seen = append(seen, r.Offset)
			mu.Unlock()
			if string(r.Key) == "K" {
				return errors.New("poison")
			}
			return nil
		})); err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithCancel(t.Context())
		done := make(chan error, 1)
		go func() { done <- h.Run(ctx) }()
		waited := make(chan error, 1)
		go func() { waited <- p.WaitCommitted(ctx, 5) }()
		select {
		case err := <-done:
			t.Fatalf("Run returned before the records were committed: %v", err)
		case err := <-waited:
			if err != nil {
				t.Fatal(err)
			}
		}
		cancel()
		if err := <-done; err != nil {
			t.Fatal(err)
		}
		mu.Lock()
		defer mu.Unlock()
		slices.Sort(seen)
		if !slices.Equal(seen, []int64{0, 1, 2, 4}) {
			t.Fatalf("the function saw offsets %v: want 0, 1, 2, 4 (K's 3 parked behind 1)", seen)
		}
		for _, key := range []string{"orders/0/1", "orders/0/3"} {
			e, err := store.Get(t.Context(), key)
			if err != nil || e.OrderKey != redrive.OrderKey("orders", 0, "K") {
				t.Fatalf("entry %s: %+v, %v: want it locked by key K", key, e, err)
			}
		}
	})
}
