package conformance

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/redeliver-go/redeliver/checkpoint"
	"github.com/redeliver-go/redeliver/stream"
)

// short is the backoff of cases that only need one to happen.
const short = 20 * time.Millisecond

var errHandler = errors.New("conformance: handler failure")

var cases = []struct {
	name string
	run  func(t *testing.T, e *env)
}{
	{"Scenario1Success", scenario1Success},
	{"Scenario2ErrorWithoutPolicy", scenario2ErrorWithoutPolicy},
	{"Scenario3ErrorWithPolicy", scenario3ErrorWithPolicy},
	{"Scenario4RetryResult", scenario4RetryResult},
	{"WholeBatchRedelivery", wholeBatchRedelivery},
	{"OrderWithinPartition", orderWithinPartition},
	{"OtherPartitionsFlowDuringBackoff", otherPartitionsFlow},
	{"BackoffLongerThanSessionTimeout", backoffLongerThanSession},
	{"GracefulShutdownDuringBackoff", gracefulShutdownDuringBackoff},
	{"ConsumerJoinsDuringRetry", consumerJoinsDuringRetry},
	{"DeadLetterAfterExhaustion", deadLetterAfterExhaustion},
	{"PartialSuccess", partialSuccess},
	{"PoisonRecordDeadLettered", poisonRecordDeadLettered},
	{"RecordsFailOnceNothingGivenUp", recordsFailOnce},
	{"PoisonRecordMovesOnItsLastRetry", poisonRecordMovesOnItsLastRetry},
	{"GiveUpSeenThroughASmallerFetch", giveUpSeenThroughASmallerFetch},
}

func succeed(context.Context, *stream.Batch) error { return nil }

// eachOnce asserts that every offset of the partition was delivered exactly
// once.
func eachOnce(t *testing.T, e *env, partition int32, end int64) {
	t.Helper()
	seen := make([]int, end)
	for _, d := range e.hist.deliveries(partition) {
		for o := d.first; o <= d.last; o++ {
			seen[o]++
		}
	}
	for o, n := range seen {
		if n != 1 {
			t.Fatalf("partition %d offset %d delivered %d times, want once\n%s", partition, o, n, e.hist.dump())
		}
	}
}

// Scenario 1: the handler succeeds; the stream moves on batch by batch.
func scenario1Success(t *testing.T, e *env) {
	e.createTopic(1)
	e.produce(0, 0, 30)
	e.start("a", spec{handler: stream.HandlerFunc(succeed), maxBatch: 10})
	e.waitCommitted(map[int32]int64{0: 30})
	e.hist.check(t, map[int32]int64{0: 30})
	eachOnce(t, e, 0, 30)
	for _, d := range e.hist.deliveries(0) {
		if d.outcome != stream.Succeeded || d.attempt.Retries != 0 || d.last-d.first+1 > 10 {
			t.Fatalf("delivery %d-%d: %v retry %d; want succeeded first deliveries of at most 10 records", d.first, d.last, d.outcome, d.attempt.Retries)
		}
	}
}

// Scenario 2: the handler fails and there is no policy: the batch is marked
// failed and the stream moves on.
func scenario2ErrorWithoutPolicy(t *testing.T, e *env) {
	e.createTopic(1)
	e.produce(0, 0, 30)
	e.start("a", spec{handler: stream.HandlerFunc(func(context.Context, *stream.Batch) error { return errHandler }), maxBatch: 10})
	e.waitCommitted(map[int32]int64{0: 30})
	e.hist.check(t, map[int32]int64{0: 30})
	eachOnce(t, e, 0, 30)
	for _, d := range e.hist.deliveries(0) {
		if d.outcome != stream.Failed {
			t.Fatalf("delivery %d-%d: %v, want failed", d.first, d.last, d.outcome)
		}
	}
	if n := e.hist.count(func(ev event) bool { return ev.exhausted }); n != len(e.hist.deliveries(0)) {
		t.Fatalf("%d batches given up, want every one of %d", n, len(e.hist.deliveries(0)))
	}
}

