package kafkago_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/segmentio/kafka-go"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/redeliver-go/redeliver/adapters/kafkago"
	"github.com/redeliver-go/redeliver/stream"
	"github.com/redeliver-go/redeliver/stream/streamtest"
)

// wait bounds every wait of these tests.
const wait = 20 * time.Second

// newCluster starts an in-process kfake cluster with one topic of the given
// partitions and returns it with its addresses.
func newCluster(t testing.TB, topic string, partitions int32, opts ...kfake.Opt) (*kfake.Cluster, []string) {
	t.Helper()
	opts = append([]kfake.Opt{kfake.NumBrokers(1), kfake.SeedTopics(partitions, topic), kfake.GroupMinSessionTimeout(100 * time.Millisecond)}, opts...)
	c, err := kfake.NewCluster(opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	return c, c.ListenAddrs()
}

// produce writes n records to the partition, with values "<partition>-<i>"
// for i from first, and waits for them to be acknowledged.
func produce(t testing.TB, addrs []string, topic string, partition int32, first, n int) {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(addrs...), kgo.RecordPartitioner(kgo.ManualPartitioner()))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	recs := make([]*kgo.Record, n)
	for i := range recs {
		recs[i] = &kgo.Record{Topic: topic, Partition: partition, Value: []byte(fmt.Sprintf("%d-%d", partition, first+i))}
	}
	ctx, cancel := context.WithTimeout(context.Background(), wait)
	defer cancel()
	if err := cl.ProduceSync(ctx, recs...).FirstErr(); err != nil {
		t.Fatal(err)
	}
}

// committed reads the group's committed offsets through the broker; a group
// that does not exist yet has none.
func committed(t testing.TB, addrs []string, group string) kadm.OffsetResponses {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(addrs...))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), wait)
	defer cancel()
	offs, err := kadm.NewClient(cl).FetchOffsets(ctx, group)
	if errors.Is(err, kerr.GroupIDNotFound) {
		return nil
	}
	if err != nil {
		t.Fatal(err)
	}
	return offs
}

// waitCommitted waits until every partition's committed offset is at least
// want[partition].
func waitCommitted(t testing.TB, addrs []string, group, topic string, want map[int32]int64) {
	t.Helper()
	deadline := time.Now().Add(wait)
	for {
		offs := committed(t, addrs, group)
		ok := true
		for p, w := range want {
			o, found := offs.Lookup(topic, p)
			if !found || o.Err != nil || o.At < w {
				ok = false
			}
		}
		if ok {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("committed offsets %v, waiting for %v", offsetsOf(offs, topic), want)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func offsetsOf(offs kadm.OffsetResponses, topic string) map[int32]int64 {
	m := make(map[int32]int64)
	for p, o := range offs[topic] {
		m[p] = o.At
	}
	return m
}

// groupConfig is the group configuration of these tests: fast heartbeats
// and a short session, so that rebalances take little time.
func groupConfig(addrs []string, group, topic string) kafka.ConsumerGroupConfig {
	return kafka.ConsumerGroupConfig{
		ID: group, Brokers: addrs, Topics: []string{topic},
		HeartbeatInterval: 100 * time.Millisecond,
		SessionTimeout:    time.Second,
		RebalanceTimeout:  2 * time.Second,
		JoinGroupBackoff:  100 * time.Millisecond,
	}
}

// running is a consumer started by start.
type running struct {
	c      *kafkago.Consumer
	cancel context.CancelFunc
	done   chan error
}

// start runs a consumer of topic in group over proc and stops it at the end
// of the test. Options of type func(*kafka.ConsumerGroupConfig) and
// func(*kafka.ReadBatchConfig) change the group and fetch configurations.
func start(t testing.TB, addrs []string, group, topic string, proc *stream.Processor, opts ...any) *running {
	t.Helper()
	gc := groupConfig(addrs, group, topic)
	fc := kafka.ReadBatchConfig{MaxWait: 100 * time.Millisecond}
	var kopts []kafkago.Option
	for _, o := range opts {
		switch o := o.(type) {
		case func(*kafka.ConsumerGroupConfig):
			o(&gc)
		case func(*kafka.ReadBatchConfig):
			o(&fc)
		case kafkago.Option:
			kopts = append(kopts, o)
		default:
			t.Fatalf("option %T", o)
		}
	}
	c, err := kafkago.New(proc, append([]kafkago.Option{kafkago.WithGroupConfig(gc), kafkago.WithFetchConfig(fc)}, kopts...)...)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	r := &running{c: c, cancel: cancel, done: make(chan error, 1)}
	go func() { r.done <- c.Run(ctx) }()
	t.Cleanup(func() { r.stop(t) })
	return r
}

// stop stops the consumer and returns Run's error.
func (r *running) stop(t testing.TB) error {
	t.Helper()
	r.cancel()
	select {
	case err := <-r.done:
		r.done <- err
		return err
	case <-time.After(wait):
		t.Fatal("consumer did not stop")
		return nil
	}
}

func newProcessor(t testing.TB, h stream.Handler, opts ...stream.Option) *stream.Processor {
	t.Helper()
	p, err := stream.NewProcessor(h, opts...)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// checkHistory checks one partition's deliveries: every delivery either
// repeats the batch before it (a retry) or starts right after it, the first
// starts at offset 0, and the last succeeded batch ends at end-1.
func checkHistory(t *testing.T, ds []streamtest.Delivery, end int64) {
	t.Helper()
	var first, last int64 = -1, -1
	for i, d := range ds {
		switch {
		case d.FirstOffset == first && d.LastOffset == last: // redelivery
		case d.FirstOffset == last+1:
			first, last = d.FirstOffset, d.LastOffset
		default:
			t.Fatalf("delivery %d: offsets %d-%d after batch %d-%d: out of order or a gap", i, d.FirstOffset, d.LastOffset, first, last)
		}
	}
	if last != end-1 {
		t.Fatalf("last batch ends at %d, want %d", last, end-1)
	}
}

// logRecorder is a slog handler that keeps the messages it is given, with
// their attributes.
type logRecorder struct {
	mu   sync.Mutex
	msgs []string
}

func (l *logRecorder) logger() *slog.Logger { return slog.New(l) }

func (l *logRecorder) Enabled(context.Context, slog.Level) bool { return true }
func (l *logRecorder) WithAttrs([]slog.Attr) slog.Handler       { return l }
func (l *logRecorder) WithGroup(string) slog.Handler            { return l }
func (l *logRecorder) Handle(_ context.Context, r slog.Record) error {
	var b strings.Builder
	b.WriteString(r.Message)
	r.Attrs(func(a slog.Attr) bool {
		fmt.Fprintf(&b, " %s=%v", a.Key, a.Value)
		return true
	})
	l.mu.Lock()
	l.msgs = append(l.msgs, b.String())
	l.mu.Unlock()
	return nil
}

// matching returns the messages that contain s.
func (l *logRecorder) matching(s string) []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []string
	for _, m := range l.msgs {
		if strings.Contains(m, s) {
			out = append(out, m)
		}
	}
	return out
}

// valueOf is the value produce gives the record at offset of partition, when
// the partition was produced from 0.
func valueOf(partition int32, offset int64) string { return fmt.Sprintf("%d-%d", partition, offset) }

var errInjected = errors.New("injected failure")
