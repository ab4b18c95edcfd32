package stream_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/redeliver-go/redeliver/checkpoint"
	"github.com/redeliver-go/redeliver/stream"
	"github.com/redeliver-go/redeliver/stream/streamtest"
)

// A handler that reports the records before index 3 done moves the
// checkpoint to record 3, and the rest of the batch is retried with record
// 3's own count.
func TestPartialSuccessAdvancesToFailedRecord(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p := streamtest.NewPartition("t", 0, 10)
		p.AppendN(time.Now(), 10)
		h := stream.HandlerFunc(func(_ context.Context, b *stream.Batch) error {
			for i, r := range b.Records {
				if r.Offset == 3 && b.Attempt.Retries < 2 {
					return stream.FailedAt(i, errTransient)
				}
			}
			return nil
		})
		hs := start(t, h, []*streamtest.Partition{p}, fixed(5, time.Second))
		hs.waitAll()
		hs.stop()
		var got []string
		for _, d := range hs.rec.Deliveries() {
			got = append(got, fmt.Sprintf("%d-%d#%d", d.FirstOffset, d.LastOffset, d.Attempt.Retries))
		}
		if want := "[0-9#0 3-9#1 3-9#2]"; fmt.Sprint(got) != want {
			t.Fatalf("deliveries %v, want %s", got, want)
		}
		if got := advancing(p.Commits()); fmt.Sprint(got) != "[3 10]" {
			t.Fatalf("advancing commits %v, want [3 10]", got)
		}
	})
}

// An index of 0 (the first record failed) or out of range: the whole batch
// is delivered again.
func TestPartialSuccessBadIndexFailsWholeBatch(t *testing.T) {
	for _, idx := range []int{0, -1, 5, 99} {
		t.Run(fmt.Sprint(idx), func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				p := streamtest.NewPartition("t", 0, 5)
				p.AppendN(time.Now(), 5)
				h := stream.HandlerFunc(func(_ context.Context, b *stream.Batch) error {
					if b.Attempt.Retries == 0 {
						return stream.FailedAt(idx, errTransient)
					}
					return nil
				})
				hs := start(t, h, []*streamtest.Partition{p}, fixed(1, time.Second))
				hs.waitAll()
				hs.stop()
				ds := hs.rec.Deliveries()
				if len(ds) != 2 || ds[1].FirstOffset != 0 || ds[1].LastOffset != 4 {
					t.Fatalf("deliveries %+v: want the whole batch twice", ds)
				}
			})
		})
	}
}

// StopPartition holds the partition, paused, until Resume (the batch comes
// back with a fresh count) or Skip (the checkpoint moves past it).
func TestStopPartitionResumeAndSkip(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p := streamtest.NewPartition("t", 0, 5)
		p.AppendN(time.Now(), 10)
		other := streamtest.NewPartition("t", 1, 5)
		other.AppendN(time.Now(), 10)
		var (
			mu      sync.Mutex
			healthy bool
		)
		h := stream.HandlerFunc(func(_ context.Context, b *stream.Batch) error {
			mu.Lock()
			defer mu.Unlock()
			if b.Partition == 0 && !healthy {
				return errTransient
			}
			return nil
		})
		var stoppedEvents []stream.StoppedEvent
		hooks := stream.Hooks{Stopped: func(e stream.StoppedEvent) { stoppedEvents = append(stoppedEvents, e) }}
		rec := &streamtest.Recorder{}
		proc, err := stream.NewProcessor(stream.Chain(h, rec.Middleware()), fixed(2, time.Second),
			stream.WithExhaustionAction(stream.StopPartition), stream.WithHooks(hooks))
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithCancel(t.Context())
		done := make(chan error, 1)
		go func() { done <- streamtest.Run(ctx, proc, p, other) }()

		waitCtx, wcancel := context.WithTimeout(ctx, time.Hour)
		defer wcancel()
		if err := other.WaitCommitted(waitCtx, 10); err != nil {
			t.Fatal(err)
		}
		time.Sleep(time.Hour) // fake time: the partition stays stopped
		synctest.Wait()
		st := proc.Stopped()
		if len(st) != 1 || st[0].Partition != 0 || st[0].FirstOffset != 0 || st[0].Err.Retries != 2 {
			t.Fatalf("stopped partitions %+v", st)
		}
		if c, _ := p.Committed(); c > 0 {
			t.Fatalf("stopped partition checkpoint moved to %d", c)
		}
		if paused, _ := p.Paused(); !paused || len(stoppedEvents) != 1 {
			t.Fatalf("paused %v, stopped events %d", paused, len(stoppedEvents))
		}
		if err := proc.Resume(ctx, "t", 1); !errors.Is(err, stream.ErrNotStopped) {
			t.Fatalf("Resume of a running partition: %v", err)
		}

		// Resume: delivered again from retry 0; still failing, it stops again.
		before := len(rec.Of("t", 0))
		if err := proc.Resume(ctx, "t", 0); err != nil {
			t.Fatal(err)
		}
		time.Sleep(time.Hour)
		synctest.Wait()
		ds := rec.Of("t", 0)
		if len(ds) != before+3 || ds[before].Attempt.Retries != 0 {
			t.Fatalf("after Resume: %d new deliveries (want 3), first at retry %d", len(ds)-before, ds[before].Attempt.Retries)
		}
		if len(proc.Stopped()) != 1 {
			t.Fatal("partition not stopped again after its retries were spent")
		}

		// Skip: the checkpoint moves past the batch; the next batch succeeds.
		mu.Lock()
		healthy = true
		mu.Unlock()
		if err := proc.Skip(ctx, "t", 0); err != nil {
			t.Fatal(err)
		}
		waitCtx, wcancel = context.WithTimeout(ctx, time.Hour)
		defer wcancel()
		if err := p.WaitCommitted(waitCtx, 10); err != nil {
			t.Fatal(err)
		}
		if n := len(rec.Of("t", 0)); n != before+4 {
			t.Fatalf("after Skip: %d deliveries in all, want %d (the skipped batch not delivered again)", n, before+4)
		}
		cancel()
		if err := <-done; err != nil {
			t.Fatal(err)
		}
	})
}

