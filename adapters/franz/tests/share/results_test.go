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

// A batch handler that names the failed record with FailedAt, whose eight
// records each fail once, under a policy of one retry: each failure counts
// for its record alone, the records after it count nothing (at index 0
// too), so nothing is given up and each record is delivered twice.
// FailedAt(i, nil) fails its record too. Before, FailedAt at index 0 counted
// a failure for every record of the call, and 7 of the 8 were dead-lettered
// after one delivery; FailedAt(i, nil) accepted the record.
func TestFailedAtCountsForItsRecordOnly(t *testing.T) {
	for _, tt := range []struct {
		name  string
		cause func(off int64) error
	}{
		{"an error", func(int64) error { return errors.New("busy") }},
		{"nil", func(int64) error { return nil }},
	} {
		t.Run(tt.name, func(t *testing.T) {
			const topic, group, n = "orders", "g", 8
			addrs := cluster(t, topic, 1, 5*time.Second, 5)
			kafkatest.Produce(t, addrs, topic, 0, 0, n)
			var mu sync.Mutex
			calls, acked := map[int64]int{}, map[int64]share.EventKind{}
			pub := &capture{}
			dl, err := stream.DeadLetter(pub, "dlq")
			if err != nil {
				t.Fatal(err)
			}
			proc, err := stream.NewProcessor(stream.HandlerFunc(func(_ context.Context, b *stream.Batch) error {
				mu.Lock()
				defer mu.Unlock()
				for i, r := range b.Records {
					if calls[r.Offset]++; calls[r.Offset] == 1 {
						return stream.FailedAt(i, tt.cause(r.Offset))
					}
				}
				return nil
			}), stream.WithPolicy(checkpoint.Policy{MaxRetries: 1, Backoff: checkpoint.Fixed(50 * time.Millisecond)}), stream.WithExhaustionAction(dl))
			if err != nil {
				t.Fatal(err)
			}
			stop := run(t, addrs, group, topic, proc, share.WithLanes(1), share.WithEvents(func(e share.Event) {
				if e.Kind == share.Accepted || e.Kind == share.Rejected {
					mu.Lock()
					acked[e.Offset] = e.Kind
					mu.Unlock()
				}
			}))
			waitFor(t, "every record acknowledged", func() bool {
				mu.Lock()
				defer mu.Unlock()
				return len(acked) == n
			})
			if err := stop(); err != nil {
				t.Fatal(err)
			}
			mu.Lock()
			defer mu.Unlock()
			for o := range int64(n) {
				if calls[o] != 2 || acked[o] != share.Accepted {
					t.Errorf("record %d: %d deliveries, then %v; want 2, then accepted", o, calls[o], acked[o])
				}
			}
			if len(pub.got) != 0 {
				t.Errorf("%d records dead-lettered, want none", len(pub.got))
			}
		})
	}
}
