package host_test

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redeliver-go/redeliver/host"
	"github.com/redeliver-go/redeliver/stream"
	"github.com/redeliver-go/redeliver/stream/streamtest"
)

// TestSourceTrigger runs a function on a trigger the host does not build
// (host.Source: here two in-memory partitions, as an Event Hubs consumer
// would be): it gets its own policy from host.json, a failed batch is
// retried under it, readiness follows the Source's Ready, the status names
// the Source, and Run stops it with the others. No brokers are needed for
// it.
func TestSourceTrigger(t *testing.T) {
	cfg := parse(t, `{
  "checkpointRetryPolicy": {
    "retryCount": 0,
    "functions": {"telemetry": {"retryCount": 2, "sleepDuration": "10ms"}},
  },
}`)
	h, err := host.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	parts := []*streamtest.Partition{streamtest.NewPartition("telemetry", 0, 5), streamtest.NewPartition("telemetry", 1, 5)}
	for _, p := range parts {
		p.AppendN(time.Now(), 10)
	}
	var (
		mu         sync.Mutex
		deliveries = map[int32]map[int64]int{0: {}, 1: {}}
		ready      = make(chan struct{})
		readyOnce  sync.Once
	)
	handler := stream.HandlerFunc(func(_ context.Context, b *stream.Batch) error {
		readyOnce.Do(func() { close(ready) })
		mu.Lock()
		defer mu.Unlock()
		for _, r := range b.Records {
			deliveries[r.Partition][r.Offset]++
		}
		if b.Partition == 1 && b.FirstOffset() == 5 && b.Attempt.Retries < 2 {
			return errBoom // retried twice under the function's own policy
		}
		return nil
	})
	err = h.Register("telemetry", handler, host.Source{
		Describe: "in-memory telemetry, 2 partitions",
		Topic:    "telemetry",
		New: func(proc *stream.Processor) (func(context.Context) error, error) {
			return func(ctx context.Context) error {
				if err := streamtest.Run(ctx, proc, parts...); err != nil && ctx.Err() == nil {
					return err
				}
				return nil
			}, nil
		},
		Ready: func() bool {
			select {
			case <-ready:
				return true
			default:
				return false
			}
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	r := start(t, h)
	waitFor(t, "both partitions checkpointed to 10", func() bool {
		a, _ := parts[0].Committed()
		b, _ := parts[1].Committed()
		return a == 10 && b == 10
	})
	if ok, why := h.Ready(); !ok {
		t.Errorf("not ready: %s", why)
	}
	mu.Lock()
	for p, offs := range deliveries {
		for off := int64(0); off < 10; off++ {
			want := 1
			if p == 1 && off >= 5 {
				want = 3 // the batch 5-9: the first delivery and its 2 retries
			}
			if offs[off] != want {
				t.Errorf("telemetry/%d offset %d delivered %d times, want %d", p, off, offs[off], want)
			}
		}
	}
	mu.Unlock()
	st := status(t, h.Handler())
	if len(st.Functions) != 1 || st.Functions[0].Source != "in-memory telemetry, 2 partitions" || st.Functions[0].TriggerFrom != "code" {
		t.Errorf("status %+v, want the Source described", st.Functions)
	}
	_, page := get(t, h.Handler(), "/")
	if want := "in-memory telemetry, 2 partitions"; !strings.Contains(page, want) {
		t.Errorf("the page lacks %q", want)
	}
	if err, _ := r.Stop(t); err != nil {
		t.Errorf("Run = %v, want nil (a clean shutdown)", err)
	}
}

// TestSourceWithoutNew: a Source without New is an error at start.
func TestSourceWithoutNew(t *testing.T) {
	h, err := host.New(parse(t, `{}`))
	if err != nil {
		t.Fatal(err)
	}
	if err := h.Register("f", stream.HandlerFunc(func(context.Context, *stream.Batch) error { return nil }), host.Source{Describe: "x"}); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), wait)
	defer cancel()
	if err := h.Run(ctx); err == nil || !strings.Contains(err.Error(), "host.Source without New") {
		t.Fatalf("Run = %v, want the missing New reported", err)
	}
}
