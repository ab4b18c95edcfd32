package stream_test

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"os"
	"strconv"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/redeliver-go/redeliver/checkpoint"
	"github.com/redeliver-go/redeliver/stream"
	"github.com/redeliver-go/redeliver/stream/streamtest"
)

var (
	randomSeeds = flag.Int("random.seeds", 0, "seeds of TestRandomEngine (default 2000, or REDELIVER_RANDOM_SEEDS)")
	randomSeed  = flag.Uint64("random.seed", 0, "run TestRandomEngine with this one seed only (a failure names its seed)")
	randomFirst = flag.Uint64("random.first", 1, "the first seed of TestRandomEngine")
)

// TestRandomEngine runs the engine over streamtest partitions on synctest's
// fake clock with everything drawn from a seed: several partitions and
// batch sizes, a policy (retry count, backoff, time limits, a Decide),
// handler outcomes (success, error, a failure at a known record, a
// RetryResult, a panic, Permanent, a retry-after hint), per-record and
// whole-batch handlers, an exhaustion action (skip, a dead-letter topic
// whose publisher fails now and then, StopPartition with an operator who
// skips or resumes), an outage budget with the downstream down for a
// while, and revocations at random moments after which a new processor
// takes the partition over from what was committed, now and then with
// fewer retries, a time budget or a record age that refuses the retry it
// restores (a redeploy), or another batch size (a smaller or larger
// fetch); some moves land during a last retry (issue 46). In a third of
// the seeds the partitions park their idle workers (issue 50) and the
// records arrive in chunks at random moments, some with a move at once,
// so that workers park, resume, and are moved while parked or resuming
// (in partition ordering: a keyed worker does not park). Every history
// is checked by
// streamtest.History, which counts each record's retries itself, and
// every partition must reach its end. 2000 seeds by default;
// -random.seeds=N or REDELIVER_RANDOM_SEEDS=N runs more, -random.seed=S
// one.
func TestRandomEngine(t *testing.T) { randomEngine(t, false) }

// TestRandomEngineKeyed runs the scenarios of TestRandomEngine in ByKey
// ordering (now and then ByNone): records keyed by a few keys, some with
// none, a concurrency limit and now and then a window small enough to
// make failed records wait for room, drawn from the seed; no outage
// budget (refused in these orderings). Each history is checked by
// History.CheckKeys. The same flags choose the seeds.
func TestRandomEngineKeyed(t *testing.T) { randomEngine(t, true) }

func randomEngine(t *testing.T, keyed bool) {
	n := 2000
	if v := os.Getenv("REDELIVER_RANDOM_SEEDS"); v != "" {
		if x, err := strconv.Atoi(v); err == nil {
			n = x
		}
	}
	if *randomSeeds > 0 {
		n = *randomSeeds
	}
	if testing.Short() {
		n = min(n, 200)
	}
	first := *randomFirst
	if *randomSeed != 0 {
		first, n = *randomSeed, 1
	}
	var tally randomTally
	defer func() { t.Logf("%d seeds: %s", n, &tally) }()
	for seed := first; seed < first+uint64(n); seed++ {
		ok := t.Run(fmt.Sprint(seed), func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				s := newScenario(seed)
				if keyed {
					s.keyedFrom(seed)
				}
				s.run(t, &tally)
				if t.Failed() {
					t.Logf("seed %d: %s (replay: go test ./stream -run TestRandomEngine -random.seed=%d -v)", seed, s.describe(), seed)
				}
			})
		})
		if !ok {
			return // one failing seed at a time
		}
	}
}

