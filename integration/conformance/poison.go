package conformance

import (
	"context"
	"strconv"
	"sync"
	"testing"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/redeliver-go/redeliver/adapters/franz"
	"github.com/redeliver-go/redeliver/checkpoint"
	"github.com/redeliver-go/redeliver/stream"
	"github.com/redeliver-go/redeliver/stream/streamtest"
)

// A per-record handler that fails on one record in the middle of a batch,
// just after a record that fails once: once the poison record's own
// retries are spent, it alone goes to the dead-letter topic, with its own
// offset, deliveries, first failure and error, and every other record is
// handled.
func poisonRecordDeadLettered(t *testing.T, e *env) {
	if e.backend != nil {
		t.Skip("reads the dead-letter topic through Kafka; on other backends DeadLetterAfterExhaustion covers the dead-letter path, and the engine's record isolation is the same for every adapter")
	}
	const n, poison = 30, 13
	e.createTopic(1)
	dlq := e.topic + ".dlq"
	ctx, cancel := context.WithTimeout(context.Background(), wait)
	defer cancel()
	if resp, err := e.adm.CreateTopic(ctx, 1, 1, nil, dlq); err != nil || resp.Err != nil {
		t.Fatalf("create %s: %v %v", dlq, err, resp.Err)
	}
	e.produce(0, 0, n)
	pub, err := franz.NewPublisher(e.cl)
	if err != nil {
		t.Fatal(err)
	}
	dl, err := stream.DeadLetter(pub, dlq)
	if err != nil {
		t.Fatal(err)
	}
	// The record before the poison one fails once: the poison record's
	// retries are its own all the same.
	var (
		mu    sync.Mutex
		calls = map[int64]int{}
	)
	h := stream.PerRecord(func(_ context.Context, r *stream.Record) error {
		mu.Lock()
		calls[r.Offset]++
		n := calls[r.Offset]
		mu.Unlock()
		if r.Offset == poison || r.Offset == poison-1 && n == 1 {
			return errHandler
		}
		return nil
	})
	e.start("a", spec{handler: h, maxBatch: 10,
		policy: checkpoint.Policy{MaxRetries: 2, Backoff: checkpoint.Fixed(short)},
		opts:   []stream.Option{stream.WithExhaustionAction(dl)},
	})
	e.waitCommitted(map[int32]int64{0: n})

	cl, err := kgo.NewClient(kgo.SeedBrokers(e.b.Addrs...), kgo.ConsumeTopics(dlq), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	var got []*kgo.Record
	for len(got) < 1 {
		fs := cl.PollFetches(ctx)
		if ctx.Err() != nil {
			t.Fatalf("%s is empty, want the poison record", dlq)
		}
		got = append(got, fs.Records()...)
	}
	// Anything more would have come with the first fetch: the dead-letter
	// produce is one call.
	if len(got) != 1 {
		t.Fatalf("%s has %d records, want 1 (the poison record alone)", dlq, len(got))
	}
	hs := map[string]string{}
	var headers []stream.Header
	for _, h := range got[0].Headers {
		hs[h.Key] = string(h.Value)
		headers = append(headers, stream.Header{Key: h.Key, Value: h.Value})
	}
	// The checker verifies the dead letter's headers against the record's
	// own deliveries, first failure and error as the history saw them.
	e.hist.rec.Add(streamtest.DeadLetteredEvent(stream.Record{Headers: headers}))
	e.hist.check(t, map[int32]int64{0: n})
	if hs[stream.HeaderOffset] != strconv.Itoa(poison) || hs[stream.HeaderError] != errHandler.Error() || string(got[0].Value) != "0:"+strconv.Itoa(poison) ||
		hs[stream.HeaderDeliveries] != "3" || hs[stream.HeaderDLQDeliveryCount] != "3" {
		t.Fatalf("dead-lettered %q with headers %v, want record %d with its own 3 deliveries", got[0].Value, hs, poison)
	}
	// The records after the poison one were delivered as a batch of their
	// own, once, and handled.
	var after int
	for _, d := range e.hist.deliveries(0) {
		if d.first == poison+1 {
			after++
		}
	}
	if after != 1 {
		t.Fatalf("%d deliveries starting after the poison record, want 1\n%s", after, e.hist.dump())
	}
}

// A per-record handler whose records each fail once, under a policy of one
// retry: each record's failure counts for that record alone, so nothing is
// given up or dead-lettered, and every record is handled.
func recordsFailOnce(t *testing.T, e *env) {
	const n = 30
	e.createTopic(1)
	e.produce(0, 0, n)
	var (
		mu    sync.Mutex
		calls = map[int64]int{}
	)
	h := stream.PerRecord(func(_ context.Context, r *stream.Record) error {
		mu.Lock()
		defer mu.Unlock()
		if calls[r.Offset]++; calls[r.Offset] == 1 {
			return errHandler
		}
		return nil
	})
	dl, err := stream.DeadLetter(e.hist.rec.Publisher(nil), e.topic+".dlq")
	if err != nil {
		t.Fatal(err)
	}
	e.start("a", spec{handler: h, maxBatch: 10,
		policy: checkpoint.Policy{MaxRetries: 1, Backoff: checkpoint.Fixed(short)},
		opts:   []stream.Option{stream.WithExhaustionAction(dl)},
	})
	e.waitCommitted(map[int32]int64{0: n})
	e.hist.check(t, map[int32]int64{0: n})
	for _, ev := range e.hist.rec.Events() {
		if ev.Kind == streamtest.GivenUp || ev.Kind == streamtest.DeadLettered {
			t.Fatalf("%v %d-%d: no record failed more than once, and the policy allows one retry\n%s", ev.Kind, ev.First, ev.Last, e.hist.dump())
		}
	}
	mu.Lock()
	defer mu.Unlock()
	for o := range int64(n) {
		if calls[o] != 2 {
			t.Errorf("record %d handled %d times, want 2 (one failure, one success)", o, calls[o])
		}
	}
}
