package engine

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"reflect"
	"regexp"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/redeliver-go/redeliver/internal/actionctx"
	"github.com/redeliver-go/redeliver/internal/lifecycle"
)

// ClientOptions returns the kgo options a client needs to serve a
// Consumer; see the franz package's ClientOptions.
func ClientOptions() []kgo.Opt {
	g := &group{wakeup: make(chan struct{}, 1)}
	return []kgo.Opt{
		kgo.DisableAutoCommit(),
		kgo.BlockRebalanceOnPoll(),
		// Transaction markers come to the claims, which skip them and
		// commit past them (claim.push): a log that ends with one is
		// committed to its end.
		kgo.KeepControlRecords(),
		kgo.OnOffsetsFetched(g.onFetched),
		kgo.OnPartitionsAssigned(g.onAssigned),
		kgo.OnPartitionsRevoked(g.onRevoked),
		kgo.OnPartitionsLost(g.onLost),
	}
}

// checkOpts checks the caller's options (WithKgoOptions) before a client
// is built from them with ClientOptions, so that a missing consumer group
// is reported in the adapter's words rather than as kgo's "invalid
// autocommit options".
func checkOpts(opts []kgo.Opt) error {
	if err := kgo.ValidateOpts(opts...); err != nil {
		return fmt.Errorf("franz: %w", err)
	}
	withOurs := append(slices.Clip(opts), ClientOptions()...)
	if kgo.ValidateOpts(withOurs...) == nil {
		return nil
	}
	probe := append(append(slices.Clip(opts), kgo.ConsumerGroup("probe")), ClientOptions()...)
	if kgo.ValidateOpts(probe...) == nil {
		return errors.New("franz: no consumer group: add kgo.ConsumerGroup(name) to WithKgoOptions (the adapter consumes as a group member and commits the group's offsets)")
	}
	return fmt.Errorf("franz: %w (an option conflicts with franz.ClientOptions: no autocommit, BlockRebalanceOnPoll, the adapter's partition callbacks)", kgo.ValidateOpts(withOurs...))
}

