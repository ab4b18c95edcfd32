package engine

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	"github.com/segmentio/kafka-go"
	"github.com/segmentio/kafka-go/protocol"
	"github.com/segmentio/kafka-go/protocol/fetch"
)

// batchOf encodes recs as one record batch with kafka-go's protocol
// package (which writes every batch at base offset 0, without a producer),
// then sets its base offset, leader epoch and producer.
func batchOf(t *testing.T, version int8, base int64, epoch int32, attrs protocol.Attributes, producer int64, recs ...protocol.Record) []byte {
	t.Helper()
	var buf bytes.Buffer
	rs := protocol.RecordSet{Version: version, Attributes: attrs, Records: protocol.NewRecordReader(recs...)}
	if _, err := rs.WriteTo(&buf); err != nil {
		t.Fatal(err)
	}
	b := buf.Bytes()[4:] // the size prefix
	if version < 2 {
		return b
	}
	binary.BigEndian.PutUint64(b, uint64(base))
	binary.BigEndian.PutUint32(b[12:], uint32(epoch))
	binary.BigEndian.PutUint64(b[43:], uint64(producer))
	reCRC(b)
	return b
}

func reCRC(b []byte) {
	binary.BigEndian.PutUint32(b[17:], crc32.Checksum(b[21:], castagnoli))
}

// answerOf encodes a fetch answer at version: first a partition of another
// topic (which the decoder must pass over), then topic's partition 3 with
// aborted and records.
func answerOf(version int16, correlationID int32, topic string, aborted []fetch.ResponseTransaction, records []byte) []byte {
	var b []byte
	i16 := func(v int16) { b = binary.BigEndian.AppendUint16(b, uint16(v)) }
	i32 := func(v int32) { b = binary.BigEndian.AppendUint32(b, uint32(v)) }
	i64 := func(v int64) { b = binary.BigEndian.AppendUint64(b, uint64(v)) }
	str := func(s string) { i16(int16(len(s))); b = append(b, s...) }
	partition := func(index int32, aborted []fetch.ResponseTransaction, records []byte) {
		i32(index)
		i16(0)
		i64(1000) // high watermark
		i64(1000) // last stable offset
		if version >= 5 {
			i64(0)
		}
		if aborted == nil {
			i32(-1)
		} else {
			i32(int32(len(aborted)))
			for _, a := range aborted {
				i64(a.ProducerID)
				i64(a.FirstOffset)
			}
		}
		if version >= 11 {
			i32(-1)
		}
		if records == nil {
			i32(-1)
		} else {
			i32(int32(len(records)))
			b = append(b, records...)
		}
	}
	i32(0) // size, set below
	i32(correlationID)
	i32(0) // throttle time
	if version >= 7 {
		i16(0)
		i32(0)
	}
	i32(2)
	str("other")
	i32(1)
	var other bytes.Buffer
	rs := protocol.RecordSet{Version: 2, Records: protocol.NewRecordReader(protocol.Record{Value: protocol.NewBytes([]byte("x"))})}
	if _, err := rs.WriteTo(&other); err != nil {
		panic(err)
	}
	partition(3, nil, other.Bytes()[4:])
	str(topic)
	i32(1)
	partition(3, aborted, records)
	binary.BigEndian.PutUint32(b, uint32(len(b)-4))
	return b
}

func rec(key, value string, ts time.Time, headers ...protocol.Header) protocol.Record {
	r := protocol.Record{Time: ts, Headers: headers}
	if key != "\x00" {
		r.Key = protocol.NewBytes([]byte(key))
	}
	if value != "\x00" {
		r.Value = protocol.NewBytes([]byte(value))
	}
	return r
}

// controlRec is a transaction marker: type 0 aborts, 1 commits.
func controlRec(typ int16) protocol.Record {
	key := binary.BigEndian.AppendUint16(binary.BigEndian.AppendUint16(nil, 0), uint16(typ))
	value := binary.BigEndian.AppendUint32(binary.BigEndian.AppendUint16(nil, 0), 0)
	return protocol.Record{Key: protocol.NewBytes(key), Value: protocol.NewBytes(value)}
}

func decodeNew(t *testing.T, answer []byte, version int16, offset int64, committed bool) ([]record, int64, error) {
	t.Helper()
	p, err := parseFetch(answer, version, 42, "t", 3)
	if err != nil {
		return nil, offset, err
	}
	return decodeBatches(p.records, offset, committed, p.aborted, nil)
}

func decodeLegacy(t *testing.T, answer []byte, version int16, offset int64, committed bool) ([]record, int64, error) {
	t.Helper()
	f := &fetcher{topic: "t", partition: 3}
	if committed {
		f.fetch.IsolationLevel = kafka.ReadCommitted
	}
	return f.legacyRecords(answer, version, offset, nil)
}

