package conformance

import (
	"context"
	"errors"
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/redeliver-go/redeliver/adapters/franz"
	"github.com/redeliver-go/redeliver/checkpoint"
	"github.com/redeliver-go/redeliver/integration/kcluster"
	"github.com/redeliver-go/redeliver/stream"
	"github.com/redeliver-go/redeliver/stream/streamtest"
)

// The cluster scenarios run on the three-broker cluster of
// integration/kafka-cluster.sh (replication 3, min.insync.replicas 2,
// __consumer_offsets replicated three times). Each runs two consumers of
// one adapter over a three-partition topic that a producer keeps
// appending to, under a per-record handler that fails or panics now and
// then and fails for ever on a poison record every 150 (dead-lettered to
// a replicated dead-letter topic once its 4 retries are spent), and
// injects one broker fault while the consumers work. The history checker
// then verifies the whole run: nothing lost, every record within its
// retry bound, commits in order and by the owner only. Each reports its
// dead letters, those published twice, and how long the consumers took
// to move again after the fault.

// clusterRetries is the retry budget of every record in the cluster
// scenarios: a poison record is delivered clusterRetries+1 times, then
// dead-lettered.
const clusterRetries = 4

// clusterPoisonEvery makes every record at an offset ≡ 42 mod it a poison
// record.
const clusterPoisonEvery = 150

// clusterFault injects a fault into a running scenario and returns when
// it ended (the kill, the resume, the heal): recovery is measured from
// then. What it says goes into the figures' note.
type clusterFault func(t *testing.T, r *clusterRun) (ended time.Time, note string)

// EnvClusterCI is the environment variable that makes TestCluster and
// TestClusterShare run CI's cluster step: with it set to 1, each adapter
// runs only its scenario in ClusterCI, so that every adapter meets a
// cluster fault and every scenario (a)-(f) runs, each once, in about five
// minutes instead of about 31. scripts/test.sh sets it.
const EnvClusterCI = "REDELIVER_CLUSTER_CI"

// ClusterCI is CI's cluster step: for each adapter (by its Name), the one
// cluster scenario it runs when REDELIVER_CLUSTER_CI=1. Together they are
// every scenario once: (a) a leader killed during a backoff, (b) the
// coordinator killed during a retry-state commit, (c) a broker paused
// past the session timeout, (d) a broker cut off from the consumers, (e)
// a rolling restart, (f) the dead-letter topic's leader killed during a
// dead-letter publish. The pairing puts the franz-go adapter
// (cooperative-sticky), the one most users run, on (b), whose retry state
// lives in __consumer_offsets, and each other scenario on an adapter that
// ran it among the fastest (docs/RELIABILITY.md's cluster tables), so
// that the step stays short. The share consumer's (b) is named
// CoordinatorKilledDuringRetry (it commits no retry state).
var ClusterCI = map[string]string{
	"franz (cooperative-sticky)": "CoordinatorKilledDuringRetryCommit", // (b)
	"franz (KIP-848)":            "RollingRestart",                     // (e)
	"kafkago":                    "DeadLetterLeaderKilled",             // (f)
	"sarama":                     "LeaderKilledDuringBackoff",          // (a)
	"confluent":                  "BrokerPausedPastSessionTimeout",     // (c)
	"franz share":                "BrokerCutOffFromConsumers",          // (d)
}

// clusterScenarios are RunCluster's scenarios, (a) to (f), by name: the
// one list of them, which ClusterScenarios names.
var clusterScenarios = []struct {
	name  string
	fault clusterFault
}{
	{"LeaderKilledDuringBackoff", leaderKilledDuringBackoff},
	{"CoordinatorKilledDuringRetryCommit", coordinatorKilledDuringRetryCommit},
	{"BrokerPausedPastSessionTimeout", brokerPausedPastSession},
	{"BrokerCutOffFromConsumers", brokerCutOff},
	{"RollingRestart", rollingRestart},
	{"DeadLetterLeaderKilled", deadLetterLeaderKilled},
}

// ClusterScenarios are the names of RunCluster's scenarios, (a) to (f).
var ClusterScenarios = func() []string {
	names := make([]string, len(clusterScenarios))
	for i, s := range clusterScenarios {
		names[i] = s.name
	}
	return names
}()

