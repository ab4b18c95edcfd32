package host_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/redeliver-go/redeliver/host"
	"github.com/redeliver-go/redeliver/internal/lifecycle"
	"github.com/redeliver-go/redeliver/redrive"
	"github.com/redeliver-go/redeliver/stream"
	"github.com/redeliver-go/redeliver/stream/streamtest"
)

var okHandler = stream.HandlerFunc(func(context.Context, *stream.Batch) error { return nil })

// memSource is a host.Source over in-memory partitions.
func memSource(topic string, parts ...*streamtest.Partition) host.Source {
	return host.Source{
		Describe: "in-memory " + topic,
		Topic:    topic,
		New: func(proc *stream.Processor) (func(context.Context) error, error) {
			return func(ctx context.Context) error {
				if err := streamtest.Run(ctx, proc, parts...); err != nil && ctx.Err() == nil {
					return err
				}
				return nil
			}, nil
		},
	}
}

// runUntil runs h in a synctest bubble until fn returns, then cancels Run
// and returns what it returned.
func runUntil(t *testing.T, h *host.Host, fn func()) error {
	t.Helper()
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() { done <- h.Run(ctx) }()
	synctest.Wait()
	fn()
	cancel()
	return <-done
}

// Two functions that consume one topic in one consumer group would split
// its records between them: Run refuses the pair before starting
// anything, naming both.
func TestSharedTopicAndGroupRefused(t *testing.T) {
	for _, tc := range []struct {
		name string
		doc  string
		a, b []host.FunctionOption
		want string
	}{
		{"both in code", `{}`,
			[]host.FunctionOption{host.Kafka{Topic: "orders", Group: "app"}},
			[]host.FunctionOption{host.Kafka{Adapter: "kafkago", Topic: "orders", Group: "app"}},
			`host: functions billing (trigger from code) and shipping (trigger from code) both consume topic "orders" in group "app"`},
		{"one from host.json", `{"triggers": {"shipping": {"type": "kafka", "topic": "orders", "consumerGroup": "app"}}}`,
			[]host.FunctionOption{host.Kafka{Topic: "orders", Group: "app"}}, nil,
			`host: functions billing (trigger from code) and shipping (trigger from triggers.shipping (host.json:1:27)) both consume topic "orders" in group "app"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h, err := host.New(parse(t, tc.doc), host.WithBrokers("127.0.0.1:1"), host.WithAdapter(&memAdapter{name: "franz"}), host.WithAdapter(&memAdapter{name: "kafkago"}))
			if err != nil {
				t.Fatal(err)
			}
			var calls atomic.Int64
			count := stream.HandlerFunc(func(context.Context, *stream.Batch) error { calls.Add(1); return nil })
			if err := h.Register("billing", count, tc.a...); err != nil {
				t.Fatal(err)
			}
			if err := h.Register("shipping", count, tc.b...); err != nil {
				t.Fatal(err)
			}
			ctx, cancel := context.WithTimeout(context.Background(), wait)
			defer cancel()
			err = h.Run(ctx)
			if err == nil || !strings.Contains(err.Error(), tc.want) || !strings.Contains(err.Error(), "give each function a group of its own") {
				t.Fatalf("Run = %v, want the pair refused:\n%s", err, tc.want)
			}
			if ctx.Err() != nil || calls.Load() != 0 {
				t.Error("Run started something")
			}
		})
	}
	// Same topic in two groups, and one group on two topics, are fine.
	h, err := host.New(nil, host.WithBrokers("127.0.0.1:1"), host.WithAdapter(&memAdapter{name: "franz"}))
	if err != nil {
		t.Fatal(err)
	}
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	must(h.Register("billing", okHandler, host.Kafka{Topic: "orders", Group: "billing"}))
	must(h.Register("shipping", okHandler, host.Kafka{Topic: "orders", Group: "shipping"}))
	must(h.Register("audit", okHandler, host.Kafka{Topic: "payments", Group: "billing"}))
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := h.Run(ctx); err != nil {
		t.Errorf("Run = %v, want a clean start and stop", err)
	}
}

// Hooks given through WithProcessorOptions(stream.WithHooks(...)) add to
// the host's: the status page still follows the partitions, and the
// host's WithHooks are still called.
func TestProcessorHooksAddToTheHosts(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var hostWide, fnOwn, viaProc atomic.Int64
		count := func(n *atomic.Int64) stream.Hooks {
			return stream.Hooks{Delivered: func(stream.DeliveredEvent) { n.Add(1) }}
		}
		h, err := host.New(nil, host.WithHooks(count(&hostWide)), host.WithProcessorOptions(stream.WithHooks(count(&viaProc))))
		if err != nil {
			t.Fatal(err)
		}
		p := streamtest.NewPartition("orders", 0, 1)
		p.AppendN(time.Now(), 3)
		if err := h.Register("orders", okHandler, memSource("orders", p), host.WithHooks(count(&fnOwn))); err != nil {
			t.Fatal(err)
		}
		err = runUntil(t, h, func() {
			if err := p.WaitCommitted(t.Context(), 3); err != nil {
				t.Fatal(err)
			}
			synctest.Wait()
			ps := h.Status().Functions[0].Partitions
			if len(ps) != 1 || ps[0].Deliveries != 3 || ps[0].Checkpoint != 3 {
				t.Errorf("status partitions %+v, want orders/0 with 3 deliveries, checkpoint 3", ps)
			}
		})
		if err != nil {
			t.Fatal(err)
		}
		for name, n := range map[string]*atomic.Int64{"host.WithHooks": &hostWide, "Register's WithHooks": &fnOwn, "stream.WithHooks": &viaProc} {
			if n.Load() != 3 {
				t.Errorf("%s: Delivered called %d times, want 3", name, n.Load())
			}
		}
	})
}

// A Source whose run returns nil before the host stops leaves its
// function without a consumer: Run stops the host with an error that
// names the function and says what happened, and the log says it too.
func TestSourceStoppingEarly(t *testing.T) {
	var logs bytes.Buffer
	h, err := host.New(nil, host.WithLogger(slog.New(slog.NewTextHandler(&logs, nil))))
	if err != nil {
		t.Fatal(err)
	}
	early := host.Source{Describe: "returns at once", New: func(*stream.Processor) (func(context.Context) error, error) {
		return func(context.Context) error { return nil }, nil
	}}
	if err := h.Register("telemetry", okHandler, early); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), wait)
	defer cancel()
	err = h.Run(ctx)
	want := "host: function telemetry: its consumer returned before the host stopped, without an error"
	if err == nil || !strings.HasPrefix(err.Error(), want) || strings.Contains(err.Error(), "%!") {
		t.Errorf("Run = %v, want %q...", err, want)
	}
	if ctx.Err() != nil {
		t.Error("Run waited for the context")
	}
	if l := logs.String(); strings.Contains(l, "<nil>") || !strings.Contains(l, "function's consumer stopped before the host") {
		t.Errorf("log:\n%s\nwant the early stop said, with no <nil> error", l)
	}

	// A Source that fails: the error is its own, named.
	h, err = host.New(nil)
	if err != nil {
		t.Fatal(err)
	}
	broken := errors.New("hub unreachable")
	failing := host.Source{Describe: "fails", New: func(*stream.Processor) (func(context.Context) error, error) {
		return func(context.Context) error { return broken }, nil
	}}
	if err := h.Register("telemetry", okHandler, failing); err != nil {
		t.Fatal(err)
	}
	if err := h.Run(ctx); !errors.Is(err, broken) || !strings.HasPrefix(err.Error(), "host: function telemetry: hub unreachable") {
		t.Errorf("Run = %v, want the Source's error, named", err)
	}
}

// A function's consumer that returns an error while the host stops (a
// final commit refused) makes the stop unclean: Run returns the error,
// named, not nil. One whose own drain time ran out before the host's
// (both are the host's drain time) gives an error wrapping
// host.ErrDrainTimeout, as the host's own drain would. A Source that
// returns its context's error has stopped as asked.
func TestSourceFailingToStop(t *testing.T) {
	drainOver := func(ctx context.Context) error {
		<-ctx.Done()
		// As the adapters' consumers say it (internal/lifecycle.Drain).
		return lifecycle.Drain(nil, slog.New(slog.DiscardHandler), "franz", &lifecycle.Workers{}, time.Millisecond)
	}
	for _, tc := range []struct {
		name  string
		run   func(context.Context) error
		check func(error) bool
		want  string
	}{
		{"commit refused", func(ctx context.Context) error {
			<-ctx.Done()
			return errors.New("final commit refused")
		}, func(err error) bool { return err != nil && !errors.Is(err, host.ErrDrainTimeout) },
			"host: function telemetry, stopping: final commit refused"},
		{"its drain over", drainOver, func(err error) bool { return errors.Is(err, host.ErrDrainTimeout) },
			"host: drain time over: function telemetry: franz: drain time (1ms) over"},
		{"its context's error", func(ctx context.Context) error {
			<-ctx.Done()
			return ctx.Err()
		}, func(err error) bool { return err == nil }, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h, err := host.New(nil)
			if err != nil {
				t.Fatal(err)
			}
			src := host.Source{Describe: "stops with an error", New: func(*stream.Processor) (func(context.Context) error, error) {
				return tc.run, nil
			}}
			if err := h.Register("telemetry", okHandler, src); err != nil {
				t.Fatal(err)
			}
			ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
			defer cancel()
			err = h.Run(ctx)
			if !tc.check(err) || tc.want != "" && !strings.HasPrefix(err.Error(), tc.want) {
				t.Errorf("Run = %v, want %q...", err, tc.want)
			}
		})
	}
}

// A Source whose run function or New panics stops the host with an error
// that names the function and the panic, logged with its stack; the
// process goes on, and the other functions are stopped cleanly.
func TestSourcePanicking(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), wait)
	defer cancel()
	blocking := host.Source{Describe: "runs", New: func(*stream.Processor) (func(context.Context) error, error) {
		return func(ctx context.Context) error { <-ctx.Done(); return nil }, nil
	}}
	boom := errors.New("boom")
	for _, tc := range []struct {
		name string
		src  host.Source
		want string
	}{
		{"run", host.Source{Describe: "panics", New: func(*stream.Processor) (func(context.Context) error, error) {
			return func(context.Context) error { panic(boom) }, nil
		}}, "host: function telemetry: its consumer panicked: boom"},
		{"run with a value", host.Source{Describe: "panics", New: func(*stream.Processor) (func(context.Context) error, error) {
			return func(context.Context) error { panic(42) }, nil
		}}, "host: function telemetry: its consumer panicked: 42"},
		{"New", host.Source{Describe: "panics", New: func(*stream.Processor) (func(context.Context) error, error) {
			panic(boom)
		}}, "host: function telemetry: host.Source's New panicked: boom"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var logs bytes.Buffer
			h, err := host.New(nil, host.WithLogger(slog.New(slog.NewTextHandler(&logs, nil))))
			if err != nil {
				t.Fatal(err)
			}
			if err := h.Register("other", okHandler, blocking); err != nil {
				t.Fatal(err)
			}
			if err := h.Register("telemetry", okHandler, tc.src); err != nil {
				t.Fatal(err)
			}
			err = h.Run(ctx)
			if err == nil || !strings.HasPrefix(err.Error(), tc.want) {
				t.Fatalf("Run = %v, want %q", err, tc.want)
			}
			if tc.name != "run with a value" && !errors.Is(err, boom) {
				t.Errorf("Run = %v, does not wrap the panic's error", err)
			}
			if ctx.Err() != nil {
				t.Fatal("Run waited for the context")
			}
			if l := logs.String(); tc.name != "New" && (!strings.Contains(l, "function's consumer panicked") || !strings.Contains(l, "goroutine")) {
				t.Errorf("log:\n%s\nwant the panic with its stack", l)
			}
		})
	}
}

// For a Source with Ready, the status's Assigned is what /readyz counts:
// not assigned while Ready says no.
func TestSourceReadyInStatus(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h, err := host.New(nil)
		if err != nil {
			t.Fatal(err)
		}
		var ready atomic.Bool
		src := memSource("telemetry", streamtest.NewPartition("telemetry", 0, 1))
		src.Ready = ready.Load
		if err := h.Register("telemetry", okHandler, src); err != nil {
			t.Fatal(err)
		}
		err = runUntil(t, h, func() {
			code, body := get(t, h.Handler(), "/readyz")
			if f := status(t, h.Handler()).Functions[0]; code != 503 || f.Assigned {
				t.Errorf("before Ready: /readyz %d %q, status assigned %v; want 503 and not assigned", code, body, f.Assigned)
			}
			if _, page := get(t, h.Handler(), "/"); !strings.Contains(page, `chip notready">joining`) {
				t.Error("the page does not show the function joining")
			}
			ready.Store(true)
			code, _ = get(t, h.Handler(), "/readyz")
			if f := status(t, h.Handler()).Functions[0]; code != 200 || !f.Assigned {
				t.Errorf("after Ready: /readyz %d, status assigned %v; want 200 and assigned", code, f.Assigned)
			}
		})
		if err != nil {
			t.Fatal(err)
		}
	})
}

