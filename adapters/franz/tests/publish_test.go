package franz_test

import (
	"context"
	"errors"
	"strconv"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/redeliver-go/redeliver/adapters/franz"
	"github.com/redeliver-go/redeliver/checkpoint"
	"github.com/redeliver-go/redeliver/stream"
)

// A batch whose retries are spent is produced to the dead-letter topic with
// its origin in headers, and the checkpoint moves past it only then; the
// headers are read back by consuming the dead-letter topic.
func TestDeadLetterThroughKafka(t *testing.T) {
	addrs := newCluster(t, "orders", 1, kfake.SeedTopics(1, "orders.dlq"))
	produce(t, addrs, "orders", 0, 0, 6)

	pubClient, err := kgo.NewClient(kgo.SeedBrokers(addrs...))
	if err != nil {
		t.Fatal(err)
	}
	defer pubClient.Close()
	pub, err := franz.NewPublisher(pubClient)
	if err != nil {
		t.Fatal(err)
	}
	h := stream.HandlerFunc(func(_ context.Context, b *stream.Batch) error {
		for _, r := range b.Records {
			if r.Offset == 2 {
				return errors.New("schema mismatch")
			}
		}
		return nil
	})
	dl, err := stream.DeadLetter(pub, "orders.dlq")
	if err != nil {
		t.Fatal(err)
	}
	given := make(chan stream.BatchInfo, 1)
	proc := newProcessor(t, h,
		stream.WithPolicy(checkpoint.Policy{MaxRetries: 2, Backoff: checkpoint.Fixed(10 * time.Millisecond)}),
		stream.WithExhaustionAction(dl),
		stream.WithHooks(stream.Hooks{Exhausted: func(e stream.ExhaustedEvent) { given <- e.BatchInfo }}))
	r := start(t, addrs, "g", "orders", proc, franz.WithMaxBatch(3))
	waitCommitted(t, addrs, "g", "orders", map[int32]int64{0: 6})
	_ = r.stop(t)
	batch := <-given // the batch holding offset 2, however the records were batched

	cl, err := kgo.NewClient(kgo.SeedBrokers(addrs...), kgo.ConsumeTopics("orders.dlq"),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), wait)
	defer cancel()
	var got []*kgo.Record
	for len(got) < batch.Records {
		fs := cl.PollFetches(ctx)
		if err := ctx.Err(); err != nil {
			t.Fatalf("dead-letter topic has %d records, want %d: %v", len(got), batch.Records, err)
		}
		got = append(got, fs.Records()...)
	}
	if len(got) != batch.Records || batch.FirstOffset > 2 || batch.LastOffset < 2 {
		t.Fatalf("%d records dead-lettered for batch %+v", len(got), batch)
	}
	for i, rec := range got {
		off := batch.FirstOffset + int64(i)
		hs := map[string]string{}
		for _, h := range rec.Headers {
			hs[h.Key] = string(h.Value)
		}
		if hs[stream.HeaderTopic] != "orders" || hs[stream.HeaderPartition] != "0" || hs[stream.HeaderOffset] != strconv.FormatInt(off, 10) ||
			hs[stream.HeaderDeliveries] != "3" || hs[stream.HeaderError] != "schema mismatch" {
			t.Errorf("dead-lettered record %d: headers %v", i, hs)
		}
		if _, err := time.Parse(time.RFC3339Nano, hs[stream.HeaderFirstFailure]); err != nil {
			t.Errorf("record %d: first failure header %q: %v", i, hs[stream.HeaderFirstFailure], err)
		}
		if want := "0-" + strconv.FormatInt(off, 10); string(rec.Value) != want {
			t.Errorf("record %d: value %q, want %q", i, rec.Value, want)
		}
	}
}