// Scenario 3: the handler fails and a policy allows 2 retries: the batch is
// withheld (the broker's committed offset stays at its first record) and
// delivered again after the backoff; after the last retry the stream moves
// on.
func scenario3ErrorWithPolicy(t *testing.T, e *env) {
	e.createTopic(1)
	e.produce(0, 0, 30)
	const backoff = 300 * time.Millisecond
	var (
		mu          sync.Mutex
		poison      = [2]int64{-1, -1}
		firstRetry  = newSignal()
		committedAt = make(chan int64, 1)
	)
	h := stream.HandlerFunc(func(_ context.Context, b *stream.Batch) error {
		if b.FirstOffset() <= 15 && 15 <= b.LastOffset() {
			mu.Lock()
			poison = [2]int64{b.FirstOffset(), b.LastOffset()}
			mu.Unlock()
			return errHandler
		}
		return nil
	})
	hooks := stream.Hooks{RetryScheduled: func(ev stream.RetryEvent) {
		if ev.Retry == 1 {
			firstRetry.fire()
		}
	}}
	e.start("a", spec{handler: h, maxBatch: 10, hooks: hooks,
		policy: checkpoint.Policy{MaxRetries: 2, Backoff: checkpoint.Fixed(backoff)}})
	e.await(firstRetry.ch, "the first retry to be scheduled")
	// The batch is withheld: the broker's committed offset is not past its
	// first record while it waits.
	time.Sleep(backoff / 3)
	if o, ok := e.committed()[0]; ok {
		committedAt <- o.At
	} else {
		committedAt <- -1
	}
	e.waitCommitted(map[int32]int64{0: 30})
	e.hist.check(t, map[int32]int64{0: 30})

	mu.Lock()
	first, last := poison[0], poison[1]
	mu.Unlock()
	if at := <-committedAt; at > first {
		t.Errorf("while batch %d-%d was withheld the broker had offset %d committed, want at most %d", first, last, at, first)
	}
	var retries []int
	for _, d := range e.hist.deliveries(0) {
		if d.first == first {
			retries = append(retries, d.attempt.Retries)
			if d.last != last {
				t.Errorf("batch %d-%d redelivered as %d-%d", first, last, d.first, d.last)
			}
		} else if d.attempt.Retries != 0 {
			t.Errorf("batch %d-%d retried, though it succeeded", d.first, d.last)
		}
	}
	if !slices.Equal(retries, []int{0, 1, 2}) {
		t.Errorf("batch %d-%d delivered with retries %v, want [0 1 2] (retryCount 2 = 3 deliveries)", first, last, retries)
	}
	if n := e.hist.count(func(ev event) bool { return ev.exhausted }); n != 1 {
		t.Errorf("%d batches given up, want 1", n)
	}
}

// Scenario 4: the handler succeeds but returns a RetryResult, which
// overrides the configured policy: the batch is delivered again 2 times
// after its delay, then the stream moves on without an exhaustion action.
func scenario4RetryResult(t *testing.T, e *env) {
	e.createTopic(1)
	e.produce(0, 0, 30)
	h := stream.HandlerFunc(func(_ context.Context, b *stream.Batch) error {
		if b.FirstOffset() == 0 {
			return stream.Retry(2, short)
		}
		return nil
	})
	e.start("a", spec{handler: h, maxBatch: 10,
		policy: checkpoint.Policy{MaxRetries: 10, Backoff: checkpoint.Fixed(time.Hour)}})
	e.waitCommitted(map[int32]int64{0: 30})
	e.hist.check(t, map[int32]int64{0: 30})
	var retries []int
	for _, d := range e.hist.deliveries(0) {
		if d.first == 0 {
			retries = append(retries, d.attempt.Retries)
			if d.outcome != stream.RetryRequested {
				t.Errorf("delivery of batch 0: %v, want retry requested", d.outcome)
			}
		} else if d.attempt.Retries != 0 {
			t.Errorf("batch %d-%d retried", d.first, d.last)
		}
	}
	if !slices.Equal(retries, []int{0, 1, 2}) {
		t.Errorf("first batch delivered with retries %v, want [0 1 2]", retries)
	}
	if n := e.hist.count(func(ev event) bool { return ev.exhausted }); n != 0 {
		t.Errorf("%d batches given up, want none: a RetryResult's batch succeeded", n)
	}
}

