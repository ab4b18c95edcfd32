package conformance

import (
	"context"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/redeliver-go/redeliver/adapters/franz"
	"github.com/redeliver-go/redeliver/checkpoint"
	"github.com/redeliver-go/redeliver/stream"
)

// A batch whose retries are spent goes to a dead-letter topic with its
// origin in headers, read back by consuming that topic; the checkpoint
// passes the batch only after the produce.
func deadLetterAfterExhaustion(t *testing.T, e *env) {
	if e.backend != nil {
		deadLetterBackend(t, e)
		return
	}
	const n, poison = 12, 5
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
	given := make(chan stream.BatchInfo, 1)
	h := stream.HandlerFunc(func(_ context.Context, b *stream.Batch) error {
		if b.FirstOffset() <= poison && poison <= b.LastOffset() {
			return errHandler
		}
		return nil
	})
	e.start("a", spec{handler: h, maxBatch: 4,
		policy: checkpoint.Policy{MaxRetries: 2, Backoff: checkpoint.Fixed(short)},
		opts:   []stream.Option{stream.WithExhaustionAction(dl)},
		hooks:  stream.Hooks{Exhausted: func(ev stream.ExhaustedEvent) { given <- ev.BatchInfo }},
	})
	e.waitCommitted(map[int32]int64{0: n})
	e.hist.check(t, map[int32]int64{0: n})
	batch := <-given

	cl, err := kgo.NewClient(kgo.SeedBrokers(e.b.Addrs...), kgo.ConsumeTopics(dlq), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	var got []*kgo.Record
	for len(got) < batch.Records {
		fs := cl.PollFetches(ctx)
		if ctx.Err() != nil {
			t.Fatalf("%s has %d records, want %d", dlq, len(got), batch.Records)
		}
		got = append(got, fs.Records()...)
	}
	for i, r := range got {
		off := batch.FirstOffset + int64(i)
		hs := map[string]string{}
		for _, h := range r.Headers {
			hs[h.Key] = string(h.Value)
		}
		if hs[stream.HeaderTopic] != e.topic || hs[stream.HeaderPartition] != "0" || hs[stream.HeaderOffset] != strconv.FormatInt(off, 10) ||
			hs[stream.HeaderDeliveries] != "3" || hs[stream.HeaderError] != errHandler.Error() {
			t.Errorf("dead-lettered record %d: headers %v", i, hs)
		}
		if _, err := time.Parse(time.RFC3339Nano, hs[stream.HeaderFirstFailure]); err != nil {
			t.Errorf("dead-lettered record %d: first failure %q: %v", i, hs[stream.HeaderFirstFailure], err)
		}
		if want := "0:" + strconv.FormatInt(off, 10); string(r.Value) != want {
			t.Errorf("dead-lettered record %d: value %q, want %q", i, r.Value, want)
		}
	}
}

// A handler that reports the first record of a batch done and the second
// failed moves the checkpoint past the first record; the rest of the batch
// comes back with the retry count going on.
func partialSuccess(t *testing.T, e *env) {
	const n = 20
	e.createTopic(1)
	e.produce(0, 0, n)
	var (
		mu    sync.Mutex
		split int64 = -1 // the offset the checkpoint must move to
	)
	h := stream.HandlerFunc(func(_ context.Context, b *stream.Batch) error {
		mu.Lock()
		defer mu.Unlock()
		switch {
		case split < 0 && len(b.Records) >= 2 && b.FirstOffset() >= 5:
			split = b.Records[1].Offset
			return stream.FailedAt(1, errHandler)
		case b.FirstOffset() == split && b.Attempt.Retries < 2:
			return errHandler
		}
		return nil
	})
	e.start("a", spec{handler: h, maxBatch: 10, policy: checkpoint.Policy{MaxRetries: 5, Backoff: checkpoint.Fixed(short)}})
	e.waitCommitted(map[int32]int64{0: n})
	e.hist.check(t, map[int32]int64{0: n})
	mu.Lock()
	defer mu.Unlock()
	if split < 0 {
		t.Fatal("no batch of two records or more was delivered")
	}
	committedSplit := e.hist.count(func(ev event) bool {
		return !ev.delivery && !ev.exhausted && !ev.abandoned && ev.next == split && ev.metadata == ""
	})
	if committedSplit == 0 {
		t.Fatalf("no checkpoint at %d, the failed record\n%s", split, e.hist.dump())
	}
	var fromSplit []int
	for _, d := range e.hist.deliveries(0) {
		if d.first == split {
			fromSplit = append(fromSplit, d.attempt.Retries)
		}
	}
	// The rest of the batch, held: retry 1 (the count went on from the
	// partial failure), then success.
	if len(fromSplit) < 2 || fromSplit[0] != 1 {
		t.Fatalf("deliveries starting at %d had retries %v, want the count going on from 1", split, fromSplit)
	}
}
