package host_test

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/redeliver-go/redeliver/host"
	"github.com/redeliver-go/redeliver/redrive/redrivetest"
	"github.com/redeliver-go/redeliver/stream"
	"github.com/redeliver-go/redeliver/stream/streamtest"
)

// memAdapter is a host.Adapter over in-memory partitions, as the adapter
// modules are over Kafka clients: a trigger's consumer runs the
// partitions of its topic.
type memAdapter struct {
	name   string
	parts  map[string][]*streamtest.Partition // by topic
	ready  chan struct{}                      // consumers call OnReady once it is closed; nil: at once
	fail   error                              // what Consumer returns, when set
	none   bool                               // Consumer returns no consumer and no error
	pub    stream.Publisher                   // what Publisher returns
	pubErr error

	mu         sync.Mutex
	bindings   []host.Binding
	closed     []string // the functions whose consumer was closed
	pubBrokers [][]string
	pubClosed  int
}

func (a *memAdapter) Name() string { return a.name }

func (a *memAdapter) Consumer(proc *stream.Processor, b host.Binding) (host.Consumer, error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.bindings = append(a.bindings, b)
	switch {
	case a.fail != nil:
		return nil, a.fail
	case a.none:
		return nil, nil
	}
	return &memConsumer{a: a, proc: proc, b: b}, nil
}

func (a *memAdapter) Publisher(brokers []string) (stream.Publisher, func() error, error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.pubBrokers = append(a.pubBrokers, brokers)
	if a.pubErr != nil {
		return nil, nil, a.pubErr
	}
	return a.pub, func() error {
		a.mu.Lock()
		defer a.mu.Unlock()
		a.pubClosed++
		return nil
	}, nil
}

func (a *memAdapter) built() []host.Binding {
	a.mu.Lock()
	defer a.mu.Unlock()
	return slices.Clone(a.bindings)
}

type memConsumer struct {
	a    *memAdapter
	proc *stream.Processor
	b    host.Binding
}

func (c *memConsumer) Run(ctx context.Context) error {
	if c.a.ready != nil {
		select {
		case <-c.a.ready:
		case <-ctx.Done():
			return nil
		}
	}
	c.b.OnReady()
	c.b.Logger.Info("consumer running", "topic", c.b.Trigger.Topic)
	parts := c.a.parts[c.b.Trigger.Topic]
	if len(parts) == 0 {
		<-ctx.Done()
		return nil
	}
	if err := streamtest.Run(ctx, c.proc, parts...); err != nil && ctx.Err() == nil {
		return err
	}
	return nil
}

func (c *memConsumer) Close() error {
	c.a.mu.Lock()
	defer c.a.mu.Unlock()
	c.a.closed = append(c.a.closed, c.b.Function)
	return nil
}