func sameRecords(t *testing.T, got, want []record) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("%d records, want %d", len(got), len(want))
	}
	for i := range got {
		g, w := got[i], want[i]
		if g.offset != w.offset || g.epoch != w.epoch || !g.time.Equal(w.time) ||
			!bytes.Equal(g.key, w.key) || (g.key == nil) != (w.key == nil) || !bytes.Equal(g.value, w.value) {
			t.Fatalf("record %d: got {%d %d %v %q %q}, want {%d %d %v %q %q}", i,
				g.offset, g.epoch, g.time, g.key, g.value, w.offset, w.epoch, w.time, w.key, w.value)
		}
		if len(g.headers) != len(w.headers) {
			t.Fatalf("record %d: %d headers, want %d", i, len(g.headers), len(w.headers))
		}
		for j := range g.headers {
			if g.headers[j].Key != w.headers[j].Key || !bytes.Equal(g.headers[j].Value, w.headers[j].Value) {
				t.Fatalf("record %d header %d: %q=%q, want %q=%q", i, j, g.headers[j].Key, g.headers[j].Value, w.headers[j].Key, w.headers[j].Value)
			}
		}
	}
}

// The decoder gives what kafka-go's protocol package decodes from the same
// answers: every compression, headers, null keys and values, a fetch from
// the middle of a batch, and aborted transactions under read_committed.
func TestDecodeAsKafkaGoDoes(t *testing.T) {
	rnd := rand.New(rand.NewPCG(1, 2))
	ts := time.UnixMilli(1_700_000_000_123)
	randomBatch := func(base int64, n int, attrs protocol.Attributes) []byte {
		recs := make([]protocol.Record, n)
		for i := range recs {
			key := fmt.Sprintf("k%d", rnd.IntN(1000))
			if rnd.IntN(5) == 0 {
				key = "\x00"
			}
			value := strings.Repeat("v", rnd.IntN(300))
			var hs []protocol.Header
			for j := range rnd.IntN(3) {
				hs = append(hs, protocol.Header{Key: fmt.Sprintf("h%d", j), Value: []byte(fmt.Sprint(rnd.Int()))})
			}
			recs[i] = rec(key, value, ts.Add(time.Duration(rnd.IntN(5000))*time.Millisecond), hs...)
		}
		return batchOf(t, 2, base, 7, attrs, -1, recs...)
	}
	type tc struct {
		name      string
		records   []byte
		aborted   []fetch.ResponseTransaction
		offset    int64
		committed bool
		want      int // records
	}
	var cases []tc
	for _, c := range []protocol.Attributes{0, protocol.Gzip, protocol.Snappy, protocol.Lz4, protocol.Zstd} {
		records := append(randomBatch(100, 50, c), randomBatch(150, 30, c)...)
		cases = append(cases, tc{name: fmt.Sprintf("compression %d", c), records: records, offset: 100, want: 80})
	}
	cases = append(cases, tc{name: "from the middle of a batch", records: randomBatch(100, 50, 0), offset: 120, want: 30})
	cases = append(cases, tc{name: "null key and value", records: batchOf(t, 2, 0, 1, 0, -1, rec("\x00", "\x00", ts), rec("k", "", ts)), want: 2})
	// Producer 7 aborts its transaction at 10-11, producer 8 commits its
	// own at 12-13, a plain batch at 16.
	txn := func(committed bool) tc {
		records := bytes.Join([][]byte{
			batchOf(t, 2, 10, 1, protocol.Transactional, 7, rec("a", "aborted", ts), rec("b", "aborted", ts)),
			batchOf(t, 2, 12, 1, protocol.Transactional, 8, rec("c", "committed", ts), rec("d", "committed", ts)),
			batchOf(t, 2, 14, 1, protocol.Transactional|protocol.Control, 7, controlRec(0)),
			batchOf(t, 2, 15, 1, protocol.Transactional|protocol.Control, 8, controlRec(1)),
			batchOf(t, 2, 16, 1, 0, -1, rec("e", "plain", ts)),
		}, nil)
		c := tc{name: fmt.Sprintf("transactions, committed=%v", committed), records: records, offset: 10,
			aborted: []fetch.ResponseTransaction{{ProducerID: 7, FirstOffset: 10}}, committed: committed, want: 5}
		if committed {
			c.want = 3
		}
		return c
	}
	cases = append(cases, txn(false), txn(true))
	for _, version := range []int16{4, 7, 11} {
		for _, c := range cases {
			t.Run(fmt.Sprintf("v%d/%s", version, c.name), func(t *testing.T) {
				answer := answerOf(version, 42, "t", c.aborted, c.records)
				got, gotNext, err := decodeNew(t, answer, version, c.offset, c.committed)
				if err != nil {
					t.Fatal(err)
				}
				want, wantNext, err := decodeLegacy(t, answer, version, c.offset, c.committed)
				if err != nil {
					t.Fatal(err)
				}
				sameRecords(t, got, want)
				if len(got) != c.want {
					t.Fatalf("%d records, want %d", len(got), c.want)
				}
				if gotNext != wantNext {
					t.Fatalf("next offset %d, kafka-go's %d", gotNext, wantNext)
				}
			})
		}
	}
}