// ClusterRuns reports whether the cluster scenario runs for the adapter:
// always, unless REDELIVER_CLUSTER_CI=1 (CI's cluster step), when only
// the adapter's pair in ClusterCI runs. Any other value of
// REDELIVER_CLUSTER_CI fails the test.
func ClusterRuns(t *testing.T, adapter, scenario string) bool {
	t.Helper()
	switch v := os.Getenv(EnvClusterCI); v {
	case "", "0":
		return true
	case "1":
		return ClusterCI[adapter] == scenario
	default:
		t.Fatalf("%s=%q: want 1 (CI's cluster step: one scenario per adapter) or nothing (every scenario)", EnvClusterCI, v)
		return false
	}
}

// RunCluster runs every cluster scenario for the adapter on the provider's
// cluster (a Broker with Cluster set); it skips when there is none. Under
// REDELIVER_CLUSTER_CI=1 it runs only the adapter's scenario in ClusterCI.
//
// The variant is [VariantFromEnv]'s: REDELIVER_ORDERING=key runs every
// scenario in key ordering (see [RunClusterVariant]).
func RunCluster(t *testing.T, p Provider, a Adapter) {
	v, err := VariantFromEnv()
	if err != nil {
		t.Fatal(err)
	}
	RunClusterVariant(t, p, a, v)
}

// RunClusterVariant is [RunCluster] in the given variant. In key (or no)
// ordering the records carry keys (8 a partition), the consumers run in
// that ordering at their default concurrency, each record is retried on
// its own, and the history is checked with
// [streamtest.History.CheckKeys]: per-key order, each record's retry
// bound, no record a committed window said was finished delivered again,
// no loss. A poison record then holds back only its own key: while it
// waits out its backoffs the other keys' records go on, and the
// partition's commits carry them as finished above it, with its retry
// state, in the commit metadata that the faults must not lose. The
// figures add the largest commit metadata written and the claims that
// began from a window.
func RunClusterVariant(t *testing.T, p Provider, a Adapter, v Variant) {
	for _, s := range clusterScenarios {
		if !ClusterRuns(t, a.Name(), s.name) {
			continue
		}
		t.Run(s.name, func(t *testing.T) {
			b := p.Start(t)
			if b.Cluster == nil {
				t.Skipf("the %s provider is not a cluster", p.Name())
			}
			if a.NeedsKIP848() && !b.KIP848 {
				t.Skipf("%s needs the KIP-848 protocol; the %s broker does not run it", a.Name(), p.Name())
			}
			if len(v.Only) > 0 && !slices.Contains(v.Only, s.name) {
				t.Skip("not in the variant's set")
			}
			begin := time.Now()
			e := newVariantEnv(t, b, a, v)
			f := clusterScenario(t, e, s.fault)
			if e.keyed() {
				f.Note = "ordering=" + e.ordering.String() + " " + f.Note
			}
			f.Scenario, f.Provider, f.Adapter, f.Took = s.name, p.Name(), a.Name(), time.Since(begin)
			report(t, f)
		})
	}
}

// clusterRun is one cluster scenario's state.
type clusterRun struct {
	e     *env
	c     *kcluster.Cluster
	dlq   string
	parts int32

	hist   streamtest.History
	faults atomic.Int64
	// poisonSlack is how many deliveries beyond retryCount+1 a poison
	// record may take: 0 in the scenarios; 1 under the chaos run, where a
	// commit of its retry state can be given up at the end of a claim
	// (the documented window: the next owner delivers the record again,
	// at most once more), which the history checker accounts for.
	poisonSlack int
	// givenUp counts the commits the members in this process gave up at
	// the end of a claim, by partition (their processors' logs).
	givenUp givenUpCommits

	armed      atomic.Bool
	failed     chan int32 // a partition whose delivery failed, once armed
	publishing chan chan struct{}
	deadLetter atomic.Bool // arm the dead-letter publish hook

	// burstUntil, in Unix nanoseconds, is when a handler fault burst
	// ends: until then the handler fails every record (the chaos run's
	// burst faults).
	burstUntil atomic.Int64
	bursts     atomic.Int64

	// child is the adapter's name in ChildMain's map when consumer b runs
	// in a child process; childKill kills the one running, the childN-th.
	child     string
	childMu   sync.Mutex
	childKill func() error
	childN    int
	kills     atomic.Int64
}

