package tests

import (
	"context"
	"errors"
	"reflect"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redeliver-go/redeliver/host"
	"github.com/redeliver-go/redeliver/stream"
)

var errBoom = errors.New("boom")

// TestTwoFunctionsOwnPoliciesAndGroups runs two functions from one
// host.json, one per adapter, each with its own policy and group, and
// checks that each batch was delivered as its own policy says and
// committed in its own group only.
func TestTwoFunctionsOwnPoliciesAndGroups(t *testing.T) {
	addrs := newCluster(t, 1, "orders", "payments")
	produce(t, addrs, "orders", 0, 5)
	produce(t, addrs, "payments", 0, 5)
	cfg := parse(t, `{
  "checkpointRetryPolicy": {
    "retryCount": 1, "sleepDuration": "10ms",
    "functions": {
      "orders": {"retryCount": 3, "sleepDuration": "20ms"},
      "payments": {"retryCount": 0},
    },
  },
  "triggers": {
    "orders": {"type": "kafka", "topic": "orders", "consumerGroup": "orders-app", "maxBatchSize": 1},
    "payments": {"type": "kafka", "adapter": "kafkago", "topic": "payments", "consumerGroup": "payments-app", "maxBatchSize": 1},
  },
}`)
	type seen struct {
		mu         sync.Mutex
		deliveries map[int64]int // by offset
		maxRetries map[int]bool
	}
	handler := func(s *seen) stream.Handler {
		s.deliveries, s.maxRetries = map[int64]int{}, map[int]bool{}
		return stream.HandlerFunc(func(_ context.Context, b *stream.Batch) error {
			s.mu.Lock()
			defer s.mu.Unlock()
			s.deliveries[b.FirstOffset()]++
			s.maxRetries[b.Attempt.MaxRetries] = true
			if b.FirstOffset() == 2 {
				return errBoom
			}
			return nil
		})
	}
	var orders, payments seen
	var mwCalls atomic.Int64
	counting := func(next stream.Handler) stream.Handler {
		return stream.HandlerFunc(func(ctx context.Context, b *stream.Batch) error {
			mwCalls.Add(1)
			return next.Handle(ctx, b)
		})
	}
	h, err := host.New(cfg, onKafka(t, addrs, host.WithMiddleware(counting))...)
	if err != nil {
		t.Fatal(err)
	}
	if err := h.Register("orders", handler(&orders)); err != nil {
		t.Fatal(err)
	}
	if err := h.Register("payments", handler(&payments)); err != nil {
		t.Fatal(err)
	}
	start(t, h)
	waitCommitted(t, addrs, "orders-app", "orders", 0, 5)
	waitCommitted(t, addrs, "payments-app", "payments", 0, 5)

	check := func(name string, s *seen, failing, maxRetries int) {
		t.Helper()
		s.mu.Lock()
		defer s.mu.Unlock()
		want := map[int64]int{0: 1, 1: 1, 2: failing, 3: 1, 4: 1}
		if !reflect.DeepEqual(s.deliveries, want) {
			t.Errorf("%s: deliveries by offset %v, want %v", name, s.deliveries, want)
		}
		if !reflect.DeepEqual(s.maxRetries, map[int]bool{maxRetries: true}) {
			t.Errorf("%s: handler saw MaxRetries %v, want only %d", name, s.maxRetries, maxRetries)
		}
	}
	check("orders", &orders, 4, 3)     // retryCount 3: 4 deliveries
	check("payments", &payments, 1, 0) // retryCount 0: 1 delivery
	if n := mwCalls.Load(); n != 4+4+5 {
		t.Errorf("host-wide middleware called %d times, want 13 (8 for orders, 5 for payments)", n)
	}
	if _, ok := committed(t, addrs, "orders-app").Lookup("payments", 0); ok {
		t.Error("orders-app committed an offset of payments")
	}
	if _, ok := committed(t, addrs, "payments-app").Lookup("orders", 0); ok {
		t.Error("payments-app committed an offset of orders")
	}
	waitFor(t, "readiness", func() bool { ok, _ := h.Ready(); return ok })
}

// TestShutdownMidBackoff stops the host while a batch waits out a long
// backoff: Run returns promptly, and the checkpoint stays at the failed
// batch, with its retry state, never past it.
func TestShutdownMidBackoff(t *testing.T) {
	for _, adapter := range []string{"franz", "kafkago"} {
		t.Run(adapter, func(t *testing.T) {
			addrs := newCluster(t, 1, "orders")
			produce(t, addrs, "orders", 0, 10)
			cfg := parse(t, `{"checkpointRetryPolicy": {"retryCount": 5, "sleepDuration": "01:00:00"}}`)
			h, err := host.New(cfg, onKafka(t, addrs, host.WithDrain(5*time.Second))...)
			if err != nil {
				t.Fatal(err)
			}
			var failed atomic.Bool
			var after atomic.Int64 // deliveries of records past the failing one
			err = h.Register("orders", stream.HandlerFunc(func(_ context.Context, b *stream.Batch) error {
				if b.FirstOffset() > 3 {
					after.Add(1)
				}
				if b.FirstOffset() == 3 {
					failed.Store(true)
					return errBoom
				}
				return nil
			}), host.Kafka{Adapter: adapter, Topic: "orders", Group: "g", MaxBatch: 1})
			if err != nil {
				t.Fatal(err)
			}
			r := start(t, h)
			waitFor(t, "a partition in backoff", func() bool {
				st := h.Status()
				return len(st.Functions[0].Partitions) == 1 && st.Functions[0].Partitions[0].State == host.StateBackoff
			})
			waitCommitted(t, addrs, "g", "orders", 0, 3) // the retry state is committed with the checkpoint at the batch
			err, took := r.Stop(t)
			if err != nil {
				t.Errorf("Run = %v, want nil (a clean shutdown)", err)
			}
			if took > time.Second {
				t.Errorf("Run took %v to return mid-backoff, want under 1s", took)
			}
			o, ok := committed(t, addrs, "g").Lookup("orders", 0)
			if !ok || o.At != 3 || !strings.HasPrefix(o.Metadata, "rd1;o=3;r=1") {
				t.Errorf("committed %+v after shutdown, want offset 3 with the retry state rd1;o=3;r=1...", o)
			}
			if n := after.Load(); n != 0 {
				t.Errorf("%d deliveries past the failing batch", n)
			}
			if ok, why := h.Ready(); ok {
				t.Errorf("ready after Run returned (%s)", why)
			}
		})
	}
}