// memPublisher is an in-memory Publisher that fails its first n calls.
type memPublisher struct {
	mu    sync.Mutex
	fail  int
	calls int
	got   map[string][]stream.Record
}

func (m *memPublisher) Publish(_ context.Context, topic string, recs []stream.Record) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.calls++
	if m.calls <= m.fail {
		return errors.New("broker not available")
	}
	if m.got == nil {
		m.got = map[string][]stream.Record{}
	}
	m.got[topic] = append(m.got[topic], recs...)
	return nil
}

// Dead-lettered records carry their origin; the checkpoint waits for the
// produce to succeed.
func TestDeadLetterHeadersAndAck(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p := streamtest.NewPartition("orders", 4, 3)
		p.Append(time.Now(), "a", "b", "c", "d")
		begin := time.Now()
		pub := &memPublisher{fail: 2}
		var seen []int64
		hooks := stream.Hooks{Exhausted: func(stream.ExhaustedEvent) {
			c, _ := p.Committed()
			seen = append(seen, c)
		}}
		h := stream.HandlerFunc(func(_ context.Context, b *stream.Batch) error {
			if b.FirstOffset() == 0 {
				return errors.New("schema mismatch")
			}
			return nil
		})
		dl, err := stream.DeadLetter(pub, "orders.dlq")
		if err != nil {
			t.Fatal(err)
		}
		hs := start(t, h, []*streamtest.Partition{p}, fixed(2, time.Second),
			stream.WithExhaustionAction(dl), stream.WithHooks(hooks))
		hs.waitAll()
		hs.stop()
		if pub.calls != 3 {
			t.Fatalf("%d produce calls, want 3 (two failures, then success)", pub.calls)
		}
		dlq := pub.got["orders.dlq"]
		if len(dlq) != 3 {
			t.Fatalf("%d dead-lettered records, want 3", len(dlq))
		}
		for i, r := range dlq {
			h := map[string]string{}
			for _, x := range r.Headers {
				h[x.Key] = string(x.Value)
			}
			want := map[string]string{
				stream.HeaderTopic: "orders", stream.HeaderPartition: "4", stream.HeaderOffset: fmt.Sprint(i),
				stream.HeaderDeliveries: "3", stream.HeaderError: "schema mismatch",
				stream.HeaderFirstFailure: begin.UTC().Format(time.RFC3339Nano),
				// KIP-1191's names, as Kafka's share-group dead-letter queue writes them.
				stream.HeaderDLQTopic: "orders", stream.HeaderDLQPartition: "4", stream.HeaderDLQOffset: fmt.Sprint(i),
				stream.HeaderDLQDeliveryCount: "3",
				stream.HeaderDLQMessage:       "given up after 3 deliveries (the retry limit, 2 retries, is reached): schema mismatch",
			}
			if fmt.Sprint(h) != fmt.Sprint(want) || string(r.Value) != string(rune('a'+i)) {
				t.Fatalf("record %d: value %q headers %v, want %v", i, r.Value, h, want)
			}
		}
		if c, _ := p.Committed(); c != 4 {
			t.Fatalf("checkpoint %d, want 4", c)
		}
	})
}