// startChild starts consumer b in a child process, named b1, b2, ... in
// the history.
func (r *clusterRun) startChild() error {
	r.childMu.Lock()
	defer r.childMu.Unlock()
	r.childN++
	cfg := ChildConfig{Adapter: r.child, Member: fmt.Sprintf("b%d", r.childN), Brokers: r.e.b.Addrs,
		Group: r.e.group, Topic: r.e.topic, SessionTimeout: r.e.b.SessionTimeout, MaxBatch: 10, Poison: -1,
		Cluster: true, DeadLetter: r.dlq, Lifetime: 6 * time.Hour, CommitWindow: r.e.window}
	kill, err := r.e.tryStartChild(&r.hist, cfg, stream.Hooks{}, nil)
	if err != nil {
		return err
	}
	r.childKill = kill
	return nil
}

// killChild kills (SIGKILL) consumer b's child process, waits d, and
// starts a new one.
func (r *clusterRun) killChild(d time.Duration) error {
	r.childMu.Lock()
	kill := r.childKill
	r.childMu.Unlock()
	if err := kill(); err != nil {
		return err
	}
	r.kills.Add(1)
	time.Sleep(d)
	return r.startChild()
}

// burst makes the handler fail every record for d.
func (r *clusterRun) burst(d time.Duration) {
	r.bursts.Add(1)
	r.burstUntil.Store(time.Now().Add(d).UnixNano())
}

func (r *clusterRun) ctx(d time.Duration) (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.Background(), d)
}

// run runs kafka-cluster.sh with args, failing the test on error.
func (r *clusterRun) run(t *testing.T, args ...string) string {
	t.Helper()
	ctx, cancel := r.ctx(5 * time.Minute)
	defer cancel()
	out, err := r.c.Run(ctx, args...)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("kafka-cluster.sh %s", strings.Join(args, " "))
	return strings.TrimSpace(out)
}

