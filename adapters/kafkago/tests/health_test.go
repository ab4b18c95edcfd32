package tests

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/segmentio/kafka-go"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/redeliver-go/redeliver/adapters/kafkago"
	"github.com/redeliver-go/redeliver/stream"
	"github.com/redeliver-go/redeliver/stream/streamtest"
)

// waitLogged waits for a message logged at level that contains s, within.
func waitLogged(t *testing.T, lr *logRecorder, level, s string, within time.Duration) {
	t.Helper()
	deadline := time.Now().Add(within)
	for {
		for _, m := range lr.matching(s) {
			if strings.HasPrefix(m, level+" ") {
				return
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("no %s message with %q in %v; log:\n%q", level, s, within, lr.matching("redeliver"))
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// A wrong topic name is logged at Warn within seconds of the start and
// reported by Health until the topic is created; unreachable brokers are
// logged at Error; a partition whose fetches fail is reported by Health.
func TestStartChecks(t *testing.T) {
	t.Run("topic", func(t *testing.T) {
		_, addrs := newCluster(t, "t", 1)
		var lr logRecorder
		r := start(t, addrs, "g", "tt", newProcessor(t, streamtest.Succeed), kafkago.WithLogger(lr.logger()))
		waitLogged(t, &lr, "WARN", "a topic the consumer reads is not there", 5*time.Second)
		if err := r.c.Health(); err == nil || !strings.Contains(err.Error(), `consumed topic "tt"`) {
			t.Errorf("Health: %v, want it to name topic tt", err)
		}
		cl, err := kgo.NewClient(kgo.SeedBrokers(addrs...))
		if err != nil {
			t.Fatal(err)
		}
		defer cl.Close()
		ctx, cancel := context.WithTimeout(context.Background(), wait)
		defer cancel()
		if _, err := kadm.NewClient(cl).CreateTopics(ctx, 1, 1, nil, "tt"); err != nil {
			t.Fatal(err)
		}
		for deadline := time.Now().Add(10 * time.Second); r.c.Health() != nil; time.Sleep(50 * time.Millisecond) {
			if time.Now().After(deadline) {
				t.Fatalf("Health still says %v after the topic was created", r.c.Health())
			}
		}
	})
	t.Run("dead-letter topic", func(t *testing.T) {
		_, addrs := newCluster(t, "t", 1)
		var lr logRecorder
		w := &kafka.Writer{Addr: kafka.TCP(addrs...), RequiredAcks: kafka.RequireAll}
		defer w.Close()
		pub, err := kafkago.NewPublisher(w)
		if err != nil {
			t.Fatal(err)
		}
		dl, err := stream.DeadLetter(pub, "t.dlq")
		if err != nil {
			t.Fatal(err)
		}
		r := start(t, addrs, "g", "t", newProcessor(t, streamtest.Succeed, stream.WithExhaustionAction(dl)), kafkago.WithLogger(lr.logger()))
		waitLogged(t, &lr, "WARN", "a dead-letter topic is not there", 5*time.Second)
		if err := r.c.Health(); err == nil || !strings.Contains(err.Error(), `dead-letter topic "t.dlq"`) {
			t.Errorf("Health: %v, want it to name the dead-letter topic t.dlq", err)
		}
		cl, err := kgo.NewClient(kgo.SeedBrokers(addrs...))
		if err != nil {
			t.Fatal(err)
		}
		defer cl.Close()
		ctx, cancel := context.WithTimeout(context.Background(), wait)
		defer cancel()
		if _, err := kadm.NewClient(cl).CreateTopics(ctx, 1, 1, nil, "t.dlq"); err != nil {
			t.Fatal(err)
		}
		// The writer's transport refreshes what it knows of the cluster
		// every few seconds (its MetadataTTL, 6s).
		for deadline := time.Now().Add(15 * time.Second); r.c.Health() != nil; time.Sleep(50 * time.Millisecond) {
			if time.Now().After(deadline) {
				t.Fatalf("Health still says %v after the topic was created", r.c.Health())
			}
		}
		waitLogged(t, &lr, "INFO", "start check passes now", time.Second)
	})
	t.Run("unreachable", func(t *testing.T) {
		var lr logRecorder
		c, err := kafkago.New(newProcessor(t, streamtest.Succeed), kafkago.WithLogger(lr.logger()),
			kafkago.WithGroupConfig(kafka.ConsumerGroupConfig{ID: "g", Brokers: []string{"127.0.0.1:1"}, Topics: []string{"t"}}))
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan error, 1)
		go func() { done <- c.Run(ctx) }()
		defer func() { cancel(); <-done }()
		waitLogged(t, &lr, "ERROR", "the brokers do not answer", 8*time.Second)
		if err := c.Health(); err == nil || !strings.Contains(err.Error(), "do not answer") {
			t.Errorf("Health: %v, want it to say the brokers do not answer", err)
		}
	})
	t.Run("fetch", func(t *testing.T) {
		_, addrs := newCluster(t, "t", 1)
		produce(t, addrs, "t", 0, 0, 3)
		r := start(t, addrs, "g", "t", newProcessor(t, streamtest.Succeed))
		waitCommitted(t, addrs, "g", "t", map[int32]int64{0: 3})
		if err := r.c.Health(); err != nil {
			t.Fatalf("Health of a consumer that works: %v", err)
		}
		deleteTopic(t, addrs, "t")
		for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(50 * time.Millisecond) {
			err := r.c.Health()
			if err != nil && strings.Contains(err.Error(), "fetching t/0 fails") {
				t.Log(err)
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("Health says %v after the topic was deleted, want the partition's failing fetches", err)
			}
		}
	})
	var zero kafkago.Consumer
	if err := zero.Health(); err == nil {
		t.Error("Health of a zero Consumer returned nil")
	}
}
