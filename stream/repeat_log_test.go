package stream_test

import (
	"context"
	"errors"
	"log/slog"
	"regexp"
	"testing"
	"testing/synctest"
	"time"

	"github.com/redeliver-go/redeliver/checkpoint"
	"github.com/redeliver-go/redeliver/stream"
	"github.com/redeliver-go/redeliver/stream/streamtest"
)

// A failed try of the exhaustion action that blocked 10s (a dead-letter
// publisher waiting out its write timeout) is logged with how long it took
// beside the delay after it: the line said delay=39ms while the next try
// came 10s later, with nothing explaining the rest.
func TestActionRetryLogSaysHowLongTheTryTook(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p := streamtest.NewPartition("t", 0, 1)
		p.AppendN(time.Now(), 1)
		var tries []time.Time
		action := func(ctx context.Context, _ *stream.Batch, _ *checkpoint.ExhaustedError) error {
			tries = append(tries, time.Now())
			if len(tries) == 1 {
				time.Sleep(10 * time.Second) // the publisher's own timeout
				return errors.New("publish: write timeout")
			}
			return nil
		}
		var logs syncBuffer
		proc, err := stream.NewProcessor(stream.HandlerFunc(func(context.Context, *stream.Batch) error { return errTransient }),
			stream.WithExhaustionAction(action), stream.WithOperationBackoff(checkpoint.Fixed(39*time.Millisecond)),
			stream.WithLogger(slog.New(slog.NewTextHandler(&logs, nil))))
		if err != nil {
			t.Fatal(err)
		}
		if !runParts(t, proc, time.Hour, p) {
			t.Fatal("not done")
		}
		if len(tries) != 2 || tries[1].Sub(tries[0]) != 10*time.Second+39*time.Millisecond {
			t.Fatalf("tries at %v, want two, 10.039s apart", tries)
		}
		if !regexp.MustCompile(`exhaustion action failed, will try again after the delay" .*try=1 took=10s delay=39ms`).MatchString(logs.String()) {
			t.Errorf("log does not give the try's 10s beside the 39ms delay:\n%s", logs.String())
		}
	})
}
