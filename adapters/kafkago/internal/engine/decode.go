package engine

import (
	"bytes"
	"cmp"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"slices"
	"time"

	"github.com/segmentio/kafka-go"
	"github.com/segmentio/kafka-go/compress"
	"github.com/segmentio/kafka-go/protocol"
	"github.com/segmentio/kafka-go/protocol/fetch"
)

// A fetch answer is read whole into one buffer and its record batches are
// decoded in place: a record's key and value are slices of the buffer, as
// franz-go's are, not copies (kafka-go's protocol package copies each
// record through its page buffers and allocates each key and value
// again). Only record batches of the v2 message format (Kafka 0.11 and
// later) are decoded here; an answer with an older batch in it is decoded
// by kafka-go's protocol package instead (see [fetcher.legacyRecords]).

// Attributes of a v2 record batch.
const (
	attrCompression   = 0x07
	attrLogAppendTime = 0x08
	attrTransactional = 0x10
	attrControl       = 0x20

	batchHeaderSize = 61      // a v2 record batch's header, from its base offset to its record count
	maxAnswerSize   = 1 << 30 // a larger size prefix is not a fetch answer (a TLS alert read as one, say)
)

// errOldFormat reports a record batch older than the v2 message format.
var errOldFormat = errors.New("record batch older than message format v2")

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// partitionAnswer is what a fetch answer says of the fetcher's partition.
type partitionAnswer struct {
	// hwm is the partition's high watermark, lso its last stable offset
	// (-1 before fetch version 4): a fetch returns no record at or past
	// hwm, nor under read_committed at or past lso.
	hwm, lso int64
	aborted  []fetch.ResponseTransaction
	records  []byte // its record batches as the broker sent them (the last one may be cut short)
}

// roundTrip sends req at version on conn and returns the answer with its
// 4-byte size prefix.
func roundTrip(conn *protocol.Conn, version int16, correlationID int32, clientID string, req *fetch.Request) ([]byte, error) {
	if err := protocol.WriteRequest(conn, version, correlationID, clientID, req); err != nil {
		return nil, err
	}
	var size [4]byte
	if _, err := io.ReadFull(conn, size[:]); err != nil {
		return nil, err
	}
	n := int32(binary.BigEndian.Uint32(size[:]))
	if n < 4 || n > maxAnswerSize {
		return nil, fmt.Errorf("fetch answer of %d bytes: not a Kafka answer", n)
	}
	buf := make([]byte, 4+int(n))
	copy(buf, size[:])
	if _, err := io.ReadFull(conn, buf[4:]); err != nil {
		if err == io.EOF {
			err = io.ErrUnexpectedEOF
		}
		return nil, err
	}
	return buf, nil
}

// wire reads the big-endian fields and the varints of Kafka's protocol
// from b. The first read past the end sets err; later reads return zeros.
type wire struct {
	b   []byte
	err error
}

func (w *wire) take(n int) []byte {
	if w.err != nil || n < 0 || n > len(w.b) {
		if w.err == nil {
			w.err = io.ErrUnexpectedEOF
		}
		return nil
	}
	p := w.b[:n:n]
	w.b = w.b[n:]
	return p
}

func (w *wire) int16() int16 {
	p := w.take(2)
	if p == nil {
		return 0
	}
	return int16(binary.BigEndian.Uint16(p))
}

func (w *wire) int32() int32 {
	p := w.take(4)
	if p == nil {
		return 0
	}
	return int32(binary.BigEndian.Uint32(p))
}

func (w *wire) int64() int64 {
	p := w.take(8)
	if p == nil {
		return 0
	}
	return int64(binary.BigEndian.Uint64(p))
}

// varint reads a zig-zag varint (Kafka's varint and varlong).
func (w *wire) varint() int64 {
	if w.err != nil {
		return 0
	}
	v, n := binary.Varint(w.b)
	if n <= 0 {
		w.err = errors.New("malformed varint")
		return 0
	}
	w.b = w.b[n:]
	return v
}

