package integration_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/redeliver-go/redeliver/adapters/franz"
	"github.com/redeliver-go/redeliver/adapters/franz/share"
	"github.com/redeliver-go/redeliver/checkpoint"
	"github.com/redeliver-go/redeliver/integration/conformance"
	"github.com/redeliver-go/redeliver/integration/kcluster"
	"github.com/redeliver-go/redeliver/integration/provider"
	"github.com/redeliver-go/redeliver/stream"
	"github.com/redeliver-go/redeliver/stream/streamtest"
)

// The share consumer (adapters/franz/share) on the three-broker cluster:
// the scenarios of TestCluster, with two share consumers of two lanes each
// in one share group instead of a consumer group. A share group keeps no
// retry state in __consumer_offsets: the broker's share-partition leader
// (the partition's leader) holds each record's lock and delivery count,
// persisted in __share_group_state, and the consumer holds its own retries
// in memory, renewing the lock. What a broker fault can cost is therefore
// different: an acknowledgement or a renewal that does not reach the
// leader lets the lock run out, and the broker hands the record out again
// with its count one higher (the consumer's in-memory retries of it are
// not carried). The checker (streamtest.ShareHistory) verifies that no
// record is lost, that a member only acknowledges what it holds, that a
// record is accepted only after a successful handling and rejected only
// after its dead letter was published; it also checks that the broker's
// count grows by one per hand-out, which a leader change or a fetch answer
// lost in a fault breaks on the broker's side: those are counted and
// reported (count-repeated, unseen-hand-outs), not failed.
const (
	shareClusterRetries = 4
	shareClusterPoison  = 150 // offset ≡ 42 mod it: a poison record
	shareClusterLock    = 5 * time.Second
	shareClusterLimit   = 10 // share.delivery.count.limit, the broker's cap
)

// shareClusterAdapter is the share consumer's name in the figures and in
// conformance.ClusterCI.
const shareClusterAdapter = "franz share"

// shareClusterCase is one of TestClusterShare's scenarios: its name and
// its fault.
type shareClusterCase struct {
	name  string
	fault func(t *testing.T, r *shareRun) (time.Time, string)
}

// shareClusterCases are TestClusterShare's scenarios, (a) to (f).
var shareClusterCases = []shareClusterCase{
	{"LeaderKilledDuringBackoff", func(t *testing.T, r *shareRun) (time.Time, string) {
		part := r.awaitHeld(t)
		n := r.leader(t, r.topic, part)
		r.cluster(t, "kill", strconv.Itoa(n))
		return time.Now(), fmt.Sprintf("killed=broker%d (leader of partition %d, a retry held on it)", n, part)
	}},
	{"CoordinatorKilledDuringRetry", func(t *testing.T, r *shareRun) (time.Time, string) {
		n := r.coordinator(t)
		r.awaitHeld(t)
		r.cluster(t, "kill", strconv.Itoa(n))
		return time.Now(), fmt.Sprintf("killed=broker%d (share group coordinator)", n)
	}},
	{"BrokerPausedPastSessionTimeout", func(t *testing.T, r *shareRun) (time.Time, string) {
		n := r.leader(t, r.topic, 0)
		const pause = 12 * time.Second
		r.cluster(t, "pause", strconv.Itoa(n))
		time.Sleep(pause)
		r.cluster(t, "resume", strconv.Itoa(n))
		return time.Now(), fmt.Sprintf("paused=broker%d (leader of partition 0) for %v", n, pause)
	}},
	{"BrokerCutOffFromConsumers", func(t *testing.T, r *shareRun) (time.Time, string) {
		n := r.leader(t, r.topic, 0)
		const cut = 30 * time.Second
		if err := kcluster.Cut(r.c.ProxyAPI, n); err != nil {
			t.Fatal(err)
		}
		time.Sleep(cut)
		if err := kcluster.Heal(r.c.ProxyAPI, n); err != nil {
			t.Fatal(err)
		}
		return time.Now(), fmt.Sprintf("cut=broker%d (leader of partition 0) for %v", n, cut)
	}},
	{"RollingRestart", func(t *testing.T, r *shareRun) (time.Time, string) {
		for n := 1; n <= kcluster.Nodes; n++ {
			r.cluster(t, "restart", strconv.Itoa(n))
		}
		return time.Now(), "restarted=broker1,broker2,broker3"
	}},
	{"DeadLetterLeaderKilled", func(t *testing.T, r *shareRun) (time.Time, string) {
		n := r.leader(t, r.dlq, 0)
		r.deadLetter.Store(true)
		var done chan struct{}
		select {
		case done = <-r.publishing:
		case <-time.After(3 * time.Minute):
			t.Fatal("no dead letter published")
		}
		r.cluster(t, "kill", strconv.Itoa(n))
		close(done)
		return time.Now(), fmt.Sprintf("killed=broker%d (leader of the dead-letter topic)", n)
	}},
}