// node returns a node id from kafka-cluster.sh's answer.
func (r *clusterRun) node(t *testing.T, f func(context.Context) (int32, error)) int {
	t.Helper()
	ctx, cancel := r.ctx(longWait)
	defer cancel()
	for {
		id, err := f(ctx)
		if err == nil && id > 0 {
			return int(id)
		}
		if ctx.Err() != nil {
			t.Fatalf("no node: %v", err)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

func (r *clusterRun) leader(t *testing.T, topic string, p int32) int {
	return r.node(t, func(ctx context.Context) (int32, error) { return kcluster.Leader(ctx, r.e.adm, topic, p) })
}

func (r *clusterRun) coordinator(t *testing.T) int {
	return r.node(t, func(ctx context.Context) (int32, error) { return kcluster.Coordinator(ctx, r.e.adm, r.e.group) })
}

// restore brings the cluster back whole: every broker running, resumed,
// reachable and in sync.
func (r *clusterRun) restore(t *testing.T) {
	ctx, cancel := r.ctx(5 * time.Minute)
	defer cancel()
	for n := 1; n <= kcluster.Nodes; n++ {
		_ = kcluster.Heal(r.c.ProxyAPI, n)
		if _, err := r.c.Run(ctx, "pid", strconv.Itoa(n)); err != nil {
			if _, err := r.c.Run(ctx, "restart", strconv.Itoa(n)); err != nil {
				t.Errorf("restore the cluster: %v", err)
			}
			continue
		}
		_, _ = r.c.Run(ctx, "resume", strconv.Itoa(n))
	}
}

// publisher is the dead-letter publisher: franz-go's (acks=all, the
// client's default) through the history, with a hook that, when armed,
// hands the publish to the scenario before it goes out.
type hookedPublisher struct {
	r    *clusterRun
	next stream.Publisher
}

func (p hookedPublisher) Publish(ctx context.Context, topic string, recs []stream.Record) error {
	if p.r.deadLetter.CompareAndSwap(true, false) {
		done := make(chan struct{})
		p.r.publishing <- done
		<-done
	}
	return p.next.Publish(ctx, topic, recs)
}

// clusterScenario runs one scenario with the given fault.
func clusterScenario(t *testing.T, e *env, fault clusterFault) Figures {
	return clusterScenarioWith(t, e, clusterOptions{}, fault)
}

// clusterOptions vary a cluster scenario's members (the chaos run's).
type clusterOptions struct {
	// child, when not "", runs consumer b in a child process (this test
	// binary run again, the adapter registered under child in ChildMain's
	// map), which clusterRun.killChild kills and replaces.
	child string
	// postgres, when not "", parks the given-up records in PostgreSQL
	// (pgstore at this URL, a schema of the run's own) instead of
	// dead-lettering them, and runs a redrive.Scheduler that re-drives
	// them to the topic, where the consumers complete them.
	postgres string
}

// clusterScenarioWith is clusterScenario with options.
func clusterScenarioWith(t *testing.T, e *env, o clusterOptions, fault clusterFault) Figures {
	const parts, initial = 3, 300
	child := o.child
	r := &clusterRun{e: e, c: e.b.Cluster, dlq: e.topic + ".dlq", parts: parts,
		failed: make(chan int32, 1), publishing: make(chan chan struct{}, 1), child: child}
	t.Cleanup(func() { r.restore(t) })
	e.createTopic(parts)
	ctx, cancel := r.ctx(longWait)
	defer cancel()
	if resp, err := e.adm.CreateTopic(ctx, 1, e.replication(), nil, r.dlq); err != nil || resp.Err != nil {
		t.Fatalf("create %s: %v %v", r.dlq, err, resp.Err)
	}
	for p := range int32(parts) {
		e.produce(p, 0, initial)
	}

	// A producer appends 5 records to each partition every 250ms until
	// the fault is over, through the brokers' internal listeners.
	feedCtx, stopFeed := context.WithCancel(context.Background())
	var feeding sync.WaitGroup
	feeding.Add(1)
	go func() {
		defer feeding.Done()
		for i := initial; feedCtx.Err() == nil; i += 5 {
			var recs []*kgo.Record
			for p := range int32(parts) {
				for j := range 5 {
					rec := &kgo.Record{Topic: e.topic, Partition: p, Value: fmt.Appendf(nil, "%d:%d", p, i+j)}
					if e.keyed() {
						// The key of the i+j-th record; a failed produce
						// can shift offsets, so the check reads the
						// keys back from the topic (readKeys).
						rec.Key = fmt.Appendf(nil, "k%d", (i+j)%keysPerPartition)
					}
					recs = append(recs, rec)
				}
			}
			pctx, pcancel := context.WithTimeout(context.Background(), longWait)
			if err := e.cl.ProduceSync(pctx, recs...).FirstErr(); err != nil {
				t.Logf("feed: %v (going on)", err)
			}
			pcancel()
			select {
			case <-feedCtx.Done():
			case <-time.After(250 * time.Millisecond):
			}
		}
	}()
	defer func() { stopFeed(); feeding.Wait() }()

	var (
		rd       *clusterRedrive
		complete func(context.Context, *stream.Record) error
	)
	if o.postgres != "" {
		rd = r.startRedrive(t, o.postgres)
		complete = rd.complete
	}
	h := clusterHandler(&r.faults, &r.burstUntil, complete)
	pub, err := franz.NewPublisher(e.cl)
	if err != nil {
		t.Fatal(err)
	}
	dl, err := stream.DeadLetter(r.hist.Publisher(hookedPublisher{r, pub}), r.dlq)
	if err != nil {
		t.Fatal(err)
	}
	if rd != nil {
		dl = rd.park
	}
	watch := stream.Hooks{Delivered: func(ev stream.DeliveredEvent) {
		// In key ordering the fault waits for a poison record's failure:
		// it hits while that record's key waits out a backoff and the
		// partition's window holds the other keys' records finished
		// above it.
		if ev.Outcome == stream.Failed && r.armed.Load() && (!e.keyed() || errors.Is(ev.Err, errPoison)) {
			select {
			case r.failed <- ev.Partition:
			default:
			}
		}
	}}
	policy := clusterPolicy
	for _, name := range []string{"a", "b"} {
		if name == "b" && child != "" {
			if err := r.startChild(); err != nil {
				t.Fatal(err)
			}
			continue
		}
		e.start(name, spec{handler: h, policy: policy, maxBatch: 10, session: true, rec: &r.hist,
			hooks: stream.MergeHooks(r.hist.Hooks(name), watch),
			opts:  []stream.Option{stream.WithExhaustionAction(dl)}, log: r.givenUp.handler()})
	}
	e.waitTotal(parts*initial/4, longWait)

	began := time.Now()
	ended, note := fault(t, r)
	r.armed.Store(false)
	at := r.committed(t)
	recovery, err := r.progress(at, ended)
	if err != nil {
		t.Errorf("after the fault: %v", err)
	}
	faultTook := ended.Sub(began)
	// The cluster whole again before the end: the next scenario starts on
	// three brokers.
	r.restore(t)
	stopFeed()
	feeding.Wait()
	if rd != nil {
		rd.drain(t)
	}

	ends := r.endOffsets(t, e.topic)
	want := map[int32]int64{}
	for p := range int32(parts) {
		want[p] = ends[p]
	}
	r.waitCommitted(t, want)
	e.stopAll()
	if child != "" {
		r.childMu.Lock()
		_ = r.childKill()
		r.childMu.Unlock()
	}
	hends := map[streamtest.TopicPartition]int64{}
	var total int64
	for p, n := range want {
		hends[streamtest.TopicPartition{Topic: e.topic, Partition: p}] = n
		total += n
	}
	if e.keyed() {
		r.readKeys(t, want)
	}
	rep := e.check(&r.hist, hends)

	letters, twice := r.readDeadLetters(t)
	var poisons int64
	for _, n := range want {
		poisons += (n + clusterPoisonEvery - 1 - 42) / clusterPoisonEvery
	}
	// Records other than the poison ones are dead-lettered only when a
	// fault burst spent their retries (the history checker has checked
	// that each was given up after its exact budget).
	var poisonLetters, burstLetters int64
	for k := range letters {
		if k[1]%clusterPoisonEvery == 42 {
			poisonLetters++
		} else {
			burstLetters++
		}
	}
	if rd == nil && poisonLetters != poisons {
		t.Errorf("%d poison records dead-lettered, want %d", poisonLetters, poisons)
	}
	if rd != nil && len(letters) > 0 {
		t.Errorf("%d records dead-lettered, but given-up records are parked", len(letters))
	}
	if burstLetters > 0 && r.bursts.Load() == 0 {
		t.Errorf("%d records other than the poison ones dead-lettered, with no fault burst", burstLetters)
	}
	minP, maxP, repeatedFirsts := r.poisonDeliveries()
	counts, _ := r.poisonCounts()
	for k, n := range counts {
		// A commit the processor gave up when its claim ended (a member
		// fenced while its commits were refused) loses what it carried: a
		// failure's retry state among them, so the next owner delivers
		// that record once more (the window docs/RELIABILITY.md describes,
		// which the history checker accounts for per move).
		lost := r.givenUp.count(int32(k[0]))
		if allowed := clusterRetries + 1 + r.poisonSlack + lost; n > allowed {
			t.Errorf("the poison record at %d/%d was delivered %d times, want at most %d (retryCount %d, %d commits of its partition given up at a claim's end)",
				k[0], k[1], n, allowed, clusterRetries, lost)
		}
	}
	f := figures(rep, r.faults.Load()+1)
	f.Records = total
	f.Recovery = recovery
	f.Note = fmt.Sprintf("dead-letters=%d twice=%d poison-deliveries=%d..%d (retryCount %d) fault=%s %s",
		len(letters), twice, minP, maxP, clusterRetries, faultTook.Round(100*time.Millisecond), note)
	if rd != nil {
		f.Note += " " + rd.check(t)
	}
	if repeatedFirsts > 0 {
		f.Note += fmt.Sprintf(" poison-first-deliveries-repeated-by-a-move=%d", repeatedFirsts)
	}
	if e.keyed() {
		// What the group coordinator answered right after the fault (a
		// new one after (b)): each partition's committed window, read
		// back from __consumer_offsets.
		var after []string
		for p := range int32(parts) {
			after = append(after, fmt.Sprintf("p%d:%d", p, len(at[p].Metadata)))
		}
		f.Note += " " + r.windowFigures() + " window-bytes-read-after-fault=" + strings.Join(after, ",")
	}
	if n := r.kills.Load(); n > 0 {
		f.Note += fmt.Sprintf(" sigkills=%d", n)
	}
	if n := r.bursts.Load(); n > 0 {
		f.Note += fmt.Sprintf(" bursts=%d burst-dead-letters=%d", n, burstLetters)
	}
	return f
}

var (
	errPoison = errors.New("poison record")
	errBurst  = errors.New("injected handler fault burst")
)

// clusterHandler is the cluster scenarios' per-record handler: it fails
// for ever at a poison record (one every clusterPoisonEvery), fails or
// panics now and then at the others, and fails every record while a
// fault burst lasts (until burstUntil, in Unix nanoseconds). It counts
// the faults it injects.
//
// complete, when not nil, is called for each record handled: it completes
// a re-driven record's entry.
func clusterHandler(faults, burstUntil *atomic.Int64, complete func(context.Context, *stream.Record) error) stream.Handler {
	var (
		mu    sync.Mutex
		calls = map[[2]int64]int{}
	)
	return stream.PerRecord(func(ctx context.Context, rec *stream.Record) error {
		time.Sleep(2 * time.Millisecond)
		if time.Now().UnixNano() < burstUntil.Load() {
			faults.Add(1)
			return errBurst
		}
		if rec.Offset%clusterPoisonEvery == 42 {
			faults.Add(1)
			return errPoison
		}
		k := [2]int64{int64(rec.Partition), rec.Offset}
		mu.Lock()
		calls[k]++
		n := calls[k]
		mu.Unlock()
		switch u := unit(rec.Partition, rec.Offset, n); {
		case u < 0.05:
			faults.Add(1)
			return errInjected
		case u < 0.06:
			faults.Add(1)
			panic("injected handler panic")
		}
		if complete != nil {
			return complete(ctx, rec)
		}
		return nil
	})
}

// clusterPolicy is the cluster scenarios' retry policy.
var clusterPolicy = checkpoint.Policy{MaxRetries: clusterRetries, Backoff: checkpoint.Capped(time.Second, checkpoint.Exponential(200*time.Millisecond))}

// committed returns the group's committed offsets, asking again while the
// brokers answer with an error (a broker just killed or restarted).
func (r *clusterRun) committed(t *testing.T) map[int32]kadm.Offset {
	t.Helper()
	deadline := time.Now().Add(longWait)
	for {
		got, err := r.e.tryCommitted()
		if err == nil {
			return got
		}
		if time.Now().After(deadline) {
			t.Fatalf("after %v: %v", longWait, err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// waitCommitted waits until the group's commits are at want.
func (r *clusterRun) waitCommitted(t *testing.T, want map[int32]int64) {
	t.Helper()
	deadline := time.Now().Add(longWait)
	for {
		got := r.committed(t)
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
			t.Fatalf("committed offsets %v, want %v, after %v", got, want, longWait)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// progress waits until every partition has committed past at, and
// returns how long that took from since.
func (r *clusterRun) progress(at map[int32]kadm.Offset, since time.Time) (time.Duration, error) {
	deadline := time.Now().Add(longWait)
	for time.Now().Before(deadline) {
		got, err := r.e.tryCommitted()
		if err == nil {
			done := true
			for p := range r.parts {
				if got[p].At <= at[p].At {
					done = false
				}
			}
			if done {
				return time.Since(since), nil
			}
		}
		time.Sleep(50 * time.Millisecond)
	}
	return 0, fmt.Errorf("no partition moved on past %v within %v", at, longWait)
}

// endOffsets returns the topic's end offsets.
func (r *clusterRun) endOffsets(t *testing.T, topic string) map[int32]int64 {
	t.Helper()
	ctx, cancel := r.ctx(longWait)
	defer cancel()
	offs, err := r.e.adm.ListEndOffsets(ctx, topic)
	if err == nil {
		err = offs.Error()
	}
	if err != nil {
		t.Fatalf("end offsets of %s: %v", topic, err)
	}
	m := map[int32]int64{}
	for p, o := range offs[topic] {
		m[p] = o.Offset
	}
	return m
}

// readDeadLetters reads the dead-letter topic to its end and returns how
// many times each record (partition, offset) was dead-lettered, and how
// many of those publishes were repeats.
func (r *clusterRun) readDeadLetters(t *testing.T) (map[[2]int64]int, int) {
	t.Helper()
	end := r.endOffsets(t, r.dlq)[0]
	got := map[[2]int64]int{}
	if end == 0 {
		return got, 0
	}
	cl, err := kgo.NewClient(kgo.SeedBrokers(r.c.Direct...), kgo.ConsumeTopics(r.dlq), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	ctx, cancel := r.ctx(longWait)
	defer cancel()
	twice := 0
	for seen := int64(0); seen < end; {
		fs := cl.PollFetches(ctx)
		if ctx.Err() != nil {
			t.Fatalf("%s: read %d of %d records", r.dlq, seen, end)
		}
		fs.EachRecord(func(rec *kgo.Record) {
			seen = max(seen, rec.Offset+1)
			var k [2]int64
			for _, h := range rec.Headers {
				switch h.Key {
				case stream.HeaderPartition:
					k[0], _ = strconv.ParseInt(string(h.Value), 10, 32)
				case stream.HeaderOffset:
					k[1], _ = strconv.ParseInt(string(h.Value), 10, 64)
				}
			}
			if got[k]++; got[k] > 1 {
				twice++
			}
		})
	}
	return got, twice
}

// readKeys reads the topic's records up to ends and notes each one's key
// (env.keys), for the key checker: the producer's keys follow the values
// it numbers, and a produce that failed and was not written shifts the
// offsets after it.
func (r *clusterRun) readKeys(t *testing.T, ends map[int32]int64) {
	t.Helper()
	e := r.e
	parts := map[string]map[int32]kgo.Offset{e.topic: {}}
	e.keys = map[int32][]string{}
	left := int64(0)
	for p, n := range ends {
		parts[e.topic][p] = kgo.NewOffset().AtStart()
		e.keys[p] = make([]string, n)
		left += n
	}
	cl, err := kgo.NewClient(kgo.SeedBrokers(r.c.Direct...), kgo.ConsumePartitions(parts))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	ctx, cancel := r.ctx(longWait)
	defer cancel()
	for left > 0 {
		fs := cl.PollFetches(ctx)
		if ctx.Err() != nil {
			t.Fatalf("%s: %d records not read back for their keys", e.topic, left)
		}
		fs.EachRecord(func(rec *kgo.Record) {
			if ks := e.keys[rec.Partition]; rec.Offset < int64(len(ks)) && ks[rec.Offset] == "" {
				ks[rec.Offset] = string(rec.Key)
				left--
			}
		})
	}
}

// windowFigures says, in key ordering, how large the commit metadata
// grew (the most written by a commit, and its 99th percentile over the
// commits that carried any) and how many claims began from a window the
// previous owner had committed (a non-empty metadata read at the claim),
// the largest of those.
func (r *clusterRun) windowFigures() string {
	var sizes []int
	claims, claimMax := 0, 0
	for _, ev := range r.hist.Events() {
		switch {
		case ev.Kind == streamtest.Committed && ev.Metadata != "":
			sizes = append(sizes, len(ev.Metadata))
		case ev.Kind == streamtest.Claimed && ev.Metadata != "":
			claims++
			claimMax = max(claimMax, len(ev.Metadata))
		}
	}
	slices.Sort(sizes)
	p99, most := 0, 0
	if len(sizes) > 0 {
		p99, most = sizes[(len(sizes)*99)/100], sizes[len(sizes)-1]
	}
	return fmt.Sprintf("metadata-bytes p99=%d max=%d (%d commits with a window) claims-from-a-window=%d (max %d bytes)",
		p99, most, len(sizes), claims, claimMax)
}

// poisonDeliveries returns the fewest and the most deliveries that count
// against one poison record: those that failed at it, and its retries a
// revocation cut short (which count as the checker counts them), with its
// first delivery counted once however often a move repeated it, and how
// many first deliveries were so repeated. A first delivery commits nothing
// before it runs: when the partition moves between its failure and the
// commit of the failure's state (a coordinator killed then), the next
// owner delivers the record again as a first delivery (docs/COUNTING.md:
// at most retryCount+1 plus one per such move, which the history checker
// verifies move by move).
func (r *clusterRun) poisonDeliveries() (lo, hi, repeated int) {
	n, repeated := r.poisonCounts()
	lo = -1
	for _, k := range n {
		if lo < 0 || k < lo {
			lo = k
		}
		hi = max(hi, k)
	}
	return max(lo, 0), hi, repeated
}

// poisonCounts returns each poison record's counted deliveries, by
// partition and offset, as poisonDeliveries counts them.
func (r *clusterRun) poisonCounts() (n map[[2]int64]int, repeated int) {
	n = map[[2]int64]int{}
	firsts := map[[2]int64]int{}
	for _, ev := range r.hist.Events() {
		switch {
		case ev.Kind != streamtest.Delivered:
		case ev.Outcome == stream.Failed && ev.Error == errPoison.Error():
			k := [2]int64{int64(ev.Partition), ev.First + int64(ev.Index)}
			if ev.Retry == 0 {
				if firsts[k]++; firsts[k] > 1 {
					repeated++
					continue
				}
			}
			n[k]++
		case ev.Outcome == stream.Cancelled && ev.Retry > 0 && ev.First%clusterPoisonEvery == 42:
			n[[2]int64{int64(ev.Partition), ev.First}]++
		}
	}
	return n, repeated
}

// awaitFailure waits for a failed delivery once the run is armed and
// returns its partition.
func (r *clusterRun) awaitFailure(t *testing.T) int32 {
	t.Helper()
	r.armed.Store(true)
	select {
	case p := <-r.failed:
		return p
	case <-time.After(longWait):
		t.Fatal("no delivery failed")
		return -1
	}
}

// (a) The leader of a partition in backoff is killed (SIGKILL): a delivery
// of the partition just failed, its retry waits out the backoff, and its
// leader dies; the partition's new leader is elected from the in-sync
// replicas and the retry goes on there.
func leaderKilledDuringBackoff(t *testing.T, r *clusterRun) (time.Time, string) {
	p := r.awaitFailure(t)
	n := r.leader(t, r.e.topic, p)
	r.run(t, "kill", strconv.Itoa(n))
	return time.Now(), fmt.Sprintf("killed=broker%d (leader of partition %d)", n, p)
}

// (b) The group coordinator is killed (SIGKILL) as a retry state is being
// committed: the kill follows a failed delivery at once, while the worker
// writes the failure's retry state into __consumer_offsets.
func coordinatorKilledDuringRetryCommit(t *testing.T, r *clusterRun) (time.Time, string) {
	n := r.coordinator(t)
	r.awaitFailure(t)
	r.run(t, "kill", strconv.Itoa(n))
	return time.Now(), fmt.Sprintf("killed=broker%d (coordinator)", n)
}

// (c) The group coordinator's broker is paused (SIGSTOP) for twice the
// session timeout (longer too than the controller's 9 s broker session),
// then resumed.
func brokerPausedPastSession(t *testing.T, r *clusterRun) (time.Time, string) {
	n := r.coordinator(t)
	pause := 2 * r.e.b.SessionTimeout
	r.run(t, "pause", strconv.Itoa(n))
	time.Sleep(pause)
	r.run(t, "resume", strconv.Itoa(n))
	return time.Now(), fmt.Sprintf("paused=broker%d (coordinator) for %v", n, pause)
}

// clusterCut is how long the cut-off scenario keeps a broker cut off.
const clusterCut = 30 * time.Second

// (d) The group coordinator's broker is cut off from the consumers for
// clusterCut (its proxy holds every byte both ways) while it goes on
// talking to the other brokers: it stays the coordinator and the leader
// of its partitions, so those wait for the heal.
func brokerCutOff(t *testing.T, r *clusterRun) (time.Time, string) {
	n := r.coordinator(t)
	if err := kcluster.Cut(r.c.ProxyAPI, n); err != nil {
		t.Fatal(err)
	}
	t.Logf("cut broker %d off from the consumers", n)
	time.Sleep(clusterCut)
	if err := kcluster.Heal(r.c.ProxyAPI, n); err != nil {
		t.Fatal(err)
	}
	return time.Now(), fmt.Sprintf("cut=broker%d (coordinator) for %v", n, clusterCut)
}

// (e) A rolling restart: each broker in turn stopped (SIGTERM, a clean
// shutdown) and started again, the next once every partition is in sync.
func rollingRestart(t *testing.T, r *clusterRun) (time.Time, string) {
	for n := 1; n <= kcluster.Nodes; n++ {
		r.run(t, "restart", strconv.Itoa(n))
	}
	return time.Now(), "restarted=broker1,broker2,broker3"
}

// (f) The dead-letter topic's leader is killed (SIGKILL) as a poison
// record is being dead-lettered: the publish goes out right after the kill
// and lands on the new leader (acks=all, two replicas in sync).
func deadLetterLeaderKilled(t *testing.T, r *clusterRun) (time.Time, string) {
	n := r.leader(t, r.dlq, 0)
	r.deadLetter.Store(true)
	var done chan struct{}
	select {
	case done = <-r.publishing:
	case <-time.After(longWait):
		t.Fatal("no dead letter published")
	}
	r.run(t, "kill", strconv.Itoa(n))
	close(done)
	return time.Now(), fmt.Sprintf("killed=broker%d (leader of the dead-letter topic)", n)
}