// TestBadBindingFailsAtStart checks that Run refuses wrong bindings before
// it starts anything, with an error that says where and what.
func TestBadBindingFailsAtStart(t *testing.T) {
	addrs := newCluster(t, 1, "orders")
	ok := stream.HandlerFunc(func(context.Context, *stream.Batch) error { return nil })
	for _, tc := range []struct {
		name string
		doc  string
		opts []host.FunctionOption
		want []string
	}{
		{"trigger for an unknown function", `{
  "triggers": {
    "ordres": {"type": "kafka", "topic": "orders", "consumerGroup": "g"}
  }
}`, nil, []string{`host: hostconfig: host.json:3:5: triggers.ordres: a trigger for function "ordres", which the host does not run: did you mean orders?`}},
		{"policy for an unknown function", `{"checkpointRetryPolicy": {"functions": {"audit": {"retryCount": 1, "sleepDuration": "1s"}}}}`,
			[]host.FunctionOption{host.Kafka{Topic: "orders", Group: "g"}},
			[]string{`host.json:1:42: checkpointRetryPolicy.functions.audit: a policy for function "audit", which the host does not run: its functions are orders`}},
		{"no trigger", `{}`, nil,
			[]string{`host: function orders has no trigger: give host.Kafka{...} to Register, or add "triggers": {"orders": {"type": "kafka", "topic": ..., "consumerGroup": ...}} to host.json`}},
		{"unknown adapter", `{}`, []host.FunctionOption{host.Kafka{Adapter: "sarama", Topic: "orders", Group: "g"}},
			[]string{`host: function orders (trigger from code): adapter "sarama" was not given to the host (it has franz, kafkago): give host.WithAdapter(a) with a from saramahost.New() (module github.com/redeliver-go/redeliver/adapters/sarama/saramahost, on IBM/sarama)`}},
		{"topic Kafka refuses", `{}`, []host.FunctionOption{host.Kafka{Topic: "orders ", Group: "g"}},
			[]string{`host: function orders (trigger from code): topic "orders ": a Kafka topic name holds only ASCII letters, digits, '.', '_' and '-', not spaces around it`}},
		{"no group", `{}`, []host.FunctionOption{host.Kafka{Topic: "orders"}},
			[]string{`host: function orders (trigger from code): no consumer group`}},
		{"negative max batch", `{"checkpointRetryPolicy": {"retryCount": 1, "strategy": {"name": "fixed", "delay": "1s"}}}`,
			[]host.FunctionOption{host.Kafka{Topic: "orders", Group: "g", MaxBatch: -1}},
			[]string{`host: function orders (trigger from code): max batch -1, want 0 (the adapter's default) or more`}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h, err := host.New(parse(t, tc.doc), onKafka(t, addrs)...)
			if err != nil {
				t.Fatal(err)
			}
			var calls atomic.Int64
			if err := h.Register("orders", stream.HandlerFunc(func(ctx context.Context, b *stream.Batch) error {
				calls.Add(1)
				return ok(ctx, b)
			}), tc.opts...); err != nil {
				t.Fatal(err)
			}
			ctx, cancel := context.WithTimeout(context.Background(), wait)
			defer cancel()
			err = h.Run(ctx)
			if err == nil || ctx.Err() != nil {
				t.Fatalf("Run = %v, want an error at start", err)
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("Run =\n%v\nwant it to contain\n%s", err, w)
				}
			}
			if calls.Load() != 0 {
				t.Error("the handler ran")
			}
		})
	}
}

func TestRegisterErrors(t *testing.T) {
	h, err := host.New(nil, adapters(t)...)
	if err != nil {
		t.Fatal(err)
	}
	ok := stream.HandlerFunc(func(context.Context, *stream.Batch) error { return nil })
	if err := h.Register("orders", ok, host.Kafka{Topic: "orders", Group: "g"}); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name, fn string
		h        stream.Handler
		want     string
	}{
		{"duplicate", "Orders", ok, `host: function "Orders" registered twice (names ignore case: "orders")`},
		{"empty name", " ", ok, "host: empty function name"},
		{"nil handler", "x", nil, `host: function "x": nil handler`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if err := h.Register(tc.fn, tc.h); err == nil || err.Error() != tc.want {
				t.Errorf("Register = %v, want %s", err, tc.want)
			}
		})
	}
	if _, err := host.New(nil, host.WithDrain(0)); err == nil {
		t.Error("New accepted a drain time of 0")
	}
	if err := h.Run(context.Background()); err == nil || !strings.Contains(err.Error(), "no brokers") {
		t.Errorf("Run without brokers = %v, want an error naming the brokers", err)
	}
}
