package franz_test

import (
	"context"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/redeliver-go/redeliver/adapters/franz"
	"github.com/redeliver-go/redeliver/stream"
	"github.com/redeliver-go/redeliver/stream/streamtest"
)

// waitLogged waits until buf holds s, or fails after within.
func waitLogged(t *testing.T, buf *syncBuffer, s string, within time.Duration) {
	t.Helper()
	deadline := time.Now().Add(within)
	for !strings.Contains(buf.String(), s) {
		if time.Now().After(deadline) {
			t.Fatalf("no log line with %q in %v:\n%s", s, within, buf.String())
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// A wrong topic name and a missing dead-letter topic are logged at Warn
// within seconds of the start and reported by Health, until the topics
// are created; an unreachable broker is logged at Error.
func TestStartChecks(t *testing.T) {
	t.Run("topics", func(t *testing.T) {
		addrs := newCluster(t, "t", 1)
		var buf syncBuffer
		pub := new(franz.Publisher)
		dl, err := stream.DeadLetter(pub, "t.dlq")
		if err != nil {
			t.Fatal(err)
		}
		proc := newProcessor(t, streamtest.Succeed, stream.WithExhaustionAction(dl))
		r := start(t, addrs, "g", "tt", proc, franz.WithPublisher(pub), franz.WithLogger(slog.New(slog.NewTextHandler(&buf, nil))))
		waitLogged(t, &buf, `level=WARN msg="redeliver: a topic the consumer reads is not there`, 5*time.Second)
		waitLogged(t, &buf, `level=WARN msg="redeliver: a dead-letter topic is not there`, 5*time.Second)
		err = r.c.Health()
		for _, want := range []string{`consumed topic "tt"`, `dead-letter topic "t.dlq"`, "UNKNOWN_TOPIC_OR_PARTITION"} {
			if err == nil || !strings.Contains(err.Error(), want) {
				t.Errorf("Health: %v, want it to say %s", err, want)
			}
		}
		cl, err := kgo.NewClient(kgo.SeedBrokers(addrs...))
		if err != nil {
			t.Fatal(err)
		}
		defer cl.Close()
		ctx, cancel := context.WithTimeout(context.Background(), wait)
		defer cancel()
		if _, err := kadm.NewClient(cl).CreateTopics(ctx, 1, 1, nil, "tt", "t.dlq"); err != nil {
			t.Fatal(err)
		}
		for deadline := time.Now().Add(10 * time.Second); r.c.Health() != nil; time.Sleep(50 * time.Millisecond) {
			if time.Now().After(deadline) {
				t.Fatalf("Health still says %v after the topics were created", r.c.Health())
			}
		}
		waitLogged(t, &buf, "start check passes now", time.Second)
	})
	t.Run("unreachable", func(t *testing.T) {
		var buf syncBuffer
		c, err := franz.New(newProcessor(t, streamtest.Succeed), franz.WithLogger(slog.New(slog.NewTextHandler(&buf, nil))),
			franz.WithKgoOptions(kgo.SeedBrokers("127.0.0.1:1"), kgo.ConsumerGroup("g"), kgo.ConsumeTopics("t")))
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan error, 1)
		go func() { done <- c.Run(ctx) }()
		defer func() { cancel(); <-done }()
		waitLogged(t, &buf, `level=ERROR msg="redeliver: the brokers do not answer"`, 8*time.Second)
		if err := c.Health(); err == nil || !strings.Contains(err.Error(), "do not answer") {
			t.Errorf("Health: %v, want it to say the brokers do not answer", err)
		}
	})
	var zero franz.Consumer
	if err := zero.Health(); err == nil {
		t.Error("Health of a zero Consumer returned nil")
	}
}
