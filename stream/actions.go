package stream

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"reflect"
	"slices"
	"strconv"
	"time"

	"github.com/redeliver-go/redeliver/checkpoint"
)

// BatchError is what a handler returns when the records before Index were
// processed and the record at Index failed with Err (as Spring's
// BatchListenerFailedException or Lambda's batch item failures do); Index
// counts from 0 in the batch as delivered. The checkpoint advances to the
// record at Index, and the rest of the batch, from Index on, is retried
// under the policy when Err is an error, under the RetryResult when Err is
// a [*RetryResult].
//
// Retries are counted per record: the retry state belongs to the batch's
// first record, and a BatchError with an Index above 0 names another one,
// whose own count, time budget (MaxRetryTime from its first failure) and
// age (MaxRecordAge from its timestamp) start with this failure. An Index
// of 0 goes on with the first record's count, as a plain error does.
// docs/COUNTING.md walks through an example.
//
// When such a batch is given up (its retries spent, or Err not retryable),
// the record that failed goes to the exhaustion action alone, with Err as
// its last error, and the records after it are delivered as the next
// batch, with counts of their own: one poison record costs one record, not
// the batch. [PerRecord] returns a BatchError for the record that failed.
//
// An Index out of range fails the whole batch, as a plain error does.
type BatchError struct {
	Index int   // the failed record's index in the delivered batch
	Err   error // why it failed
}

// FailedAt returns a [*BatchError]: records before index succeeded, the one
// at index failed with err.
func FailedAt(index int, err error) error { return &BatchError{Index: index, Err: err} }

func (e *BatchError) Error() string {
	return fmt.Sprintf("record at index %d of the batch: %v", e.Index, e.Err)
}

// Unwrap returns Err.
func (e *BatchError) Unwrap() error { return e.Err }

// errStop is returned by StopPartition.
var errStop = errors.New("stream: stop partition")

// StopPartition is an [ExhaustionAction] that stops the partition instead of
// moving on: the partition stays paused, with its checkpoint at the batch,
// and the Stopped hook fires, until [Processor.Resume] delivers the batch
// again with a fresh retry count or [Processor.Skip] moves past it. Other
// partitions go on. If the partition is revoked meanwhile, its next owner
// delivers the batch again, with a fresh retry count: the batch's retry
// state is committed as halted when the partition stops. An action that wraps
// StopPartition's error (with %w) stops the partition too.
func StopPartition(context.Context, *Batch, *checkpoint.ExhaustedError) error { return errStop }

// StoppedPartition describes a unit held by [StopPartition]: a partition
// at its batch (checkpoint mode), or one record (share mode, Record set).
type StoppedPartition struct {
	BatchInfo
	Err *checkpoint.ExhaustedError
	// Record says that the unit held is the record at FirstOffset alone
	// (a share group's record), not its partition: the partition's other
	// records go on. [Processor.ResumeRecord] and [Processor.SkipRecord]
	// address it; Resume and Skip do too while it is the partition's
	// only record held.
	Record bool
	// Key is the key of the record held, with Record: in key ordering the
	// key that orders it ([WithKeyFunc]'s, or the record's Kafka key),
	// whose later records wait until the record is resumed or skipped;
	// in a share group the record's key. Empty for a partition held and
	// for a record without a key.
	Key string
}

// ErrNotStopped is returned by [Processor.Resume] and [Processor.Skip] for a
// partition that is not stopped.
var ErrNotStopped = errors.New("stream: partition not stopped")

