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
	cl := &claim{c: &Consumer{cfg: Config{MaxBatch: 500}}, mem: new(batchMem)}
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

// TestFullBatchArraysAreShared: a partition that goes idle gives its full
// batch's record array, cleared, to the next partition with a full batch;
// a smaller batch gets an array of its own size, so that a withheld small
// batch does not keep a full batch's array.
func TestFullBatchArraysAreShared(t *testing.T) {
	c := &Consumer{cfg: Config{MaxBatch: 3}}
	recs := func(n int) []*kgo.Record {
		var rs []*kgo.Record
		for i := range n {
			rs = append(rs, &kgo.Record{Topic: "t", Offset: int64(i), Value: []byte("v")})
		}
		return rs
	}
	// sync.Pool may drop what it is given (always under the race
	// detector, a quarter of the time), so the array is looked for over
	// a few rounds.
	shared := false
	for range 50 {
		a := &claim{c: c, mem: &batchMem{taken: recs(3)}}
		first := a.convert()
		a.letGoMem()
		if a.mem != nil {
			t.Fatal("the idle claim still holds its batches' memory")
		}
		for i, r := range first[:cap(first)] {
			if r.Value != nil || r.Topic != "" {
				t.Fatalf("record %d of the array given back still points at the batch's records: %+v", i, r)
			}
		}
		small := (&claim{c: c, mem: &batchMem{taken: recs(2)}}).convert()
		if cap(small) != 2 {
			t.Fatalf("a batch of 2 got an array of %d records", cap(small))
		}
		b := &claim{c: c, mem: &batchMem{taken: recs(3)}}
		second := b.convert()
		if len(second) != 3 || second[2].Offset != 2 || string(second[2].Value) != "v" {
			t.Fatalf("second claim's batch: %+v", second)
		}
		if &second[:1][0] == &first[:1][0] {
			shared = true
			break
		}
	}
	if !shared {
		t.Fatal("no full batch's array went from an idle claim to the next full batch")
	}
	// A batch that is not full gives nothing back.
	a := &claim{c: c, mem: &batchMem{taken: recs(2)}}
	out := a.convert()
	a.letGoMem()
	if out[0].Value == nil {
		t.Fatal("a batch that is not full was cleared as if it went to the pool")
	}
}

// BenchmarkConvert: a full batch of 500 records of 100 bytes, without
// headers, turned into the batch's records in the claim's reused memory.
func BenchmarkConvert(b *testing.B) {
	recs := make([]kgo.Record, 500)
	value := make([]byte, 100)
	for i := range recs {
		recs[i] = kgo.Record{Topic: "t", Partition: 1, Offset: int64(i), Key: value[:8], Value: value}
	}
	cl := &claim{c: &Consumer{cfg: Config{MaxBatch: 500}}, mem: new(batchMem)}
	b.ReportAllocs()
	for b.Loop() {
		for i := range recs {
			cl.mem.taken = append(cl.mem.taken, &recs[i])
		}
		if out := cl.convert(); len(out) != len(recs) {
			b.Fatalf("%d records", len(out))
		}
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*len(recs)), "ns/record")
}
