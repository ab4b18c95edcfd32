package engine

import (
	"testing"

	"github.com/twmb/franz-go/pkg/kgo"
)

// TestConvertLetsGoOfTheLongerBatch: a claim reuses its batches' memory
// while records keep coming, and a shorter batch after a longer one must
// not leave the longer one's records past its end. Each would keep the
// fetch response its key and value point into (a whole response, of
// every partition it carried) for as long as the partition is busy.
func TestConvertLetsGoOfTheLongerBatch(t *testing.T) {
	rec := func(off int64, headers int) *kgo.Record {
		r := &kgo.Record{Topic: "t", Offset: off, Key: []byte("k"), Value: []byte("v")}
		for range headers {
			r.Headers = append(r.Headers, kgo.RecordHeader{Key: "h", Value: []byte("x")})
		}
		return r
	}
	cl := &claim{mem: new(batchMem)}
	cl.mem.taken = []*kgo.Record{rec(0, 2), rec(1, 2), rec(2, 2)}
	if got := cl.convert(); len(got) != 3 || len(got[2].Headers) != 2 {
		t.Fatalf("first batch: %d records", len(got))
	}
	cl.mem.taken = append(cl.mem.taken, rec(3, 1))
	got := cl.convert()
	if len(got) != 1 || got[0].Offset != 3 || len(got[0].Headers) != 1 {
		t.Fatalf("second batch: %+v", got)
	}
	if cap(got) != 3 {
		t.Fatalf("the second batch has a new array (cap %d): the test no longer covers reuse", cap(got))
	}
	for i, r := range got[1:cap(got)] {
		if r.Key != nil || r.Value != nil || r.Headers != nil {
			t.Errorf("record %d past the batch's end still points at the first batch's records: %+v", i+1, r)
		}
	}
	hdrs := cl.mem.hdrs[:cap(cl.mem.hdrs)]
	for i, h := range hdrs[1:] {
		if h.Key != "" || h.Value != nil {
			t.Errorf("header %d past the batch's end still points at the first batch's: %+v", i+1, h)
		}
	}
}
