package host_test

import (
	"context"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/redeliver-go/redeliver/host"
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
