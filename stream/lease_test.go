package stream_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/redeliver-go/redeliver/checkpoint"
	"github.com/redeliver-go/redeliver/internal/leases"
	"github.com/redeliver-go/redeliver/stream"
)

// The lease driver (record units) over fake leases: the lease is the
// engine's own interface, so a fake is the transport here; the share
// consumer's tests (adapters/franz/tests/share) run the same over kfake.

type fakeLease struct {
	rec      stream.Record
	dc       int
	deadline time.Time
	canHold  bool

	mu      sync.Mutex
	settled string // "accept", "release", "reject"
}

func (l *fakeLease) Record() *stream.Record { return &l.rec }
func (l *fakeLease) Deliveries() int        { return l.dc }
func (l *fakeLease) Deadline() time.Time    { return l.deadline }
func (l *fakeLease) Hold(time.Time) bool    { return l.canHold }
func (l *fakeLease) Accept()                { l.set("accept") }
func (l *fakeLease) Release()               { l.set("release") }
func (l *fakeLease) Reject()                { l.set("reject") }
func (l *fakeLease) set(s string)           { l.mu.Lock(); l.settled = s; l.mu.Unlock() }
func (l *fakeLease) how() string            { l.mu.Lock(); defer l.mu.Unlock(); return l.settled }
func newLease(off int64, dc int) *fakeLease {
	return &fakeLease{rec: stream.Record{Topic: "t", Partition: 0, Offset: off}, dc: dc, deadline: time.Now().Add(time.Hour), canHold: true}
}

type fakePoll []*fakeLease

func (p fakePoll) Leases() []leases.Lease[stream.Record] {
	out := make([]leases.Lease[stream.Record], len(p))
	for i, l := range p {
		out[i] = l
	}
	return out
}
func (fakePoll) Tend(context.Context, time.Time, []leases.Lease[stream.Record], bool) time.Time {
	return time.Time{}
}

func lane(t *testing.T, p *stream.Processor, limit int) leases.Lane[stream.Record] {
	t.Helper()
	d, err := leases.New(p, leases.Config[stream.Record]{Limit: func() int { return limit }})
	if err != nil {
		t.Fatal(err)
	}
	return d.Lane(nil)
}

// A record the broker delivered before is restored with the bound check:
// under MaxRetries 0 its second delivery is not handed to the handler; it
// goes to its action. Under MaxRetries 1 a third delivery is not either.
func TestLeaseRestoredCountIsBounded(t *testing.T) {
	for _, tc := range []struct {
		max, dc int
		want    int // handler calls
	}{{0, 2, 0}, {1, 2, 1}, {1, 3, 0}} {
		synctest.Test(t, func(t *testing.T) {
			var calls, acted int
			p, err := stream.NewProcessor(stream.PerRecord(func(context.Context, *stream.Record) error { calls++; return nil }),
				stream.WithPolicy(checkpoint.Policy{MaxRetries: tc.max}),
				stream.WithExhaustionAction(func(context.Context, *stream.Batch, *checkpoint.ExhaustedError) error { acted++; return nil }))
			if err != nil {
				t.Fatal(err)
			}
			l := newLease(0, tc.dc)
			lane(t, p, 0).Settle(t.Context(), fakePoll{l})
			wantHow := "accept"
			if tc.want == 0 {
				wantHow = "reject"
			}
			if calls != tc.want || l.how() != wantHow {
				t.Errorf("MaxRetries %d, delivery %d: %d calls, %s; want %d, %s", tc.max, tc.dc, calls, l.how(), tc.want, wantHow)
			}
		})
	}
}

// A retry that cannot be held is released (under the limit) and its state
// kept: when the record comes back with the next count, the release spent
// nothing. At the broker's last delivery it is given up instead, with the
// delivery limit as its reason.
func TestLeaseReleaseAndDeliveryLimit(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var mu sync.Mutex
		var attempts []stream.Attempt
		var xerrs []*checkpoint.ExhaustedError
		p, err := stream.NewProcessor(stream.HandlerFunc(func(_ context.Context, b *stream.Batch) error {
			mu.Lock()
			attempts = append(attempts, b.Attempt)
			mu.Unlock()
			return &stream.RetryResult{MaxRetries: 3, Delay: time.Hour}
		}), stream.WithExhaustionAction(func(_ context.Context, _ *stream.Batch, xerr *checkpoint.ExhaustedError) error {
			xerrs = append(xerrs, xerr)
			return nil
		}))
		if err != nil {
			t.Fatal(err)
		}
		ln := lane(t, p, 3)
		for dc := 1; dc <= 3; dc++ {
			l := newLease(0, dc)
			l.canHold = false
			ln.Settle(t.Context(), fakePoll{l})
			want := "release"
			if dc == 3 {
				want = "reject"
			}
			if l.how() != want {
				t.Fatalf("delivery %d: %s, want %s", dc, l.how(), want)
			}
		}
		if len(attempts) != 3 || attempts[1].Retries != 1 || attempts[2].Retries != 2 || attempts[2].MaxRetries != 3 {
			t.Errorf("attempts %+v, want retries 0, 1, 2 of the RetryResult's 3", attempts)
		}
		if len(xerrs) != 1 || xerrs[0].Reason != checkpoint.DeliveryLimitReached {
			t.Errorf("given up with %v, want the delivery limit", xerrs)
		}
	})
}