// A batch handler that fails on one record (without saying which, so not
// with FailedAt) gets the whole batch again, the same records in the same
// order.
func wholeBatchRedelivery(t *testing.T, e *env) {
	e.createTopic(1)
	e.produce(0, 0, 20)
	var (
		mu         sync.Mutex
		failed     bool
		deliveries [][]string
	)
	capture := stream.HandlerFunc(func(ctx context.Context, b *stream.Batch) error {
		vs := make([]string, len(b.Records))
		for i, r := range b.Records {
			vs[i] = fmt.Sprintf("%d=%s", r.Offset, r.Value)
		}
		mu.Lock()
		defer mu.Unlock()
		deliveries = append(deliveries, vs)
		for _, r := range b.Records {
			if r.Offset == 5 && !failed {
				failed = true
				return errHandler
			}
		}
		return nil
	})
	e.start("a", spec{handler: capture, maxBatch: 10,
		policy: checkpoint.Policy{MaxRetries: 3, Backoff: checkpoint.Fixed(short)}})
	e.waitCommitted(map[int32]int64{0: 20})
	e.hist.check(t, map[int32]int64{0: 20})
	mu.Lock()
	defer mu.Unlock()
	var with5 [][]string
	for _, d := range deliveries {
		if slices.Contains(d, "5=0:5") {
			with5 = append(with5, d)
		}
	}
	if len(with5) != 2 {
		t.Fatalf("the batch holding offset 5 was delivered %d times, want 2: %v", len(with5), deliveries)
	}
	if !slices.Equal(with5[0], with5[1]) {
		t.Fatalf("redelivered batch differs:\nfirst  %v\nsecond %v", with5[0], with5[1])
	}
	if with5[0][0] == "5=0:5" {
		t.Logf("note: the failed record was first in its batch (%v)", with5[0])
	}
}

// Records of a partition are delivered in order, across retries, on several
// partitions at once.
func orderWithinPartition(t *testing.T, e *env) {
	e.createTopic(3)
	end := map[int32]int64{}
	for p := range int32(3) {
		e.produce(p, 0, 200)
		end[p] = 200
	}
	var (
		mu     sync.Mutex
		values = map[int32][]string{}
	)
	h := stream.HandlerFunc(func(_ context.Context, b *stream.Batch) error {
		if b.FirstOffset()%3 == 0 && b.Attempt.Retries == 0 {
			return errHandler
		}
		mu.Lock()
		for _, r := range b.Records {
			values[b.Partition] = append(values[b.Partition], string(r.Value))
		}
		mu.Unlock()
		return nil
	})
	e.start("a", spec{handler: h, maxBatch: 16,
		policy: checkpoint.Policy{MaxRetries: 3, Backoff: checkpoint.Fixed(5 * time.Millisecond)}})
	e.waitCommitted(end)
	e.hist.check(t, end)
	mu.Lock()
	defer mu.Unlock()
	for p := range int32(3) {
		vs := values[p]
		if len(vs) != 200 {
			t.Fatalf("partition %d: %d records handled successfully, want 200", p, len(vs))
		}
		for i, v := range vs {
			if want := fmt.Sprintf("%d:%d", p, i); v != want {
				t.Fatalf("partition %d: record %d is %q, want %q: out of order", p, i, v, want)
			}
		}
	}
}