// A batch held at offset 0 keeps "firstOffset": 0 in /status.json; a
// partition with no batch yet has none.
func TestStatusJSONOffsetZero(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h, err := host.New(parse(t, `{"checkpointRetryPolicy": {"retryCount": 1, "sleepDuration": "01:00:00"}}`))
		if err != nil {
			t.Fatal(err)
		}
		held, idle := streamtest.NewPartition("orders", 0, 5), streamtest.NewPartition("orders", 1, 5)
		held.AppendN(time.Now(), 3)
		fail := stream.HandlerFunc(func(context.Context, *stream.Batch) error { return errBoom })
		if err := h.Register("orders", fail, memSource("orders", held, idle)); err != nil {
			t.Fatal(err)
		}
		err = runUntil(t, h, func() {
			_, body := get(t, h.Handler(), "/status.json")
			var st struct {
				Functions []struct{ Partitions []map[string]any }
			}
			if err := json.Unmarshal([]byte(body), &st); err != nil {
				t.Fatal(err)
			}
			ps := st.Functions[0].Partitions
			if len(ps) != 2 {
				t.Fatalf("partitions %v, want 2", ps)
			}
			if ps[0]["state"] != "backoff" || ps[0]["firstOffset"] != 0.0 || ps[0]["lastOffset"] != 2.0 {
				t.Errorf("held partition %v, want backoff with firstOffset 0 and lastOffset 2", ps[0])
			}
			if _, ok := ps[1]["firstOffset"]; ok || ps[1]["state"] != "flowing" {
				t.Errorf("idle partition %v, want flowing with no firstOffset", ps[1])
			}
		})
		if err != nil {
			t.Fatal(err)
		}
	})
}

