package conformance

import (
	"context"
	"flag"
	"fmt"
	"hash/fnv"
	"math/rand/v2"
	"os"
	"path/filepath"
	"runtime/pprof"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redeliver-go/redeliver/integration/kcluster"
)

// The chaos run: every adapter's cluster scenario at once, each with its
// own topic, group, producer, handler faults and poison records, while
// one fault at a time hits a random broker (or moves a random leader) for
// a set duration. Each scenario's fault is the whole run: it waits until
// the chaos is over, then checks its history as the other cluster
// scenarios do. After each fault is undone the run measures its recovery:
// how long until every partition of every member has moved on (a commit
// past where it stood, or for a share group a record acknowledged).

// ChaosMember is one consumer set under the chaos: its name, the group
// whose coordinator a fault may target, a topic whose leaders a fault may
// move, and a probe of its progress per partition.
type ChaosMember struct {
	Name     string
	Group    string
	Topic    string
	Parts    int32
	Progress func() (map[int32]int64, error)

	// The faults a member offers besides the brokers' (nil: none).
	// Burst makes the member's handler fail every record for d.
	Burst func(d time.Duration)
	// Kill kills (SIGKILL) the member's consumer that runs in a child
	// process, waits d, and starts a new one in its place.
	Kill func(d time.Duration) error
	// RestartStore restarts the PostgreSQL server under the member's
	// re-drive scheduler.
	RestartStore func() error
}

// Chaos injects random broker faults into the three-broker cluster for a
// set duration while members consume. Its methods are safe for
// concurrent use.
type Chaos struct {
	c      *kcluster.Cluster
	d      time.Duration
	want   int
	rnd    *rand.Rand
	joined chan ChaosMember
	done   chan struct{}

	mu       sync.Mutex
	members  []ChaosMember
	ended    time.Time
	counts   map[string]int
	recovery []time.Duration
	slowest  string
	log      []string
}

// NewChaos returns a chaos run of duration d over the cluster, which
// starts once want members have joined (or 5 minutes passed).
func NewChaos(c *kcluster.Cluster, d time.Duration, want int, seed uint64) *Chaos {
	return &Chaos{c: c, d: d, want: want, rnd: rand.New(rand.NewPCG(seed, 0x51)),
		joined: make(chan ChaosMember, want), done: make(chan struct{}),
		counts: map[string]int{}}
}

// Join adds a member and blocks until the chaos is over; it returns when
// it ended.
func (ch *Chaos) Join(m ChaosMember) time.Time {
	ch.joined <- m
	<-ch.done
	ch.mu.Lock()
	defer ch.mu.Unlock()
	return ch.ended
}

// ChaosSummary is what a chaos run did.
type ChaosSummary struct {
	Duration   time.Duration
	Faults     map[string]int
	Recoveries []time.Duration // sorted
	Slowest    string
	Stuck      int // faults after which some member did not move on within the bound
}

// Quantile returns the q-quantile of the recoveries (0 when none).
func (s ChaosSummary) Quantile(q float64) time.Duration {
	if len(s.Recoveries) == 0 {
		return 0
	}
	i := int(q*float64(len(s.Recoveries))+0.5) - 1
	return s.Recoveries[min(max(i, 0), len(s.Recoveries)-1)]
}

func (s ChaosSummary) String() string {
	var kinds []string
	total := 0
	for k, n := range s.Faults {
		kinds = append(kinds, fmt.Sprintf("%s=%d", k, n))
		total += n
	}
	sort.Strings(kinds)
	return fmt.Sprintf("chaos %v: faults=%d (%s) recovery p50=%v p99=%v max=%v (%s) stuck=%d",
		s.Duration.Round(time.Second), total, strings.Join(kinds, " "),
		s.Quantile(0.5).Round(time.Millisecond), s.Quantile(0.99).Round(time.Millisecond),
		s.Quantile(1).Round(time.Millisecond), s.Slowest, s.Stuck)
}