// bytesOf reads n bytes, or nil for a negative n (null).
func (w *wire) bytesOf(n int64) []byte {
	if n < 0 {
		return nil
	}
	if n > int64(len(w.b)) {
		w.take(len(w.b) + 1)
		return nil
	}
	return w.take(int(n))
}

// parseFetch returns what answer (with its size prefix), the answer to a
// fetch request at version with correlationID, says of topic's partition:
// its records, its aborted transactions, or its error (a [kafka.Error]).
func parseFetch(answer []byte, version int16, correlationID int32, topic string, partition int32) (partitionAnswer, error) {
	w := wire{b: answer[4:]}
	if id := w.int32(); w.err == nil && id != correlationID {
		return partitionAnswer{}, fmt.Errorf("fetch answer for request %d, want %d", id, correlationID)
	}
	if version >= 1 {
		w.int32() // throttle time
	}
	if version >= 7 {
		code := w.int16()
		w.int32() // fetch session
		if w.err == nil && code != 0 {
			return partitionAnswer{}, kafka.Error(code)
		}
	}
	var (
		out   partitionAnswer
		found bool
	)
	for range max(w.int32(), 0) {
		name := string(w.bytesOf(int64(w.int16())))
		for range max(w.int32(), 0) {
			index := w.int32()
			code := w.int16()
			hwm, lso := w.int64(), int64(-1)
			if version >= 4 {
				lso = w.int64()
			}
			if version >= 5 {
				w.int64() // log start offset
			}
			var aborted []fetch.ResponseTransaction
			if version >= 4 {
				for range max(w.int32(), 0) {
					aborted = append(aborted, fetch.ResponseTransaction{ProducerID: w.int64(), FirstOffset: w.int64()})
				}
			}
			if version >= 11 {
				w.int32() // preferred read replica
			}
			records := w.bytesOf(int64(w.int32()))
			if w.err != nil {
				break
			}
			if name != topic || index != partition || found {
				continue
			}
			if code != 0 {
				return partitionAnswer{}, kafka.Error(code)
			}
			out, found = partitionAnswer{hwm: hwm, lso: lso, aborted: aborted, records: records}, true
		}
		if w.err != nil {
			break
		}
	}
	if w.err != nil {
		return partitionAnswer{}, fmt.Errorf("malformed fetch answer: %w", w.err)
	}
	if !found {
		return partitionAnswer{}, fmt.Errorf("fetch of %s/%d: no answer for the partition", topic, partition)
	}
	return out, nil
}