// TestAdapterRunsTriggers: each trigger runs on the adapter it names (the
// file's, the code's, franz when it names none), which gets the trigger,
// the brokers, the function's logger and the readiness callback; the
// host is ready once every consumer has called it.
func TestAdapterRunsTriggers(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		cfg := parse(t, `{
  "checkpointRetryPolicy": {"retryCount": 1, "sleepDuration": "00:00:01"},
  "triggers": {
    "orders": {"type": "kafka", "topic": "orders", "consumerGroup": "orders-app", "maxBatchSize": 2},
    "payments": {"type": "kafka", "adapter": "kafkago", "topic": "payments", "consumerGroup": "payments-app"},
  },
}`)
		orders, payments, audit := streamtest.NewPartition("orders", 0, 2), streamtest.NewPartition("payments", 0, 5), streamtest.NewPartition("audit", 0, 5)
		for _, p := range []*streamtest.Partition{orders, payments, audit} {
			p.AppendN(time.Now(), 4)
		}
		ready := make(chan struct{})
		franz := &memAdapter{name: "franz", parts: map[string][]*streamtest.Partition{"orders": {orders}}, ready: ready}
		kafkago := &memAdapter{name: "kafkago", parts: map[string][]*streamtest.Partition{"payments": {payments}, "audit": {audit}}, ready: ready}
		var logs bytes.Buffer
		h, err := host.New(cfg, host.WithAdapter(kafkago), host.WithAdapter(franz), host.WithBrokers("b1:9092", "b2:9092"),
			host.WithLogger(slog.New(slog.NewTextHandler(&logs, nil))))
		if err != nil {
			t.Fatal(err)
		}
		for _, fn := range []string{"orders", "payments"} {
			if err := h.Register(fn, okHandler); err != nil {
				t.Fatal(err)
			}
		}
		if err := h.Register("audit", okHandler, host.Kafka{Adapter: "kafkago", Topic: "audit", Group: "audit-app", MaxBatch: 3}); err != nil {
			t.Fatal(err)
		}
		err = runUntil(t, h, func() {
			if ok, why := h.Ready(); ok || why != "waiting for the group assignment of orders, payments, audit" {
				t.Errorf("Ready before the consumers said so = %v, %q", ok, why)
			}
			close(ready)
			for _, p := range []*streamtest.Partition{orders, payments, audit} {
				if err := p.WaitCommitted(t.Context(), 4); err != nil {
					t.Fatal(err)
				}
			}
			if ok, why := h.Ready(); !ok {
				t.Errorf("Ready = false (%s), want ready once every consumer said so", why)
			}
			st := h.Status()
			for i, want := range []string{"franz", "kafkago", "kafkago"} {
				if got := st.Functions[i].Adapter; got != want {
					t.Errorf("status of %s: adapter %q, want %q", st.Functions[i].Name, got, want)
				}
			}
		})
		if err != nil {
			t.Fatalf("Run = %v", err)
		}
		type built struct {
			fn      string
			trigger host.Kafka
		}
		var got []built
		for _, a := range []*memAdapter{franz, kafkago} {
			for _, b := range a.built() {
				got = append(got, built{b.Function, b.Trigger})
				if !slices.Equal(b.Brokers, []string{"b1:9092", "b2:9092"}) || b.Logger == nil || b.OnReady == nil {
					t.Errorf("%s: binding %+v, want the brokers, a logger and OnReady", b.Function, b)
				}
			}
		}
		want := []built{
			{"orders", host.Kafka{Adapter: "franz", Topic: "orders", Group: "orders-app", MaxBatch: 2}},
			{"payments", host.Kafka{Adapter: "kafkago", Topic: "payments", Group: "payments-app"}},
			{"audit", host.Kafka{Adapter: "kafkago", Topic: "audit", Group: "audit-app", MaxBatch: 3}},
		}
		if !slices.Equal(got, want) {
			t.Errorf("consumers built:\n%+v\nwant\n%+v", got, want)
		}
		for _, fn := range []string{"orders", "payments", "audit"} {
			if !strings.Contains(logs.String(), `msg="consumer running" function=`+fn) {
				t.Errorf("the log has no line from %s's consumer with its function attribute:\n%s", fn, logs.String())
			}
		}
		if len(franz.pubBrokers)+len(kafkago.pubBrokers) != 0 {
			t.Error("a producer was built, though nothing dead-letters")
		}
	})
}