// Stopped returns the units held by [StopPartition], by topic, partition
// and offset: partitions, and in share mode records.
func (p *Processor) Stopped() []StoppedPartition {
	if p == nil {
		return nil
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	out := make([]StoppedPartition, 0, len(p.stopped))
	for _, e := range p.stopped {
		out = append(out, e.info)
	}
	slices.SortFunc(out, func(a, b StoppedPartition) int {
		return cmp.Or(cmp.Compare(a.Topic, b.Topic), cmp.Compare(a.Partition, b.Partition), cmp.Compare(a.FirstOffset, b.FirstOffset))
	})
	return out
}

// Resume releases a stopped partition: its batch is delivered again, with a
// fresh retry count. It returns nil once the partition's worker has taken
// the command, and an error wrapping [ErrNotStopped] when the partition is
// not stopped, or stopped being before the command arrived (another Resume
// or Skip released it, or it was revoked, or the consumer shut down: its
// next owner then delivers the batch again all the same).
//
// It waits for the worker until ctx is done: then it returns an error that
// wraps ctx's error and says what state the partition is in (still
// stopped: nothing was done).
//
// In share mode the unit held is a record: Resume addresses it while it is
// the partition's only record held, [Processor.ResumeRecord] always.
func (p *Processor) Resume(ctx context.Context, topic string, partition int32) error {
	return p.release(ctx, topic, partition, -1, true)
}

// ResumeRecord releases a record held by StopPartition in share mode, as
// [Processor.Resume] releases a partition: the record is delivered again
// with a fresh retry count.
func (p *Processor) ResumeRecord(ctx context.Context, topic string, partition int32, offset int64) error {
	return p.release(ctx, topic, partition, offset, true)
}

// SkipRecord releases a record held by StopPartition in share mode past
// its exhaustion action, as [Processor.Skip] releases a partition: the
// record is settled as after an action that succeeded (rejected, so that
// the broker archives it). It returns once the record's lease has taken
// the command.
func (p *Processor) SkipRecord(ctx context.Context, topic string, partition int32, offset int64) error {
	return p.release(ctx, topic, partition, offset, false)
}

// Skip releases a stopped partition past its batch: the checkpoint moves on
// as if the exhaustion action had succeeded. It returns nil once the
// checkpoint has moved past the batch, and an error when it did not: an
// error wrapping [ErrNotStopped] when the partition is not stopped or
// stopped being before the command arrived, one wrapping [ErrRevoked] (or
// the claim's end) when the partition moved before the checkpoint was
// written. Either way the skip did not happen, and the partition's next
// owner delivers the batch again.
//
// Writing the checkpoint is tried again until it succeeds or the partition
// moves, which can take long while the broker is away: Skip waits until
// ctx is done, then returns an error that wraps ctx's error and says what
// state the partition is in: still stopped (the worker had not taken the
// command: nothing was done), or no longer stopped, its checkpoint past
// the batch being written (the Checkpointed hook tells when it is).
//
// In share mode the unit held is a record: Skip addresses it while it is
// the partition's only record held, [Processor.SkipRecord] always.
func (p *Processor) Skip(ctx context.Context, topic string, partition int32) error {
	return p.release(ctx, topic, partition, -1, false)
}

// lookup returns the registry's entry of the unit: the partition's when
// offset is -1, or else its only record held; the record's at offset
// otherwise.
func (p *Processor) lookup(topic string, partition int32, offset int64) (*stoppedEntry, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if e, ok := p.stopped[unitKey{topic, partition, offset}]; ok {
		return e, nil
	}
	if offset >= 0 {
		return nil, fmt.Errorf("%w: the record %s/%d at offset %d is not held by StopPartition on this processor (never stopped, released already, or its lock lost: the broker delivers it again)",
			ErrNotStopped, topic, partition, offset)
	}
	var recs []*stoppedEntry
	for k, e := range p.stopped {
		if k.topic == topic && k.partition == partition {
			recs = append(recs, e)
		}
	}
	switch len(recs) {
	case 0:
		return nil, fmt.Errorf("%w: %s/%d is not held by StopPartition on this processor (never stopped, released already, or moved: a next owner delivers a stopped batch again)",
			ErrNotStopped, topic, partition)
	case 1:
		return recs[0], nil
	}
	offs := make([]int64, len(recs))
	for i, e := range recs {
		offs[i] = e.info.FirstOffset
	}
	slices.Sort(offs)
	return nil, fmt.Errorf("stream: %d records of %s/%d are held by StopPartition (offsets %v): name one with ResumeRecord or SkipRecord", len(recs), topic, partition, offs)
}

func (p *Processor) release(ctx context.Context, topic string, partition int32, offset int64, redeliver bool) error {
	verb := map[bool]string{true: "resume", false: "skip"}[redeliver]
	if offset >= 0 {
		verb += " of the record at offset " + strconv.FormatInt(offset, 10)
	}
	switch {
	case p == nil:
		return fmt.Errorf("stream: %s of %s/%d on a nil Processor", verb, topic, partition)
	case ctx == nil:
		return fmt.Errorf("stream: %s of %s/%d: nil context", verb, topic, partition)
	}
	e, err := p.lookup(topic, partition, offset)
	if err != nil {
		return err
	}
	// The entry stays registered until its worker takes a command (and
	// unregisters it): a wait cut short leaves the partition stopped, and
	// listed by Stopped, as it is.
	stillStopped := func() error {
		return fmt.Errorf("stream: %s of %s/%d not done (%w): the partition is still stopped at offset %d, waiting for a Resume or Skip",
			verb, topic, partition, ctx.Err(), e.info.FirstOffset)
	}
	if ctx.Err() != nil {
		return stillStopped()
	}
	reply := make(chan error, 1)
	select {
	case e.cmd <- command{redeliver: redeliver, reply: reply}:
	case <-e.gone:
		return fmt.Errorf("%w: %s/%d stopped being held before the command arrived: another Resume or Skip released it, or its worker stopped (revoked, or the consumer shut down: its next owner delivers the batch again)",
			ErrNotStopped, topic, partition)
	case <-ctx.Done():
		return stillStopped()
	}
	select {
	case err := <-reply:
		return err
	case <-ctx.Done():
		if redeliver {
			return fmt.Errorf("stream: resume of %s/%d not confirmed (%w): the partition's worker took it, and delivers its batch at offset %d again",
				topic, partition, ctx.Err(), e.info.FirstOffset)
		}
		return fmt.Errorf("stream: skip of %s/%d not confirmed (%w): the partition's worker took it and is no longer stopped; its checkpoint past offset %d is being written, tried again until it is or the partition moves (the Checkpointed hook tells when)",
			topic, partition, ctx.Err(), e.info.LastOffset)
	}
}

// command is what Processor.Resume and Processor.Skip hand a stopped
// partition's worker, with where to answer.
type command struct {
	redeliver bool
	reply     chan<- error
}

func (p *Processor) register(sp StoppedPartition) *stoppedEntry {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.stopped == nil {
		p.stopped = map[unitKey]*stoppedEntry{}
	}
	k := unitKey{sp.Topic, sp.Partition, -1}
	if sp.Record {
		k.offset = sp.FirstOffset
	}
	e := &stoppedEntry{key: k, info: sp, cmd: make(chan command), gone: make(chan struct{})}
	p.stopped[k] = e
	return e
}

// unregister removes e, the entry of a unit that stops waiting, and
// tells a Resume or Skip that came too late.
func (p *Processor) unregister(e *stoppedEntry) {
	p.mu.Lock()
	defer p.mu.Unlock()
	k := e.key
	if cur, ok := p.stopped[k]; ok && cur == e {
		delete(p.stopped, k)
	}
	close(e.gone)
}

// Publisher produces records to a topic and returns once the broker has
// acknowledged them all. Adapters provide one for their client. When some
// records were written and others not, a Publisher that can tell which
// returns a [*PublishError] that says so.
type Publisher interface {
	Publish(ctx context.Context, topic string, recs []Record) error
}

// The headers a dead-lettered record carries, besides its own. Each
// describes the record, in every mode (checkpoint or share group) and
// through every adapter: HeaderDeliveries is how many times the record
// was handed to the handler in its count, the ExhaustedError's Retries
// plus one (a record given up as not retryable on its first delivery says
// 1); HeaderFirstFailure is the record's own first failure; HeaderError
// its last error. docs/COUNTING.md says what is counted, and where a
// count can fall short after a crash.
const (
	HeaderTopic        = "redeliver-original-topic"
	HeaderPartition    = "redeliver-original-partition"
	HeaderOffset       = "redeliver-original-offset"
	HeaderDeliveries   = "redeliver-deliveries"
	HeaderFirstFailure = "redeliver-first-failure" // RFC 3339 with nanoseconds, UTC
	HeaderError        = "redeliver-last-error"
)

// The headers of Kafka's own share-group dead-letter queue (KIP-1191), which
// a dead-lettered record carries too, so that one tool reads both. Group is
// set when the consumer names its group (see [SourceFrom]); DeliveryCount
// is the record's own deliveries, as HeaderDeliveries (in share mode not
// the broker's delivery count, which does not count the retries a
// consumer holds in memory); Message holds the reason the record was
// given up.
const (
	HeaderDLQTopic         = "__dlq.errors.topic"
	HeaderDLQPartition     = "__dlq.errors.partition"
	HeaderDLQOffset        = "__dlq.errors.offset"
	HeaderDLQGroup         = "__dlq.errors.group"
	HeaderDLQDeliveryCount = "__dlq.errors.delivery.count"
	HeaderDLQMessage       = "__dlq.errors.message"
)

// DeadLetter returns an [ExhaustionAction] that produces the given-up
// records to topic, with their keys, values and headers and the Header*
// headers added, and returns once pub has them acknowledged. Until it has,
// the checkpoint does not move: a failed produce is tried again after a
// backoff (the ActionTried hook reports each try), and the partition waits.
// A dead-letter that succeeds is logged at Info level.
//
// When a produce fails after writing some of the records and pub says
// which (a [*PublishError], as the Kafka adapters' publishers return), the
// next tries produce only the records not written yet, so that each lands
// in topic once. A record can still be produced twice when pub cannot tell
// which records it wrote, and when the partition moves to another consumer
// between two tries: its next owner gives the batch up again and produces
// all of it.
//
// The topic must exist (or the broker must create topics on first use),
// and pub's client must be allowed to write to it: a missing topic holds
// the partition until it is created.
//
// DeadLetter returns an error when pub is nil (a nil interface or a nil
// pointer in it) or topic is empty. A pub that has a method
// DeadLetterTo(topic string) is told the topic, so that the consumer it
// belongs to can check at start that the topic exists (the franz adapter's
// Publisher does).
func DeadLetter(pub Publisher, topic string) (ExhaustionAction, error) {
	switch {
	case isNil(pub):
		if pub == nil {
			return nil, errors.New("stream: DeadLetter: nil publisher")
		}
		return nil, fmt.Errorf("stream: DeadLetter: nil %T publisher", pub)
	case topic == "":
		return nil, errors.New("stream: DeadLetter: no topic")
	}
	if t, ok := pub.(interface{ DeadLetterTo(topic string) }); ok {
		t.DeadLetterTo(topic)
	}
	return deadLetter(pub, topic), nil
}

// deadLetter is the action DeadLetter returns. It is never inlined, so
// that its actions share one code pointer, which deadLetterOf knows them
// by (an inlined copy of a closure is compiled apart).
//
//go:noinline
func deadLetter(pub Publisher, topic string) ExhaustionAction {
	id := new(deadLetterID) // what this action wrote is its own, whatever other action runs with it
	return func(ctx context.Context, b *Batch, xerr *checkpoint.ExhaustedError) error {
		if q, ok := ctx.Value(deadLetterQuery{}).(*deadLetterTarget); ok {
			q.pub, q.topic = pub, topic // deadLetterOf asks: nothing is published
			return nil
		}
		recs := make([]Record, len(b.Records))
		deliveries := strconv.Itoa(xerr.Retries + 1)
		first := xerr.FirstFailure.UTC().Format(time.RFC3339Nano)
		last := ""
		if xerr.Last != nil {
			last = xerr.Last.Error()
		}
		src, _ := SourceFrom(ctx)
		reason := src.Reason
		if reason == "" {
			reason = xerr.Error()
		}
		for i, r := range b.Records {
			h := make([]Header, 0, len(r.Headers)+12)
			h = append(h, r.Headers...)
			part := strconv.AppendInt(nil, int64(r.Partition), 10)
			off := strconv.AppendInt(nil, r.Offset, 10)
			h = append(h,
				Header{HeaderTopic, []byte(r.Topic)},
				Header{HeaderPartition, part},
				Header{HeaderOffset, off},
				Header{HeaderDeliveries, []byte(deliveries)},
				Header{HeaderFirstFailure, []byte(first)},
				Header{HeaderError, []byte(last)},
				Header{HeaderDLQTopic, []byte(r.Topic)},
				Header{HeaderDLQPartition, part},
				Header{HeaderDLQOffset, off},
			)
			if src.Group != "" {
				h = append(h, Header{HeaderDLQGroup, []byte(src.Group)})
			}
			h = append(h,
				Header{HeaderDLQDeliveryCount, []byte(deliveries)},
				Header{HeaderDLQMessage, []byte(reason)},
			)
			recs[i] = Record{Topic: topic, Key: r.Key, Value: r.Value, Headers: h, Timestamp: r.Timestamp}
		}
		// The records an earlier try of this batch wrote are left out.
		call := actionCallFrom(ctx)
		var written map[recordID]bool
		if call != nil {
			written = call.written[id]
		}
		send, from := recs, b.Records // from: the given-up record of each of send
		if len(written) > 0 {
			send, from = nil, nil
			for i, r := range b.Records {
				if !written[recordID{r.Topic, r.Partition, r.Offset}] {
					send, from = append(send, recs[i]), append(from, r)
				}
			}
		}
		if len(send) > 0 {
			if err := pub.Publish(ctx, topic, send); err != nil {
				var pe *PublishError
				if call != nil && errors.As(err, &pe) && len(pe.Errs) == len(send) {
					note(call, id, from, pe.Written)
				}
				what := records(len(send))
				if len(send) < len(recs) {
					what = fmt.Sprintf("%s (of %d: the others were written by an earlier try)", what, len(recs))
				}
				return fmt.Errorf("dead-letter of %s to topic %q failed, tried again after a backoff while the partition waits "+
					"(check that the topic exists and that the publisher's client may write to it): %w", what, topic, err)
			}
		}
		if call != nil {
			// All written: a later try of the batch (the action that
			// runs this one failed after it) publishes none again.
			note(call, id, from, func(int) bool { return true })
		}
		loggerFrom(ctx).Info("redeliver: dead-lettered", "offset", b.FirstOffset(), "records", len(recs), "dead_letter_topic", topic)
		return nil
	}
}

// note records in call, for the DeadLetter action id, the given-up records
// of from whose dead letters were written.
func note(call *actionCall, id *deadLetterID, from []Record, written func(i int) bool) {
	m := call.written[id]
	if m == nil {
		m = map[recordID]bool{}
		if call.written == nil {
			call.written = map[*deadLetterID]map[recordID]bool{}
		}
		call.written[id] = m
	}
	for i, r := range from {
		if written(i) {
			m[recordID{r.Topic, r.Partition, r.Offset}] = true
		}
	}
}

// deadLetterID identifies an action made by DeadLetter.
type deadLetterID struct{ _ byte }

type deadLetterQuery struct{}

type deadLetterTarget struct {
	pub   Publisher
	topic string
}

// deadLetterCode identifies the code of the actions DeadLetter makes.
var deadLetterCode = reflect.ValueOf(deadLetter(nil, "")).Pointer()

// deadLetterOf returns the publisher and the topic of an exhaustion action
// made by [DeadLetter], and false for any other action, without running it
// (see [Processor.DeadLetter]).
func deadLetterOf(a ExhaustionAction) (pub Publisher, topic string, ok bool) {
	if a == nil || reflect.ValueOf(a).Pointer() != deadLetterCode {
		return nil, "", false
	}
	var q deadLetterTarget
	if err := a(context.WithValue(context.Background(), deadLetterQuery{}, &q), nil, nil); err != nil || q.pub == nil {
		return nil, "", false
	}
	return q.pub, q.topic, true
}

func records(n int) string {
	if n == 1 {
		return "1 record"
	}
	return strconv.Itoa(n) + " records"
}

// isNil reports whether v is nil or holds a nil pointer, map, slice,
// channel or function.
func isNil(v any) bool {
	if v == nil {
		return true
	}
	switch rv := reflect.ValueOf(v); rv.Kind() {
	case reflect.Pointer, reflect.Map, reflect.Slice, reflect.Chan, reflect.Func, reflect.Interface:
		return rv.IsNil()
	}
	return false
}