// checkClient reports whether cl was built with ClientOptions and has
// something to consume, and returns the group state ClientOptions made
// for it.
func checkClient(cl *kgo.Client) (*group, error) {
	if g, _ := cl.OptValue(kgo.ConsumerGroup).(string); g == "" {
		return nil, errors.New("franz: no consumer group: add kgo.ConsumerGroup(name) to the client's options")
	}
	if topics, _ := cl.OptValue(kgo.ConsumeTopics).(map[string]*regexp.Regexp); len(topics) == 0 {
		return nil, errors.New("franz: the client consumes no topic: add kgo.ConsumeTopics(topic, ...) to its options (Run would wait for an assignment that never comes)")
	}
	if off, _ := cl.OptValue(kgo.DisableAutoCommit).(bool); !off {
		return nil, errors.New("franz: the client autocommits: build it with franz.ClientOptions() last")
	}
	if b, _ := cl.OptValue(kgo.BlockRebalanceOnPoll).(bool); !b {
		return nil, errors.New("franz: the client does not block rebalances on poll: build it with franz.ClientOptions() last")
	}
	g := groupOf(cl)
	if g == nil {
		return nil, errors.New("franz: the client has another OnOffsetsFetched: build it with franz.ClientOptions() last")
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.cl == nil {
		g.cl = cl
	}
	if g.cl != cl {
		return nil, errors.New("franz: the client was built with the franz.ClientOptions() of another client: call ClientOptions for each client")
	}
	return g, nil
}

// probeKey marks the context with which groupOf calls a client's
// OnOffsetsFetched: the callback then answers with its group instead.
type probeKey struct{}

// groupOf returns the group whose callbacks cl was built with, or nil when
// its OnOffsetsFetched is not one of ClientOptions.
func groupOf(cl *kgo.Client) *group {
	fn, ok := cl.OptValue(kgo.OnOffsetsFetched).(func(context.Context, *kgo.Client, *kmsg.OffsetFetchResponse) error)
	if !ok || fn == nil || reflect.ValueOf(fn).Pointer() != reflect.ValueOf((&group{}).onFetched).Pointer() {
		return nil
	}
	var g *group
	_ = fn(context.WithValue(context.Background(), probeKey{}, &g), nil, nil)
	return g
}

func (g *group) onFetched(ctx context.Context, cl *kgo.Client, resp *kmsg.OffsetFetchResponse) error {
	if p, ok := ctx.Value(probeKey{}).(**group); ok {
		*p = g
		return nil
	}
	g.setClient(cl)
	g.fetched(resp)
	return nil
}

func (g *group) onAssigned(_ context.Context, cl *kgo.Client, assigned map[string][]int32) {
	g.setClient(cl)
	g.assigned()
	g.mu.Lock()
	c := g.c
	if c == nil {
		// The client joins as soon as it is built, which can be before
		// its Consumer is bound: keep the assignment for it.
		g.early, g.hasEarly = assigned, true
	}
	g.mu.Unlock()
	if c != nil && c.cfg.OnAssigned != nil {
		lifecycle.Inside(func() { c.cfg.OnAssigned(assigned) })
	}
}

func (g *group) onRevoked(_ context.Context, _ *kgo.Client, lost map[string][]int32) {
	g.end(lost, nil)
}

func (g *group) onLost(_ context.Context, _ *kgo.Client, lost map[string][]int32) {
	g.end(lost, errLost)
}

// setClient notes the client whose callbacks g serves: the first callback
// may come before New.
func (g *group) setClient(cl *kgo.Client) {
	g.mu.Lock()
	if g.cl == nil {
		g.cl = cl
	}
	g.mu.Unlock()
}

// tp names a partition.
type tp struct {
	topic     string
	partition int32
}

// String returns "topic/partition", as the logs name a partition.
func (k tp) String() string { return k.topic + "/" + strconv.Itoa(int(k.partition)) }

// group is the assignment state of one client: its claims, and the
// consumer and run that start their workers.
type group struct {
	mu       sync.Mutex
	cl       *kgo.Client // set by the first callback or by New, then fixed
	c        *Consumer
	early    map[string][]int32 // an assignment made before c was bound
	hasEarly bool
	claims   claimTable
	running  bool
	// run is Run's context, and runCtx the same as the claims' contexts
	// are made from it: without its cancellation (see detached); endRun,
	// registered on run, ends the claims' contexts when it ends.
	run, runCtx context.Context
	endRun      func() bool
	fail        func(error)
	wg          sync.WaitGroup

	nfull  atomic.Int32  // claims whose buffer is full
	wakeup chan struct{} // a full claim drained or a claim starves
	// workers are the running workers, which a stopping Run reports.
	workers running
	// abandoned is closed once Run has given up on the workers of its
	// stop (see abandon); made when first needed.
	abandoned chan struct{}

	sideOnce sync.Once
	side     *kgo.Client // fetchAhead's client, made when first needed
}

func (g *group) bind(c *Consumer) error {
	g.mu.Lock()
	if g.c != nil {
		g.mu.Unlock()
		return errors.New("franz: the client already serves a Consumer")
	}
	g.c = c
	early, hasEarly := g.early, g.hasEarly
	g.early, g.hasEarly = nil, false
	g.mu.Unlock()
	if hasEarly && c.cfg.OnAssigned != nil {
		// WithOnAssigned hears of an assignment made before New returned.
		lifecycle.Inside(func() { c.cfg.OnAssigned(early) })
	}
	return nil
}

// fetched makes a claim for every partition whose committed offset was
// fetched: franz-go calls it after an assignment and before it fetches any
// record of those partitions. A partition that somehow still has a claim
// has it ended first.
func (g *group) fetched(resp *kmsg.OffsetFetchResponse) {
	type fetchedOffset struct {
		key      tp
		offset   int64
		metadata string
	}
	var (
		add     []fetchedOffset
		replace = make(map[string][]int32)
	)
	g.mu.Lock()
	for _, rg := range resp.Groups {
		for _, t := range rg.Topics {
			for _, p := range t.Partitions {
				if p.ErrorCode != 0 {
					continue // franz-go reports it and does not assign the partition
				}
				f := fetchedOffset{key: tp{t.Topic, p.Partition}, offset: p.Offset}
				if f.offset < 0 {
					f.offset = -1
				}
				if p.Metadata != nil {
					f.metadata = *p.Metadata
				}
				add = append(add, f)
				if g.claims.get(f.key) != nil {
					replace[t.Topic] = append(replace[t.Topic], p.Partition)
				}
			}
		}
	}
	g.mu.Unlock()
	if len(replace) > 0 {
		g.end(replace, nil)
	}

	member, gen := g.cl.GroupMetadata()
	g.mu.Lock()
	defer g.mu.Unlock()
	for _, f := range add {
		cl := newClaim(g, f.key, f.offset, f.metadata)
		cl.confirm(member, gen)
		g.claims.set(f.key, cl)
		if g.running {
			g.startLocked(cl)
		}
	}
	if g.c != nil {
		for _, f := range add {
			g.c.log.Info("redeliver: partition assigned", "topic", f.key.topic, "partition", f.key.partition,
				"committed", f.offset, "metadata", f.metadata)
		}
	}
}

// assigned confirms every claim in the client's current group session:
// franz-go calls OnPartitionsAssigned at the end of each session's
// assignment, once the partitions the session took away are revoked (and
// their claims ended), so the claims left are of partitions the session
// kept. Their commits waiting for the session go out now (claim.Commit).
// The member ID and generation cannot change meanwhile: the next session
// begins only after this callback returns.
func (g *group) assigned() {
	member, gen := g.cl.GroupMetadata()
	g.mu.Lock()
	defer g.mu.Unlock()
	for cl := range g.claims.all() {
		cl.confirm(member, gen)
	}
}

// end ends the claims of the given partitions: it cancels them with cause
// (stream.ErrRevoked when nil), refuses their later commits, and waits for
// their workers (unless Run has given them up: see abandon). It finds and
// waits for the claims a stopping Run is ending too (see stop).
func (g *group) end(parts map[string][]int32, cause error) {
	var ending []*claim
	g.mu.Lock()
	for topic, ps := range parts {
		for _, p := range ps {
			key := tp{topic, p}
			if cl := g.claims.remove(key); cl != nil {
				ending = append(ending, cl)
			}
		}
	}
	log := g.logger()
	g.mu.Unlock()
	g.endClaims(ending, cause)
	for _, cl := range ending {
		if log != nil {
			log.Info("redeliver: partition released", "topic", cl.key.topic, "partition", cl.key.partition,
				"cause", causeOr(cause))
		}
	}
}

func causeOr(cause error) error {
	if cause == nil {
		return errRevoked
	}
	return cause
}

// start starts a worker for every claim, and for every claim made from now
// until stop, each in a context derived from ctx. A worker that fails calls
// fail.
func (g *group) start(ctx context.Context, fail func(error)) {
	g.mu.Lock()
	defer g.mu.Unlock()
	// The group names the dead letters' __dlq.errors.group header: the
	// workers' contexts carry it from their parent, made once here.
	group, _ := g.cl.OptValue(kgo.ConsumerGroup).(string)
	ctx = actionctx.WithSource(ctx, actionctx.Source{Group: group})
	g.running, g.run, g.runCtx, g.fail = true, ctx, detached{ctx}, fail
	g.endRun = context.AfterFunc(ctx, func() {
		cause := context.Cause(ctx)
		g.mu.Lock()
		defer g.mu.Unlock()
		for cl := range g.claims.all() {
			if cl.started {
				cl.cancel(cause)
			}
		}
	})
	for cl := range g.claims.all() {
		g.startLocked(cl)
	}
}

// stop ends every claim with cause and waits for every worker.
//
// The claims stay in the table until they have ended: the client stays
// in the group meanwhile, and a rebalance can revoke their partitions.
// franz-go rejoins once OnPartitionsRevoked returns, without the
// partitions, and the group gives them to another member; so the
// revocation (end) must find the claims and wait for them to end (their
// last commits written), as it does a claim it ends itself, not return
// at once while a last commit is still on its way (which the broker would
// take, under the member's new generation, after the next owner has read
// the checkpoint before it).
func (g *group) stop(cause error) {
	g.mu.Lock()
	g.running = false
	if g.endRun != nil {
		g.endRun()
	}
	ending := make([]*claim, 0, g.claims.len())
	for cl := range g.claims.all() {
		ending = append(ending, cl)
	}
	g.mu.Unlock()
	g.endClaims(ending, cause)
	g.mu.Lock()
	for _, cl := range ending {
		if g.claims.get(cl.key) == cl {
			g.claims.remove(cl.key)
		}
	}
	g.mu.Unlock()
	g.wg.Wait()
	g.closeSide()
}

// endClaims revokes the claims with cause and waits for their workers,
// until Run gives them up (abandon).
func (g *group) endClaims(ending []*claim, cause error) {
	cause = causeOr(cause)
	for _, cl := range ending {
		cl.revoke(cause)
	}
	if len(ending) == 0 {
		return
	}
	abandoned := g.abandonedChan()
	select {
	case <-abandoned:
		return
	default:
	}
	ended := make(chan struct{})
	go func() {
		for _, cl := range ending {
			cl.wait()
		}
		close(ended)
	}()
	g.mu.Lock()
	log := g.logger()
	g.mu.Unlock()
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	revoked := make(map[string]bool, len(ending))
	for _, cl := range ending {
		revoked[cl.key.String()] = true
	}
	// A stopping Run reports its own wait (lifecycle.Drain).
	stopping := func() bool {
		g.mu.Lock()
		defer g.mu.Unlock()
		return !g.running
	}
	lifecycle.WaitRevoked(ended, abandoned, log, lifecycle.Only(&g.workers, revoked), stopping)
}

// abandonedChan returns the channel abandon closes.
func (g *group) abandonedChan() chan struct{} {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.abandoned == nil {
		g.abandoned = make(chan struct{})
	}
	return g.abandoned
}

// abandon is called once Run has stopped waiting for the workers of its
// stop (the drain time is over, and they are left running): a revocation
// no longer waits for them, or the client's Close, whose leave of the
// group revokes every partition, would wait for them too.
func (g *group) abandon() {
	ch := g.abandonedChan()
	g.mu.Lock()
	defer g.mu.Unlock()
	select {
	case <-ch:
	default:
		close(ch)
	}
}

// startLocked starts cl's worker; g.mu is held.
func (g *group) startLocked(cl *claim) {
	c := g.c
	ctx, cancel := context.WithCancelCause(g.runCtx)
	if g.run.Err() != nil {
		// Run's context ended before endRun could end this claim's.
		cancel(context.Cause(g.run))
	}
	cl.begin(ctx, cancel, c)
	g.wg.Add(1) // kept while the worker is parked
	g.workers.add(cl)
	cl.work(func() error { return c.proc.Process(ctx, cl) })
}

// detached is Run's context without its cancellation, which the claims'
// contexts are made from: a context made from a cancellable one is kept
// in its parent's set of children until it ends (about 60 bytes for every
// partition, idle or not). The group ends them itself when Run's context
// ends (group.start's endRun). Its values and deadline are Run's.
type detached struct{ context.Context }

func (detached) Done() <-chan struct{} { return nil }
func (detached) Err() error            { return nil }

// running is the set of claims whose workers run, or are parked until
// records come or the claim ends, which a stopping Run names
// (lifecycle.Drain): a set of the claims themselves, not a
// lifecycle.Workers, which keeps a name, a map entry and a closure for
// every worker, so every idle partition.
type running struct {
	mu     sync.Mutex
	claims map[*claim]struct{}
}

func (r *running) add(cl *claim) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.claims == nil {
		r.claims = make(map[*claim]struct{})
	}
	r.claims[cl] = struct{}{}
}