// Run returns nil after a clean shutdown: the context is cancelled and
// every worker returns within the drain time.
func TestRunCleanShutdownIsNil(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h, err := host.New(nil)
		if err != nil {
			t.Fatal(err)
		}
		p := streamtest.NewPartition("orders", 0, 1)
		if err := h.Register("orders", okHandler, memSource("orders", p)); err != nil {
			t.Fatal(err)
		}
		if err := runUntil(t, h, func() {}); err != nil {
			t.Errorf("Run = %v after a cancel, want nil", err)
		}
		if err := h.Run(t.Context()); err == nil || err.Error() != "host: Run called more than once" {
			t.Errorf("a second Run = %v", err)
		}
	})
}

// No nil option, nil argument or zero value makes the host panic: each is
// an error that says what is wrong, or what to call instead.
func TestNilAndZeroValues(t *testing.T) {
	for _, tc := range []struct {
		name string
		opts []host.Option
		want string
	}{
		{"nil option", []host.Option{host.WithBrokers("b:9092"), nil}, "host: New: option 2 of 2 is nil"},
		{"empty broker", []host.Option{host.WithBrokers("b:9092", "")}, "host: WithBrokers: address 2 of 2 is empty"},
		{"nil adapter", []host.Option{host.WithAdapter(nil)}, "host: WithAdapter: nil adapter"},
		{"adapter without a name", []host.Option{host.WithAdapter(&memAdapter{name: " "})}, "host: WithAdapter: adapter *host_test.memAdapter has an empty name"},
		{"adapter twice", []host.Option{host.WithAdapter(&memAdapter{name: "franz"}), host.WithAdapter(&memAdapter{name: "franz"})}, `host: WithAdapter: adapter "franz" given twice`},
		{"nil store", []host.Option{host.WithRedrive(nil)}, "host: WithRedrive: nil store"},
		{"nil redrive option", []host.Option{host.WithRedrive(nilStore{}, nil)}, "host: WithRedrive: option 1 of 1 is nil"},
		{"nil middleware", []host.Option{host.WithMiddleware(nil)}, "host: WithMiddleware: middleware 1 of 1 is nil"},
		{"nil processor option", []host.Option{host.WithProcessorOptions(nil)}, "host: WithProcessorOptions: option 1 of 1 is nil"},
		{"drain 0", []host.Option{host.WithDrain(0)}, "host: drain time 0s, want more than 0"},
		{"refresh -1s", []host.Option{host.WithRefresh(-time.Second)}, "host: refresh -1s, want more than 0"},
	} {
		t.Run("New/"+tc.name, func(t *testing.T) {
			if h, err := host.New(nil, tc.opts...); err == nil || err.Error() != tc.want || h != nil {
				t.Errorf("New = %v, %v; want nil, %q", h, err, tc.want)
			}
		})
	}
	// Nil and empty values that mean "the default" are accepted.
	if _, err := host.New(nil, host.WithLogger(nil), host.WithPublisher(nil), host.WithListener(nil), host.WithHTTP(""),
		host.WithToken(""), host.WithHooks(stream.Hooks{}), host.WithBrokers(), host.WithMiddleware(), host.WithProcessorOptions()); err != nil {
		t.Errorf("New with the defaults spelled out = %v", err)
	}

	h, err := host.New(nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name    string
		handler stream.Handler
		opts    []host.FunctionOption
		want    string
	}{
		{"nil handler", nil, nil, `host: function "f": nil handler`},
		{"nil HandlerFunc", stream.HandlerFunc(nil), nil, `host: function "f": nil handler`},
		{"nil option", okHandler, []host.FunctionOption{host.Kafka{Topic: "t", Group: "g"}, nil}, `host: function "f": option 2 of 2 is nil`},
		{"nil middleware", okHandler, []host.FunctionOption{host.WithMiddleware(nil)}, `host: function "f": WithMiddleware: middleware 1 of 1 is nil`},
		{"nil processor option", okHandler, []host.FunctionOption{host.WithProcessorOptions(nil)}, `host: function "f": WithProcessorOptions: option 1 of 1 is nil`},
	} {
		t.Run("Register/"+tc.name, func(t *testing.T) {
			if err := h.Register("f", tc.handler, tc.opts...); err == nil || err.Error() != tc.want {
				t.Errorf("Register = %v, want %q", err, tc.want)
			}
		})
	}
	t.Run("Run/nil context", func(t *testing.T) {
		var ctx context.Context // nil: the mistake under test
		if err := h.Run(ctx); err == nil || err.Error() != "host: Run: nil context" {
			t.Errorf("Run(nil) = %v", err)
		}
	})
	t.Run("Run/zero trigger", func(t *testing.T) {
		h, _ := host.New(nil, host.WithBrokers("127.0.0.1:1"))
		if err := h.Register("f", okHandler, host.Kafka{}); err != nil {
			t.Fatal(err)
		}
		if err := h.Run(t.Context()); err == nil || !strings.Contains(err.Error(), "host: function f (trigger from code): no topic") {
			t.Errorf("Run = %v, want the empty trigger named", err)
		}
	})
	t.Run("Run/zero Source", func(t *testing.T) {
		h, _ := host.New(nil)
		if err := h.Register("f", okHandler, host.Source{}); err != nil {
			t.Fatal(err)
		}
		if err := h.Run(t.Context()); err == nil || !strings.Contains(err.Error(), "host: function f: host.Source without New") {
			t.Errorf("Run = %v, want the empty Source named", err)
		}
	})
	t.Run("Run/Source New returns nothing", func(t *testing.T) {
		h, _ := host.New(nil)
		src := host.Source{Describe: "d", New: func(*stream.Processor) (func(context.Context) error, error) { return nil, nil }}
		if err := h.Register("f", okHandler, src); err != nil {
			t.Fatal(err)
		}
		if err := h.Run(t.Context()); err == nil || !strings.Contains(err.Error(), "host: function f: host.Source's New returned no run function") {
			t.Errorf("Run = %v", err)
		}
	})

	// A zero Host and a nil *Host: every method answers, none panics.
	const notNew = "host: this Host was not made by host.New: create it with host.New(cfg, options...)"
	for name, h := range map[string]*host.Host{"zero": {}, "nil": nil} {
		t.Run(name+" Host", func(t *testing.T) {
			if err := h.Run(t.Context()); err == nil || err.Error() != notNew {
				t.Errorf("Run = %v, want %q", err, notNew)
			}
			if err := h.Register("f", okHandler); err == nil || err.Error() != notNew {
				t.Errorf("Register = %v", err)
			}
			if ok, why := h.Ready(); ok || why != notNew {
				t.Errorf("Ready = %v, %q", ok, why)
			}
			if st := h.Status(); st.Ready || st.Reason != notNew || len(st.Functions) != 0 {
				t.Errorf("Status = %+v", st)
			}
			if err := h.Resume(context.Background(), "f", "t", 0); err == nil || err.Error() != notNew {
				t.Errorf("Resume = %v", err)
			}
			if err := h.Skip(context.Background(), "f", "t", 0); err == nil || err.Error() != notNew {
				t.Errorf("Skip = %v", err)
			}
			if code, body := get(t, h.Handler(), "/readyz"); code != http.StatusInternalServerError || !strings.Contains(body, notNew) {
				t.Errorf("Handler /readyz = %d %q", code, body)
			}
		})
	}
	// A function without a re-drive store has no Parked in its status:
	// counting it gives 0, as reading a status in a loop over every
	// function would.
	var noStore *host.ParkedStatus
	if n := noStore.Total(); n != 0 {
		t.Errorf("a nil ParkedStatus's Total = %d, want 0", n)
	}
}

