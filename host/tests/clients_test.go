package tests

import (
	"bytes"
	"context"
	"log/slog"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/IBM/sarama"
	"github.com/confluentinc/confluent-kafka-go/v2/kafka"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/redeliver-go/redeliver/adapters/confluent/confluenthost"
	"github.com/redeliver-go/redeliver/adapters/franz/franzhost"
	"github.com/redeliver-go/redeliver/adapters/kafkago/kafkagohost"
	"github.com/redeliver-go/redeliver/adapters/sarama/saramahost"
	"github.com/redeliver-go/redeliver/host"
	"github.com/redeliver-go/redeliver/stream"
)

// The host's operator actions, status page and drain time through each of
// the four Kafka clients' host modules: franzhost, kafkagohost, saramahost
// and confluenthost.

// clients names the four adapters.
var clients = []string{"franz", "kafkago", "sarama", "confluent"}

// fastSarama makes sarama's group quick to join on kfake.
func fastSarama(c *sarama.Config) {
	c.Version = sarama.V3_9_0_0
	c.Consumer.Group.Heartbeat.Interval = 100 * time.Millisecond
	c.Consumer.Group.Session.Timeout = time.Second
	c.Consumer.Group.Rebalance.Timeout = 2 * time.Second
	c.Consumer.Group.Rebalance.Retry.Backoff = 100 * time.Millisecond
	c.Metadata.Retry.Backoff = 50 * time.Millisecond
	c.Consumer.MaxWaitTime = 100 * time.Millisecond // heartbeats share the fetches' connection
}

// fastConfluent makes librdkafka's group quick to join on kfake, with only
// its errors on stderr.
func fastConfluent(c kafka.ConfigMap) {
	c["session.timeout.ms"] = 1000
	c["heartbeat.interval.ms"] = 100
	c["topic.metadata.refresh.interval.ms"] = 500
	c["log_level"] = 3
}

// allAdapters returns the host options that give it all four Kafka
// adapters, each made quick to join kfake's groups.
func allAdapters(t testing.TB) []host.Option {
	t.Helper()
	fr, err := franzhost.New(franzhost.WithKgoOptions(kgo.ClientID("host-tests")))
	if err != nil {
		t.Fatal(err)
	}
	kg, err := kafkagohost.New(kafkagohost.WithGroupConfig(fastKafkaGo))
	if err != nil {
		t.Fatal(err)
	}
	sa, err := saramahost.New(saramahost.WithConfig(fastSarama))
	if err != nil {
		t.Fatal(err)
	}
	co, err := confluenthost.New(confluenthost.WithConfig(fastConfluent), confluenthost.WithProducerConfig(func(c kafka.ConfigMap) { c["log_level"] = 3 }))
	if err != nil {
		t.Fatal(err)
	}
	return []host.Option{host.WithAdapter(fr), host.WithAdapter(kg), host.WithAdapter(sa), host.WithAdapter(co)}
}

// logBuffer is a slog handler's output, safe to read while it is written.
type logBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *logBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *logBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// TestDrainReachesEachAdapter: the host's drain time (host.WithDrain) is
// the drain time of each adapter's consumer. A handler that ignores its
// context holds the stop; the host gives up on it after its drain time,
// and so does the adapter, which says so naming the partition, well before
// the adapter's own default of 25s.
func TestDrainReachesEachAdapter(t *testing.T) {
	for _, name := range clients {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			addrs := newCluster(t, 1, "orders")
			produce(t, addrs, "orders", 0, 3)
			var logs logBuffer
			log := slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelInfo}))
			const drain = 1500 * time.Millisecond
			h, err := host.New(nil, append(allAdapters(t), host.WithBrokers(addrs...), host.WithDrain(drain), host.WithLogger(log))...)
			if err != nil {
				t.Fatal(err)
			}
			release := make(chan struct{})
			t.Cleanup(func() { close(release) }) // after the host's Stop: cleanups run last first
			var began atomic.Bool
			if err := h.Register("orders", stream.HandlerFunc(func(context.Context, *stream.Batch) error {
				began.Store(true)
				<-release // ignores its context
				return nil
			}), host.Kafka{Adapter: name, Topic: "orders", Group: "orders-app"}); err != nil {
				t.Fatal(err)
			}
			r := start(t, h)
			waitFor(t, "the handler to hold a batch", began.Load)
			err, took := r.Stop(t)
			if err == nil || !strings.Contains(err.Error(), "drain time over") || took < drain {
				t.Errorf("Run = %v after %v, want the host's drain time over after %v", err, took, drain)
			}
			const want = "redeliver: stopping: drain time over, partitions left running"
			var seen string
			for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
				if seen = logs.String(); strings.Contains(seen, want) {
					break
				}
			}
			line := ""
			for l := range strings.Lines(seen) {
				if strings.Contains(l, want) {
					line = l
				}
			}
			if !strings.Contains(line, "drain="+drain.String()) || !strings.Contains(line, "orders") {
				t.Errorf("the %s adapter's drain log line is %q, want %q with drain=%v naming orders (the host's drain time, not the adapter's 25s)",
					name, line, want, drain)
			}
		})
	}
}