// chaosRecoveryBound bounds the wait for every member to move on after a
// fault; a fault past it counts as stuck (the run goes on).
const chaosRecoveryBound = 2 * time.Minute

// Run waits for the members, injects faults until the duration is over,
// brings the cluster back whole, releases the members and returns the
// summary. Call it on its own goroutine; logf reports each fault.
func (ch *Chaos) Run(logf func(format string, args ...any)) ChaosSummary {
	wait := time.After(5 * time.Minute)
collect:
	for len(ch.members) < ch.want {
		select {
		case m := <-ch.joined:
			ch.mu.Lock()
			ch.members = append(ch.members, m)
			ch.mu.Unlock()
		case <-wait:
			logf("chaos: %d of %d members joined within 5 minutes; going on with them", len(ch.members), ch.want)
			break collect
		}
	}
	stuck := 0
	begin := time.Now()
	for i := 0; time.Since(begin) < ch.d && len(ch.members) > 0; i++ {
		kind, what := ch.fault(logf)
		if kind == "" {
			continue
		}
		ch.counts[kind]++
		rec, who, ok := ch.awaitProgress()
		if !ok {
			stuck++
			logf("chaos %d: %s: %s did not move on within %v%s", i, what, who, chaosRecoveryBound, dumpStall(i))
		} else {
			ch.recovery = append(ch.recovery, rec)
			if rec >= slices.Max(ch.recovery) {
				ch.slowest = what
			}
			logf("chaos %d: %s: every member moved on after %v (last %s)", i, what, rec.Round(time.Millisecond), who)
		}
		time.Sleep(time.Duration(1000+ch.rnd.IntN(4000)) * time.Millisecond)
	}
	took := time.Since(begin)
	ch.restore(logf)
	ch.mu.Lock()
	ch.ended = time.Now()
	ch.mu.Unlock()
	close(ch.done)
	rs := slices.Clone(ch.recovery)
	slices.Sort(rs)
	return ChaosSummary{Duration: took, Faults: ch.counts, Recoveries: rs, Slowest: ch.slowest, Stuck: stuck}
}

func (ch *Chaos) cluster(args ...string) error {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	_, err := ch.c.Run(ctx, args...)
	return err
}

