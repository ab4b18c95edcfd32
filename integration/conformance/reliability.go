package conformance

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/redeliver-go/redeliver/checkpoint"
	"github.com/redeliver-go/redeliver/internal/retrystate"
	"github.com/redeliver-go/redeliver/stream"
	"github.com/redeliver-go/redeliver/stream/streamtest"
)

// The reliability suite hunts anomalies under faults, as Jepsen's Kafka
// checker and Kafka's own OffsetValidationTest do: every delivery, give-up,
// claim and commit of every consumer goes into a [streamtest.History], and
// [streamtest.History.Check] verifies it: no record lost, no commit ahead of
// handled records, no commit by a consumer that no longer owns the
// partition, order kept, every rewind to the start of the batch being
// retried. Each scenario prints its figures.

// longWait bounds the waits of the reliability scenarios, which move
// thousands of records through a loaded machine.
const longWait = 3 * time.Minute

// Figures are what a reliability scenario measured.
type Figures struct {
	Scenario   string
	Provider   string
	Adapter    string
	Records    int64
	Faults     int64 // injected: handler errors and panics, commit errors, kills, restarts
	Lost       int64
	MaxPerRec  int     // the most deliveries of one record
	MeanPerRec float64 // deliveries per record, on average
	Recovery   time.Duration
	Took       time.Duration
	Note       string
}

func (f Figures) String() string {
	rec := "-"
	if f.Recovery > 0 {
		rec = f.Recovery.Round(time.Millisecond).String()
	}
	return fmt.Sprintf("%-28s %-9s %-27s records=%-6d faults=%-5d lost=%d max/record=%d mean/record=%.2f recovery=%s took=%s %s",
		f.Scenario, f.Provider, f.Adapter, f.Records, f.Faults, f.Lost, f.MaxPerRec, f.MeanPerRec, rec,
		f.Took.Round(100*time.Millisecond), f.Note)
}

// EnvFigures names a file the reliability suite appends its figures to,
// one line per scenario, besides logging them.
const EnvFigures = "REDELIVER_FIGURES"

// EnvRestart is a shell command that restarts the external broker keeping
// its data (integration/kafka.sh restart); the broker-restart scenario
// skips without it.
const EnvRestart = "REDELIVER_KAFKA_RESTART"

func report(t *testing.T, f Figures) {
	t.Helper()
	t.Log(f.String())
	if path := os.Getenv(EnvFigures); path != "" {
		file, err := os.OpenFile(path, os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o644)
		if err != nil {
			t.Errorf("figures file: %v", err)
			return
		}
		defer file.Close()
		fmt.Fprintln(file, f.String())
	}
}

// RunReliability runs every reliability scenario for the adapter on the
// provider's broker. Child-process scenarios run the test binary again as a
// consumer: the binary's TestMain must call [ChildMain] with the adapter
// registered under childName.
//
// The variant is [VariantFromEnv]'s: REDELIVER_ORDERING=key runs every
// scenario in key ordering.
func RunReliability(t *testing.T, p Provider, a Adapter, childName string) {
	v, err := VariantFromEnv()
	if err != nil {
		t.Fatal(err)
	}
	RunReliabilityVariant(t, p, a, childName, v)
}

// Variant changes how the reliability scenarios run.
type Variant struct {
	// Ordering is the consumers' ordering ([stream.WithOrdering]). In
	// [stream.ByKey] (or [stream.ByNone]) the records carry keys (8 a
	// partition, in turn), every record is retried on its own, and the
	// history is checked with [streamtest.History.CheckKeys]: per-key
	// order, the per-record retry bound (plus one per move), no record a
	// commit said was finished delivered again, no loss. The scenarios
	// that do not apply to that ordering skip with the reason.
	Ordering stream.Ordering
	// Only, when not empty, names the scenarios to run (a short set for
	// CI); the others are not run.
	Only []string
	// CommitWindow, when above 0, is the commit window of every consumer
	// whose scenario sets none (Config.CommitWindow): success commits
	// coalesced, and in key ordering the windows that only finish
	// records.
	CommitWindow time.Duration
}

// EnvOrdering names the variable that sets the ordering of
// [VariantFromEnv]: "key", "none" or "partition" (the default).
const EnvOrdering = "REDELIVER_ORDERING"

// VariantFromEnv returns the variant REDELIVER_ORDERING asks for: the way
// to run a whole suite in key ordering by hand. A value it cannot read is
// an error naming it (the suites fail the test with it), so that a
// mistyped run is not taken for a run in partition ordering.
func VariantFromEnv() (Variant, error) {
	o, err := stream.ParseOrdering(os.Getenv(EnvOrdering))
	if err != nil {
		return Variant{}, fmt.Errorf("%s: %w", EnvOrdering, err)
	}
	return Variant{Ordering: o}, nil
}

