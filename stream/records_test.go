package stream_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/redeliver-go/redeliver/checkpoint"
	"github.com/redeliver-go/redeliver/internal/retrystate"
	"github.com/redeliver-go/redeliver/stream"
	"github.com/redeliver-go/redeliver/stream/streamtest"
)

// recordRun runs h over one partition of the given records (all in one
// batch unless maxBatch says otherwise), with a dead-letter action to a
// History publisher, and checks the history: it returns the history and
// the dead-lettered records.
func recordRun(t *testing.T, p *streamtest.Partition, h stream.Handler, policy checkpoint.Policy, opts ...stream.Option) (*streamtest.History, []stream.Record, *harness) {
	t.Helper()
	hist := &streamtest.History{}
	pub := &memPublisher{}
	dl, err := stream.DeadLetter(hist.Publisher(pub), "dlq")
	if err != nil {
		t.Fatal(err)
	}
	opts = append([]stream.Option{stream.WithPolicy(policy), stream.WithExhaustionAction(dl), stream.WithHooks(hist.Hooks("a"))}, opts...)
	hs := start(t, h, []*streamtest.Partition{p}, opts...)
	hs.waitAll()
	hs.stop()
	r := hist.Check(map[streamtest.TopicPartition]int64{{Topic: p.Topic(), Partition: p.Partition()}: p.End()})
	for _, v := range r.Violations {
		t.Error(v)
	}
	return hist, pub.got["dlq"], hs
}

// failing counts the handler calls of each record and fails a record's
// first fails[offset] calls.
type failing struct {
	mu    sync.Mutex
	calls map[int64]int
	fails map[int64]int // -1: always
}

func (f *failing) handler() stream.Handler {
	return stream.PerRecord(func(_ context.Context, r *stream.Record) error {
		f.mu.Lock()
		defer f.mu.Unlock()
		if f.calls == nil {
			f.calls = map[int64]int{}
		}
		f.calls[r.Offset]++
		if n := f.fails[r.Offset]; n < 0 || f.calls[r.Offset] <= n {
			return fmt.Errorf("record %d, call %d: %w", r.Offset, f.calls[r.Offset], errTransient)
		}
		return nil
	})
}

func headers(r stream.Record) map[string]string {
	h := map[string]string{}
	for _, x := range r.Headers {
		h[x.Key] = string(x.Value)
	}
	return h
}

// Eight records in one batch, each failing once and then succeeding,
// under a policy of one retry: each record's failure starts its own count
// once the checkpoint has moved past the record before it, so nothing is
// given up (the batch's count went on from record to record, and 4 of the
// 8 were dead-lettered).
func TestRecordsCountTheirOwnRetries(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p := streamtest.NewPartition("orders", 0, 8)
		p.AppendN(time.Now(), 8)
		f := &failing{fails: map[int64]int{}}
		for o := range int64(8) {
			f.fails[o] = 1
		}
		_, dlq, hs := recordRun(t, p, f.handler(), checkpoint.Policy{MaxRetries: 1, Backoff: checkpoint.Fixed(time.Second)})
		if len(dlq) != 0 {
			t.Fatalf("%d records dead-lettered, want none: no record failed more than once", len(dlq))
		}
		var got []string
		for _, d := range hs.rec.Deliveries() {
			got = append(got, fmt.Sprintf("%d-%d#%d", d.FirstOffset, d.LastOffset, d.Attempt.Retries))
		}
		// Each delivery after the first is retry 1 of the record it
		// starts at: that record failed once.
		want := "[0-7#0 0-7#1 1-7#1 2-7#1 3-7#1 4-7#1 5-7#1 6-7#1 7-7#1]"
		if fmt.Sprint(got) != want {
			t.Fatalf("deliveries %v, want %s", got, want)
		}
	})
}