func (r *running) remove(cl *claim) {
	r.mu.Lock()
	defer r.mu.Unlock()
	delete(r.claims, cl)
}

// Names returns the running workers' partitions ("orders/0"), sorted, each
// once (a partition's worker may run twice across a rebalance).
func (r *running) Names() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := make([]string, 0, len(r.claims))
	for cl := range r.claims {
		out = append(out, cl.key.String())
	}
	slices.Sort(out)
	return slices.Compact(out)
}

// logger returns the bound consumer's logger or nil; g.mu is held.
func (g *group) logger() *slog.Logger {
	if g.c == nil {
		return nil
	}
	return g.c.log
}

// dispatch hands each partition's polled records to its claim.
func (g *group) dispatch(fs kgo.Fetches) {
	g.mu.Lock()
	defer g.mu.Unlock()
	fs.EachTopic(func(t kgo.FetchTopic) {
		for _, p := range t.Partitions {
			cl := g.claims.get(tp{t.Topic, p.Partition})
			if cl != nil && cl.topicID != t.TopicID {
				cl.mu.Lock()
				cl.topicID = t.TopicID
				cl.mu.Unlock()
			}
			if len(p.Records) == 0 {
				if cl != nil && cl.started && p.Err == nil {
					cl.push(nil, p.HighWatermark, -1)
				}
				continue
			}
			if cl == nil || !cl.started {
				// Cannot happen: claims are made before their
				// partitions are fetched and ended between polls.
				g.c.log.Error("redeliver: records for a partition without a claim dropped", "topic", t.Topic,
					"partition", p.Partition, "first_offset", p.Records[0].Offset, "records", len(p.Records))
				continue
			}
			cl.push(p.Records, p.HighWatermark, -1)
		}
	})
}