// scenario is one seed's world.
type scenario struct {
	seed      uint64
	rnd       *rand.Rand
	parts     int
	records   int
	maxBatch  int
	policy    checkpoint.Policy
	policyStr string
	perRecord bool
	action    string // "skip", "deadletter", "stop"
	budget    bool
	down      [2]time.Duration // the downstream is down from down[0] to down[1] after the start
	revokes   int
	commits   int           // commits made to fail
	memory    bool          // stream.WithInMemoryState
	failsOf   map[int64]int // offset -> failing calls of that record (-1: poison)
	pRetryRes float64
	pPanic    float64
	pPerm     float64
	pBatchErr float64       // a failure reported for the whole batch, not FailedAt
	pHint     float64       // a failure with a retry-after hint
	lower     bool          // a new owner may run a policy with fewer retries (a redeploy)
	tighten   bool          // a new owner may run a policy with a time budget or a record age (a redeploy)
	refetch   bool          // a new owner may fetch batches of another size
	lastMoves int           // moves during a last retry
	latency   time.Duration // every commit's
	// park: the partitions park their idle workers (a third of the
	// seeds), and only the first initial records of each are there at
	// the start, the rest appended in chunks at random moments, so that
	// workers park and are resumed (or revoked, or stopped) in between.
	park    bool
	initial int

	// keyed runs the scenario in key (or no) ordering.
	keyed       bool
	ordering    stream.Ordering
	nkeys       int // records keyed by offset modulo nkeys; key "" (none) for every seventh when noKey
	noKey       bool
	concurrency int
	maxBytes    int // the window's limit; 0 for the default
}

// keyedFrom turns s into its keyed variant, with draws of its own.
func (s *scenario) keyedFrom(seed uint64) {
	r := rand.New(rand.NewPCG(seed, 49))
	s.keyed, s.budget = true, false
	s.ordering = stream.ByKey
	if r.IntN(5) == 0 {
		s.ordering = stream.ByNone
	}
	s.nkeys, s.noKey, s.concurrency = 1+r.IntN(6), r.IntN(3) == 0, 1+r.IntN(8)
	if r.IntN(3) == 0 {
		s.maxBytes = 250 + r.IntN(300)
	}
}

// keyOf is the key of the record at o in a keyed scenario.
func (s *scenario) keyOf(o int64) string {
	if s.noKey && o%7 == 3 {
		return ""
	}
	return fmt.Sprint("k", o%int64(s.nkeys))
}