// RunReliabilityVariant is [RunReliability] in the given variant.
func RunReliabilityVariant(t *testing.T, p Provider, a Adapter, childName string, v Variant) {
	for _, s := range []struct {
		name string
		run  func(t *testing.T, e *env) Figures
	}{
		{"HandlerErrorsAndPanics", func(t *testing.T, e *env) Figures { return faultsScenario(t, e, false) }},
		{"HandlerErrorsAndPanicsPerRecord", func(t *testing.T, e *env) Figures { return faultsScenario(t, e, true) }},
		{"MembersJoinAndLeave", func(t *testing.T, e *env) Figures { return membersScenario(t, e, false) }},
		{"MembersJoinAndLeavePerRecord", func(t *testing.T, e *env) Figures { return membersScenario(t, e, true) }},
		{"RetryBudgetAcrossRebalance", func(t *testing.T, e *env) Figures { return budgetScenario(t, e, false, "", false) }},
		{"RetryBudgetAcrossRebalancePerRecord", func(t *testing.T, e *env) Figures { return budgetScenario(t, e, false, "", true) }},
		{"InMemoryOverrunAcrossRebalance", func(t *testing.T, e *env) Figures { return budgetScenario(t, e, true, "", false) }},
		{"SIGKILLDuringBackoff", func(t *testing.T, e *env) Figures { return budgetScenario(t, e, false, childName, false) }},
		{"SIGKILLDuringBackoffPerRecord", func(t *testing.T, e *env) Figures { return budgetScenario(t, e, false, childName, true) }},
		{"SIGKILLDuringDelivery", func(t *testing.T, e *env) Figures { return killDuringDelivery(t, e, childName) }},
		{"SIGKILLInMemoryOverrun", func(t *testing.T, e *env) Figures { return budgetScenario(t, e, true, childName, false) }},
		{"SIGKILLWithCommitsUnwritten", func(t *testing.T, e *env) Figures { return killWithCommitsUnwritten(t, e, childName) }},
		{"BrokerRestart", func(t *testing.T, e *env) Figures { return restartScenario(t, e, false) }},
		{"BrokerRestartPerRecord", func(t *testing.T, e *env) Figures { return restartScenario(t, e, true) }},
		{"CommitFailures", func(t *testing.T, e *env) Figures { return commitFailuresScenario(t, e, false) }},
		{"CommitFailuresPerRecord", func(t *testing.T, e *env) Figures { return commitFailuresScenario(t, e, true) }},
		{"TopicRecreated", topicRecreatedScenario},
		{"SlowPartition", slowPartitionScenario},
	} {
		if len(v.Only) > 0 && !slices.Contains(v.Only, s.name) {
			continue
		}
		t.Run(s.name, func(t *testing.T) {
			b := p.Start(t)
			if a.NeedsKIP848() && !b.KIP848 {
				t.Skipf("%s needs the KIP-848 protocol; the %s broker does not run it", a.Name(), p.Name())
			}
			begin := time.Now()
			e := newVariantEnv(t, b, a, v)
			f := s.run(t, e)
			if e.keyed() {
				f.Note = strings.TrimSpace("ordering=" + e.ordering.String() + " " + f.Note)
			}
			f.Scenario, f.Provider, f.Adapter, f.Took = s.name, p.Name(), a.Name(), time.Since(begin)
			report(t, f)
		})
	}
}

// unit maps a batch's identity and retry to a number in [0, 1): the fault
// plan, the same however often a test runs.
func unit(partition int32, first int64, retry int) float64 {
	// splitmix64 of the three packed together: well mixed, unlike the high
	// bits of a short string's FNV hash.
	x := uint64(partition)<<48 ^ uint64(first)<<16 ^ uint64(retry)
	x += 0x9e3779b97f4a7c15
	x = (x ^ x>>30) * 0xbf58476d1ce4e5b9
	x = (x ^ x>>27) * 0x94d049bb133111eb
	x ^= x >> 31
	return float64(x>>11) / (1 << 53)
}

var errInjected = errors.New("injected handler failure")

// faultyHandler takes delay over each delivery (a slow handler keeps a run
// long enough for what a scenario does meanwhile), then fails it with
// probability pErr or panics with probability pPanic, and counts the faults
// it injects.
func faultyHandler(delay time.Duration, pErr, pPanic float64, faults *atomic.Int64) stream.Handler {
	return stream.HandlerFunc(func(_ context.Context, b *stream.Batch) error {
		if delay > 0 {
			time.Sleep(delay)
		}
		u := unit(b.Partition, b.FirstOffset(), b.Attempt.Retries)
		switch {
		case u < pErr:
			faults.Add(1)
			return errInjected
		case u < pErr+pPanic:
			faults.Add(1)
			panic("injected handler panic")
		}
		return nil
	})
}