// TestAdapterNotGiven: a trigger whose adapter the host was not given is
// an error when Run starts, before any consumer is built, that says which
// module and option to add.
func TestAdapterNotGiven(t *testing.T) {
	for _, tc := range []struct {
		name     string
		doc      string
		adapters []string
		code     *host.Kafka
		want     string
	}{
		{"kafkago named in host.json", `{"triggers": {"f": {"type": "kafka", "adapter": "kafkago", "topic": "t", "consumerGroup": "g"}}}`, []string{"franz"}, nil,
			`host: function f (trigger from triggers.f (host.json:1:20)): adapter "kafkago" was not given to the host (it has franz): ` +
				`give host.WithAdapter(a) with a from kafkagohost.New() (module github.com/redeliver-go/redeliver/adapters/kafkago/kafkagohost, on segmentio/kafka-go)`},
		{"franz by default in host.json", `{"triggers": {"f": {"type": "kafka", "topic": "t", "consumerGroup": "g"}}}`, []string{"kafkago"}, nil,
			`host: function f (trigger from triggers.f (host.json:1:20)): adapter "franz" (the default: the trigger names no adapter) was not given to the host (it has kafkago): ` +
				`give host.WithAdapter(a) with a from franzhost.New() (module github.com/redeliver-go/redeliver/adapters/franz/franzhost, on twmb/franz-go); ` +
				`or name the host's adapter in the trigger: "adapter": "kafkago"`},
		{"franz by default in code, host on kafkago", `{}`, []string{"kafkago"}, &host.Kafka{Topic: "t", Group: "g"},
			`host: function f (trigger from code): adapter "franz" (the default: the trigger names no adapter) was not given to the host (it has kafkago): ` +
				`give host.WithAdapter(a) with a from franzhost.New() (module github.com/redeliver-go/redeliver/adapters/franz/franzhost, on twmb/franz-go); ` +
				`or name the host's adapter in the trigger: host.Kafka{Adapter: "kafkago", ...}`},
		{"franz by default in code", `{}`, nil, &host.Kafka{Topic: "t", Group: "g"},
			`host: function f (trigger from code): adapter "franz" (the default: the trigger names no adapter) was not given to the host (it has none): ` +
				`give host.WithAdapter(a) with a from franzhost.New()`},
		{"another name in code", `{}`, []string{"franz", "kafkago"}, &host.Kafka{Adapter: "pulsar", Topic: "t", Group: "g"},
			`host: function f (trigger from code): adapter "pulsar" was not given to the host (it has franz, kafkago): give host.WithAdapter an adapter of that name; redeliver's are franz, kafkago, sarama and confluent`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			opts := []host.Option{host.WithBrokers("127.0.0.1:1")}
			var given []*memAdapter
			for _, n := range tc.adapters {
				a := &memAdapter{name: n}
				given = append(given, a)
				opts = append(opts, host.WithAdapter(a))
			}
			h, err := host.New(parse(t, tc.doc), opts...)
			if err != nil {
				t.Fatal(err)
			}
			var fopts []host.FunctionOption
			if tc.code != nil {
				fopts = append(fopts, *tc.code)
			}
			if err := h.Register("f", okHandler, fopts...); err != nil {
				t.Fatal(err)
			}
			// A function whose adapter is there is not built either.
			if len(given) > 0 {
				if err := h.Register("other", okHandler, host.Kafka{Adapter: given[0].name, Topic: "other", Group: "other"}); err != nil {
					t.Fatal(err)
				}
			}
			ctx, cancel := context.WithTimeout(context.Background(), wait)
			defer cancel()
			err = h.Run(ctx)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("Run = %v\nwant it to contain\n%s", err, tc.want)
			}
			for _, a := range given {
				if b := a.built(); len(b) != 0 {
					t.Errorf("adapter %s built consumers %+v before the bindings were checked", a.name, b)
				}
			}
		})
	}
}

// TestAdapterFailures: an adapter that refuses a trigger stops Run before
// anything runs, with the function and where its trigger comes from; the
// consumers built before it are closed.
func TestAdapterFailures(t *testing.T) {
	for _, tc := range []struct {
		name  string
		setup func(*memAdapter)
		want  string
	}{
		{"refused", func(a *memAdapter) { a.fail = errors.New("kafkago: no share groups") },
			"host: function second: trigger from code: kafkago: no share groups"},
		{"no consumer", func(a *memAdapter) { a.none = true },
			"host: function second: trigger from code: adapter kafkago built no consumer"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			franz, kafkago := &memAdapter{name: "franz"}, &memAdapter{name: "kafkago"}
			tc.setup(kafkago)
			h, err := host.New(nil, host.WithAdapter(franz), host.WithAdapter(kafkago), host.WithBrokers("127.0.0.1:1"))
			if err != nil {
				t.Fatal(err)
			}
			if err := h.Register("first", okHandler, host.Kafka{Topic: "a", Group: "g"}); err != nil {
				t.Fatal(err)
			}
			if err := h.Register("second", okHandler, host.Kafka{Adapter: "kafkago", Topic: "b", Group: "g", Share: true}); err != nil {
				t.Fatal(err)
			}
			ctx, cancel := context.WithTimeout(context.Background(), wait)
			defer cancel()
			if err := h.Run(ctx); err == nil || err.Error() != tc.want {
				t.Errorf("Run = %v, want %q", err, tc.want)
			}
			if b := kafkago.built(); len(b) != 1 || !b[0].Trigger.Share {
				t.Errorf("kafkago was asked for %+v, want the share trigger", b)
			}
			if !slices.Equal(franz.closed, []string{"first"}) {
				t.Errorf("closed %v, want the consumer of first, which never ran", franz.closed)
			}
		})
	}
}