// fault injects one fault, holds it, undoes it, and returns its kind and
// a description ("" when it could not be injected).
func (ch *Chaos) fault(logf func(string, ...any)) (string, string) {
	node := 1 + ch.rnd.IntN(kcluster.Nodes)
	n := strconv.Itoa(node)
	hold := time.Duration(2000+ch.rnd.IntN(13000)) * time.Millisecond
	kinds := []string{"kill", "pause", "cut", "restart", "move"}
	ch.mu.Lock()
	withBurst, withKill, withStore := ch.offering(func(m ChaosMember) bool { return m.Burst != nil }),
		ch.offering(func(m ChaosMember) bool { return m.Kill != nil }),
		ch.offering(func(m ChaosMember) bool { return m.RestartStore != nil })
	ch.mu.Unlock()
	if len(withBurst) > 0 {
		kinds = append(kinds, "burst")
	}
	if len(withKill) > 0 {
		kinds = append(kinds, "sigkill")
	}
	if len(withStore) > 0 {
		kinds = append(kinds, "postgres")
	}
	if only := os.Getenv("REDELIVER_CHAOS_KINDS"); only != "" {
		kinds = slices.DeleteFunc(kinds, func(k string) bool { return !slices.Contains(strings.Split(only, ","), k) })
		if len(kinds) == 0 {
			logf("chaos: REDELIVER_CHAOS_KINDS=%q names none of the kinds on offer", only)
			time.Sleep(time.Second)
			return "", ""
		}
	}
	kind := kinds[ch.rnd.IntN(len(kinds))]
	var what string
	var err error
	switch kind {
	case "burst":
		m := withBurst[ch.rnd.IntN(len(withBurst))]
		hold = time.Duration(1000+ch.rnd.IntN(5000)) * time.Millisecond
		what = fmt.Sprintf("handler fault burst on %s for %v", m.Name, hold)
		m.Burst(hold)
		time.Sleep(hold)
	case "sigkill":
		m := withKill[ch.rnd.IntN(len(withKill))]
		hold = min(hold, 10*time.Second)
		what = fmt.Sprintf("SIGKILL a consumer of %s, a new one after %v", m.Name, hold)
		err = m.Kill(hold)
	case "postgres":
		m := withStore[ch.rnd.IntN(len(withStore))]
		what = fmt.Sprintf("restart PostgreSQL (under %s)", m.Name)
		err = m.RestartStore()
	case "kill":
		what = fmt.Sprintf("kill broker %d for %v", node, hold)
		if err = ch.cluster("kill", n); err == nil {
			time.Sleep(hold)
			err = ch.cluster("restart", n)
		}
	case "pause":
		hold = min(hold, 12*time.Second)
		what = fmt.Sprintf("pause broker %d for %v", node, hold)
		if err = ch.cluster("pause", n); err == nil {
			time.Sleep(hold)
			err = ch.cluster("resume", n)
			ch.awaitInSync(logf)
		}
	case "cut":
		what = fmt.Sprintf("cut broker %d off from the consumers for %v", node, hold)
		if err = kcluster.Cut(ch.c.ProxyAPI, node); err == nil {
			time.Sleep(hold)
			err = kcluster.Heal(ch.c.ProxyAPI, node)
		}
	case "restart":
		what = fmt.Sprintf("restart broker %d (SIGTERM)", node)
		err = ch.cluster("restart", n)
	case "move":
		ch.mu.Lock()
		m := ch.members[ch.rnd.IntN(len(ch.members))]
		ch.mu.Unlock()
		topic, part := m.Topic, ch.rnd.Int32N(max(m.Parts, 1))
		if ch.rnd.IntN(2) == 0 && m.Group != "" {
			// The group's __consumer_offsets partition: its coordinator moves.
			topic, part = "__consumer_offsets", offsetsPartition(m.Group, 6)
		}
		out := ""
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		out, err = ch.c.Run(ctx, "move", topic, strconv.Itoa(int(part)))
		cancel()
		what = fmt.Sprintf("move the leader of %s/%d (%s: %s)", topic, part, m.Name, strings.TrimSpace(out))
	}
	if err != nil {
		logf("chaos: %s: %v", what, err)
		ch.restore(logf)
		return "", ""
	}
	ch.mu.Lock()
	ch.log = append(ch.log, what)
	ch.mu.Unlock()
	return kind, what
}

// dumpStall writes every goroutine's stack of the test process (the
// members' consumers and clients, what each waits for) to
// REDELIVER_CHAOS_DUMPS/stall-<i>-<time>.txt when that directory is set,
// and says where; the brokers' logs of the same moment are in their run
// directories (scripts/chaos.sh keeps them).
func dumpStall(i int) string {
	dir := os.Getenv("REDELIVER_CHAOS_DUMPS")
	if dir == "" {
		return ""
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Sprintf(" (no stack dump: %v)", err)
	}
	path := filepath.Join(dir, fmt.Sprintf("stall-%d-%s.txt", i, time.Now().UTC().Format("150405")))
	f, err := os.Create(path)
	if err != nil {
		return fmt.Sprintf(" (no stack dump: %v)", err)
	}
	defer f.Close()
	if err := pprof.Lookup("goroutine").WriteTo(f, 2); err != nil {
		return fmt.Sprintf(" (stack dump: %v)", err)
	}
	return fmt.Sprintf(" (every goroutine's stack at %s UTC in %s)", time.Now().UTC().Format("15:04:05"), path)
}

// offering returns the members for which f is true; ch.mu is held.
func (ch *Chaos) offering(f func(ChaosMember) bool) []ChaosMember {
	var ms []ChaosMember
	for _, m := range ch.members {
		if f(m) {
			ms = append(ms, m)
		}
	}
	return ms
}