// notify wakes a throttled poll loop.
func (g *group) notify() {
	select {
	case g.wakeup <- struct{}{}:
	default:
	}
}

// holdMax is how long a full partition holds the poll loop back while other
// partitions could be fetched: past it, the full partition is paused in the
// client and the loop polls on.
const holdMax = 100 * time.Millisecond

// throttle holds the poll loop back while a partition's buffer is full and
// not paused: not polling makes the client stop fetching without dropping
// anything. But the client then fetches no partition of the same broker
// either, so the hold lasts at most holdMax while another partition could
// be fetched (running, not full, not paused, not in a backoff): then the
// full partitions are paused in the client, and the loop polls on. When
// another partition starves meanwhile (nothing buffered, more at the
// broker), the loop polls at once, and only partitions holding twice their
// limit are paused in the client. Pausing drops what the client fetched
// for a partition, and a resumed partition may wait for a fetch in flight
// (see fetchAhead), so it is kept for when the hold would stall others.
func (g *group) throttle(ctx context.Context) {
	if g.nfull.Load() == 0 {
		return
	}
	tick := time.NewTicker(holdMax / 2) // a safety net: every change notifies
	defer tick.Stop()
	deadline := time.Now().Add(holdMax)
	for {
		wait, starving, others := g.pressure()
		if !wait {
			return
		}
		if starving {
			g.pauseOverfull(2)
			return
		}
		if others && !time.Now().Before(deadline) {
			g.pauseOverfull(1)
			return
		}
		select {
		case <-g.wakeup:
		case <-tick.C:
		case <-ctx.Done():
			return
		}
	}
}