// TestActionsOnEachAdapter runs, on each adapter, a function whose
// partition stops at offset 2 after its one retry, on two topics: the
// status (JSON and page) shows it stopped, with its adapter; the page's
// resume action delivers the batch again, which now succeeds, and the
// checkpoint reaches the end; the skip action moves the checkpoint past
// the batch without delivering it again.
func TestActionsOnEachAdapter(t *testing.T) {
	for _, name := range clients {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			addrs := newCluster(t, 1, "resumed", "skipped")
			produce(t, addrs, "resumed", 0, 5)
			produce(t, addrs, "skipped", 0, 5)
			cfg := parse(t, `{
  "checkpointRetryPolicy": {"retryCount": 1, "sleepDuration": "10ms", "onExhausted": "stop"},
  "triggers": {
    "resumed": {"type": "kafka", "adapter": "`+name+`", "topic": "resumed", "consumerGroup": "resumed-app", "maxBatchSize": 1},
    "skipped": {"type": "kafka", "adapter": "`+name+`", "topic": "skipped", "consumerGroup": "skipped-app", "maxBatchSize": 1},
  },
}`)
			h, err := host.New(cfg, append(allAdapters(t), host.WithBrokers(addrs...), host.WithToken(token))...)
			if err != nil {
				t.Fatal(err)
			}
			var fixed atomic.Bool
			var skippedAt2 atomic.Int64 // deliveries of offset 2 of "skipped"
			if err := h.Register("resumed", stream.HandlerFunc(func(_ context.Context, b *stream.Batch) error {
				if b.FirstOffset() == 2 && !fixed.Load() {
					return errBoom
				}
				return nil
			})); err != nil {
				t.Fatal(err)
			}
			if err := h.Register("skipped", stream.HandlerFunc(func(_ context.Context, b *stream.Batch) error {
				if b.FirstOffset() == 2 {
					skippedAt2.Add(1)
					return errBoom
				}
				return nil
			})); err != nil {
				t.Fatal(err)
			}
			hd := h.Handler()
			start(t, h)
			waitFor(t, "both functions stopped", func() bool {
				st := status(t, hd)
				a, ok1 := partition(st, "resumed")
				b, ok2 := partition(st, "skipped")
				return ok1 && ok2 && a.State == host.StateStopped && b.State == host.StateStopped
			})
			st := status(t, hd)
			for _, f := range st.Functions {
				if f.Adapter != name {
					t.Errorf("function %s runs on %q in the status, want %q", f.Name, f.Adapter, name)
				}
			}
			p, _ := partition(st, "resumed")
			if p.Retry != 1 || p.Checkpoint != 2 || !strings.Contains(p.LastError, "boom") {
				t.Errorf("resumed = %+v, want stopped at 2 after 1 retry", p)
			}
			if o, ok := committed(t, addrs, "resumed-app").Lookup("resumed", 0); !ok || o.At != 2 {
				t.Errorf("committed %+v while stopped, want offset 2", o)
			}
			code, page := get(t, hd, "/")
			for _, want := range []string{"stopped after 1 retry", `action="/actions/resume"`, `action="/actions/skip"`} {
				if code != 200 || !strings.Contains(page, want) {
					t.Errorf("page (%d) lacks %q", code, want)
				}
			}

			auth := map[string]string{"Authorization": "Bearer " + token, "Accept": "application/json"}
			fixed.Store(true)
			rec := post(hd, "/actions/resume", url.Values{"function": {"resumed"}, "topic": {"resumed"}, "partition": {"0"}}, auth)
			if rec.Code != http.StatusOK {
				t.Fatalf("resume = %d %s", rec.Code, rec.Body)
			}
			waitCommitted(t, addrs, "resumed-app", "resumed", 0, 5)
			waitFor(t, "resumed flowing at 5", func() bool {
				p, ok := partition(status(t, hd), "resumed")
				return ok && p.State == host.StateFlowing && p.Checkpoint == 5
			})

			before := skippedAt2.Load()
			rec = post(hd, "/actions/skip", url.Values{"function": {"skipped"}, "topic": {"skipped"}, "partition": {"0"}}, auth)
			if rec.Code != http.StatusOK {
				t.Fatalf("skip = %d %s", rec.Code, rec.Body)
			}
			waitCommitted(t, addrs, "skipped-app", "skipped", 0, 5)
			if n := skippedAt2.Load(); n != before {
				t.Errorf("offset 2 delivered %d more times after the skip, want 0", n-before)
			}
			if rec := post(hd, "/actions/skip", url.Values{"function": {"skipped"}, "topic": {"skipped"}, "partition": {"0"}}, auth); rec.Code != http.StatusConflict {
				t.Errorf("skip of a flowing partition = %d %s, want 409", rec.Code, rec.Body)
			}
		})
	}
}