// nilStore is a redrive.Store whose methods are never called.
type nilStore struct{ redrive.Store }

// Without WithLogger, what an operator must see (a record given up, a
// function that fails) goes to slog.Default at Warn level and above; the
// rest is dropped.
func TestDefaultLoggerWarns(t *testing.T) {
	var logs bytes.Buffer
	prev := slog.Default()
	slog.SetDefault(slog.New(slog.NewTextHandler(&logs, nil)))
	defer slog.SetDefault(prev)
	synctest.Test(t, func(t *testing.T) {
		h, err := host.New(nil)
		if err != nil {
			t.Fatal(err)
		}
		p := streamtest.NewPartition("orders", 0, 1)
		p.AppendN(time.Now(), 1)
		fail := stream.HandlerFunc(func(context.Context, *stream.Batch) error { return errBoom })
		if err := h.Register("orders", fail, memSource("orders", p)); err != nil {
			t.Fatal(err)
		}
		if err := runUntil(t, h, func() {
			if err := p.WaitCommitted(t.Context(), 1); err != nil {
				t.Fatal(err)
			}
		}); err != nil {
			t.Fatal(err)
		}
	})
	l := logs.String()
	if !strings.Contains(l, "level=ERROR") || !strings.Contains(l, "given up") || !strings.Contains(l, "function=orders") {
		t.Errorf("default log:\n%s\nwant the record given up, at Error level, with its function", l)
	}
	if strings.Contains(l, "level=INFO") {
		t.Errorf("default log:\n%s\nwant no Info lines", l)
	}
}

