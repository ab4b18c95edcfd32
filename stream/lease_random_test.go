package stream_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/redeliver-go/redeliver/checkpoint"
	"github.com/redeliver-go/redeliver/internal/leases"
	"github.com/redeliver-go/redeliver/stream"
)

// TestRandomLeases drives record units (the lease driver) with random
// polls, policies, handler results, exhaustion actions, holds, delivery
// limits and shutdowns, and checks what must hold whatever they are:
//
//   - every lease is settled at most once, and no lease is touched after
//     Settle returned;
//   - a Settle that was not cut short settles every lease;
//   - a record is rejected only after its exhaustion action succeeded
//     (or a Skip of its stop), and never handed to the handler after its
//     settlement;
//   - under the policy alone (no RetryResult, no resume of a stop), a
//     record is handed to the handler at most MaxRetries + 1 times, less
//     the earlier deliveries the broker counted.
//
// Seeds as TestRandomEngine's: -random.seeds=N.
func TestRandomLeases(t *testing.T) {
	n := 500
	if *randomSeeds > 0 {
		n = *randomSeeds
	}
	var tally leaseTally
	for seed := 1; seed <= n; seed++ {
		synctest.Test(t, func(t *testing.T) { randomLeases(t, uint64(seed), &tally) })
		if t.Failed() {
			t.Fatalf("seed %d failed", seed)
		}
	}
	t.Logf("%d seeds: %d leases, %d handler calls, settled: %v; %d stops", n, tally.leases, tally.calls, tally.settles, tally.stops)
}

// leaseTally counts what the seeds did, to show what they cover.
type leaseTally struct {
	leases, calls, stops int
	settles              map[string]int
}

type rlease struct {
	rec     stream.Record
	dc      int
	hold    bool
	mu      sync.Mutex
	settles []string
	after   bool // touched after Settle returned
	closed  *atomic.Bool
	deadAt  time.Time
	onSet   func(off int64)
}

func (l *rlease) Record() *stream.Record { return &l.rec }
func (l *rlease) Deliveries() int        { return l.dc }
func (l *rlease) Deadline() time.Time    { return l.deadAt }
func (l *rlease) Hold(time.Time) bool    { return l.hold }
func (l *rlease) Accept()                { l.settle("accept") }
func (l *rlease) Release()               { l.settle("release") }
func (l *rlease) Reject()                { l.settle("reject") }
func (l *rlease) settle(how string) {
	l.onSet(l.rec.Offset)
	l.mu.Lock()
	defer l.mu.Unlock()
	l.settles = append(l.settles, how)
	if l.closed.Load() {
		l.after = true
	}
}

type rpoll []*rlease

func (p rpoll) Leases() []leases.Lease[stream.Record] {
	out := make([]leases.Lease[stream.Record], len(p))
	for i, l := range p {
		out[i] = l
	}
	return out
}
func (rpoll) Tend(context.Context, time.Time, []leases.Lease[stream.Record], bool) time.Time {
	return time.Time{}
}