// offsetsPartition is the __consumer_offsets partition of a group, as
// Kafka places it: the group id's Java hash code, its sign bit cleared,
// modulo the number of partitions.
func offsetsPartition(group string, n int32) int32 {
	var h int32
	for _, r := range group {
		h = 31*h + int32(r)
	}
	return (h & 0x7fffffff) % n
}

// awaitInSync waits until every partition is in sync again (a resumed
// broker catches up), so that the next fault does not take a second
// replica out.
func (ch *Chaos) awaitInSync(logf func(string, ...any)) {
	adm, err := ch.c.Admin()
	if err != nil {
		return
	}
	defer adm.Close()
	deadline := time.Now().Add(2 * time.Minute)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		err := kcluster.InSync(ctx, adm, kcluster.Nodes)
		cancel()
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			logf("chaos: not in sync after 2 minutes: %v", err)
			return
		}
		time.Sleep(500 * time.Millisecond)
	}
}

// awaitProgress waits until every member's every partition has moved past
// where it stood, and returns how long that took.
func (ch *Chaos) awaitProgress() (time.Duration, string, bool) {
	start := time.Now()
	ch.mu.Lock()
	ms := slices.Clone(ch.members)
	ch.mu.Unlock()
	at := make([]map[int32]int64, len(ms))
	moved := make([]bool, len(ms))
	last := ""
	for time.Since(start) < chaosRecoveryBound {
		all := true
		for i, m := range ms {
			if moved[i] {
				continue
			}
			pos, err := m.Progress()
			if err != nil {
				all = false
				continue
			}
			if at[i] == nil {
				at[i] = pos
				all = false
				continue
			}
			ok := true
			for p := range m.Parts {
				if pos[p] <= at[i][p] {
					ok = false
				}
			}
			if ok {
				moved[i], last = true, m.Name
			} else {
				all = false
			}
		}
		if all {
			return time.Since(start), last, true
		}
		time.Sleep(100 * time.Millisecond)
	}
	var stuck []string
	for i, m := range ms {
		if !moved[i] {
			stuck = append(stuck, m.Name)
		}
	}
	return 0, strings.Join(stuck, ","), false
}

// restore brings the cluster back whole: every broker healed, running,
// resumed, and in sync.
func (ch *Chaos) restore(logf func(string, ...any)) {
	for n := 1; n <= kcluster.Nodes; n++ {
		_ = kcluster.Heal(ch.c.ProxyAPI, n)
		if err := ch.cluster("pid", strconv.Itoa(n)); err != nil {
			if err := ch.cluster("restart", strconv.Itoa(n)); err != nil {
				logf("chaos: restore broker %d: %v", n, err)
			}
			continue
		}
		_ = ch.cluster("resume", strconv.Itoa(n))
	}
	ch.awaitInSync(logf)
}

// chaosSeed derives a seed from a string (the run's start time when none
// is given).
func chaosSeed(s string) uint64 {
	h := fnv.New64a()
	h.Write([]byte(s))
	return h.Sum64()
}

// ChaosOptions add members of the first adapter to a chaos run.
type ChaosOptions struct {
	// Child, when not "", adds a member whose consumer b runs in a child
	// process (this test binary run again, the adapter registered under
	// Child in ChildMain's map), which the chaos kills (SIGKILL) and
	// replaces.
	Child string
	// Postgres, when not "", adds a member that parks the records it
	// gives up in PostgreSQL at this URL (redrive/pgstore) and runs a
	// redrive.Scheduler re-driving them to its topic; the chaos restarts
	// the server (integration/postgres.sh restart, next to
	// kafka-cluster.sh).
	Postgres string
}