// Close stops a running host (Run returns nil, as after a cancel), a Run
// after Close returns stream.ErrClosed at once, and a handler may close its
// own host without a deadlock.
func TestClose(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h, err := host.New(nil)
		if err != nil {
			t.Fatal(err)
		}
		p := streamtest.NewPartition("orders", 0, 1)
		p.AppendN(time.Now(), 3)
		if err := h.Register("orders", okHandler, memSource("orders", p)); err != nil {
			t.Fatal(err)
		}
		done := make(chan error, 1)
		go func() { done <- h.Run(t.Context()) }()
		synctest.Wait()
		if err := h.Close(); err != nil {
			t.Fatalf("Close = %v", err)
		}
		// Run returns as Close does, give or take its last steps
		// (Close waits for the run; the goroutine then sends): a
		// moment of the bubble's clock, never a drain or a timer.
		select {
		case err := <-done:
			if err != nil {
				t.Errorf("Run = %v after Close, want nil", err)
			}
		case <-time.After(time.Millisecond):
			t.Error("Close returned before Run did")
		}
		if err := h.Close(); err != nil {
			t.Errorf("a second Close = %v", err)
		}
	})
	synctest.Test(t, func(t *testing.T) {
		h, err := host.New(nil)
		if err != nil {
			t.Fatal(err)
		}
		if err := h.Register("orders", okHandler, memSource("orders", streamtest.NewPartition("orders", 0, 1))); err != nil {
			t.Fatal(err)
		}
		h.Close()
		if err := h.Run(t.Context()); !errors.Is(err, stream.ErrClosed) {
			t.Errorf("Run after Close = %v, want stream.ErrClosed", err)
		}
	})
	synctest.Test(t, func(t *testing.T) {
		h, err := host.New(nil)
		if err != nil {
			t.Fatal(err)
		}
		p := streamtest.NewPartition("orders", 0, 1)
		p.AppendN(time.Now(), 1)
		closing := stream.HandlerFunc(func(context.Context, *stream.Batch) error { return h.Close() })
		if err := h.Register("orders", closing, memSource("orders", p)); err != nil {
			t.Fatal(err)
		}
		if err := h.Run(t.Context()); err != nil {
			t.Errorf("Run = %v after its handler closed the host, want nil", err)
		}
	})
	var zero host.Host
	if err := zero.Close(); err == nil {
		t.Error("Close of a zero Host: no error")
	}
}