// decodeBatches appends to recs the records of data, a partition's record
// batches, less control records, records before offset, and, when
// readCommitted, records of the aborted transactions. It returns them and
// the offset to fetch next: past every whole batch of data, skipped ones
// included (a batch whose last records compaction removed still ends at
// its last offset). A batch cut short at the end of data (the broker stops
// at the fetch's size limit) is left for the next fetch. It returns
// errOldFormat, and recs as it was given, when data holds a batch older
// than the v2 message format.
func decodeBatches(data []byte, offset int64, readCommitted bool, aborted []fetch.ResponseTransaction, recs []record) ([]record, int64, error) {
	given := len(recs)
	var open map[int64]bool // producers in an aborted transaction
	if readCommitted && len(aborted) > 0 {
		aborted = slices.SortedFunc(slices.Values(aborted), func(a, b fetch.ResponseTransaction) int {
			return cmp.Compare(a.FirstOffset, b.FirstOffset)
		})
		open = make(map[int64]bool)
	} else {
		aborted = nil
	}
	next := offset
	for len(data) >= 17 { // up to the magic byte
		base := int64(binary.BigEndian.Uint64(data))
		size := int64(int32(binary.BigEndian.Uint32(data[8:])))
		if magic := int8(data[16]); magic < 2 {
			return recs[:given], offset, errOldFormat
		}
		if size < batchHeaderSize-12 {
			return recs, next, fmt.Errorf("record batch at offset %d: length %d is shorter than its header", base, size)
		}
		if 12+size > int64(len(data)) {
			break // cut short: the rest comes with the next fetch
		}
		batch := data[:12+size]
		data = data[12+size:]
		if sum := binary.BigEndian.Uint32(batch[17:]); crc32.Checksum(batch[21:], castagnoli) != sum {
			return recs, next, fmt.Errorf("record batch at offset %d: CRC mismatch (corrupt data)", base)
		}
		var (
			epoch     = int32(binary.BigEndian.Uint32(batch[12:]))
			attrs     = int16(binary.BigEndian.Uint16(batch[21:]))
			lastDelta = int32(binary.BigEndian.Uint32(batch[23:]))
			baseTime  = int64(binary.BigEndian.Uint64(batch[27:]))
			maxTime   = int64(binary.BigEndian.Uint64(batch[35:]))
			producer  = int64(binary.BigEndian.Uint64(batch[43:]))
			count     = int32(binary.BigEndian.Uint32(batch[57:]))
			body      = batch[batchHeaderSize:]
			end       = base + int64(lastDelta) + 1
		)
		for len(aborted) > 0 && aborted[0].FirstOffset <= base {
			open[aborted[0].ProducerID] = true
			aborted = aborted[1:]
		}
		control := attrs&attrControl != 0
		if !control && attrs&attrTransactional != 0 && open[producer] {
			next = max(next, end)
			continue // an aborted transaction's records
		}
		if codec := attrs & attrCompression; codec != 0 {
			var err error
			if body, err = decompress(codec, body); err != nil {
				return recs, next, fmt.Errorf("record batch at offset %d: %w", base, err)
			}
		}
		w := wire{b: body}
		for range max(count, 0) {
			length := w.varint()
			rec := wire{b: w.take(int(min(max(length, 0), int64(len(w.b)+1))))}
			if w.err != nil {
				break
			}
			rec.take(1) // attributes
			tsDelta := rec.varint()
			off := base + rec.varint()
			key := rec.bytesOf(rec.varint())
			value := rec.bytesOf(rec.varint())
			var hs []protocol.Header
			if n := rec.varint(); n > int64(len(rec.b)) {
				rec.err = fmt.Errorf("%d headers in %d bytes", n, len(rec.b))
			} else if n > 0 {
				hs = make([]protocol.Header, n)
				for i := range hs {
					hs[i].Key = string(rec.bytesOf(rec.varint()))
					hs[i].Value = rec.bytesOf(rec.varint())
				}
			}
			if rec.err != nil {
				w.err = rec.err
				break
			}
			if control {
				// A control record's key is its version and type; type
				// 0 is an abort marker, which ends its producer's
				// aborted transaction.
				if len(key) >= 4 && binary.BigEndian.Uint16(key[2:]) == 0 {
					delete(open, producer)
				}
				continue
			}
			if off < offset {
				continue
			}
			ts := baseTime + tsDelta
			if attrs&attrLogAppendTime != 0 {
				ts = maxTime
			}
			recs = append(recs, record{offset: off, epoch: epoch, time: time.UnixMilli(ts), key: key, value: value, headers: hs})
		}
		if w.err != nil {
			return recs, next, fmt.Errorf("record batch at offset %d: malformed record: %w", base, w.err)
		}
		next = max(next, end)
	}
	if next == offset && len(data) > 0 {
		// A batch, but not whole: larger than the fetch may bring.
		return recs, next, fmt.Errorf("record batch at offset %d does not fit in the fetch's MaxBytes: %w", offset, io.ErrNoProgress)
	}
	return recs, next, nil
}

// decompress returns the records of a compressed batch's body.
func decompress(codec int16, body []byte) ([]byte, error) {
	c := compress.Compression(codec).Codec()
	if c == nil {
		return nil, fmt.Errorf("unknown compression codec %d", codec)
	}
	r := c.NewReader(bytes.NewReader(body))
	defer r.Close()
	out, err := io.ReadAll(r)
	if err != nil {
		return nil, fmt.Errorf("decompressing (%s): %w", c.Name(), err)
	}
	return out, nil
}
