package stream

import (
	"context"
	"errors"
)

// Claim is one partition assigned to this consumer: what an adapter gives
// the [Processor]. The Processor calls a Claim's methods from one goroutine
// only, except that an adapter may cancel the claim's context from any.
//
// An adapter ends a claim by cancelling the context it passed to
// [Processor.Process] (on revocation, loss or shutdown) and waits for Process
// to return before it gives the partition up.
type Claim interface {
	// Topic and Partition name the claimed partition.
	Topic() string
	Partition() int32

	// Committed returns the committed offset and its metadata as they were
	// when the partition was assigned; offset is -1 when nothing was
	// committed.
	Committed() (offset int64, metadata string)

	// Fetch returns the next records of the partition, in order, at least
	// one (a claim that is a [Positioner] may return none when its position
	// moved past records it skipped). It blocks until records arrive or ctx
	// is done. The Processor owns
	// the returned slice until its next call to Fetch. In ByKey and ByNone
	// ordering (see [WithOrdering]) the Processor ends a Fetch's ctx when it
	// has other work (a handler returned, a retry is due): a Fetch that
	// returns ctx's error must keep every record it has not returned for
	// the next Fetch.
	Fetch(ctx context.Context) ([]Record, error)

	// Pause asks the adapter to stop fetching this partition while its batch
	// waits out a backoff; other partitions and the client's heartbeats go
	// on. Resume undoes it. Records fetched before Pause must still come out
	// of Fetch in order after Resume.
	Pause()
	Resume()

	// Commit writes the checkpoint: next is the offset of the next record to
	// consume. It returns [ErrRevoked] when the partition is no longer owned.
	Commit(ctx context.Context, next int64, metadata string) error
}

// Positioner is an optional interface of a [Claim] whose partition holds
// records that Fetch never returns: Kafka's transaction markers (commit
// and abort markers) and, under read_committed, the records of aborted
// transactions. Without it the checkpoint moves only past records handed
// to the handler, so a log that ends with such records is committed one
// short of its end (or more) for as long as nothing follows them: a lag
// that never drains. With it the Processor moves the checkpoint to the
// claim's position, as Kafka's own consumers commit their fetch position,
// but only when every record below it is finished: never past a record
// withheld or retrying, and never back.
type Positioner interface {
	// Position returns the offset after the records the claim has
	// skipped since the last record it returned from Fetch, or -1 when
	// it knows of none (or holds records fetched and not yet returned):
	// every offset from that last record's + 1 up to Position, excluded,
	// is a record Fetch never returns. The Processor calls it after
	// Fetch, from the same goroutine.
	Position() int64
}

// positionOf returns c's position, or -1 when c is not a [Positioner].
func positionOf(c Claim) int64 {
	if p, ok := c.(Positioner); ok {
		return p.Position()
	}
	return -1
}

// ErrClosed is what the Run of a long-running type of redeliver returns
// when its Close came first: the consumers of every adapter, the share
// consumer, the functions host and the re-drive scheduler. Each wraps it
// with its own name ("franz: consumer closed"); match it with errors.Is.
var ErrClosed = errors.New("closed")

// ErrRevoked is returned by a Claim when its partition is no longer owned by
// this consumer. The Processor stops the claim's worker without a commit.
var ErrRevoked = errors.New("stream: partition no longer owned")