// StopPartition holds the record: Processor.Stopped lists it as a record
// unit, and ResumeRecord delivers it again with a fresh count.
func TestLeaseStopAndResume(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var calls int
		stopped := make(chan stream.StoppedEvent, 1)
		p, err := stream.NewProcessor(stream.PerRecord(func(context.Context, *stream.Record) error {
			calls++
			if calls == 1 {
				return errors.New("bad")
			}
			return nil
		}), stream.WithExhaustionAction(stream.StopPartition), stream.WithHooks(stream.Hooks{Stopped: func(e stream.StoppedEvent) { stopped <- e }}))
		if err != nil {
			t.Fatal(err)
		}
		l := newLease(5, 1)
		done := make(chan struct{})
		go func() { lane(t, p, 0).Settle(t.Context(), fakePoll{l}); close(done) }()
		<-stopped
		sp := p.Stopped()
		if len(sp) != 1 || !sp[0].Record || sp[0].FirstOffset != 5 {
			t.Fatalf("Stopped() = %+v, want the record at offset 5", sp)
		}
		if err := p.ResumeRecord(t.Context(), "t", 0, 5); err != nil {
			t.Fatal(err)
		}
		<-done
		if calls != 2 || l.how() != "accept" {
			t.Errorf("%d calls, %s; want 2, accept", calls, l.how())
		}
	})
}

// At shutdown a held record is released, reported Abandoned.
func TestLeaseShutdown(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var abandoned int
		p, err := stream.NewProcessor(stream.PerRecord(func(context.Context, *stream.Record) error { return errors.New("bad") }),
			stream.WithPolicy(checkpoint.Policy{MaxRetries: 3, Backoff: checkpoint.Fixed(time.Minute)}),
			stream.WithHooks(stream.Hooks{Abandoned: func(stream.AbandonedEvent) { abandoned++ }}))
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithCancel(t.Context())
		l := newLease(0, 1)
		done := make(chan struct{})
		go func() { lane(t, p, 0).Settle(ctx, fakePoll{l}); close(done) }()
		time.Sleep(time.Second) // held for its retry, a minute away
		cancel()
		<-done
		if l.how() != "release" || abandoned != 1 {
			t.Errorf("%s, %d Abandoned; want release, 1", l.how(), abandoned)
		}
	})
}

// An outage budget is refused: record units cannot apply it.
func TestLeasesRefuseOutageBudget(t *testing.T) {
	b, err := stream.NewBudget(stream.BudgetConfig{})
	if err != nil {
		t.Fatal(err)
	}
	p, err := stream.NewProcessor(stream.HandlerFunc(func(context.Context, *stream.Batch) error { return nil }), stream.WithOutageBudget(b))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := leases.New(p, leases.Config[stream.Record]{}); err == nil {
		t.Fatal("leases.New with an outage budget: no error")
	}
}

// A stop drains the poll (issue 47, follow-up 1): a handler call running
// at the stop finishes with its context not done, and the records not
// handed over yet are delivered, so that nothing that never failed is
// released; a record held for a retry is released. With a bound, the
// calls' context ends at the bound, and what is left is released.
func TestLeaseStopDrains(t *testing.T) {
	for _, tc := range []struct {
		name  string
		drain time.Duration
		slow  time.Duration // how long the call of offset 1 takes, ignoring the stop
		want  []string      // settlements of offsets 0 (held), 1, 2, 3
	}{
		{"unbounded", 0, time.Minute, []string{"release", "accept", "accept", "accept"}},
		{"within the bound", 2 * time.Minute, time.Minute, []string{"release", "accept", "accept", "accept"}},
		{"past the bound", 10 * time.Second, time.Minute, []string{"release", "release", "release", "release"}},
		{"no drain", -1, time.Minute, []string{"release", "release", "release", "release"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				ctx, stop := context.WithCancel(t.Context())
				var mu sync.Mutex
				var late []int64
				p, err := stream.NewProcessor(stream.PerRecord(func(hctx context.Context, r *stream.Record) error {
					switch r.Offset {
					case 0:
						return errors.New("bad") // held for its retry
					case 1:
						stop() // the stop comes during the call
						select {
						case <-time.After(tc.slow):
						case <-hctx.Done():
						}
					}
					if hctx.Err() != nil {
						mu.Lock()
						late = append(late, r.Offset)
						mu.Unlock()
						return hctx.Err()
					}
					return nil
				}), stream.WithPolicy(checkpoint.Policy{MaxRetries: 1, Backoff: checkpoint.Fixed(time.Hour)}))
				if err != nil {
					t.Fatal(err)
				}
				d, err := leases.New(p, leases.Config[stream.Record]{Drain: tc.drain})
				if err != nil {
					t.Fatal(err)
				}
				// One call over the four, record by record: offset 0 fails
				// and is held, the stop comes during offset 1.
				poll := fakePoll{newLease(0, 1), newLease(1, 1), newLease(2, 1), newLease(3, 1)}
				d.Lane(nil).Settle(ctx, poll)
				var got []string
				for _, l := range poll {
					got = append(got, l.how())
				}
				if fmt.Sprint(got) != fmt.Sprint(tc.want) {
					t.Errorf("settled %v, want %v (late calls %v)", got, tc.want, late)
				}
			})
		})
	}
}

// A driver asked for a Processor not made by NewProcessor (nil, or the
// zero value), or for what is not a Processor, is refused with an error:
// no panic.
func TestLeasesNotMadeByNewProcessor(t *testing.T) {
	var nilProc *stream.Processor
	for _, p := range []*stream.Processor{nilProc, new(stream.Processor)} {
		d, err := leases.New(p, leases.Config[stream.Record]{})
		if err == nil || !strings.Contains(err.Error(), "not made by NewProcessor") {
			t.Errorf("leases.New(%p) = %v, %v; want an error saying it was not made by NewProcessor", p, d, err)
		}
	}
	if _, err := leases.New(42, leases.Config[stream.Record]{}); err == nil {
		t.Error("leases.New(42): no error")
	}
	if _, err := leases.New(nilProc, leases.Config[int]{}); err == nil {
		t.Error("leases.New over int records: no error")
	}
}