func newScenario(seed uint64) *scenario {
	r := rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))
	s := &scenario{seed: seed, rnd: r, parts: 1 + r.IntN(4), records: 3 + r.IntN(20), maxBatch: 1 + r.IntN(6),
		perRecord: r.IntN(2) == 0, failsOf: map[int64]int{}}
	s.action = []string{"skip", "deadletter", "stop"}[r.IntN(3)]
	retries := []int{0, 1, 2, 3, 5}[r.IntN(5)]
	var backoff checkpoint.Backoff
	bs := ""
	switch r.IntN(4) {
	case 0:
		backoff, bs = checkpoint.Immediate(), "immediate"
	case 1:
		d := time.Duration(1+r.IntN(3000)) * time.Millisecond
		backoff, bs = checkpoint.Fixed(d), "fixed "+d.String()
	case 2:
		backoff, bs = checkpoint.Exponential(100*time.Millisecond), "exponential 100ms"
	case 3:
		backoff, bs = checkpoint.FullJitter(checkpoint.Capped(5*time.Second, checkpoint.Exponential(200*time.Millisecond))), "full jitter 200ms-5s"
	}
	s.policy = checkpoint.Policy{MaxRetries: retries, Backoff: backoff}
	if r.IntN(4) == 0 {
		s.policy.MaxRetries = checkpoint.Infinite
		s.policy.MaxRetryTime = time.Duration(2+r.IntN(20)) * time.Second // an infinite policy needs an end
	} else if r.IntN(4) == 0 {
		s.policy.MaxRetryTime = time.Duration(1+r.IntN(10)) * time.Second
	}
	if r.IntN(5) == 0 {
		s.policy.MaxRecordAge = time.Duration(5+r.IntN(60)) * time.Second
	}
	s.policyStr = fmt.Sprintf("retries %d, %s, max retry time %v, max record age %v", s.policy.MaxRetries, bs, s.policy.MaxRetryTime, s.policy.MaxRecordAge)
	for o := range int64(s.records) {
		switch x := r.Float64(); {
		case x < 0.08:
			s.failsOf[o] = -1
		case x < 0.5:
			s.failsOf[o] = 1 + r.IntN(4)
		}
	}
	s.pRetryRes, s.pPanic, s.pPerm, s.pBatchErr = 0.15*r.Float64(), 0.1*r.Float64(), 0.1*r.Float64(), r.Float64()
	if r.IntN(3) == 0 {
		s.budget = true
		start := time.Duration(r.IntN(10)) * time.Second
		s.down = [2]time.Duration{start, start + time.Duration(5+r.IntN(90))*time.Second}
	}
	s.revokes = r.IntN(6)
	s.commits = r.IntN(4)
	s.memory = r.IntN(8) == 0
	if r.IntN(3) == 0 {
		// A Decide that retries only the handler's errors, with a delay
		// of its own that grows with the retry.
		k := time.Duration(1+r.IntN(2000)) * time.Millisecond
		s.policy.Decide = func(n int, err error, _ time.Duration, _ checkpoint.Rand) (time.Duration, bool) {
			return k * time.Duration(n), errors.Is(err, errRandom)
		}
		s.policyStr += fmt.Sprintf(", decide %v per retry", k)
	}
	s.pHint = 0.1 * r.Float64()
	s.lower = s.policy.MaxRetries > 0 && r.IntN(4) == 0
	s.tighten = r.IntN(5) == 0
	s.refetch = r.IntN(3) == 0
	s.lastMoves = r.IntN(3)
	if r.IntN(3) == 0 {
		// Commits that take a broker's round trip: a started mark is
		// sent that long before its retry is due, or alone in a short
		// backoff.
		s.latency = []time.Duration{300 * time.Microsecond, 2 * time.Millisecond, 7 * time.Millisecond}[r.IntN(3)]
	}
	s.initial = s.records
	if pr := rand.New(rand.NewPCG(seed, 50)); pr.IntN(3) == 0 { // draws of its own: the other seeds' worlds are as they were
		s.park, s.initial = true, pr.IntN(s.records)
	}
	return s
}

func (s *scenario) describe() string {
	keyed := ""
	if s.keyed {
		keyed = fmt.Sprintf("%s ordering over %d keys (records without a key %v), concurrency %d, window of %d bytes; ", s.ordering, s.nkeys, s.noKey, s.concurrency, s.maxBytes)
	}
	return keyed + fmt.Sprintf("%d partitions of %d records, batches of %d, %s, fewer retries after a move %v, tighter limits after a move %v, "+
		"other batch sizes after a move %v, per-record %v, action %s, budget %v (down %v-%v), %d revocations, %d during a last retry, %d failed commits (each commit %v), in memory %v, parking %v (%d records at the start), fails %v",
		s.parts, s.records, s.maxBatch, s.policyStr, s.lower, s.tighten, s.refetch, s.perRecord, s.action, s.budget, s.down[0], s.down[1],
		s.revokes, s.lastMoves, s.commits, s.latency, s.memory, s.park, s.initial, s.failsOf)
}

// world is what a running scenario shares between its goroutines.
type world struct {
	s     *scenario
	begin time.Time
	mu    sync.Mutex
	calls map[[2]int64]int // partition, offset -> handler calls of the record
	draws *rand.Rand       // the handler's draws (under mu)
	procs map[int]*stream.Processor
	// lastMoves is how many moves during a last retry are left (under mu).
	lastMoves int
}

var errRandom = errors.New("random failure")

// fails reports whether the record's call n fails: while the downstream is
// down, or for its first failsOf calls (or always for a poison record).
func (w *world) fails(off int64, n int) bool {
	if now := time.Since(w.begin); w.s.budget && now >= w.s.down[0] && now < w.s.down[1] {
		return true
	}
	k, ok := w.s.failsOf[off]
	return ok && (k < 0 || n <= k)
}