// TestClusterShare runs the cluster scenarios for the share consumer. It
// runs only when REDELIVER_KAFKA_CLUSTER is set, as TestCluster does;
// with REDELIVER_CLUSTER_CI=1, only its scenario in conformance.ClusterCI.
func TestClusterShare(t *testing.T) {
	if testing.Short() {
		t.Skip("the cluster scenarios are long")
	}
	p := provider.Cluster()
	for _, s := range shareClusterCases {
		if !conformance.ClusterRuns(t, shareClusterAdapter, s.name) {
			continue
		}
		t.Run("share/"+s.name, func(t *testing.T) {
			b := p.Start(t)
			runShareCluster(t, b, s.name, s.fault)
		})
	}
}

// runShareCluster runs one share scenario and reports its figures.
func runShareCluster(t *testing.T, b conformance.Broker, name string, fault func(*testing.T, *shareRun) (time.Time, string)) {
	begin := time.Now()
	f := shareClusterScenario(t, b, fault)
	f.Scenario, f.Provider, f.Adapter, f.Took = name, "cluster", shareClusterAdapter, time.Since(begin)
	t.Log(f.String())
	if path := os.Getenv(conformance.EnvFigures); path != "" {
		if file, err := os.OpenFile(path, os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o644); err == nil {
			fmt.Fprintln(file, f.String())
			file.Close()
		}
	}
}

// shareInChaos runs the share consumer's scenario as a member of a chaos
// run: its fault is the whole run.
func shareInChaos(t *testing.T, b conformance.Broker, ch *conformance.Chaos) {
	runShareCluster(t, b, "Chaos", func(t *testing.T, r *shareRun) (time.Time, string) {
		return ch.Join(conformance.ChaosMember{Name: shareClusterAdapter, Group: r.group, Topic: r.topic, Parts: 3, Progress: r.progress}), "chaos"
	})
}

// shareRun is one share scenario's state.
type shareRun struct {
	c          *kcluster.Cluster
	adm        *kadm.Client
	topic, dlq string
	group      string

	hist       streamtest.ShareHistory
	armed      atomic.Bool
	held       chan int32 // a partition with a retry held, once armed
	publishing chan chan struct{}
	deadLetter atomic.Bool

	mu       sync.Mutex
	lastDone map[int32]time.Time // the latest accept or reject per partition
	nDone    map[int32]int64     // accepts and rejects per partition
}

// progress returns the accepts and rejects per partition so far.
func (r *shareRun) progress() (map[int32]int64, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	m := make(map[int32]int64, len(r.nDone))
	for p, n := range r.nDone {
		m[p] = n
	}
	return m, nil
}

func (r *shareRun) cluster(t *testing.T, args ...string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	if _, err := r.c.Run(ctx, args...); err != nil {
		t.Fatal(err)
	}
	t.Logf("kafka-cluster.sh %v", args)
}

