package tests

import (
	"context"
	"testing"

	"github.com/redeliver-go/redeliver/adapters/internal/kafkatest"
	"github.com/redeliver-go/redeliver/adapters/kafkago"
	"github.com/redeliver-go/redeliver/stream"
	"github.com/redeliver-go/redeliver/stream/streamtest"
)

// Run returns within a second of its context's cancellation whatever
// request the broker is slow to answer.
func TestShutdownUnderSlowAnswers(t *testing.T) {
	kafkatest.ShutdownUnderSlowAnswers(t, kafkatest.SlowKeys, func(t *testing.T, ctx context.Context, addrs []string) <-chan error {
		c, err := kafkago.New(newProcessor(t, streamtest.Succeed), kafkago.WithGroupConfig(groupConfig(addrs, "g", "t")))
		if err != nil {
			t.Fatal(err)
		}
		done := make(chan error, 1)
		go func() { done <- c.Run(ctx) }()
		return done
	})
}

// A commit in flight when Run's context is cancelled, answered by the
// broker soon after, is reported to the worker: a clean shutdown keeps the
// final commit of the records it handled.
func TestShutdownKeepsCommitInFlight(t *testing.T) {
	kafkatest.CommitAnsweredAtShutdown(t, func(t *testing.T, ctx context.Context, addrs []string, hooks stream.Hooks) <-chan error {
		c, err := kafkago.New(newProcessor(t, streamtest.Succeed, stream.WithHooks(hooks)), kafkago.WithGroupConfig(groupConfig(addrs, "g", "t")))
		if err != nil {
			t.Fatal(err)
		}
		done := make(chan error, 1)
		go func() { done <- c.Run(ctx) }()
		return done
	})
}