// TestDefaultPublisher: the first adapter given builds the dead-letter
// producer on the brokers, which takes the given-up records and is
// closed when Run returns; WithPublisher replaces it; without either, a
// policy that dead-letters is an error at start.
func TestDefaultPublisher(t *testing.T) {
	const doc = `{"checkpointRetryPolicy": {"retryCount": 0, "onExhausted": {"action": "deadLetter", "topic": "orders.dlq"}}}`
	t.Run("first adapter", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			var pub redrivetest.Publisher
			p := streamtest.NewPartition("orders", 0, 1)
			kafkago := &memAdapter{name: "kafkago", pub: &pub, parts: map[string][]*streamtest.Partition{"orders": {p}}}
			franz := &memAdapter{name: "franz", pubErr: errors.New("not this one")}
			h, err := host.New(parse(t, doc), host.WithAdapter(kafkago), host.WithAdapter(franz), host.WithBrokers("b:9092"))
			if err != nil {
				t.Fatal(err)
			}
			p.AppendN(time.Now(), 2)
			fail := stream.HandlerFunc(func(context.Context, *stream.Batch) error { return errBoom })
			if err := h.Register("orders", fail, host.Kafka{Adapter: "kafkago", Topic: "orders", Group: "g"}); err != nil {
				t.Fatal(err)
			}
			err = runUntil(t, h, func() {
				if err := p.WaitCommitted(t.Context(), 2); err != nil {
					t.Error(err)
				}
				if kafkago.pubClosed != 0 {
					t.Error("the producer was closed while Run runs")
				}
			})
			if err != nil {
				t.Fatalf("Run = %v", err)
			}
			if n := len(pub.Topic("orders.dlq")); n != 2 {
				t.Errorf("%d records dead-lettered through the adapter's producer, want 2", n)
			}
			if !slices.EqualFunc(kafkago.pubBrokers, [][]string{{"b:9092"}}, slices.Equal) || len(franz.pubBrokers) != 0 {
				t.Errorf("producers built: kafkago %v, franz %v; want one, by kafkago, on b:9092", kafkago.pubBrokers, franz.pubBrokers)
			}
			if kafkago.pubClosed != 1 {
				t.Errorf("producer closed %d times after Run returned, want 1", kafkago.pubClosed)
			}
		})
	})
	t.Run("WithPublisher", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			var pub redrivetest.Publisher
			p := streamtest.NewPartition("orders", 0, 1)
			kafkago := &memAdapter{name: "kafkago", pubErr: errors.New("not called"), parts: map[string][]*streamtest.Partition{"orders": {p}}}
			h, err := host.New(parse(t, doc), host.WithAdapter(kafkago), host.WithBrokers("b:9092"), host.WithPublisher(&pub))
			if err != nil {
				t.Fatal(err)
			}
			p.AppendN(time.Now(), 1)
			fail := stream.HandlerFunc(func(context.Context, *stream.Batch) error { return errBoom })
			if err := h.Register("orders", fail, host.Kafka{Adapter: "kafkago", Topic: "orders", Group: "g"}); err != nil {
				t.Fatal(err)
			}
			if err := runUntil(t, h, func() {
				if err := p.WaitCommitted(t.Context(), 1); err != nil {
					t.Error(err)
				}
			}); err != nil {
				t.Fatalf("Run = %v", err)
			}
			if n := len(pub.Topic("orders.dlq")); n != 1 || len(kafkago.pubBrokers) != 0 {
				t.Errorf("%d records through WithPublisher's, %d producers built by the adapter; want 1 and 0", n, len(kafkago.pubBrokers))
			}
		})
	})
	for _, tc := range []struct {
		name string
		opts []host.Option
		want string
	}{
		{"no adapter for it", []host.Option{host.WithBrokers("b:9092")},
			"host: a function's policy dead-letters or the re-drive publishes, and there is no producer: give host.WithPublisher, or host.WithAdapter with host.WithBrokers (the first adapter builds the producer)"},
		{"adapter fails", []host.Option{host.WithBrokers("b:9092"), host.WithAdapter(&memAdapter{name: "kafkago", pubErr: errors.New("no route")})},
			"host: dead-letter producer of adapter kafkago: no route"},
		{"adapter builds none", []host.Option{host.WithBrokers("b:9092"), host.WithAdapter(&memAdapter{name: "kafkago"})},
			"host: adapter kafkago built no dead-letter producer"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h, err := host.New(parse(t, doc), tc.opts...)
			if err != nil {
				t.Fatal(err)
			}
			src := memSource("orders", streamtest.NewPartition("orders", 0, 1))
			if err := h.Register("orders", okHandler, src); err != nil {
				t.Fatal(err)
			}
			ctx, cancel := context.WithTimeout(context.Background(), wait)
			defer cancel()
			if err := h.Run(ctx); err == nil || err.Error() != tc.want {
				t.Errorf("Run = %v, want %q", err, tc.want)
			}
		})
	}
}