func (r *shareRun) node(t *testing.T, f func(context.Context) (int32, error)) int {
	t.Helper()
	deadline := time.Now().Add(3 * time.Minute)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		id, err := f(ctx)
		cancel()
		if err == nil && id > 0 {
			return int(id)
		}
		if time.Now().After(deadline) {
			t.Fatalf("no node: %v", err)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

func (r *shareRun) leader(t *testing.T, topic string, p int32) int {
	return r.node(t, func(ctx context.Context) (int32, error) { return kcluster.Leader(ctx, r.adm, topic, p) })
}

func (r *shareRun) coordinator(t *testing.T) int {
	return r.node(t, func(ctx context.Context) (int32, error) { return kcluster.Coordinator(ctx, r.adm, r.group) })
}

func (r *shareRun) awaitHeld(t *testing.T) int32 {
	t.Helper()
	r.armed.Store(true)
	defer r.armed.Store(false)
	select {
	case p := <-r.held:
		return p
	case <-time.After(3 * time.Minute):
		t.Fatal("no retry held")
		return -1
	}
}

// restore brings the cluster back whole.
func (r *shareRun) restore(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
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

// hookedSharePublisher hands a dead-letter publish to the scenario, when
// armed, before it goes out, and counts the publishes.
type hookedSharePublisher struct {
	r    *shareRun
	next stream.Publisher
}

func (p hookedSharePublisher) Publish(ctx context.Context, topic string, recs []stream.Record) error {
	if p.r.deadLetter.CompareAndSwap(true, false) {
		done := make(chan struct{})
		p.r.publishing <- done
		<-done
	}
	return p.next.Publish(ctx, topic, recs)
}

// shareUnit is a number in [0, 1) fixed by a record and its delivery,
// independent from one delivery to the next.
func shareUnit(p int32, off int64, n int) float64 {
	return rand.New(rand.NewPCG(uint64(p)<<40^uint64(off), uint64(n))).Float64()
}

var errSharePoison = errors.New("poison record")

func shareClusterScenario(t *testing.T, b conformance.Broker, fault func(*testing.T, *shareRun) (time.Time, string)) conformance.Figures {
	const parts, initial = 3, 300
	suffix := strconv.FormatInt(time.Now().UnixNano(), 36)
	r := &shareRun{c: b.Cluster, topic: "rd-share-cluster-" + suffix, held: make(chan int32, 1),
		publishing: make(chan chan struct{}, 1), lastDone: map[int32]time.Time{}, nDone: map[int32]int64{}}
	r.dlq, r.group = r.topic+".dlq", r.topic+"-g"
	adm, err := r.c.Admin()
	if err != nil {
		t.Fatal(err)
	}
	defer adm.Close()
	r.adm = adm
	t.Cleanup(func() { r.restore(t) })
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	for topic, n := range map[string]int32{r.topic: parts, r.dlq: 1} {
		if resp, err := adm.CreateTopic(ctx, n, -1, nil, topic); err != nil || resp.Err != nil {
			t.Fatalf("create %s: %v %v", topic, err, resp.Err)
		}
	}
	setShareGroupConfigs(t, b.AdminAddrs, r.group, map[string]string{
		"share.record.lock.duration.ms": strconv.Itoa(int(shareClusterLock / time.Millisecond)),
		"share.session.timeout.ms":      "6000",
		"share.heartbeat.interval.ms":   "500",
		"share.delivery.count.limit":    strconv.Itoa(shareClusterLimit),
	})
	pcl, err := kgo.NewClient(kgo.SeedBrokers(b.AdminAddrs...), kgo.RecordPartitioner(kgo.ManualPartitioner()),
		kgo.RetryTimeout(3*time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	defer pcl.Close()
	produce := func(first, n int) error {
		var recs []*kgo.Record
		for p := range int32(parts) {
			for j := range n {
				recs = append(recs, &kgo.Record{Topic: r.topic, Partition: p, Value: fmt.Appendf(nil, "%d:%d", p, first+j)})
			}
		}
		pctx, pcancel := context.WithTimeout(context.Background(), 3*time.Minute)
		defer pcancel()
		return pcl.ProduceSync(pctx, recs...).FirstErr()
	}
	// In batches of 10 per partition: a broker hands out whole record
	// batches, so one big batch would go to one member.
	for i := 0; i < initial; i += 10 {
		if err := produce(i, 10); err != nil {
			t.Fatal(err)
		}
	}
	feedCtx, stopFeed := context.WithCancel(context.Background())
	var feeding sync.WaitGroup
	feeding.Add(1)
	go func() {
		defer feeding.Done()
		for i := initial; feedCtx.Err() == nil; i += 5 {
			if err := produce(i, 5); err != nil {
				t.Logf("feed: %v (going on)", err)
			}
			select {
			case <-feedCtx.Done():
			case <-time.After(250 * time.Millisecond):
			}
		}
	}()
	defer func() { stopFeed(); feeding.Wait() }()

	var (
		faults atomic.Int64
		mu     sync.Mutex
		calls  = map[[2]int64]int{}
	)
	h := stream.PerRecord(func(_ context.Context, rec *stream.Record) error {
		time.Sleep(2 * time.Millisecond)
		if rec.Offset%shareClusterPoison == 42 {
			faults.Add(1)
			return errSharePoison
		}
		k := [2]int64{int64(rec.Partition), rec.Offset}
		mu.Lock()
		calls[k]++
		n := calls[k]
		mu.Unlock()
		switch u := shareUnit(rec.Partition, rec.Offset, n); {
		case u < 0.05:
			faults.Add(1)
			return errors.New("injected")
		case u < 0.06:
			faults.Add(1)
			panic("injected handler panic")
		}
		return nil
	})
	pub, err := franz.NewPublisher(pcl)
	if err != nil {
		t.Fatal(err)
	}
	dl, err := stream.DeadLetter(hookedSharePublisher{r, pub}, r.dlq)
	if err != nil {
		t.Fatal(err)
	}
	events := func(e share.Event) {
		r.hist.Add(toShareEvent(e))
		switch e.Kind {
		case share.Held:
			if r.armed.Load() {
				select {
				case r.held <- e.Partition:
				default:
				}
			}
		case share.Accepted, share.Rejected:
			r.mu.Lock()
			r.lastDone[e.Partition] = time.Now()
			r.nDone[e.Partition]++
			r.mu.Unlock()
		}
	}
	var running sync.WaitGroup
	runCtx, stopRun := context.WithCancel(context.Background())
	defer func() { stopRun(); running.Wait() }()
	errs := make(chan error, 2)
	for _, name := range []string{"a", "b"} {
		proc, err := stream.NewProcessor(h, stream.WithPolicy(checkpoint.Policy{MaxRetries: shareClusterRetries,
			Backoff: checkpoint.Capped(time.Second, checkpoint.Exponential(200*time.Millisecond))}),
			stream.WithExhaustionAction(dl))
		if err != nil {
			t.Fatal(err)
		}
		kopts := []kgo.Opt{kgo.SeedBrokers(b.Addrs...), kgo.ShareGroup(r.group), kgo.ConsumeTopics(r.topic),
			kgo.FetchMaxWait(100 * time.Millisecond), kgo.ShareMaxRecords(20)}
		if dir := os.Getenv("REDELIVER_CHAOS_DUMPS"); dir != "" {
			// The chaos run keeps each share consumer's client log (info
			// level: connections, metadata, the share group's
			// heartbeats and assignments), for a look at what it waited
			// for when it stalled.
			if err := os.MkdirAll(dir, 0o755); err == nil {
				if f, err := os.Create(filepath.Join(dir, "share-"+name+".log")); err == nil {
					t.Cleanup(func() { f.Close() })
					kopts = append(kopts, kgo.WithLogger(kgo.BasicLogger(f, kgo.LogLevelInfo, func() string {
						return time.Now().UTC().Format("15:04:05.000 ")
					})))
				}
			}
		}
		c, err := share.New(proc, share.WithKgoOptions(kopts...),
			share.WithLanes(2), share.WithResetEarliest(), share.WithMember(name), share.WithEvents(events))
		if err != nil {
			t.Fatal(err)
		}
		running.Add(1)
		go func() {
			defer running.Done()
			if err := c.Run(runCtx); err != nil {
				errs <- fmt.Errorf("consumer %s: %w", name, err)
			}
		}()
	}
	done := func() (n int) {
		seen := map[[2]int64]bool{}
		for _, e := range r.hist.Events() {
			if e.Kind == streamtest.ShareAccepted || e.Kind == streamtest.ShareRejected {
				seen[[2]int64{int64(e.Partition), e.Offset}] = true
			}
		}
		return len(seen)
	}
	waitFor := func(what string, d time.Duration, cond func() bool) bool {
		deadline := time.Now().Add(d)
		for !cond() {
			if time.Now().After(deadline) {
				t.Errorf("timed out after %v waiting for %s (%d records done)", d, what, done())
				return false
			}
			select {
			case err := <-errs:
				t.Fatal(err)
			case <-time.After(100 * time.Millisecond):
			}
		}
		return true
	}
	waitFor("a quarter of the first records", 3*time.Minute, func() bool { return done() >= parts*initial/4 })

	began := time.Now()
	ended, note := fault(t, r)
	// Recovery: until every partition has a record accepted or rejected
	// after the fault ended.
	var recovery time.Duration
	if waitFor("every partition to move again", 3*time.Minute, func() bool {
		r.mu.Lock()
		defer r.mu.Unlock()
		for p := range int32(parts) {
			if !r.lastDone[p].After(ended) {
				return false
			}
		}
		return true
	}) {
		recovery = time.Since(ended)
	}
	faultTook := ended.Sub(began)
	r.restore(t)
	stopFeed()
	feeding.Wait()

	// A fresh bound: the fault (a chaos run) may have outlasted ctx.
	ectx, ecancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer ecancel()
	offs, err := adm.ListEndOffsets(ectx, r.topic)
	if err == nil {
		err = offs.Error()
	}
	if err != nil {
		t.Fatalf("end offsets: %v", err)
	}
	ends := map[streamtest.TopicPartition]int64{}
	var total int64
	for p, o := range offs[r.topic] {
		ends[streamtest.TopicPartition{Topic: r.topic, Partition: p}] = o.Offset
		total += o.Offset
	}
	waitFor("every record accepted or rejected", 3*time.Minute, func() bool { return int64(done()) == total })
	stopRun()
	running.Wait()

	// The partitions' leaders change on the cluster. A share-partition
	// leader does not persist a record's acquisition (only its
	// acknowledgement, release or renewal) to
	// __share_group_state, so a leader that takes over after a kill or a
	// pause hands an acquired record out again at once, from the count
	// last persisted, while the member that held it does not know yet:
	// what that member does with it until it learns (a dead letter
	// written, a REJECT the broker refuses) is counted (displaced=), not
	// a violation; anything else is (streamtest.ShareHistory.LeaderChanges).
	r.hist.LeaderChanges = true
	rep := r.hist.Check(ends)
	for _, v := range rep.Recounts {
		t.Logf("broker recount after a leader change: %s", v)
	}
	for _, v := range rep.Displaced {
		t.Logf("after a recount, the member the record was taken from: %s", v)
	}
	recounted, unseen := len(rep.Recounts), 0
	// A record handed out with a count one higher than the checker saw:
	// the broker acquired it for a member whose fetch answer never came
	// back (the request timed out while the leader was paused or cut
	// off), the lock ran out, and the next hand-out counts both. The
	// member never held it: as after a crash, not the consumer's doing.
	for _, v := range rep.Violations {
		switch {
		case strings.Contains(v, "(the broker counts each hand-out once)"):
			unseen++
			t.Logf("a hand-out no member saw: %s", v)
		default:
			t.Error(v)
		}
	}
	if rep.Lost > 0 {
		t.Errorf("%d records lost", rep.Lost)
	}
	// A poison record's deliveries: its own retries, held in memory, plus
	// one more acquisition for each lock the fault made it lose.
	poisonMax, acquisitions := 0, 0
	perRec := map[[2]int64]int{}
	acq := map[[2]int64]int{}
	for _, e := range r.hist.Events() {
		k := [2]int64{int64(e.Partition), e.Offset}
		switch e.Kind {
		case streamtest.ShareHandled:
			if e.Offset%shareClusterPoison == 42 {
				perRec[k]++
				poisonMax = max(poisonMax, perRec[k])
			}
		case streamtest.ShareAcquired:
			acq[k]++
			acquisitions = max(acquisitions, acq[k])
		}
	}
	letters, twice := readShareDeadLetters(t, r.c, r.dlq)
	var poisons int64
	for _, n := range ends {
		poisons += (n + shareClusterPoison - 1 - 42) / shareClusterPoison
	}
	if int64(len(letters)) != poisons {
		t.Errorf("%d poison records dead-lettered, want %d", len(letters), poisons)
	}
	// The bound: retryCount+1 deliveries per acquisition, an acquisition
	// beyond the first only after a lost lock (counted by the broker).
	if poisonMax > (shareClusterRetries+1)*acquisitions {
		t.Errorf("a poison record was handled %d times in at most %d acquisitions, want at most %d",
			poisonMax, acquisitions, (shareClusterRetries+1)*acquisitions)
	}
	mean := 0.0
	if rep.Records > 0 {
		mean = float64(rep.Deliveries) / float64(rep.Records)
	}
	return conformance.Figures{Records: total, Faults: faults.Load() + 1, Lost: rep.Lost, MaxPerRec: rep.MaxDeliveries,
		MeanPerRec: mean, Recovery: recovery,
		Note: fmt.Sprintf("dead-letters=%d twice=%d poison-handled<=%d acquisitions<=%d again-after-ack=%d count-repeated=%d displaced=%d unseen-hand-outs=%d (retryCount %d) fault=%s %s",
			len(letters), twice, poisonMax, acquisitions, rep.Duplicates, recounted, len(rep.Displaced), unseen, shareClusterRetries, faultTook.Round(100*time.Millisecond), note)}
}

// readShareDeadLetters reads the dead-letter topic to its end and returns
// how many times each record was dead-lettered and how many publishes were
// repeats.
func readShareDeadLetters(t *testing.T, c *kcluster.Cluster, dlq string) (map[[2]int64]int, int) {
	t.Helper()
	adm, err := c.Admin()
	if err != nil {
		t.Fatal(err)
	}
	defer adm.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	offs, err := adm.ListEndOffsets(ctx, dlq)
	if err == nil {
		err = offs.Error()
	}
	if err != nil {
		t.Fatal(err)
	}
	end := offs[dlq][0].Offset
	got := map[[2]int64]int{}
	if end == 0 {
		return got, 0
	}
	cl, err := kgo.NewClient(kgo.SeedBrokers(c.Direct...), kgo.ConsumeTopics(dlq), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	twice := 0
	for seen := int64(0); seen < end; {
		fs := cl.PollFetches(ctx)
		if ctx.Err() != nil {
			t.Fatalf("%s: read %d of %d records", dlq, seen, end)
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
