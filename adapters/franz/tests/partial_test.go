package franz_test

import (
	"context"
	"errors"
	"slices"
	"strconv"
	"testing"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/redeliver-go/redeliver/adapters/franz"
	"github.com/redeliver-go/redeliver/adapters/internal/kafkatest"
	"github.com/redeliver-go/redeliver/stream"
)

// TestPublishReportsPartialWrites: when the broker writes the records of
// one partition and refuses those of another, Publish says which records
// were written (a *stream.PublishError), and they are exactly those read
// back from the topic.
func TestPublishReportsPartialWrites(t *testing.T) {
	c, addrs := kafkatest.NewCluster(t, "t", 2)
	c.Fault(kfake.Fault{Keys: []kmsg.Key{kmsg.Produce}, Topic: "t", Partitions: []int32{1}, Err: kerr.PolicyViolation, Count: -1})
	cl, err := kgo.NewClient(kgo.SeedBrokers(addrs...), kgo.RecordPartitioner(kgo.RoundRobinPartitioner()))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	pub, err := franz.NewPublisher(cl)
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
	if !errors.Is(err, kerr.PolicyViolation) {
		t.Errorf("the error does not match the broker's: %v", err)
	}
	var written []string
	for i, r := range recs {
		if pe.Written(i) {
			written = append(written, string(r.Value))
		}
	}
	if len(written) == 0 || len(written) == len(recs) || pe.Failed() != len(recs)-len(written) {
		t.Fatalf("written %v, %d failed: want some of each", written, pe.Failed())
	}
	in := readAll(t, ctx, addrs, "t")
	slices.Sort(written)
	slices.Sort(in)
	if !slices.Equal(written, in) {
		t.Fatalf("reported written %v, the topic holds %v", written, in)
	}
}

// readAll returns the values in topic.
func readAll(t *testing.T, ctx context.Context, addrs []string, topic string) []string {
	t.Helper()
	adm, err := kgo.NewClient(kgo.SeedBrokers(addrs...))
	if err != nil {
		t.Fatal(err)
	}
	defer adm.Close()
	req := kmsg.NewPtrListOffsetsRequest()
	rt := kmsg.NewListOffsetsRequestTopic()
	rt.Topic = topic
	for p := range int32(2) {
		rp := kmsg.NewListOffsetsRequestTopicPartition()
		rp.Partition, rp.Timestamp = p, -1
		rt.Partitions = append(rt.Partitions, rp)
	}
	req.Topics = append(req.Topics, rt)
	resp, err := req.RequestWith(ctx, adm)
	if err != nil {
		t.Fatal(err)
	}
	total := int64(0)
	for _, p := range resp.Topics[0].Partitions {
		total += p.Offset
	}
	cl, err := kgo.NewClient(kgo.SeedBrokers(addrs...), kgo.ConsumeTopics(topic), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	var out []string
	for int64(len(out)) < total {
		fs := cl.PollFetches(ctx)
		if ctx.Err() != nil {
			t.Fatalf("read %d of %d records back", len(out), total)
		}
		fs.EachRecord(func(r *kgo.Record) { out = append(out, string(r.Value)) })
	}
	return out
}