// Resume and Skip wait for the stopped partition's worker no longer than
// their caller's context: a wait cut short returns the context's error
// and says what state the partition is in. Cancelled before the worker
// took the command, the partition is still stopped (and listed by
// Stopped); a skip the worker took while its checkpoint cannot be written
// (the broker away) is no longer stopped, its checkpoint written once the
// commits succeed again.
func TestSkipAndResumeWaitNoLongerThanTheirContext(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p := streamtest.NewPartition("t", 0, 1)
		p.AppendN(time.Now(), 3)
		h := stream.HandlerFunc(func(_ context.Context, b *stream.Batch) error {
			if b.FirstOffset() == 1 {
				return errTransient
			}
			return nil
		})
		proc, err := stream.NewProcessor(h, fixed(0, 0), stream.WithExhaustionAction(stream.StopPartition),
			stream.WithOperationBackoff(checkpoint.Fixed(time.Second)))
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithCancel(t.Context())
		done := make(chan error, 1)
		go func() { done <- streamtest.Run(ctx, proc, p) }()
		synctest.Wait()
		if st := proc.Stopped(); len(st) != 1 || st[0].FirstOffset != 1 {
			t.Fatalf("stopped %+v, want the partition stopped at 1", st)
		}

		// A context already done: nothing happens.
		gone, stop := context.WithCancel(ctx)
		stop()
		for _, op := range []func(context.Context, string, int32) error{proc.Resume, proc.Skip} {
			err := op(gone, "t", 0)
			if !errors.Is(err, context.Canceled) || !strings.Contains(err.Error(), "still stopped at offset 1") {
				t.Errorf("with a cancelled context: %v; want context.Canceled, saying the partition is still stopped at offset 1", err)
			}
		}
		if st := proc.Stopped(); len(st) != 1 {
			t.Fatalf("stopped %+v after cancelled calls, want the partition still stopped", st)
		}

		// The broker away for a minute: the skip's checkpoint cannot be
		// written, and the caller's 5s end the wait.
		faults := make([]error, 60)
		for i := range faults {
			faults[i] = errors.New("coordinator not available")
		}
		p.FailCommits(faults...)
		wctx, wcancel := context.WithTimeout(ctx, 5*time.Second)
		defer wcancel()
		began := time.Now()
		err = proc.Skip(wctx, "t", 0)
		if took := time.Since(began); took != 5*time.Second {
			t.Errorf("Skip returned after %v, want 5s: the caller's deadline", took)
		}
		if !errors.Is(err, context.DeadlineExceeded) || !strings.Contains(err.Error(), "no longer stopped") ||
			!strings.Contains(err.Error(), "checkpoint past offset 1 is being written") {
			t.Errorf("Skip = %v; want context.DeadlineExceeded, saying the partition is no longer stopped and its checkpoint is being written", err)
		}
		if st := proc.Stopped(); len(st) != 0 {
			t.Errorf("stopped %+v after the worker took the skip, want none", st)
		}
		if c, _ := p.Committed(); c != 1 {
			t.Errorf("checkpoint %d while the commits fail, want 1", c)
		}
		// Once the broker is back, the skip's checkpoint is written and the
		// partition goes on.
		wait, wcancel2 := context.WithTimeout(ctx, time.Hour)
		defer wcancel2()
		if err := p.WaitCommitted(wait, 3); err != nil {
			t.Fatal(err)
		}
		cancel()
		if err := <-done; err != nil {
			t.Fatal(err)
		}
	})
}

// partialPublisher is an in-memory Publisher whose first call writes the
// first `writes` records and fails the rest, reporting which with a
// *stream.PublishError, as a Kafka publisher does when one partition's
// leader is away; later calls write everything.
type partialPublisher struct {
	mu     sync.Mutex
	writes int
	calls  [][]int64 // the original offsets of each call's records
	got    []stream.Record
}

func (m *partialPublisher) Publish(_ context.Context, _ string, recs []stream.Record) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	var offs []int64
	for _, r := range recs {
		offs = append(offs, originalOffset(r))
	}
	m.calls = append(m.calls, offs)
	if len(m.calls) > 1 {
		m.got = append(m.got, recs...)
		return nil
	}
	pe := &stream.PublishError{Errs: make([]error, len(recs))}
	for i, r := range recs {
		if i < m.writes {
			m.got = append(m.got, r)
		} else {
			pe.Errs[i] = errors.New("not leader for partition")
		}
	}
	if pe.Failed() == 0 {
		return nil
	}
	return pe
}

