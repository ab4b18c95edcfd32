package stream

import (
	"time"

	"github.com/redeliver-go/redeliver/internal/retrystate"
)

// Record is one record of a partition, as an adapter delivers it.
type Record struct {
	Topic     string
	Partition int32
	Offset    int64
	Key       []byte
	Value     []byte
	Headers   []Header
	Timestamp time.Time
}

// Header is a record header.
type Header struct {
	Key   string
	Value []byte
}

// Batch is the unit of delivery and of checkpointing: consecutive records of
// one partition. A failed batch is delivered again whole, as the same Batch
// value: it is held, not copied. Handlers must not keep a Batch or its
// records after they return: the adapters reuse the records' memory for
// later batches, of the same partition or of another. A handler that needs
// a record afterwards copies it (its Key, Value and Headers too).
type Batch struct {
	Topic     string
	Partition int32
	Records   []Record
	// Attempt tells the handler where this delivery stands in its retries.
	Attempt Attempt
}

// FirstOffset returns the offset of the batch's first record, or -1 for a
// batch with no records (the engine never delivers one).
func (b *Batch) FirstOffset() int64 {
	if b == nil || len(b.Records) == 0 {
		return -1
	}
	return b.Records[0].Offset
}

// LastOffset returns the offset of the batch's last record, or -1 for a
// batch with no records.
func (b *Batch) LastOffset() int64 {
	if b == nil || len(b.Records) == 0 {
		return -1
	}
	return b.Records[len(b.Records)-1].Offset
}

// Attempt describes one delivery of a batch, as Azure Functions' RetryContext
// does for one execution. Its count, first failure and last error are those
// of the batch's first record, which the retry state belongs to (see
// [BatchError]).
type Attempt struct {
	// Retries is how many retries this delivery makes: 0 for the first
	// delivery, n for the n-th retry (the n-th redelivery). It counts as
	// [checkpoint.ExhaustedError.Retries] does, and is the number the
	// RetryScheduled hook announced for this delivery ([RetryEvent.Retry]);
	// [Attempt.Number] counts deliveries from 1 instead.
	Retries int
	// MaxRetries is the limit of the policy in force, [checkpoint.Infinite]
	// (-1) when there is none.
	MaxRetries int
	// Last reports whether the policy allows no retry after this delivery.
	Last bool
	// FirstFailure is when the batch first failed; zero on the first
	// delivery.
	FirstFailure time.Time
	// LastError is the error of the previous delivery; nil on the first
	// delivery and after a RetryResult.
	LastError error
	// Probe reports a delivery made during an outage to test the
	// downstream (see Budget): its failure spends no retry.
	Probe bool
}

// Number returns the 1-based number of this delivery: Retries+1.
func (a Attempt) Number() int { return a.Retries + 1 }

// fillAttempt sets *a to the Attempt of the delivery m is at, but for its
// Probe, field by field in place: it runs on every delivery, and an
// Attempt built aside and copied costs more than its stores.
func fillAttempt(a *Attempt, m *retrystate.Machine) {
	a.Retries = m.Retries()
	a.MaxRetries = m.MaxRetries()
	a.Last = m.Last()
	a.FirstFailure = m.FirstFailure()
	a.LastError = m.LastError()
}

// attemptOf returns the Attempt of the delivery m is at. It reads the
// fields it needs one by one, not a copy of m's whole state: it runs on
// every delivery.
func attemptOf(m *retrystate.Machine) Attempt {
	return Attempt{
		Retries:      m.Retries(),
		MaxRetries:   m.MaxRetries(),
		Last:         m.Last(),
		FirstFailure: m.FirstFailure(),
		LastError:    m.LastError(),
	}
}