// /status.json shows every partition's maxRetries, the limit in force,
// whatever its history: one never delivered, one that failed and then
// succeeded (flowing again), one in backoff. It was missing from the
// first two (0 with omitempty) and present on the third.
func TestStatusJSONMaxRetriesAlways(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h, err := host.New(parse(t, `{"checkpointRetryPolicy": {"retryCount": 4, "sleepDuration": "00:00:01"}}`))
		if err != nil {
			t.Fatal(err)
		}
		recovered, idle, held := streamtest.NewPartition("orders", 0, 5), streamtest.NewPartition("orders", 1, 5), streamtest.NewPartition("orders", 2, 5)
		recovered.AppendN(time.Now(), 3)
		held.AppendN(time.Now(), 3)
		var failedOnce atomic.Bool
		h1 := stream.HandlerFunc(func(_ context.Context, b *stream.Batch) error {
			switch {
			case b.Partition == 2:
				return errBoom
			case b.Partition == 0 && failedOnce.CompareAndSwap(false, true):
				return errBoom
			}
			return nil
		})
		if err := h.Register("orders", h1, memSource("orders", recovered, idle, held)); err != nil {
			t.Fatal(err)
		}
		err = runUntil(t, h, func() {
			ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
			defer cancel()
			if err := recovered.WaitCommitted(ctx, 3); err != nil {
				t.Fatal(err)
			}
			synctest.Wait()
			_, body := get(t, h.Handler(), "/status.json")
			var st struct {
				Functions []struct{ Partitions []map[string]any }
			}
			if err := json.Unmarshal([]byte(body), &st); err != nil {
				t.Fatal(err)
			}
			ps := st.Functions[0].Partitions
			if len(ps) != 3 {
				t.Fatalf("partitions %v, want 3", ps)
			}
			for _, p := range ps {
				if p["maxRetries"] != 4.0 {
					t.Errorf("partition %v (%v): maxRetries %v, want 4", p["partition"], p["state"], p["maxRetries"])
				}
			}
		})
		if err != nil {
			t.Fatal(err)
		}
	})
}