func (w *world) call(r *stream.Record) (n int, fail bool) {
	k := [2]int64{int64(r.Partition), r.Offset}
	w.mu.Lock()
	defer w.mu.Unlock()
	w.calls[k]++
	n = w.calls[k]
	return n, w.fails(r.Offset, n)
}

// failure returns how a failing call is reported, drawn from the seed.
func (w *world) failure(err error) error {
	w.mu.Lock()
	x := w.draws.Float64()
	w.mu.Unlock()
	switch {
	case x < w.s.pPanic:
		panic(err)
	case x < w.s.pPanic+w.s.pPerm:
		return checkpoint.Permanent(err)
	case x < w.s.pPanic+w.s.pPerm+w.s.pRetryRes:
		return stream.Retry(w.drawInt(3), time.Duration(w.drawInt(1500))*time.Millisecond)
	case x < w.s.pPanic+w.s.pPerm+w.s.pRetryRes+w.s.pHint:
		return checkpoint.RetryAfter(err, time.Duration(w.drawInt(4000))*time.Millisecond)
	}
	return err
}

func (w *world) drawInt(n int) int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.draws.IntN(n)
}

// work takes a while now and then (so that revocations land during
// deliveries too), and returns ctx's error when it ends meanwhile.
func (w *world) work(ctx context.Context) error {
	if d := w.drawInt(1000); d < 800 {
		select {
		case <-time.After(time.Duration(d) * time.Millisecond):
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	return nil
}

func (w *world) handler() stream.Handler {
	if w.s.perRecord {
		return stream.PerRecord(func(ctx context.Context, r *stream.Record) error {
			if err := w.work(ctx); err != nil {
				return err
			}
			if _, fail := w.call(r); fail {
				return w.failure(fmt.Errorf("record %d/%d: %w", r.Partition, r.Offset, errRandom))
			}
			return nil
		})
	}
	return stream.HandlerFunc(func(ctx context.Context, b *stream.Batch) error {
		if err := w.work(ctx); err != nil {
			return err
		}
		for i := range b.Records {
			r := &b.Records[i]
			if _, fail := w.call(r); fail {
				err := w.failure(fmt.Errorf("record %d/%d: %w", r.Partition, r.Offset, errRandom))
				if i > 0 || w.drawInt(1000) >= int(1000*w.s.pBatchErr) {
					return stream.FailedAt(i, err)
				}
				return err // the whole batch
			}
		}
		return nil
	})
}

// moveOnLast wraps h: now and then, a last retry is cut short by a move
// of its partition p (the retry started, its outcome never reported).
func (w *world) moveOnLast(h stream.Handler, p *streamtest.Partition, tally *randomTally) stream.Handler {
	return stream.HandlerFunc(func(ctx context.Context, b *stream.Batch) error {
		if b.Attempt.Last && b.Attempt.Retries > 0 {
			w.mu.Lock()
			move := w.lastMoves > 0 && w.draws.IntN(2) == 0
			if move {
				w.lastMoves--
			}
			w.mu.Unlock()
			if move {
				tally.mu.Lock()
				tally.lastMoves++
				tally.mu.Unlock()
				p.Revoke()
				<-ctx.Done()
				return ctx.Err()
			}
		}
		return h.Handle(ctx, b)
	})
}

// flakyPublisher fails a third of its calls.
type flakyPublisher struct {
	mu  sync.Mutex
	rnd *rand.Rand
}

func (f *flakyPublisher) Publish(context.Context, string, []stream.Record) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.rnd.IntN(3) == 0 {
		return errors.New("dead-letter topic unavailable")
	}
	return nil
}

// randomTally counts what the seeds did, to show what they cover.
type randomTally struct {
	mu                                                     sync.Mutex
	deliveries, failed, retryResults, cancelled, uncounted int
	givenUp, deadLettered, stops, skips, resumes, revokes  int
	outages, probes, claims                                int
	lastMoves, refetches, tightened                        int
	parks, parkedRevokes, resumingRevokes                  int
}

func (r *randomTally) String() string {
	return fmt.Sprintf("%d deliveries (%d failed, %d retry requests, %d cut short, %d during outages), %d given up, %d dead letters, "+
		"%d stops (%d skipped, %d resumed), %d revocations (%d during a last retry, %d of a parked worker, %d of one resuming), "+
		"%d claims (%d with another batch size, %d with tighter limits), %d outages, %d probes, %d parks",
		r.deliveries, r.failed, r.retryResults, r.cancelled, r.uncounted, r.givenUp, r.deadLettered, r.stops, r.skips, r.resumes,
		r.revokes, r.lastMoves, r.parkedRevokes, r.resumingRevokes, r.claims, r.refetches, r.tightened, r.outages, r.probes, r.parks)
}

func (s *scenario) run(t *testing.T, tally *randomTally) {
	w := &world{s: s, begin: time.Now(), calls: map[[2]int64]int{}, draws: rand.New(rand.NewPCG(s.seed, 7)), procs: map[int]*stream.Processor{},
		lastMoves: s.lastMoves}
	hist := streamtest.History{MemoryOnly: s.memory}
	var budget *stream.Budget
	if s.budget {
		var err error
		if budget, err = stream.NewBudget(stream.BudgetConfig{ProbeBackoff: checkpoint.Capped(8*time.Second, checkpoint.Exponential(time.Second))}); err != nil {
			t.Fatal(err)
		}
	}
	pub := hist.Publisher(&flakyPublisher{rnd: rand.New(rand.NewPCG(s.seed, 11))})
	newProc := func(member string, gen int, part *streamtest.Partition) *stream.Processor {
		count := stream.Hooks{
			Stopped:     func(stream.StoppedEvent) { tally.mu.Lock(); tally.stops++; tally.mu.Unlock() },
			OutageBegan: func(stream.OutageEvent) { tally.mu.Lock(); tally.outages++; tally.mu.Unlock() },
			Probing:     func(stream.ProbeEvent) { tally.mu.Lock(); tally.probes++; tally.mu.Unlock() },
		}
		policy := s.policy
		if s.lower && w.drawInt(2) == 0 {
			policy.MaxRetries = w.drawInt(policy.MaxRetries) // a redeploy with fewer retries
		}
		if s.tighten && gen > 0 && w.drawInt(2) == 0 {
			// A redeploy with limits that may refuse the retry it
			// restores.
			if w.drawInt(2) == 0 {
				policy.MaxRetryTime = time.Duration(500+w.drawInt(4000)) * time.Millisecond
			} else {
				policy.MaxRecordAge = time.Duration(1+w.drawInt(30)) * time.Second
			}
			tally.mu.Lock()
			tally.tightened++
			tally.mu.Unlock()
		}
		opts := []stream.Option{stream.WithPolicy(policy), stream.WithHooks(stream.MergeHooks(hist.Hooks(member), count)),
			stream.WithOperationBackoff(checkpoint.Fixed(200 * time.Millisecond)),
			stream.WithRand(func() checkpoint.Rand { return rand.New(rand.NewPCG(s.seed, 13)) }),
			stream.WithLogger(slog.New(slog.DiscardHandler))}
		switch s.action {
		case "deadletter":
			dl, err := stream.DeadLetter(pub, "dlq")
			if err != nil {
				t.Fatal(err)
			}
			opts = append(opts, stream.WithExhaustionAction(dl))
		case "stop":
			opts = append(opts, stream.WithExhaustionAction(stream.StopPartition))
		}
		if budget != nil {
			opts = append(opts, stream.WithOutageBudget(budget))
		}
		if s.memory {
			opts = append(opts, stream.WithInMemoryState())
		}
		if s.keyed {
			opts = append(opts, stream.WithOrdering(s.ordering), stream.WithConcurrency(s.concurrency, 0),
				stream.WithWindowLimits(checkpoint.WindowLimits{MaxBytes: s.maxBytes}))
		}
		h := w.handler()
		if s.lastMoves > 0 {
			h = w.moveOnLast(h, part, tally)
		}
		p, err := stream.NewProcessor(stream.Chain(h, hist.Middleware(member)), opts...)
		if err != nil {
			t.Fatal(err)
		}
		return p
	}
	parts := make([]*streamtest.Partition, s.parts)
	ends := map[streamtest.TopicPartition]int64{}
	// appendTo appends the records from..to of a partition.
	appendTo := func(p *streamtest.Partition, from, to int) {
		if s.keyed {
			keys := make([]string, 0, to-from)
			for o := from; o < to; o++ {
				keys = append(keys, s.keyOf(int64(o)))
			}
			p.AppendKeyed(time.Now(), keys...)
		} else {
			p.AppendN(time.Now(), to-from)
		}
	}
	for i := range parts {
		parts[i] = streamtest.NewPartition("t", int32(i), s.maxBatch)
		parts[i].SetCommitLatency(s.latency)
		parts[i].SetParking(s.park)
		appendTo(parts[i], 0, s.initial)
		ends[streamtest.TopicPartition{Topic: "t", Partition: int32(i)}] = int64(s.records)
	}
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	var wg sync.WaitGroup
	// Each partition's owners, one after the other: a revocation ends one,
	// and a new processor takes over from what was committed.
	for i, p := range parts {
		wg.Go(func() {
			for gen := 0; ctx.Err() == nil; gen++ {
				if s.refetch && gen > 0 {
					// The next owner fetches batches of another size.
					p.SetMaxBatch(1 + w.drawInt(6))
					tally.mu.Lock()
					tally.refetches++
					tally.mu.Unlock()
				}
				proc := newProc(fmt.Sprintf("p%d-%d", i, gen), gen, p)
				w.mu.Lock()
				w.procs[i] = proc
				w.mu.Unlock()
				if err := streamtest.Run(ctx, proc, p); err != nil {
					t.Errorf("partition %d, owner %d: %v", i, gen, err)
					return
				}
			}
		})
	}
	if s.initial < s.records {
		// The rest of the records, in chunks at random moments: a
		// partition's worker parks in between (or waits out a retry,
		// or is stopped), and is resumed by them.
		adds := rand.New(rand.NewPCG(s.seed, 19))
		wg.Go(func() {
			next := make([]int, len(parts))
			for i := range next {
				next[i] = s.initial
			}
			for left := len(parts); left > 0; {
				select {
				case <-time.After(time.Duration(adds.IntN(4000)) * time.Millisecond):
				case <-ctx.Done():
					return
				}
				i := adds.IntN(len(parts))
				if next[i] == s.records {
					continue
				}
				to := next[i] + 1 + adds.IntN(s.records-next[i])
				parked, _ := parts[i].Parked()
				appendTo(parts[i], next[i], to)
				if adds.IntN(4) == 0 {
					// A move at once: the claim ends while its worker
					// resumes (when it was parked), or runs.
					parts[i].Revoke()
					tally.mu.Lock()
					tally.revokes++
					if parked {
						tally.resumingRevokes++
					}
					tally.mu.Unlock()
				}
				if next[i] = to; to == s.records {
					left--
				}
			}
		})
	}
	// Revocations at random moments, and an operator who skips or resumes
	// stopped partitions now and then.
	ops := rand.New(rand.NewPCG(s.seed, 17))
	wg.Go(func() {
		revokes, commits := s.revokes, s.commits
		for ctx.Err() == nil {
			select {
			case <-time.After(time.Duration(100+ops.IntN(3000)) * time.Millisecond):
			case <-ctx.Done():
				return
			}
			if commits > 0 && ops.IntN(3) == 0 {
				commits--
				parts[ops.IntN(len(parts))].FailCommits(errors.New("commit failed"))
			}
			if revokes > 0 && ops.IntN(3) == 0 {
				revokes--
				p := parts[ops.IntN(len(parts))]
				parked, _ := p.Parked()
				p.Revoke()
				tally.mu.Lock()
				tally.revokes++
				if parked {
					tally.parkedRevokes++
				}
				tally.mu.Unlock()
			}
			w.mu.Lock()
			procs := make([]*stream.Processor, 0, len(w.procs))
			for _, p := range w.procs {
				procs = append(procs, p)
			}
			w.mu.Unlock()
			for _, p := range procs {
				for _, sp := range p.Stopped() {
					var err error
					resume := ops.IntN(3) == 0
					switch {
					case sp.Record && resume:
						err = p.ResumeRecord(ctx, sp.Topic, sp.Partition, sp.FirstOffset)
					case sp.Record:
						err = p.SkipRecord(ctx, sp.Topic, sp.Partition, sp.FirstOffset)
					case resume:
						err = p.Resume(ctx, sp.Topic, sp.Partition)
					default:
						err = p.Skip(ctx, sp.Topic, sp.Partition)
					}
					tally.mu.Lock()
					switch {
					case err != nil:
					case resume:
						tally.resumes++
					default:
						tally.skips++
					}
					tally.mu.Unlock()
				}
			}
		}
	})
	wctx, wcancel := context.WithTimeout(ctx, 6*time.Hour) // fake time
	defer wcancel()
	for i, p := range parts {
		if err := p.WaitCommitted(wctx, int64(s.records)); err != nil {
			t.Errorf("partition %d not done: %v", i, err)
			break
		}
	}
	cancel()
	wg.Wait()
	tally.mu.Lock()
	for _, p := range parts {
		_, n := p.Parked()
		tally.parks += n
	}
	tally.mu.Unlock()
	var r streamtest.Report
	if !s.keyed {
		r = hist.Check(ends)
	}
	// Partition mode keeps every key's order, whatever the keys: the
	// per-key check holds too (keys by offset modulo 5). Key mode keeps
	// the records' keys; no ordering, none (a key per record).
	keys := map[streamtest.TopicPartition][]string{}
	for tp, end := range ends {
		for o := range end {
			switch {
			case !s.keyed:
				keys[tp] = append(keys[tp], fmt.Sprint(o%5))
			case s.ordering == stream.ByNone:
				keys[tp] = append(keys[tp], fmt.Sprint(o))
			default:
				keys[tp] = append(keys[tp], s.keyOf(o))
			}
		}
	}
	kr := hist.CheckKeys(keys)
	r.Violations = append(r.Violations, kr.Violations...)
	if s.keyed && kr.Lost != 0 {
		r.Violations = append(r.Violations, fmt.Sprintf("%d records lost", kr.Lost))
	}
	tally.mu.Lock()
	for _, e := range hist.Events() {
		switch e.Kind {
		case streamtest.Delivered:
			tally.deliveries++
			switch {
			case e.Uncounted:
				tally.uncounted++
			case e.Outcome == stream.Failed:
				tally.failed++
			case e.Outcome == stream.RetryRequested:
				tally.retryResults++
			case e.Outcome == stream.Cancelled:
				tally.cancelled++
			}
		case streamtest.GivenUp:
			tally.givenUp++
		case streamtest.DeadLettered:
			tally.deadLettered++
		case streamtest.Claimed:
			tally.claims++
		}
	}
	tally.mu.Unlock()
	for i, v := range r.Violations {
		if i == 10 {
			t.Errorf("... and %d more", len(r.Violations)-10)
			break
		}
		t.Error(v)
	}
	if t.Failed() && testing.Verbose() {
		var b strings.Builder
		for i, e := range hist.Events() {
			fmt.Fprintf(&b, "%d %s#%d %s p%d %d-%d retry %d max %d %v handled %d index %d uncounted %v off %d md %q err %q retries %d\n",
				i, e.Member, e.Claim, e.Kind, e.Partition, e.First, e.Last, e.Retry, e.MaxRetries, e.Outcome, e.Handled, e.Index, e.Uncounted, e.Offset, e.Metadata, e.Error, e.Retries)
		}
		t.Log(b.String())
	}
}