// RunChaos runs every adapter's cluster scenario at once under a chaos
// run of duration d (see [Chaos]); extra, when not nil, runs more members
// (the share consumer) as parallel subtests that join ch themselves. It
// logs and reports the summary (to REDELIVER_FIGURES too).
// o adds members of the first adapter (see [ChaosOptions]).
func RunChaos(t *testing.T, p Provider, adapters []Adapter, d time.Duration, o ChaosOptions, extra func(t *testing.T, b Broker, ch *Chaos)) {
	b := p.Start(t)
	if b.Cluster == nil {
		t.Skipf("the %s provider is not a cluster", p.Name())
	}
	seedText := os.Getenv("REDELIVER_CHAOS_SEED")
	if seedText == "" {
		seedText = time.Now().Format(time.RFC3339Nano)
	}
	want := len(adapters)
	if o.Child != "" {
		want++
	}
	if o.Postgres != "" {
		want++
	}
	if extra != nil {
		want++
	}
	// The members are parallel subtests: go test runs -parallel of them at
	// once (GOMAXPROCS by default), and a member that starts after the
	// chaos ended sees none of it.
	if f := flag.Lookup("test.parallel"); f != nil {
		if n, err := strconv.Atoi(f.Value.String()); err == nil && n < want {
			t.Fatalf("the chaos run has %d members, which must run at once: run go test with -parallel %d or more (it is %d)", want, want, n)
		}
	}
	ch := NewChaos(b.Cluster, d, want, chaosSeed(seedText))
	t.Logf("chaos for %v, seed %q (REDELIVER_CHAOS_SEED)", d, seedText)
	summaries := make(chan ChaosSummary, 1)
	go func() { summaries <- ch.Run(t.Logf) }()
	t.Run("members", func(t *testing.T) {
		member := func(t *testing.T, name string, a Adapter, co clusterOptions) {
			t.Parallel()
			if a.NeedsKIP848() && !b.KIP848 {
				t.Skipf("%s needs the KIP-848 protocol", a.Name())
			}
			begin := time.Now()
			f := clusterScenarioWith(t, newEnv(t, b, a), co, func(t *testing.T, r *clusterRun) (time.Time, string) {
				r.poisonSlack = 1
				m := ChaosMember{Name: name, Group: r.e.group, Topic: r.e.topic, Parts: r.parts,
					Progress: func() (map[int32]int64, error) {
						got, err := r.e.tryCommitted()
						if err != nil {
							return nil, err
						}
						m := map[int32]int64{}
						for p, o := range got {
							m[p] = o.At
						}
						return m, nil
					},
					Burst: r.burst}
				if co.child != "" {
					m.Kill = r.killChild
				}
				if co.postgres != "" {
					m.RestartStore = r.restartPostgres
				}
				return ch.Join(m), "chaos"
			})
			f.Scenario, f.Provider, f.Adapter, f.Took = "Chaos", p.Name(), name, time.Since(begin)
			report(t, f)
		}
		for _, a := range adapters {
			t.Run(a.Name(), func(t *testing.T) { member(t, a.Name(), a, clusterOptions{}) })
		}
		if o.Child != "" {
			name := adapters[0].Name() + " child"
			t.Run(name, func(t *testing.T) { member(t, name, adapters[0], clusterOptions{child: o.Child}) })
		}
		if o.Postgres != "" {
			name := adapters[0].Name() + " redrive"
			t.Run(name, func(t *testing.T) { member(t, name, adapters[0], clusterOptions{postgres: o.Postgres}) })
		}
		if extra != nil {
			t.Run("share", func(t *testing.T) {
				t.Parallel()
				extra(t, b, ch)
			})
		}
	})
	summary := <-summaries
	t.Log(summary.String())
	if path := os.Getenv(EnvFigures); path != "" {
		if file, err := os.OpenFile(path, os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o644); err == nil {
			fmt.Fprintln(file, summary.String())
			file.Close()
		}
	}
	if summary.Stuck > 0 {
		t.Errorf("after %d faults some member did not move on within %v", summary.Stuck, chaosRecoveryBound)
	}
}
