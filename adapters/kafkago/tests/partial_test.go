package tests

import (
	"context"
	"errors"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/segmentio/kafka-go"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/redeliver-go/redeliver/adapters/kafkago"
	"github.com/redeliver-go/redeliver/stream"
)

// TestPublishReportsPartialWrites: when the broker writes the records of
// one partition and refuses those of another, Publish says which records
// were written (a *stream.PublishError, from kafka-go's WriteErrors), and
// they are exactly those read back from the topic.
func TestPublishReportsPartialWrites(t *testing.T) {
	c, addrs := newCluster(t, "t", 2)
	c.Fault(kfake.Fault{Keys: []kmsg.Key{kmsg.Produce}, Topic: "t", Partitions: []int32{1}, Err: kerr.PolicyViolation, Count: -1})
	w := &kafka.Writer{Addr: kafka.TCP(addrs...), RequiredAcks: kafka.RequireAll, BatchTimeout: time.Millisecond,
		Balancer: &kafka.RoundRobin{}, MaxAttempts: 1}
	defer w.Close()
	pub, err := kafkago.NewPublisher(w)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), wait)
	defer cancel()
	recs := make([]stream.Record, 6)
	for i := range recs {
		recs[i] = stream.Record{Value: []byte("v" + strconv.Itoa(i))}
	}
	err = pub.Publish(ctx, "t", recs)
	var pe *stream.PublishError
	if !errors.As(err, &pe) || len(pe.Errs) != len(recs) {
		t.Fatalf("Publish with one partition refusing: %v (%T), want a *stream.PublishError of %d records", err, err, len(recs))
	}
	var written []string
	for i, r := range recs {
		if pe.Written(i) {
			written = append(written, string(r.Value))
		}
	}
	if len(written) == 0 || len(written) == len(recs) {
		t.Fatalf("written %v: want some of each", written)
	}
	cl, err := kgo.NewClient(kgo.SeedBrokers(addrs...), kgo.ConsumeTopics("t"), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	var in []string
	for len(in) < len(written) {
		fs := cl.PollFetches(ctx)
		if ctx.Err() != nil {
			t.Fatalf("read %v back, reported written %v", in, written)
		}
		fs.EachRecord(func(r *kgo.Record) { in = append(in, string(r.Value)) })
	}
	poll, cancelPoll := context.WithTimeout(ctx, 200*time.Millisecond)
	defer cancelPoll()
	cl.PollFetches(poll).EachRecord(func(r *kgo.Record) { in = append(in, string(r.Value)) }) // nothing more
	slices.Sort(written)
	slices.Sort(in)
	if !slices.Equal(written, in) {
		t.Fatalf("reported written %v, the topic holds %v", written, in)
	}
}