// faultyRecords is faultyHandler for each record ([stream.PerRecord]):
// each call of a record takes delay, then fails with probability pErr or
// panics with probability pPanic, drawn from the record and how many times
// this handler was called on it. A failure names its record, whose retry
// count is its own.
func faultyRecords(delay time.Duration, pErr, pPanic float64, faults *atomic.Int64) stream.Handler {
	var (
		mu    sync.Mutex
		calls = map[[2]int64]int{}
	)
	return stream.PerRecord(func(_ context.Context, r *stream.Record) error {
		k := [2]int64{int64(r.Partition), r.Offset}
		mu.Lock()
		calls[k]++
		n := calls[k]
		mu.Unlock()
		if delay > 0 {
			time.Sleep(delay)
		}
		u := unit(r.Partition, r.Offset, n)
		switch {
		case u < pErr:
			faults.Add(1)
			return errInjected
		case u < pErr+pPanic:
			faults.Add(1)
			panic("injected handler panic")
		}
		return nil
	})
}

// faulty returns faultyHandler, or with perRecord faultyRecords with the
// batch's figures spread over its records (a tenth of the delay, a third
// of the probabilities).
func faulty(perRecord bool, delay time.Duration, pErr, pPanic float64, faults *atomic.Int64) stream.Handler {
	if perRecord {
		return faultyRecords(delay/10, pErr/3, pPanic/3, faults)
	}
	return faultyHandler(delay, pErr, pPanic, faults)
}

// fill creates the case's topic with the given partitions and produces n
// records to each.
func (e *env) fill(partitions int32, n int) {
	e.t.Helper()
	e.createTopic(partitions)
	for p := range partitions {
		e.produce(p, 0, n)
	}
}

// ends returns each partition's end offset as a History check wants them.
func (e *env) ends(partitions int32, n int64) map[streamtest.TopicPartition]int64 {
	m := map[streamtest.TopicPartition]int64{}
	for p := range partitions {
		m[streamtest.TopicPartition{Topic: e.topic, Partition: p}] = n
	}
	return m
}