// The decoder's own rules: a batch cut short at the end waits for the next
// fetch, a batch whose last records compaction removed is passed whole, a
// corrupt batch is an error, and an old message format is left to kafka-go.
func TestDecodeEdges(t *testing.T) {
	ts := time.UnixMilli(1_700_000_000_000)
	a := batchOf(t, 2, 0, 1, 0, -1, rec("a", "1", ts), rec("b", "2", ts))
	b := batchOf(t, 2, 2, 1, 0, -1, rec("c", "3", ts))

	t.Run("cut short", func(t *testing.T) {
		records := append(bytes.Clone(a), b[:len(b)-5]...)
		got, next, err := decodeNew(t, answerOf(11, 42, "t", nil, records), 11, 0, false)
		if err != nil || len(got) != 2 || next != 2 {
			t.Fatalf("got %d records, next %d, %v; want 2, 2, nil", len(got), next, err)
		}
		_, next, err = decodeNew(t, answerOf(11, 42, "t", nil, b[:len(b)-5]), 11, 2, false)
		if !errors.Is(err, io.ErrNoProgress) || next != 2 {
			t.Fatalf("only a cut batch: next %d, %v; want 2 and io.ErrNoProgress", next, err)
		}
	})
	t.Run("compacted end", func(t *testing.T) {
		c := bytes.Clone(a)
		binary.BigEndian.PutUint32(c[23:], 9) // last offset delta: offsets 2 to 9 compacted away
		reCRC(c)
		got, next, err := decodeNew(t, answerOf(11, 42, "t", nil, c), 11, 0, false)
		if err != nil || len(got) != 2 || next != 10 {
			t.Fatalf("got %d records, next %d, %v; want 2, 10, nil", len(got), next, err)
		}
	})
	t.Run("corrupt", func(t *testing.T) {
		c := bytes.Clone(a)
		c[len(c)-1] ^= 0xff
		if _, _, err := decodeNew(t, answerOf(11, 42, "t", nil, c), 11, 0, false); err == nil || !strings.Contains(err.Error(), "CRC") {
			t.Fatalf("corrupt batch: %v", err)
		}
	})
	t.Run("malformed answer", func(t *testing.T) {
		answer := answerOf(11, 42, "t", nil, a)
		for _, cut := range []int{8, 20, len(answer) - 3} {
			short := bytes.Clone(answer[:cut])
			binary.BigEndian.PutUint32(short, uint32(cut-4))
			if _, _, err := decodeNew(t, short, 11, 0, false); err == nil {
				t.Fatalf("answer cut at %d decoded", cut)
			}
		}
		if _, _, err := decodeNew(t, answerOf(11, 43, "t", nil, a), 11, 0, false); err == nil {
			t.Fatal("answer to another request decoded")
		}
		if _, _, err := decodeNew(t, answerOf(11, 42, "u", nil, a), 11, 0, false); err == nil || !strings.Contains(err.Error(), "no answer") {
			t.Fatalf("answer without the partition: %v", err)
		}
	})
	t.Run("old format", func(t *testing.T) {
		old := batchOf(t, 1, 0, 0, 0, -1, rec("a", "1", ts), rec("b", "2", ts))
		answer := answerOf(11, 42, "t", nil, old)
		given := []record{{offset: -1}}
		p, err := parseFetch(answer, 11, 42, "t", 3)
		if err != nil {
			t.Fatal(err)
		}
		if got, _, err := decodeBatches(p.records, 0, false, nil, given); !errors.Is(err, errOldFormat) || len(got) != 1 {
			t.Fatalf("old format: %d records, %v; want the 1 given and errOldFormat", len(got), err)
		}
		got, next, err := decodeLegacy(t, answer, 11, 0, false)
		if err != nil || len(got) != 2 || next != 2 || string(got[1].value) != "2" {
			t.Fatalf("old format through kafka-go: %d records, next %d, %v", len(got), next, err)
		}
	})
}