// While one partition waits out a backoff, another one keeps flowing: it is
// consumed to its end before the waiting batch's retry, or, where its
// commits are slow (a checkpoint store over HTTP on a loaded machine), it
// is delivered batch after batch during the backoff.
func otherPartitionsFlow(t *testing.T, e *env) {
	e.createTopic(2)
	e.produce(0, 0, 10)
	e.produce(1, 0, 300)
	const backoff = time.Second
	h := stream.HandlerFunc(func(_ context.Context, b *stream.Batch) error {
		if b.Partition == 0 && b.FirstOffset() == 0 && b.Attempt.Retries == 0 {
			return errHandler
		}
		return nil
	})
	e.start("a", spec{handler: h, maxBatch: 10,
		policy: checkpoint.Policy{MaxRetries: 1, Backoff: checkpoint.Fixed(backoff)}})
	e.waitCommitted(map[int32]int64{0: 10, 1: 300})
	e.hist.check(t, map[int32]int64{0: 10, 1: 300})

	var failedAt, retryAt, p1Done time.Time
	evs := e.hist.all()
	for _, ev := range evs {
		switch {
		case ev.delivery && ev.partition == 0 && ev.first == 0 && ev.attempt.Retries == 0:
			failedAt = ev.at
		case ev.delivery && ev.partition == 0 && ev.first == 0 && ev.attempt.Retries == 1:
			retryAt = ev.at
		case !ev.delivery && !ev.exhausted && !ev.abandoned && ev.partition == 1 && ev.next == 300:
			p1Done = ev.at
		}
	}
	if failedAt.IsZero() || retryAt.IsZero() || p1Done.IsZero() {
		t.Fatalf("partition 0 failed at %v and retried at %v, partition 1 done at %v\n%s", failedAt, retryAt, p1Done, e.hist.dump())
	}
	if p1Done.Before(retryAt) {
		return
	}
	// Partition 1 was not done in time: it must have been delivered
	// during the backoff all the same, more than one batch.
	during := 0
	for _, ev := range evs {
		if ev.delivery && ev.partition == 1 && ev.at.After(failedAt) && ev.at.Before(retryAt) {
			during++
		}
	}
	if during < 2 {
		t.Errorf("partition 1 was done %v after partition 0's retry, and %d of its batches were delivered during the %v backoff: it did not flow", p1Done.Sub(retryAt), during, backoff)
	} else {
		t.Logf("partition 1 was done %v after partition 0's retry (slow commits); %d of its batches were delivered during the %v backoff", p1Done.Sub(retryAt), during, backoff)
	}
}

// A backoff longer than the group's session timeout causes no rebalance: the
// consumer keeps heartbeating while the partition is paused, so the worker
// is not stopped and the retry happens in the same assignment.
func backoffLongerThanSession(t *testing.T, e *env) {
	if e.b.SessionTimeout <= 0 {
		t.Skip("the provider gives no session timeout to use")
	}
	e.createTopic(1)
	e.produce(0, 0, 20)
	backoff := 2 * e.b.SessionTimeout
	h := stream.HandlerFunc(func(_ context.Context, b *stream.Batch) error {
		if b.FirstOffset() == 0 && b.Attempt.Retries == 0 {
			return errHandler
		}
		return nil
	})
	e.start("a", spec{handler: h, maxBatch: 10, session: true,
		policy: checkpoint.Policy{MaxRetries: 1, Backoff: checkpoint.Fixed(backoff)}})
	e.waitCommitted(map[int32]int64{0: 20})
	e.hist.check(t, map[int32]int64{0: 20})
	var ds []event
	for _, d := range e.hist.deliveries(0) {
		if d.first == 0 {
			ds = append(ds, d)
		}
	}
	if len(ds) != 2 {
		t.Fatalf("first batch delivered %d times, want 2\n%s", len(ds), e.hist.dump())
	}
	// From the failed delivery's return to the retry's start, both read by
	// the worker that ran them: the backoff the engine promises.
	if gap := ds[1].at.Sub(ds[0].end); gap < backoff {
		t.Errorf("retry started %v after the failed delivery returned, want at least the %v backoff", gap, backoff)
	}
	if n := e.hist.count(func(ev event) bool { return ev.abandoned }); n != 0 {
		t.Errorf("%d batches abandoned: the partition was taken away during a %v backoff with a %v session timeout\n%s",
			n, backoff, e.b.SessionTimeout, e.hist.dump())
	}
}

