package conformance

import (
	"context"
	"strconv"
	"testing"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/redeliver-go/redeliver/adapters/franz"
	"github.com/redeliver-go/redeliver/checkpoint"
	"github.com/redeliver-go/redeliver/stream"
)

// A per-record handler that fails on one record in the middle of a batch:
// once its retries are spent, that record alone goes to the dead-letter
// topic, with its own offset and error, and every other record is handled.
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
	h := stream.PerRecord(func(_ context.Context, r *stream.Record) error {
		if r.Offset == poison {
			return errHandler
		}
		return nil
	})
	e.start("a", spec{handler: h, maxBatch: 10,
		policy: checkpoint.Policy{MaxRetries: 2, Backoff: checkpoint.Fixed(short)},
		opts:   []stream.Option{stream.WithExhaustionAction(dl)},
	})
	e.waitCommitted(map[int32]int64{0: n})
	e.hist.check(t, map[int32]int64{0: n})

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
	for _, h := range got[0].Headers {
		hs[h.Key] = string(h.Value)
	}
	if hs[stream.HeaderOffset] != strconv.Itoa(poison) || hs[stream.HeaderError] != errHandler.Error() || string(got[0].Value) != "0:"+strconv.Itoa(poison) {
		t.Fatalf("dead-lettered %q with headers %v", got[0].Value, hs)
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
