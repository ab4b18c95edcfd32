package sarama

import (
	"cmp"
	"errors"
	"slices"
	"time"

	"github.com/IBM/sarama"
)

// The claim's look past transaction markers and aborted records, which
// sarama skips without a word (see Position).

// probeAfter is how long the pump waits with nothing from sarama, when
// the partition's high watermark is past the last record it pushed,
// before it looks there for transaction markers (probe).
const probeAfter = 200 * time.Millisecond

// from is the offset after the last record pushed, or before any the
// offset the claim starts at: sarama's start, or the committed offset
// when the claim skips to it (see add).
func (cl *claim) from() int64 {
	if cl.next >= 0 {
		return cl.next
	}
	return max(cl.sc.InitialOffset(), cl.skipBelow)
}

// wantProbe reports whether the partition's high watermark is past the
// records pushed, where it has not looked yet: sarama never hands out a
// transaction marker, nor under read_committed an aborted transaction's
// records, and says nothing of them (ConsumerGroupClaim has no position).
func (cl *claim) wantProbe() bool {
	from := cl.from()
	hwm := cl.sc.HighWaterMarkOffset()
	return from >= 0 && hwm > from && (from != cl.probedFrom || hwm != cl.probedHWM)
}

// probe reads the partition past the last record pushed, as sarama's
// consumer would, and moves the claim's Position past the transaction
// markers, and under read_committed the aborted records, that come there
// before any record sarama hands out: a log that ends with a marker is
// then committed to its end. A failure (the leader down) leaves the
// Position where it is, logged at Debug, and the pump looks again after
// probeAfter.
func (cl *claim) probe() {
	from := cl.from()
	hwm := cl.sc.HighWaterMarkOffset()
	cl.probedFrom, cl.probedHWM = from, hwm
	next, err := cl.skippedFrom(from, hwm)
	if err != nil {
		cl.h.e.log.Debug("redeliver: reading past the records handed out for transaction markers failed, will try again",
			"topic", cl.key.topic, "partition", cl.key.partition, "offset", from, "error", err)
		cl.probedFrom = -1 // again after probeAfter
	}
	if next > from {
		cl.mu.Lock()
		cl.buf.Skip(next) // ignored if sarama pushed records meanwhile
		cl.mu.Unlock()
	}
}

// maxProbes bounds the fetches of one probe (an aborted transaction larger
// than a fetch's bytes takes more than one).
const maxProbes = 8

// skippedFrom fetches the partition from offset from, with the consumer's
// isolation level, on the commits' client, and returns the offset past the
// control batches (transaction markers) and, under read_committed, the
// batches of aborted transactions that come before the first batch of
// records sarama hands out (or before hwm): from when there are none.
func (cl *claim) skippedFrom(from, hwm int64) (int64, error) {
	conf := cl.h.e.cfg.sarama
	if !conf.Version.IsAtLeast(sarama.V0_11_0_0) {
		return from, nil // no transactions before Kafka 0.11
	}
	readCommitted := conf.Consumer.IsolationLevel == sarama.ReadCommitted
	next := from
	for range maxProbes {
		b, err := cl.h.client.Leader(cl.key.topic, cl.key.partition)
		if err != nil {
			return next, err
		}
		req := &sarama.FetchRequest{Version: 4, MinBytes: 1, MaxBytes: conf.Consumer.Fetch.Default, Isolation: conf.Consumer.IsolationLevel}
		req.AddBlock(cl.key.topic, cl.key.partition, next, conf.Consumer.Fetch.Default, -1)
		resp, err := b.Fetch(req)
		if err != nil {
			return next, err
		}
		blk := resp.GetBlock(cl.key.topic, cl.key.partition)
		switch {
		case blk == nil:
			return next, sarama.ErrIncompleteResponse
		case !errors.Is(blk.Err, sarama.ErrNoError):
			return next, blk.Err
		}
		aborted := slices.SortedFunc(slices.Values(blk.AbortedTransactions), func(a, b *sarama.AbortedTransaction) int {
			return cmp.Compare(a.FirstOffset, b.FirstOffset)
		})
		open := map[int64]bool{} // producers in an aborted transaction
		moved := false
	batches:
		for _, rs := range blk.RecordsSet {
			rb := rs.RecordBatch
			if rb == nil || rb.PartialTrailingRecord {
				break // a batch of the old format, or cut short
			}
			last := rb.FirstOffset + int64(rb.LastOffsetDelta)
			if last < next {
				continue
			}
			for len(aborted) > 0 && aborted[0].FirstOffset <= last {
				open[aborted[0].ProducerID] = true
				aborted = aborted[1:]
			}
			switch {
			case rb.Control:
				if len(rb.Records) > 0 && isAbortMarker(rb.Records[0].Key) {
					delete(open, rb.ProducerID)
				}
			case readCommitted && rb.IsTransactional && open[rb.ProducerID]:
			default:
				return next, nil // records sarama hands out
			}
			next, moved = last+1, true
			if next >= hwm {
				break batches
			}
		}
		if !moved || next >= hwm {
			break
		}
	}
	return next, nil
}

// isAbortMarker reports whether a control record's key (its version and
// type, two big-endian int16s) is an abort marker's (type 0).
func isAbortMarker(key []byte) bool {
	return len(key) >= 4 && key[2] == 0 && key[3] == 0
}