// A graceful shutdown during a backoff stops promptly and commits nothing
// past the handled records; the next consumer starts at the withheld batch
// and continues its retry count. The batch that fails is the one holding
// offset 10, wherever it begins: a batch is what was fetched, up to the
// maximum, so a client that hands over a fetch's records one by one (sarama)
// can begin batches anywhere.
func gracefulShutdownDuringBackoff(t *testing.T, e *env) {
	e.createTopic(1)
	e.produce(0, 0, 30)
	scheduled := newSignal()
	var (
		mu     sync.Mutex
		failed int64 = -1 // the first offset of the batch that failed
	)
	failedAt := func() int64 {
		mu.Lock()
		defer mu.Unlock()
		return failed
	}
	h := stream.HandlerFunc(func(_ context.Context, b *stream.Batch) error {
		mu.Lock()
		defer mu.Unlock()
		if failed < 0 && b.FirstOffset() <= 10 && 10 <= b.LastOffset() && b.Attempt.Retries == 0 {
			failed = b.FirstOffset()
			return errHandler
		}
		return nil
	})
	policy := checkpoint.Policy{MaxRetries: 3, Backoff: checkpoint.Fixed(1500 * time.Millisecond)}
	// Stop once the retry state is written with the checkpoint (the commit
	// follows the RetryScheduled hook; a stop before it is a crash's case).
	hooks := stream.Hooks{Checkpointed: func(ev stream.CheckpointEvent) {
		if f := failedAt(); f >= 0 && ev.Next == f && ev.Metadata != "" {
			scheduled.fire()
		}
	}}
	a := e.start("a", spec{handler: h, maxBatch: 10, policy: policy, hooks: hooks})
	e.await(scheduled.ch, "the retry state of the batch holding offset 10 to be committed")
	if err := a.stop(); err != nil {
		t.Fatal(err)
	}
	if a.stopped > time.Second {
		t.Errorf("shutdown during a backoff took %v, want at most 1s", a.stopped)
	}
	if a.err != nil {
		t.Errorf("Run returned %v after its context was cancelled, want nil: a clean shutdown", a.err)
	}
	f := failedAt()
	o, ok := e.committed()[0]
	if !ok || o.At != f {
		t.Fatalf("after the shutdown the broker has %+v committed (found %t), want offset %d: the handled records before it and nothing of the withheld batch\n%s", o, ok, f, e.hist.dump())
	}

	e.start("b", spec{handler: h, maxBatch: 10, policy: policy})
	e.waitCommitted(map[int32]int64{0: 30})
	e.hist.check(t, map[int32]int64{0: 30})
	var firstOfB *event
	for _, d := range e.hist.deliveries(0) {
		if d.member == "b" {
			firstOfB = &d
			break
		}
	}
	if firstOfB == nil || firstOfB.first != f {
		t.Fatalf("the next consumer's first delivery is %+v, want the withheld batch at %d\n%s", firstOfB, f, e.hist.dump())
	}
	if firstOfB.attempt.Retries != 1 {
		t.Errorf("the next consumer delivered the batch at %d as retry %d, want 1: the retry state committed with the checkpoint was not continued", f, firstOfB.attempt.Retries)
	}
}

// A second consumer joining the group while the first retries loses no
// record: partitions move between them without gaps, in order.
func consumerJoinsDuringRetry(t *testing.T, e *env) {
	e.createTopic(4)
	end := map[int32]int64{}
	for p := range int32(4) {
		e.produce(p, 0, 100)
		end[p] = 100
	}
	scheduled := newSignal()
	h := stream.HandlerFunc(func(_ context.Context, b *stream.Batch) error {
		if b.FirstOffset() <= 50 && 50 <= b.LastOffset() && b.Attempt.Retries == 0 {
			return errHandler
		}
		return nil
	})
	policy := checkpoint.Policy{MaxRetries: 5, Backoff: checkpoint.Fixed(300 * time.Millisecond)}
	hooks := stream.Hooks{RetryScheduled: func(stream.RetryEvent) { scheduled.fire() }}
	e.start("a", spec{handler: h, maxBatch: 10, policy: policy, hooks: hooks, session: true})
	e.await(scheduled.ch, "a retry to be scheduled")
	e.start("b", spec{handler: h, maxBatch: 10, policy: policy, session: true})
	e.waitCommitted(end)
	e.hist.check(t, end)
	if n := e.hist.count(func(ev event) bool { return ev.delivery && ev.member == "b" }); n == 0 {
		t.Logf("note: the second consumer joined after the first had finished\n%s", e.hist.dump())
	}
}