// A poison record after a record that failed once gets the retries of its
// own policy (3, so 4 deliveries that reach it), and its dead letter
// describes it: its own deliveries, first failure and error.
func TestPoisonRecordAfterATransientOne(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p := streamtest.NewPartition("orders", 0, 10)
		p.AppendN(time.Now(), 10)
		begin := time.Now()
		f := &failing{fails: map[int64]int{2: 1, 5: -1}}
		_, dlq, _ := recordRun(t, p, f.handler(), checkpoint.Policy{MaxRetries: 3, Backoff: checkpoint.Fixed(time.Second)})
		if f.calls[5] != 4 {
			t.Fatalf("the poison record was delivered %d times, want 4 (3 retries of its own)", f.calls[5])
		}
		if len(dlq) != 1 {
			t.Fatalf("%d records dead-lettered, want the poison record", len(dlq))
		}
		// Record 2 failed at once and succeeded 1s later, when record 5
		// first failed.
		h := headers(dlq[0])
		want := map[string]string{
			stream.HeaderOffset: "5", stream.HeaderDeliveries: "4", stream.HeaderDLQDeliveryCount: "4",
			stream.HeaderFirstFailure: begin.Add(time.Second).UTC().Format(time.RFC3339Nano),
			stream.HeaderError:        "record 5, call 4: " + errTransient.Error(),
		}
		for k, v := range want {
			if h[k] != v {
				t.Errorf("header %s = %q, want %q", k, h[k], v)
			}
		}
	})
}

// MaxRetryTime runs from the record's own first failure, MaxRecordAge
// from its own timestamp: a record that fails after another one spent
// part of its budget gets the whole of its own.
func TestRecordsOwnTimeLimits(t *testing.T) {
	t.Run("MaxRetryTime", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			p := streamtest.NewPartition("orders", 0, 10)
			p.AppendN(time.Now(), 2)
			// Record 0 fails twice (retries at 1s and 2s), record 1
			// then fails twice from 2s on: its retries at 3s and 4s
			// are within its own 3s budget, not the batch's.
			f := &failing{fails: map[int64]int{0: 2, 1: 2}}
			_, dlq, _ := recordRun(t, p, f.handler(), checkpoint.Policy{MaxRetries: 10, Backoff: checkpoint.Fixed(time.Second), MaxRetryTime: 3 * time.Second})
			if len(dlq) != 0 || f.calls[1] != 3 {
				t.Fatalf("record 1 delivered %d times, %d dead-lettered; want 3 and none", f.calls[1], len(dlq))
			}
		})
	})
	t.Run("MaxRecordAge", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			p := streamtest.NewPartition("orders", 0, 10)
			p.Append(time.Now().Add(-59*time.Second), "old")
			p.Append(time.Now(), "new")
			f := &failing{fails: map[int64]int{1: 2}}
			_, dlq, _ := recordRun(t, p, f.handler(), checkpoint.Policy{MaxRetries: 10, Backoff: checkpoint.Fixed(time.Second), MaxRecordAge: time.Minute})
			if len(dlq) != 0 || f.calls[1] != 3 {
				t.Fatalf("record 1 delivered %d times, %d dead-lettered; want 3 and none: its age is its own", f.calls[1], len(dlq))
			}
		})
	})
}

// A RetryResult on a partial success counts for the record it names, from
// its own first request.
func TestRecordRetryResultOnPartialSuccess(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p := streamtest.NewPartition("orders", 0, 10)
		p.AppendN(time.Now(), 3)
		var mu sync.Mutex
		calls := map[int64]int{}
		h := stream.HandlerFunc(func(_ context.Context, b *stream.Batch) error {
			mu.Lock()
			defer mu.Unlock()
			for i, r := range b.Records {
				calls[r.Offset]++
				switch {
				case r.Offset == 0 && calls[0] <= 2:
					return stream.FailedAt(i, errTransient)
				case r.Offset == 1 && calls[1] == 1:
					return stream.FailedAt(i, &stream.RetryResult{MaxRetries: 1, Delay: time.Second})
				}
			}
			return nil
		})
		_, _, hs := recordRun(t, p, h, checkpoint.Policy{MaxRetries: 5, Backoff: checkpoint.Fixed(time.Second)})
		var got []string
		for _, d := range hs.rec.Deliveries() {
			got = append(got, fmt.Sprintf("%d-%d#%d/%d", d.FirstOffset, d.LastOffset, d.Attempt.Retries, d.Attempt.MaxRetries))
		}
		// Record 1's RetryResult replaces the policy for record 1 only,
		// with its count from its own request.
		if want := "[0-2#0/5 0-2#1/5 0-2#2/5 1-2#1/1]"; fmt.Sprint(got) != want {
			t.Fatalf("deliveries %v, want %s", got, want)
		}
	})
}

