package stream_test

import (
	"context"
	"errors"
	"testing"

	"github.com/redeliver-go/redeliver/stream"
	"github.com/redeliver-go/redeliver/stream/streamtest"
)

// A claim that ends while the handler runs (its partition revoked, a
// shutdown) abandons the batch even though the handler succeeded: no
// checkpoint, an Abandoned event. With no Delivered hook and no outage
// budget, the success path the engine takes without reading the clock,
// and with a hook.
func TestClaimEndedDuringASuccessfulCallWritesNoCheckpoint(t *testing.T) {
	stop := errors.New("partition revoked")
	for _, tc := range []struct {
		name      string
		delivered bool
	}{{"no Delivered hook", false}, {"Delivered hook", true}} {
		t.Run(tc.name, func(t *testing.T) {
			ctx, cancel := context.WithCancelCause(t.Context())
			defer cancel(nil)
			h := stream.HandlerFunc(func(context.Context, *stream.Batch) error {
				cancel(stop)
				return nil
			})
			var abandoned []stream.AbandonedEvent
			var outcomes []stream.Outcome
			hooks := stream.Hooks{Abandoned: func(e stream.AbandonedEvent) { abandoned = append(abandoned, e) }}
			if tc.delivered {
				hooks.Delivered = func(e stream.DeliveredEvent) { outcomes = append(outcomes, e.Outcome) }
			}
			proc, err := stream.NewProcessor(h, stream.WithHooks(hooks))
			if err != nil {
				t.Fatal(err)
			}
			c := streamtest.NewGenerator(2, 10, 10)
			if err := proc.Process(ctx, c); !errors.Is(err, stop) {
				t.Fatalf("Process returned %v, want the claim's cause %v", err, stop)
			}
			if last, _ := c.Committed(); last != -1 {
				t.Fatalf("checkpoint written at %d after the claim ended during the call, want none", last)
			}
			if len(abandoned) != 1 || abandoned[0].FirstOffset != 0 || !errors.Is(abandoned[0].Cause, stop) {
				t.Fatalf("abandoned events %+v, want one for offset 0 with the claim's cause", abandoned)
			}
			if tc.delivered && (len(outcomes) != 1 || outcomes[0] != stream.Cancelled) {
				t.Fatalf("delivered outcomes %v, want [Cancelled]", outcomes)
			}
		})
	}
}