// A handler that ignores its context holds the host's stop: the host says,
// at Warn, which function it waits for and for how long, 2s after the stop
// and then every 5s, and returns ErrDrainTimeout naming it after the drain
// time. It waited in silence until then.
func TestDrainReportsWhatItWaitsFor(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var logs strings.Builder
		var mu sync.Mutex
		h, err := host.New(nil, host.WithDrain(11*time.Second),
			host.WithLogger(slog.New(slog.NewTextHandler(writerFunc(func(p []byte) (int, error) {
				mu.Lock()
				defer mu.Unlock()
				return logs.Write(p)
			}), nil))))
		if err != nil {
			t.Fatal(err)
		}
		p := streamtest.NewPartition("orders", 0, 1)
		p.AppendN(time.Now(), 1)
		release := make(chan struct{})
		stuck := stream.HandlerFunc(func(context.Context, *stream.Batch) error {
			<-release // ignores its context
			return nil
		})
		if err := h.Register("orders", stuck, memSource("orders", p)); err != nil {
			t.Fatal(err)
		}
		err = runUntil(t, h, func() {})
		close(release)
		if !errors.Is(err, host.ErrDrainTimeout) || !strings.Contains(err.Error(), "orders") {
			t.Errorf("Run = %v, want ErrDrainTimeout naming orders", err)
		}
		mu.Lock()
		out := logs.String()
		mu.Unlock()
		// At 2s, 7s: then the drain time (11s) is over.
		if n := strings.Count(out, "level=WARN msg=\"redeliver: host stopping: waiting for functions"); n != 2 || !strings.Contains(out, "functions=orders waited=2s") || !strings.Contains(out, "functions=orders waited=7s") {
			t.Errorf("%d Warn lines, want 2 (after 2s and 7s) naming orders:\n%s", n, out)
		}
	})
}

type writerFunc func([]byte) (int, error)

func (f writerFunc) Write(p []byte) (int, error) { return f(p) }
