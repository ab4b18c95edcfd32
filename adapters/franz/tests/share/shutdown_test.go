package share_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/redeliver-go/redeliver/adapters/franz/share"
	"github.com/redeliver-go/redeliver/adapters/internal/kafkatest"
	"github.com/redeliver-go/redeliver/checkpoint"
	"github.com/redeliver-go/redeliver/stream"
)

// Run returns within a second of its context's cancellation whatever
// request the broker is slow to answer. Every other record fails and is
// held for a retry, so that the others' acknowledgements are flushed on
// their own (ShareAcknowledge) while it waits.
func TestShutdownUnderSlowAnswers(t *testing.T) {
	kafkatest.ShutdownUnderSlowAnswers(t, kafkatest.ShareSlowKeys, func(t *testing.T, ctx context.Context, addrs []string) <-chan error {
		proc, err := stream.NewProcessor(stream.PerRecord(func(_ context.Context, r *stream.Record) error {
			if r.Offset%2 == 1 {
				return errors.New("held for a retry")
			}
			return nil
		}), stream.WithPolicy(checkpoint.Policy{MaxRetries: 3, Backoff: checkpoint.Fixed(time.Minute)}))
		if err != nil {
			t.Fatal(err)
		}
		c, err := share.New(proc, share.WithResetEarliest(), share.WithLanes(2),
			share.WithKgoOptions(kgo.SeedBrokers(addrs...), kgo.ShareGroup("g"), kgo.ConsumeTopics("t"), kgo.FetchMaxWait(100*time.Millisecond)))
		if err != nil {
			t.Fatal(err)
		}
		done := make(chan error, 1)
		go func() { done <- c.Run(ctx) }()
		return done
	})
}