// originalOffset reads a dead letter's original offset header.
func originalOffset(r stream.Record) int64 {
	for _, h := range r.Headers {
		if h.Key == stream.HeaderOffset {
			var n int64
			fmt.Sscan(string(h.Value), &n)
			return n
		}
	}
	return -1
}

// A dead letter that the publisher wrote in part is completed on the next
// try with the records not written yet: each given-up record lands in the
// dead-letter topic once.
func TestDeadLetterAfterPartialPublishWritesEachRecordOnce(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p := streamtest.NewPartition("orders", 0, 5)
		p.AppendN(time.Now(), 5)
		fail := stream.HandlerFunc(func(context.Context, *stream.Batch) error { return errors.New("schema mismatch") })
		pub := &partialPublisher{writes: 2}
		hist := &streamtest.History{}
		dl, err := stream.DeadLetter(hist.Publisher(pub), "orders.dlq")
		if err != nil {
			t.Fatal(err)
		}
		var tries []stream.ActionEvent
		hs := start(t, fail, []*streamtest.Partition{p}, fixed(0, 0), stream.WithExhaustionAction(dl),
			stream.WithHooks(stream.Hooks{ActionTried: func(e stream.ActionEvent) { tries = append(tries, e) }}))
		hs.waitAll()
		hs.stop()
		if len(pub.calls) != 2 || !slices.Equal(pub.calls[0], []int64{0, 1, 2, 3, 4}) || !slices.Equal(pub.calls[1], []int64{2, 3, 4}) {
			t.Errorf("publish calls %v, want [0 1 2 3 4] then [2 3 4]: the records written by the first are not published again", pub.calls)
		}
		var got []int64
		for _, r := range pub.got {
			got = append(got, originalOffset(r))
		}
		slices.Sort(got)
		if !slices.Equal(got, []int64{0, 1, 2, 3, 4}) {
			t.Errorf("dead-letter topic holds offsets %v, want each of 0-4 once", got)
		}
		if len(tries) != 2 || tries[0].Err == nil || !strings.Contains(tries[0].Err.Error(), "3 of 5 records not published") || tries[1].Err != nil {
			t.Errorf("action tries %+v, want a failure that says 3 of 5 were not published, then a success", tries)
		}
		// The history records what was published, partial writes included.
		if n := len(hist.Events()); n != 5 {
			t.Errorf("the history recorded %d dead letters, want 5", n)
		}
	})
}

// Two DeadLetter actions run by one action of the application's (a copy
// to an audit topic, then the dead-letter topic) each keep what they
// wrote: when the second fails part-way, the next try publishes neither
// the first's records again nor the second's written ones, and nothing
// the second has not written is left out.
func TestDeadLetterActionsKeepTheirOwnWrites(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p := streamtest.NewPartition("orders", 0, 5)
		p.AppendN(time.Now(), 5)
		fail := stream.HandlerFunc(func(context.Context, *stream.Batch) error { return errors.New("schema mismatch") })
		audit, dlq := &partialPublisher{writes: 5}, &partialPublisher{writes: 2}
		toAudit, err := stream.DeadLetter(audit, "orders.audit")
		if err != nil {
			t.Fatal(err)
		}
		toDLQ, err := stream.DeadLetter(dlq, "orders.dlq")
		if err != nil {
			t.Fatal(err)
		}
		both := func(ctx context.Context, b *stream.Batch, xerr *checkpoint.ExhaustedError) error {
			if err := toAudit(ctx, b, xerr); err != nil {
				return err
			}
			return toDLQ(ctx, b, xerr)
		}
		hs := start(t, fail, []*streamtest.Partition{p}, fixed(0, 0), stream.WithExhaustionAction(both))
		hs.waitAll()
		hs.stop()
		for name, pub := range map[string]*partialPublisher{"audit": audit, "dlq": dlq} {
			var got []int64
			for _, r := range pub.got {
				got = append(got, originalOffset(r))
			}
			slices.Sort(got)
			if !slices.Equal(got, []int64{0, 1, 2, 3, 4}) {
				t.Errorf("%s topic holds offsets %v (publish calls %v), want each of 0-4 once", name, got, pub.calls)
			}
		}
		if len(audit.calls) != 1 || len(dlq.calls) != 2 || !slices.Equal(dlq.calls[1], []int64{2, 3, 4}) {
			t.Errorf("publish calls: audit %v, dlq %v; want audit once, dlq [0-4] then [2 3 4]", audit.calls, dlq.calls)
		}
	})
}