func randomLeases(t *testing.T, seed uint64, tally *leaseTally) {
	rnd := rand.New(rand.NewPCG(seed, 47))
	pol := checkpoint.Policy{MaxRetries: rnd.IntN(4), Backoff: checkpoint.Fixed(time.Duration(rnd.IntN(3)) * time.Second)}
	perRecord := rnd.IntN(2) == 0
	requests := rnd.IntN(4) == 0 // RetryResults among the results
	limit := 0
	if rnd.IntN(2) == 0 {
		limit = 2 + rnd.IntN(3)
	}
	var (
		mu       sync.Mutex
		calls    = map[int64]int{}
		acted    = map[int64]bool{} // an action succeeded, or a Skip
		settled  = map[int64]bool{}
		resumed  = map[int64]bool{}
		late     []string
		decide   = map[[2]int64]int{} // (offset, call) -> result kind
		failures = rand.New(rand.NewPCG(seed, 48))
	)
	kind := func(off int64, call int) int {
		k := [2]int64{off, int64(call)}
		if v, ok := decide[k]; ok {
			return v
		}
		v := failures.IntN(6) // 0-2 success, 3 error, 4 permanent, 5 request or panic
		decide[k] = v
		return v
	}
	result := func(r *stream.Record) error {
		mu.Lock()
		calls[r.Offset]++
		n := calls[r.Offset]
		if settled[r.Offset] {
			late = append(late, fmt.Sprintf("offset %d handed to the handler after its settlement", r.Offset))
		}
		k := kind(r.Offset, n)
		mu.Unlock()
		switch k {
		case 3:
			return errors.New("boom")
		case 4:
			return checkpoint.Permanent(errors.New("bad"))
		case 5:
			if requests {
				return &stream.RetryResult{MaxRetries: 1, Delay: 100 * time.Millisecond}
			}
			panic("boom")
		}
		return nil
	}
	var h stream.Handler
	if perRecord {
		h = stream.PerRecord(func(_ context.Context, r *stream.Record) error { return result(r) })
	} else {
		h = stream.HandlerFunc(func(_ context.Context, b *stream.Batch) error {
			for i := range b.Records {
				if err := result(&b.Records[i]); err != nil {
					if b.Records[i].Offset%2 == 0 {
						return stream.FailedAt(i, err)
					}
					return err
				}
			}
			return nil
		})
	}
	actionKind := rnd.IntN(4) // 0 none (skip), 1 succeeds, 2 fails twice, 3 StopPartition
	var tries sync.Map
	opts := []stream.Option{stream.WithPolicy(pol), stream.WithOperationBackoff(checkpoint.Fixed(50 * time.Millisecond)),
		stream.WithLogger(slog.New(slog.DiscardHandler)), stream.WithRand(func() checkpoint.Rand { return rand.New(rand.NewPCG(seed, 49)) })}
	action := func(_ context.Context, b *stream.Batch, _ *checkpoint.ExhaustedError) error {
		off := b.FirstOffset()
		switch actionKind {
		case 2:
			v, _ := tries.LoadOrStore(off, new(int))
			p := v.(*int)
			mu.Lock()
			*p++
			n := *p
			mu.Unlock()
			if n <= 2 {
				return errors.New("dead letter unreachable")
			}
		case 3:
			return stream.StopPartition(context.Background(), b, nil)
		}
		mu.Lock()
		acted[off] = true
		mu.Unlock()
		return nil
	}
	switch actionKind {
	case 0:
		opts = append(opts, stream.WithHooks(stream.Hooks{ActionTried: func(e stream.ActionEvent) {
			mu.Lock()
			acted[e.FirstOffset] = true
			mu.Unlock()
		}}))
	default:
		opts = append(opts, stream.WithExhaustionAction(action))
	}
	p, err := stream.NewProcessor(h, opts...)
	if err != nil {
		t.Fatal(err)
	}
	d, err := leases.New(p, leases.Config[stream.Record]{MaxBatch: 1 + rnd.IntN(4), Limit: func() int { return limit }})
	if err != nil {
		t.Fatal(err)
	}
	var closed atomic.Bool
	onSet := func(off int64) {
		mu.Lock()
		settled[off] = true
		mu.Unlock()
	}
	var poll rpoll
	for i := range 1 + rnd.IntN(6) {
		poll = append(poll, &rlease{rec: stream.Record{Topic: "t", Partition: int32(rnd.IntN(2)), Offset: int64(i)},
			dc: 1 + rnd.IntN(3), hold: rnd.IntN(4) != 0, closed: &closed, deadAt: time.Now().Add(time.Hour), onSet: onSet})
	}
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	cut := rnd.IntN(4) == 0
	if cut {
		time.AfterFunc(time.Duration(rnd.IntN(3000))*time.Millisecond, cancel)
	}
	// An operator who resumes or skips stopped records.
	opDone := make(chan struct{})
	opRnd := rand.New(rand.NewPCG(seed, 50))
	go func() {
		defer close(opDone)
		for ctx.Err() == nil {
			time.Sleep(500 * time.Millisecond)
			for _, sp := range p.Stopped() {
				if opRnd.IntN(2) == 0 {
					mu.Lock()
					resumed[sp.FirstOffset] = true
					mu.Unlock()
					_ = p.ResumeRecord(ctx, sp.Topic, sp.Partition, sp.FirstOffset)
					continue
				}
				mu.Lock()
				acted[sp.FirstOffset] = true
				mu.Unlock()
				_ = p.SkipRecord(ctx, sp.Topic, sp.Partition, sp.FirstOffset)
			}
		}
	}()
	d.Lane(nil).Settle(ctx, poll)
	cancel()
	<-opDone
	closed.Store(true)
	time.Sleep(time.Second) // anything still running would touch a lease now
	synctest.Wait()

	mu.Lock()
	defer mu.Unlock()
	if tally.settles == nil {
		tally.settles = map[string]int{}
	}
	tally.leases += len(poll)
	for _, c := range calls {
		tally.calls += c
	}
	tally.stops += len(resumed)
	for _, l := range poll {
		for _, s := range l.settles {
			tally.settles[s]++
		}
	}
	for _, s := range late {
		t.Error(s)
	}
	for _, l := range poll {
		l.mu.Lock()
		off := l.rec.Offset
		switch {
		case len(l.settles) > 1:
			t.Errorf("seed %d: offset %d settled %v", seed, off, l.settles)
		case len(l.settles) == 0:
			t.Errorf("seed %d: offset %d never settled (cut %v)", seed, off, cut)
		case l.after:
			t.Errorf("seed %d: offset %d settled after Settle returned", seed, off)
		case l.settles[0] == "reject" && !acted[off]:
			t.Errorf("seed %d: offset %d rejected before its action succeeded", seed, off)
		}
		if !requests && !resumed[off] && actionKind != 3 {
			bound := max(0, pol.MaxRetries+1-(l.dc-1))
			if calls[off] > bound {
				t.Errorf("seed %d: offset %d handed over %d times, bound %d (MaxRetries %d, delivery count %d)", seed, off, calls[off], bound, pol.MaxRetries, l.dc)
			}
		}
		l.mu.Unlock()
	}
}