// waitReported waits, at most within, until the history holds a commit
// of each partition's end: a commit that failed in the consumer's eyes
// (a write that landed and reported an error, then the rest of a commit
// that failed) is tried again after a backoff, and is reported only then,
// though the store may show the end already. After within it returns,
// and the history's check reports what is missing.
func waitReported(t *testing.T, h *streamtest.History, ends map[streamtest.TopicPartition]int64, within time.Duration) {
	t.Helper()
	deadline := time.Now().Add(within)
	for {
		at := map[streamtest.TopicPartition]int64{}
		for _, ev := range h.Events() {
			if ev.Kind == streamtest.Committed {
				tp := streamtest.TopicPartition{Topic: ev.Topic, Partition: ev.Partition}
				at[tp] = max(at[tp], ev.Offset)
			}
		}
		missing := 0
		for tp, end := range ends {
			if at[tp] < end {
				missing++
			}
		}
		if missing == 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Logf("the store shows every end, but after %v %d partitions have no commit of their end reported", within, missing)
			return
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// committedTotal returns the sum of the group's committed offsets, or -1
// when the broker does not answer (it may be restarting).
func (e *env) committedTotal() int64 {
	offs, err := e.tryCommitted()
	if err != nil {
		e.t.Logf("%v (polling on)", err)
		return -1
	}
	var sum int64
	for _, o := range offs {
		sum += max(o.At, 0)
	}
	return sum
}

// waitTotal waits until the committed offsets add up to at least total.
func (e *env) waitTotal(total int64, within time.Duration) {
	e.t.Helper()
	deadline := time.Now().Add(within)
	for {
		got := e.committedTotal()
		if got >= total {
			return
		}
		if time.Now().After(deadline) {
			e.t.Fatalf("committed offsets add up to %d, want %d, after %v", got, total, within)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// check runs the history checker and fails the test on any violation.
func check(t *testing.T, h *streamtest.History, ends map[streamtest.TopicPartition]int64) streamtest.Report {
	t.Helper()
	dump(t, h)
	r := h.Check(ends)
	for i, v := range r.Violations {
		if i == 20 {
			t.Errorf("... and %d more violations", len(r.Violations)-20)
			break
		}
		t.Error(v)
	}
	if r.Lost != 0 {
		t.Errorf("%d records lost", r.Lost)
	}
	return r
}

// check runs check, or in key ordering the key checker
// ([streamtest.History.CheckKeys]) over the keys of the records the case
// produced.
func (e *env) check(h *streamtest.History, ends map[streamtest.TopicPartition]int64) streamtest.Report {
	e.t.Helper()
	if !e.keyed() {
		return check(e.t, h, ends)
	}
	dump(e.t, h)
	keys := map[streamtest.TopicPartition][]string{}
	for tp, end := range ends {
		ks := e.keys[tp.Partition]
		if int64(len(ks)) != end {
			e.t.Fatalf("%v: %d keys noted for %d records", tp, len(ks), end)
		}
		keys[tp] = ks
	}
	r := h.CheckKeys(keys)
	for i, v := range r.Violations {
		if i == 20 {
			e.t.Errorf("... and %d more violations", len(r.Violations)-20)
			break
		}
		e.t.Error(v)
	}
	if r.Lost != 0 {
		e.t.Errorf("%d records lost", r.Lost)
	}
	return r
}

func figures(r streamtest.Report, faults int64) Figures {
	return Figures{Records: r.Records, Faults: faults, Lost: r.Lost, MaxPerRec: r.MaxDeliveries, MeanPerRec: r.MeanPerRecord}
}

// faultsScenario: 10^4 records, two consumers, a handler that fails or
// panics on half of its deliveries.
func faultsScenario(t *testing.T, e *env, perRecord bool) Figures {
	const parts, n = 4, 2500
	e.fill(parts, n)
	var (
		hist   streamtest.History
		faults atomic.Int64
	)
	policy := checkpoint.Policy{MaxRetries: 8, Backoff: checkpoint.FullJitter(checkpoint.Capped(5*time.Millisecond, checkpoint.Exponential(time.Millisecond)))}
	h := faulty(perRecord, 0, 0.35, 0.15, &faults)
	for _, name := range []string{"a", "b"} {
		e.start(name, spec{handler: h, policy: policy, maxBatch: 8, hooks: hist.Hooks(name), rec: &hist})
	}
	e.waitTotal(parts*n, longWait)
	e.stopAll()
	r := e.check(&hist, e.ends(parts, n))
	if faults.Load() < 1000 {
		t.Errorf("only %d faults injected, want at least 1000", faults.Load())
	}
	for tp, batches := range counted(&hist, e.keyed()) {
		for first, k := range batches {
			if k > policy.MaxRetries+1 {
				t.Errorf("%v: batch at %d delivered %d times (a repeated first delivery counted once), want at most %d", tp, first, k, policy.MaxRetries+1)
			}
		}
	}
	return figures(r, faults.Load())
}

// counted returns the deliveries of each batch that count toward its retry
// bound: its retries, and its first delivery once however often a move
// repeated it (a first delivery commits nothing before it runs).
// In key ordering (keyed) it returns nil: [streamtest.History.CheckKeys]
// bounds each record's deliveries, moves counted.
func counted(h *streamtest.History, keyed bool) map[streamtest.TopicPartition]map[int64]int {
	if keyed {
		return nil
	}
	out := map[streamtest.TopicPartition]map[int64]int{}
	firsts := map[streamtest.TopicPartition]map[int64]bool{}
	for _, e := range h.Events() {
		if e.Kind != streamtest.Delivered {
			continue
		}
		tp := streamtest.TopicPartition{Topic: e.Topic, Partition: e.Partition}
		if out[tp] == nil {
			out[tp], firsts[tp] = map[int64]int{}, map[int64]bool{}
		}
		if e.Retry == 0 {
			if firsts[tp][e.First] {
				continue
			}
			firsts[tp][e.First] = true
		}
		out[tp][e.First]++
	}
	return out
}

// membersScenario: consumers join and leave while batches are being
// retried.
func membersScenario(t *testing.T, e *env, perRecord bool) Figures {
	const parts, n = 6, 800
	e.fill(parts, n)
	var (
		hist   streamtest.History
		faults atomic.Int64
	)
	policy := checkpoint.Policy{MaxRetries: checkpoint.Infinite, Backoff: checkpoint.FullJitter(checkpoint.Capped(50*time.Millisecond, checkpoint.Exponential(5*time.Millisecond)))}
	h := faulty(perRecord, 5*time.Millisecond, 0.3, 0.05, &faults)
	run := func(name string) *member {
		return e.start(name, spec{handler: h, policy: policy, maxBatch: 10, hooks: hist.Hooks(name), session: true, rec: &hist})
	}
	total := int64(parts * n)
	a := run("a")
	e.waitTotal(total/5, longWait)
	b := run("b")
	e.waitTotal(2*total/5, longWait)
	if err := a.stop(); err != nil {
		t.Error(err)
	}
	c := run("c")
	e.waitTotal(3*total/5, longWait)
	if err := b.stop(); err != nil {
		t.Error(err)
	}
	e.waitTotal(total, longWait)
	if err := c.stop(); err != nil {
		t.Error(err)
	}
	r := e.check(&hist, e.ends(parts, n))
	return figures(r, faults.Load())
}

// EnvHistory names a file each scenario's history is written to, one
// event a line, for a failure's post-mortem.
const EnvHistory = "REDELIVER_HISTORY"

func dump(t *testing.T, h *streamtest.History) {
	path := os.Getenv(EnvHistory)
	if path == "" {
		return
	}
	f, err := os.Create(path)
	if err != nil {
		t.Errorf("history file: %v", err)
		return
	}
	defer f.Close()
	for _, e := range h.Events() {
		fmt.Fprintf(f, "%s#%d %s p%d first=%d last=%d retry=%d outcome=%v handled=%d off=%d md=%q err=%q\n", e.Member, e.Claim, e.Kind, e.Partition, e.First, e.Last, e.Retry, e.Outcome, e.Handled, e.Offset, e.Metadata, e.Error)
	}
}

// stopAll stops every member.
func (e *env) stopAll() {
	e.t.Helper()
	for _, m := range e.members {
		if err := m.stop(); err != nil {
			e.t.Error(err)
		}
	}
}

// budgetScenario: a batch set to 10 retries that never succeeds loses its
// consumer after its 4th delivery, by a rebalance (the consumer leaves) or,
// with child set, by SIGKILL of the consumer's process; another consumer
// takes over. With durable retry state the batch gets at most 11
// deliveries in all, a crash included: each retry is committed as started
// before it runs, so a retry in flight when the process died counts; in
// memory the count starts over and overruns, as seed 004 warns.
//
// With perRecord the handler is per record: the poison record fails every
// time and the record before it fails once, so that the poison record's
// count is its own, from its own first failure.
func budgetScenario(t *testing.T, e *env, memory bool, child string, perRecord bool) Figures {
	if child != "" && e.backend != nil {
		t.Skip("the backend's events live in this test process; a child process cannot share them")
	}
	const retries, n = 10, 40
	poison := int64(17)
	e.createTopic(2)
	e.produce(0, 0, n)
	e.produce(1, 0, n)
	cfg := ChildConfig{
		Retries: retries, BackoffMS: 200, MaxBatch: 5, Poison: poison, Memory: memory, PerRecord: perRecord,
		Brokers: e.b.Addrs, Group: e.group, Topic: e.topic, SessionTimeout: e.b.SessionTimeout, Ordering: e.ordering.String(),
		CommitWindow: e.window,
	}
	hist := streamtest.History{MemoryOnly: memory}
	fourth, stateWritten := newSignal(), newSignal()
	var fourthSeen atomic.Bool
	watch := stream.Hooks{
		Delivered: func(ev stream.DeliveredEvent) {
			if ev.Partition == 0 && ev.FirstOffset <= poison && poison <= ev.LastOffset && ev.Attempt.Retries == 3 {
				fourthSeen.Store(true)
				fourth.fire()
			}
		},
		// The worker writes the retry state of the 4th failure after its
		// Delivered hook: the first state checkpoint of partition 0 after
		// it. In key ordering, the first window of partition 0 that
		// counts 4 failures of the poison record (a window may carry other
		// records' states, or the poison record's retry 3 marked started).
		Checkpointed: func(ev stream.CheckpointEvent) {
			if ev.Partition != 0 || ev.Metadata == "" || !fourthSeen.Load() {
				return
			}
			if e.keyed() {
				w, err := retrystate.RestoreWindow(ev.Next, ev.Metadata, checkpoint.WindowLimits{})
				if err != nil {
					return
				}
				if st, ok := w.State(poison); !ok || st.Retries < 4 {
					return
				}
			}
			stateWritten.fire()
		},
	}
	var (
		kill     func() error
		killedAt time.Time
	)
	if child != "" {
		cfg.Adapter, cfg.Member = child, "a"
		kill = e.startChild(&hist, cfg, watch, nil)
	} else {
		a := e.start("a", cfg.spec(stream.MergeHooks(hist.Hooks("a"), watch)).with(&hist))
		kill = a.stop
	}
	e.await(fourth.ch, "the poison batch's 4th delivery")
	if child == "" && !memory {
		// A consumer that leaves does so inside the 200ms backoff, once
		// the state of the 4th failure is committed.
		e.await(stateWritten.ch, "the retry state of the 4th failure to be committed")
	}
	// A child is killed at once: the retry state of its 4th failure may not
	// be written yet, but its 4th delivery (retry 3) was committed as
	// started before it ran, so the next owner goes on with retry 4.
	if err := kill(); err != nil {
		t.Fatal(err)
	}
	killedAt = time.Now()
	resumed := newSignal()
	var recovery time.Duration
	var once sync.Once
	after := stream.Hooks{Delivered: func(ev stream.DeliveredEvent) {
		if ev.Partition == 0 {
			once.Do(func() { recovery = time.Since(killedAt) })
			resumed.fire()
		}
	}}
	b := e.start("b", cfg.spec(stream.MergeHooks(hist.Hooks("b"), after)).with(&hist))
	e.await(resumed.ch, "the new owner's first delivery")
	e.waitCommittedWithin(map[int32]int64{0: n, 1: n}, longWait)
	if err := b.stop(); err != nil {
		t.Error(err)
	}
	r := e.check(&hist, e.ends(2, n))

	got := 0
	for first, k := range hist.Deliveries()[streamtest.TopicPartition{Topic: e.topic, Partition: 0}] {
		// A batch of 5 holds the poison record; in key ordering, a batch
		// is a record.
		if first <= poison && (first+5 > poison) && !perRecord && (!e.keyed() || first == poison) {
			got += k
		}
	}
	if perRecord {
		// The deliveries that reached the poison record: those that
		// failed at it.
		for _, ev := range hist.Events() {
			if ev.Kind == streamtest.Delivered && ev.Partition == 0 && ev.First+int64(ev.Index) == poison &&
				(ev.Outcome == stream.Failed || ev.Outcome == stream.Cancelled && ev.First == poison) {
				got++
			}
		}
	}
	bound := retries + 1 // a crash included
	switch {
	case !memory && got > bound:
		t.Errorf("the poison batch was delivered %d times, want at most %d (retryCount %d)", got, bound, retries)
	case memory && got <= retries+1:
		t.Errorf("in-memory state: the poison batch was delivered %d times; the count should have started over past %d", got, retries+1)
	}
	f := figures(r, 1)
	f.Recovery = recovery
	f.Note = fmt.Sprintf("poison-batch-deliveries=%d (retryCount %d)", got, retries)
	return f
}

// killDuringDelivery: the consumer process of a batch set to 10 retries
// that never succeeds is killed with SIGKILL during the batch's 4th
// delivery (retry 3), while its handler runs; another consumer takes over.
// The retry was committed as started before it ran, so the next owner goes
// on with retry 4: 11 handler calls in all, the one the kill cut short
// included (before each retry was committed as started, the next owner
// repeated retry 3: 12).
func killDuringDelivery(t *testing.T, e *env, child string) Figures {
	if e.backend != nil {
		t.Skip("the backend's events live in this test process; a child process cannot share them")
	}
	const retries, n = 10, 40
	poison := int64(17)
	e.createTopic(2)
	e.produce(0, 0, n)
	e.produce(1, 0, n)
	cfg := ChildConfig{
		Retries: retries, BackoffMS: 200, MaxBatch: 5, Poison: poison, SlowRetry: 3,
		Brokers: e.b.Addrs, Group: e.group, Topic: e.topic, SessionTimeout: e.b.SessionTimeout, Ordering: e.ordering.String(),
		Adapter: child, Member: "a", CommitWindow: e.window,
	}
	var hist streamtest.History
	var calls atomic.Int64 // the child's handler calls on the poison batch
	inFourth := newSignal()
	kill := e.startChild(&hist, cfg, stream.Hooks{}, func(_ int64, retry int) {
		calls.Add(1)
		if retry == 3 {
			inFourth.fire()
		}
	})
	e.await(inFourth.ch, "the poison batch's 4th delivery to start")
	if err := kill(); err != nil {
		t.Fatal(err)
	}
	killedAt := time.Now()
	var recovery time.Duration
	var once sync.Once
	resumed := newSignal()
	after := stream.Hooks{Delivered: func(ev stream.DeliveredEvent) {
		if ev.Partition == 0 {
			once.Do(func() { recovery = time.Since(killedAt) })
			resumed.fire()
		}
	}}
	cfg.SlowRetry = 0
	b := e.start("b", cfg.spec(stream.MergeHooks(hist.Hooks("b"), after)).with(&hist))
	e.await(resumed.ch, "the new owner's first delivery")
	e.waitCommittedWithin(map[int32]int64{0: n, 1: n}, longWait)
	if err := b.stop(); err != nil {
		t.Error(err)
	}
	r := e.check(&hist, e.ends(2, n))
	got := int(calls.Load())
	for _, ev := range hist.Events() {
		if ev.Member == "b" && ev.Kind == streamtest.Delivered && ev.Partition == 0 && ev.First <= poison && poison <= ev.Last {
			got++
		}
	}
	if got > retries+1 {
		t.Errorf("the poison batch's handler was called %d times, want at most %d (retryCount %d, a crash during a delivery included)", got, retries+1, retries)
	}
	f := figures(r, 1)
	f.Recovery = recovery
	f.Note = fmt.Sprintf("poison-batch-handler-calls=%d (retryCount %d)", got, retries)
	return f
}

// killWithCommitsUnwritten: the consumer process handles a backlog that
// only succeeds while every offset commit fails (kfake answers them with
// REQUEST_TIMED_OUT), so that the success commits its adapter coalesced are
// taken (and reported) but not written; it is killed with SIGKILL once it
// reported a checkpoint at 200 or more, the commits succeed again, and
// another consumer takes over. Nothing is lost: the new owner starts from
// the last checkpoint written and delivers the records after it again,
// which the history checker allows only after a claim that was never
// released. An adapter that commits synchronously reports nothing it did
// not write, and the new owner starts where it stopped.
func killWithCommitsUnwritten(t *testing.T, e *env, child string) Figures {
	if e.backend != nil {
		t.Skip("the backend's events live in this test process; a child process cannot share them")
	}
	if e.control == nil {
		t.Skip("the commits are made to fail through kfake's request control")
	}
	const n = 1000
	e.createTopic(2)
	e.produce(0, 0, n)
	e.produce(1, 0, n)
	var failing atomic.Bool
	failing.Store(true)
	var faults atomic.Int64
	e.control.ControlKey(int16(kmsg.OffsetCommit), func(kr kmsg.Request) (kmsg.Response, error, bool) {
		e.control.KeepControl()
		if !failing.Load() {
			return nil, nil, false
		}
		faults.Add(1)
		req := kr.(*kmsg.OffsetCommitRequest)
		resp := req.ResponseKind().(*kmsg.OffsetCommitResponse)
		for _, rt := range req.Topics {
			st := kmsg.NewOffsetCommitResponseTopic()
			st.Topic = rt.Topic
			for _, rp := range rt.Partitions {
				sp := kmsg.NewOffsetCommitResponseTopicPartition()
				sp.Partition, sp.ErrorCode = rp.Partition, kerr.RequestTimedOut.Code
				st.Partitions = append(st.Partitions, sp)
			}
			resp.Topics = append(resp.Topics, st)
		}
		return resp, nil, true
	})
	cfg := ChildConfig{
		Retries: 3, BackoffMS: 1, MaxBatch: 10, Poison: -1,
		Brokers: e.b.Addrs, Group: e.group, Topic: e.topic, SessionTimeout: e.b.SessionTimeout, Ordering: e.ordering.String(),
		Adapter: child, Member: "a", CommitWindow: 500 * time.Millisecond,
	}
	var hist streamtest.History
	var reported atomic.Int64 // the child's highest checkpoint reported
	far := newSignal()
	kill := e.startChild(&hist, cfg, stream.Hooks{Checkpointed: func(ev stream.CheckpointEvent) {
		for {
			r := reported.Load()
			if ev.Next <= r || reported.CompareAndSwap(r, ev.Next) {
				break
			}
		}
		if ev.Next >= 200 {
			far.fire()
		}
	}}, nil)
	// An adapter that commits synchronously reports no checkpoint while
	// the commits fail: it is killed all the same after a while.
	select {
	case <-far.ch:
	case <-time.After(3 * time.Second):
	}
	if err := kill(); err != nil {
		t.Fatal(err)
	}
	failing.Store(false)
	written, _ := e.tryCommitted() // none yet: the zero offsets
	b := e.start("b", cfg.spec(hist.Hooks("b")).with(&hist))
	e.waitCommittedWithin(map[int32]int64{0: n, 1: n}, longWait)
	if err := b.stop(); err != nil {
		t.Error(err)
	}
	r := e.check(&hist, e.ends(2, n))
	f := figures(r, faults.Load())
	f.Note = fmt.Sprintf("reported=%d written-at-kill=%d,%d failed-commit-requests=%d", reported.Load(), written[0].At, written[1].At, faults.Load())
	return f
}

// waitCommittedWithin is waitCommitted with a longer bound.
func (e *env) waitCommittedWithin(want map[int32]int64, within time.Duration) {
	e.t.Helper()
	deadline := time.Now().Add(within)
	for {
		got := e.committed()
		ok := true
		for p, w := range want {
			if got[p].At != w {
				ok = false
			}
		}
		if ok {
			return
		}
		if time.Now().After(deadline) {
			e.t.Fatalf("committed offsets %v, want %v, after %v", got, want, within)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// commitFailuresScenario: one offset commit request in three fails, on
// kfake, which lets a test answer a request in the broker's place. A real
// broker's commits fail for real in the broker-restart scenario.
func commitFailuresScenario(t *testing.T, e *env, perRecord bool) Figures {
	if e.backend != nil {
		return commitFailuresBackend(t, e, perRecord)
	}
	if e.control == nil {
		t.Skip("commit failures are injected through kfake's request control; see BrokerRestart for a real broker's")
	}
	var faults atomic.Int64
	var n int64
	e.control.ControlKey(int16(kmsg.OffsetCommit), func(kr kmsg.Request) (kmsg.Response, error, bool) {
		e.control.KeepControl()
		if n++; n%3 != 0 {
			return nil, nil, false
		}
		faults.Add(1)
		req := kr.(*kmsg.OffsetCommitRequest)
		resp := req.ResponseKind().(*kmsg.OffsetCommitResponse)
		code := kerr.UnknownServerError.Code
		if n%2 == 0 {
			code = kerr.RequestTimedOut.Code
		}
		for _, rt := range req.Topics {
			st := kmsg.NewOffsetCommitResponseTopic()
			st.Topic = rt.Topic
			for _, rp := range rt.Partitions {
				sp := kmsg.NewOffsetCommitResponseTopicPartition()
				sp.Partition, sp.ErrorCode = rp.Partition, code
				st.Partitions = append(st.Partitions, sp)
			}
			resp.Topics = append(resp.Topics, st)
		}
		return resp, nil, true
	})
	// 1,000 records a partition: the adapters coalesce success commits, so
	// that 500 made fewer than the 150 commit requests that the 50 failed
	// ones below need.
	const parts, n0 = 3, 1000
	e.fill(parts, n0)
	var hist streamtest.History
	var handlerFaults atomic.Int64
	policy := checkpoint.Policy{MaxRetries: 8, Backoff: checkpoint.FullJitter(checkpoint.Capped(10*time.Millisecond, checkpoint.Exponential(time.Millisecond)))}
	e.start("a", spec{handler: faulty(perRecord, 0, 0.2, 0.05, &handlerFaults), policy: policy, maxBatch: 10, hooks: hist.Hooks("a"), rec: &hist})
	e.waitTotal(parts*n0, longWait)
	waitReported(t, &hist, e.ends(parts, n0), wait)
	e.stopAll()
	r := e.check(&hist, e.ends(parts, n0))
	// With a commit window the successes' commits are coalesced and the
	// scenario makes about 150 commit requests whatever its size (the
	// retry states' and the window's): a third of them fail.
	least := int64(50)
	if e.window > 0 {
		least = 25
	}
	if faults.Load() < least {
		t.Errorf("only %d commit requests failed, want at least %d", faults.Load(), least)
	}
	f := figures(r, faults.Load()+handlerFaults.Load())
	f.Note = fmt.Sprintf("failed-commit-requests=%d", faults.Load())
	return f
}

// restartScenario: the broker restarts (keeping its data) while consumers
// retry failing batches.
func restartScenario(t *testing.T, e *env, perRecord bool) Figures {
	cmd := os.Getenv(EnvRestart)
	if cmd == "" || strings.Join(e.b.Addrs, ",") != os.Getenv("REDELIVER_KAFKA_BROKERS") {
		t.Skipf("needs an external broker and %s, a command that restarts it (integration/kafka.sh restart)", EnvRestart)
	}
	const parts, n = 3, 1000
	e.fill(parts, n)
	var (
		hist   streamtest.History
		faults atomic.Int64
	)
	policy := checkpoint.Policy{MaxRetries: checkpoint.Infinite, Backoff: checkpoint.FullJitter(checkpoint.Capped(100*time.Millisecond, checkpoint.Exponential(10*time.Millisecond)))}
	h := faulty(perRecord, 5*time.Millisecond, 0.2, 0.05, &faults)
	e.start("a", spec{handler: h, policy: policy, maxBatch: 10, hooks: hist.Hooks("a"), rec: &hist})
	e.waitTotal(parts*n/4, longWait)
	out, err := exec.Command("bash", "-c", cmd).CombinedOutput()
	if err != nil {
		t.Fatalf("restart the broker: %v\n%s", err, out)
	}
	restarted := time.Now()
	before := int64(-1)
	for before < 0 && time.Since(restarted) < longWait {
		before = e.committedTotal()
	}
	for now := before; now <= before && time.Since(restarted) < longWait; now = e.committedTotal() {
		time.Sleep(20 * time.Millisecond)
	}
	recovery := time.Since(restarted)
	e.waitTotal(parts*n, longWait)
	e.stopAll()
	r := e.check(&hist, e.ends(parts, n))
	f := figures(r, faults.Load()+1)
	f.Recovery = recovery
	f.Note = "recovery = from the restarted broker's readiness to the next commit"
	return f
}
