package eventhubs_test

import (
	"context"
	"testing"

	"github.com/redeliver-go/redeliver/adapters/eventhubs"
	"github.com/redeliver-go/redeliver/adapters/eventhubs/memhub"
	"github.com/redeliver-go/redeliver/stream"
)

func TestPublisherSendsRecordsAsEvents(t *testing.T) {
	dlq, _ := memhub.New("dlq", 4)
	pub, err := eventhubs.NewSenderPublisher("dlq", dlq)
	if err != nil {
		t.Fatal(err)
	}
	recs := []stream.Record{
		{Key: []byte("k1"), Value: []byte("a"), Headers: []stream.Header{{Key: "text", Value: []byte("x")}, {Key: "bin", Value: []byte{0xff, 0xfe}}}},
		{Key: []byte("k1"), Value: []byte("b")},
		{Value: []byte("c")},
	}
	if err := pub.Publish(context.Background(), "other", recs); err == nil {
		t.Fatal("publish to another hub's name succeeded")
	}
	if err := pub.Publish(context.Background(), "dlq", recs); err != nil {
		t.Fatal(err)
	}
	var got []stream.Record
	for i, id := range dlq.PartitionIDs() {
		evs, _ := dlq.Events(id)
		for _, ev := range evs {
			got = append(got, eventhubs.Record("dlq", int32(i), ev))
		}
	}
	if len(got) != 3 {
		t.Fatalf("%d events, want 3", len(got))
	}
	byValue := map[string]stream.Record{}
	for _, r := range got {
		byValue[string(r.Value)] = r
	}
	a, b := byValue["a"], byValue["b"]
	if string(a.Key) != "k1" || string(b.Key) != "k1" || a.Partition != b.Partition {
		t.Errorf("records with key k1: %+v and %+v, want the key kept and one partition", a, b)
	}
	if len(a.Headers) != 2 || a.Headers[0].Key != "bin" || string(a.Headers[0].Value) != "\xff\xfe" || a.Headers[1].Key != "text" || string(a.Headers[1].Value) != "x" {
		t.Errorf("headers %+v, want bin and text kept", a.Headers)
	}
	if c := byValue["c"]; c.Key != nil {
		t.Errorf("record without a key got key %q", c.Key)
	}
}
