package share_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/redeliver-go/redeliver/adapters/franz/share"
	"github.com/redeliver-go/redeliver/adapters/internal/kafkatest"
	"github.com/redeliver-go/redeliver/checkpoint"
	"github.com/redeliver-go/redeliver/stream"
)

// capture is a Publisher that keeps what it was given.
type capture struct {
	mu  sync.Mutex
	got []stream.Record
}

func (p *capture) Publish(_ context.Context, _ string, recs []stream.Record) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.got = append(p.got, recs...)
	return nil
}

// The share consumer reads a handler's result as the Processor does: a
// failure beside a RetryResult, a RetryResult marked Permanent and an
// invalid RetryResult are failures, so under a policy of no retries the
// record is given up to its dead letter at its first delivery. Before, each
// was taken for a retry request: the record was delivered again and then
// accepted, its failure never dead-lettered.
func TestResultsReadAsTheProcessorReadsThem(t *testing.T) {
	for _, tt := range []struct {
		name string
		res  error
	}{
		{"a failure beside a RetryResult", errors.Join(errors.New("inventory down"), stream.Retry(1, 0))},
		{"a RetryResult marked Permanent", checkpoint.Permanent(stream.Retry(1, 0))},
		{"an invalid RetryResult", stream.Retry(-5, 0)},
	} {
		t.Run(tt.name, func(t *testing.T) {
			const topic, group = "orders", "g"
			addrs := cluster(t, topic, 1, time.Second, 5)
			kafkatest.Produce(t, addrs, topic, 0, 0, 1)
			var mu sync.Mutex
			calls := 0
			pub := &capture{}
			dl, err := stream.DeadLetter(pub, "dlq")
			if err != nil {
				t.Fatal(err)
			}
			acked := make(chan share.EventKind, 1)
			proc, err := stream.NewProcessor(stream.HandlerFunc(func(context.Context, *stream.Batch) error {
				mu.Lock()
				defer mu.Unlock()
				calls++
				return tt.res
			}), stream.WithPolicy(checkpoint.Policy{}), stream.WithExhaustionAction(dl))
			if err != nil {
				t.Fatal(err)
			}
			stop := run(t, addrs, group, topic, proc, share.WithLanes(1), share.WithEvents(func(e share.Event) {
				if e.Kind == share.Accepted || e.Kind == share.Rejected {
					select {
					case acked <- e.Kind:
					default:
					}
				}
			}))
			var kind share.EventKind
			select {
			case kind = <-acked:
			case <-time.After(wait):
				t.Fatal("the record was neither accepted nor rejected")
			}
			if err := stop(); err != nil {
				t.Fatal(err)
			}
			mu.Lock()
			defer mu.Unlock()
			pub.mu.Lock()
			defer pub.mu.Unlock()
			if kind != share.Rejected || calls != 1 || len(pub.got) != 1 {
				t.Fatalf("record %v after %d deliveries, %d dead-lettered; want rejected after 1, dead-lettered", kind, calls, len(pub.got))
			}
		})
	}
}