// The committed retry state names its record: a next owner continues the
// count of the record at the checkpoint, and ignores a state that names
// another record.
func TestRetryStateNamesItsRecord(t *testing.T) {
	for _, tt := range []struct {
		name  string
		md    string
		retry int
	}{
		{"its own", "rd1;o=3;r=2;f=1000;d=1000;s=1", 3},
		{"another record's", "rd1;o=1;r=2;f=1000;d=1000;s=1", 0},
		{"written before states named their record", "rd1;r=2;f=1000;d=1000;s=1", 3},
	} {
		t.Run(tt.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				p := streamtest.NewPartition("orders", 0, 10)
				p.AppendN(time.Now(), 6)
				p.SetCheckpoint(3, tt.md)
				hs := start(t, streamtest.Succeed, []*streamtest.Partition{p}, fixed(5, time.Second))
				hs.waitAll()
				hs.stop()
				ds := hs.rec.Deliveries()
				if len(ds) != 1 || ds[0].FirstOffset != 3 || ds[0].Attempt.Retries != tt.retry {
					t.Fatalf("deliveries %+v, want 3-5 as retry %d", ds, tt.retry)
				}
			})
		})
	}
	// What the engine commits for a record that failed after a partial
	// success names that record.
	synctest.Test(t, func(t *testing.T) {
		p := streamtest.NewPartition("orders", 0, 10)
		p.AppendN(time.Now(), 6)
		f := &failing{fails: map[int64]int{4: 1}}
		hs := start(t, f.handler(), []*streamtest.Partition{p}, fixed(5, time.Second))
		hs.waitAll()
		hs.stop()
		var states []string
		for _, c := range p.Commits() {
			if c.Metadata != "" {
				s, err := retrystate.DecodeState(c.Metadata)
				if err != nil {
					t.Fatal(err)
				}
				states = append(states, fmt.Sprintf("%d:o=%d", c.Next, s.Offset))
			}
		}
		if fmt.Sprint(states) != "[4:o=4 4:o=4]" {
			t.Fatalf("retry states %v, want two (scheduled, started) at 4 naming record 4", states)
		}
	})
}

// A move while a record that failed after a partial success waits out its
// backoff: the next owner continues that record's count, and the history
// checker, which counts per record, finds nothing wrong.
func TestRecordCountSurvivesAMove(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var hist streamtest.History
		p := streamtest.NewPartition("orders", 0, 10)
		p.AppendN(time.Now(), 10)
		f := &failing{fails: map[int64]int{0: 1, 4: -1}}
		revoke := stream.Hooks{Checkpointed: func(e stream.CheckpointEvent) {
			if s, _ := retrystate.DecodeState(e.Metadata); s.Offset == 4 && s.Retries == 2 && !s.Started {
				p.Revoke()
			}
		}}
		policy := checkpoint.Policy{MaxRetries: 3, Backoff: checkpoint.Fixed(time.Second)}
		a := start(t, f.handler(), []*streamtest.Partition{p}, stream.WithPolicy(policy), stream.WithHooks(stream.MergeHooks(hist.Hooks("a"), revoke)))
		if err := <-a.done; err != nil {
			t.Fatal(err)
		}
		var given givenUp
		b := start(t, f.handler(), []*streamtest.Partition{p}, stream.WithPolicy(policy), stream.WithHooks(hist.Hooks("b")), stream.WithExhaustionAction(given.action))
		b.waitAll()
		b.stop()
		if f.calls[4] != 4 || len(given.errs) != 1 || given.errs[0].Retries != 3 {
			t.Fatalf("record 4 delivered %d times, given up %v; want 4 and after 3 retries", f.calls[4], given.got)
		}
		if r := hist.Check(map[streamtest.TopicPartition]int64{{Topic: "orders", Partition: 0}: 10}); len(r.Violations) > 0 {
			t.Fatalf("violations: %v", r.Violations)
		}
		if ds := b.rec.Deliveries(); len(ds) == 0 || ds[0].FirstOffset != 4 || ds[0].Attempt.Retries != 2 {
			t.Fatalf("the next owner's first delivery %+v, want record 4 as retry 2", ds)
		}
		if !errors.Is(given.errs[0], errTransient) {
			t.Fatalf("given up with %v", given.errs[0])
		}
	})
}
