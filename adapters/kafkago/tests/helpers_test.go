package tests

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

	"github.com/redeliver-go/redeliver/adapters/internal/kafkatest"
	"github.com/redeliver-go/redeliver/stream"
)

// The shared helpers, under the names these tests use.
const wait = kafkatest.Wait

var (
	newCluster    = kafkatest.NewCluster
	produce       = kafkatest.Produce
	committed     = kafkatest.Committed
	waitCommitted = kafkatest.WaitCommitted
	offsetsOf     = kafkatest.OffsetsOf
	checkHistory  = kafkatest.CheckHistory
)

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

// start runs a consumer of topic in group over proc and stops it at the end
// of the test. Options of type func(*kafka.ConsumerGroupConfig) and
// func(*kafka.ReadBatchConfig) change the group and fetch configurations.
func start(t testing.TB, addrs []string, group, topic string, proc *stream.Processor, opts ...any) *kafkatest.Running {
	t.Helper()
	return kafkatest.Start(t, adapter, kafkatest.Config{Addrs: addrs, Group: group, Topic: topic, Processor: proc, Options: opts})
}

func newProcessor(t testing.TB, h stream.Handler, opts ...stream.Option) *stream.Processor {
	t.Helper()
	p, err := stream.NewProcessor(h, opts...)
	if err != nil {
		t.Fatal(err)
	}
	return p
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
	b.WriteString(r.Level.String())
	b.WriteString(" ")
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