// pressure reports whether a claim is full and not paused in the client,
// whether another running claim starves: it has nothing buffered though
// its partition has more (an idle partition, caught up with its end, does
// not starve), and whether another running claim could take records (not
// full, not paused, not in a backoff). A full claim whose worker waits out
// a backoff will not drain soon: it is paused in the client instead of
// holding the poll loop back, when another claim could take records; when
// none could, it holds the loop back as any full claim does (pausing would
// stall nothing less, and would drop what the client fetched for it).
func (g *group) pressure() (wait, starving, others bool) {
	g.mu.Lock()
	defer g.mu.Unlock()
	var backoff []*claim // full, not paused in the client, in a backoff
	for cl := range g.claims.all() {
		if !cl.started {
			continue
		}
		cl.mu.Lock()
		full := cl.buf.Full()
		switch {
		case full && cl.pause == 0 && cl.buf.Paused():
			backoff = append(backoff, cl)
		case full && cl.pause == 0:
			wait = true
		case cl.starvingLocked():
			starving = true
		}
		if !full && cl.pause == 0 && !cl.buf.Paused() {
			others = true
		}
		cl.mu.Unlock()
	}
	if !others {
		// No other partition could take records (a single partition,
		// say): holding the loop back stalls none, and pausing in the
		// client would drop what the client fetched for the partition,
		// to be fetched again once it is resumed.
		return wait || len(backoff) > 0, starving, others
	}
	for _, cl := range backoff {
		cl.mu.Lock()
		cl.setPauseLocked(pauseFull, true)
		cl.mu.Unlock()
	}
	return wait, starving, others
}

// pauseOverfull pauses in the client every full claim, or with times above
// 1 every full claim holding at least times its limit.
func (g *group) pauseOverfull(times int) {
	g.mu.Lock()
	defer g.mu.Unlock()
	for cl := range g.claims.all() {
		cl.mu.Lock()
		if cl.started && cl.buf.Full() && (times <= 1 || cl.buf.Size() >= times*cl.c.cfg.BufferBytes) {
			cl.setPauseLocked(pauseFull, true)
		}
		cl.mu.Unlock()
	}
}
