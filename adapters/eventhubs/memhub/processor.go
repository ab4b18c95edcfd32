package memhub

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"reflect"
	"strconv"
	"sync"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/messaging/azeventhubs/v2"

	"github.com/redeliver-go/redeliver/adapters/eventhubs"
)

// Processor balances the partitions of a Hub between processors of one
// consumer group through a checkpoint store, and hands out a
// [PartitionClient] for each partition it comes to own: the SDK's
// [azeventhubs.Processor] (v2.0.2) with the same load balancing (ported
// from its processor_load_balancer.go: balanced claims one partition per
// round, greedy all it may; an owner above its fair share is stolen from;
// an ownership not renewed within the expiration is free), the same update
// interval with 0.8-1.3 jitter, the same start positions (the checkpoint,
// exclusive, else StartPositions), and the same shutdown (close the
// clients, relinquish the ownerships). Run may be called once. Build it
// with [Hub.NewProcessor]: the zero Processor's Run returns an error.
type Processor struct {
	hub      *Hub
	store    azeventhubs.CheckpointStore
	group    string
	owner    string
	strategy azeventhubs.ProcessorStrategy
	interval time.Duration
	expiry   time.Duration
	start    azeventhubs.StartPositions
	log      *slog.Logger

	rnd     *rand.Rand // used by Run's goroutine only
	next    chan *PartitionClient
	running sync.Once

	mu        sync.Mutex
	consumers map[string]*PartitionClient
	current   []azeventhubs.Ownership
}

// NewProcessor returns a processor of the hub for consumer group group,
// named ownerID in the store's ownership records (the SDK uses the
// ConsumerClient's InstanceID). opts may be nil; its Prefetch is ignored.
// The default start position, as the SDK's without geo-replication, is the
// latest event.
func (h *Hub) NewProcessor(store azeventhubs.CheckpointStore, group, ownerID string, opts *azeventhubs.ProcessorOptions) (*Processor, error) {
	switch {
	case h == nil || len(h.parts) == 0:
		return nil, errZeroHub
	case isNil(store) || group == "" || ownerID == "":
		return nil, errors.New("memhub: a processor needs a checkpoint store, a consumer group and an owner ID")
	}
	p := &Processor{hub: h, store: store, group: group, owner: ownerID,
		strategy: azeventhubs.ProcessorStrategyBalanced, interval: 10 * time.Second, expiry: time.Minute,
		log: slog.New(slog.DiscardHandler), rnd: rand.New(rand.NewPCG(rand.Uint64(), rand.Uint64())),
		next: make(chan *PartitionClient, len(h.parts)), consumers: map[string]*PartitionClient{}}
	if opts != nil {
		if opts.LoadBalancingStrategy != "" {
			p.strategy = opts.LoadBalancingStrategy
		}
		if opts.UpdateInterval != 0 {
			p.interval = opts.UpdateInterval
		}
		if opts.PartitionExpirationDuration != 0 {
			p.expiry = opts.PartitionExpirationDuration
		}
		p.start = opts.StartPositions
	}
	switch {
	case p.strategy != azeventhubs.ProcessorStrategyBalanced && p.strategy != azeventhubs.ProcessorStrategyGreedy:
		return nil, fmt.Errorf("memhub: invalid load balancing strategy %q", p.strategy)
	case p.interval < 0 || p.expiry < 0:
		return nil, errors.New("memhub: negative update interval or partition expiration")
	}
	return p, nil
}

// SetLogger makes the processor log its balancing decisions to l; nil
// discards them.
func (p *Processor) SetLogger(l *slog.Logger) {
	if p == nil {
		return
	}
	if l == nil {
		l = slog.New(slog.DiscardHandler)
	}
	p.log = l
}

// Run balances partitions until ctx is done, then closes its partition
// clients and relinquishes its ownerships. It returns nil when ctx ends
// it, or the error that stopped it.
func (p *Processor) Run(ctx context.Context) error {
	if p == nil || p.hub == nil {
		return errors.New("memhub: Run on a zero Processor: build it with Hub.NewProcessor")
	}
	first := false
	p.running.Do(func() { first = true })
	if !first {
		return errors.New("memhub: the Processor has been run already; create a new one")
	}
	defer p.shutdown()
	if err := p.dispatch(ctx); err != nil && ctx.Err() == nil {
		return err
	}
	for {
		d := time.Duration(float64(p.interval) * (p.rnd.Float64()/2 + 0.8))
		t := time.NewTimer(d)
		select {
		case <-ctx.Done():
			t.Stop()
			return nil
		case <-t.C:
		}
		if err := p.dispatch(ctx); err != nil && ctx.Err() == nil {
			return err
		}
	}
}

// NextPartitionClient returns the client of the next partition this
// processor owns, blocking until there is one; nil once the processor has
// stopped or ctx is done.
func (p *Processor) NextPartitionClient(ctx context.Context) eventhubs.PartitionClient {
	if p == nil || p.next == nil {
		return nil // the zero Processor never runs
	}
	select {
	case pc, ok := <-p.next:
		if !ok {
			return nil
		}
		return pc
	case <-ctx.Done():
		return nil
	}
}

func (p *Processor) shutdown() {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	p.mu.Lock()
	clients := make([]*PartitionClient, 0, len(p.consumers))
	for _, c := range p.consumers {
		clients = append(clients, c)
	}
	current := append([]azeventhubs.Ownership(nil), p.current...)
	p.mu.Unlock()
	for _, c := range clients {
		_ = c.Close(ctx)
	}
	for i := range current {
		current[i].OwnerID = "" // relinquished: free at once for others
	}
	if _, err := p.store.ClaimOwnership(ctx, current, nil); err != nil {
		p.log.Warn("memhub: relinquishing ownership failed; others wait for it to expire", "error", err)
	}
	close(p.next)
}

// dispatch claims what the load balancing says and opens a client for each
// owned partition that has none.
func (p *Processor) dispatch(ctx context.Context) error {
	owned, err := p.loadBalance(ctx)
	if err != nil {
		return err
	}
	p.mu.Lock()
	p.current = append([]azeventhubs.Ownership(nil), owned...)
	p.mu.Unlock()
	var cps map[string]azeventhubs.Checkpoint
	for _, o := range owned {
		p.mu.Lock()
		_, exists := p.consumers[o.PartitionID]
		p.mu.Unlock()
		if exists {
			continue
		}
		if cps == nil {
			list, err := p.store.ListCheckpoints(ctx, Namespace, p.hub.name, p.group, nil)
			if err != nil {
				p.log.Warn("memhub: listing checkpoints failed", "error", err)
				return nil
			}
			cps = map[string]azeventhubs.Checkpoint{}
			for _, c := range list {
				cps[c.PartitionID] = c
			}
		}
		start, err := p.startOf(o.PartitionID, cps)
		if err != nil {
			p.log.Warn("memhub: no start position", "partition", o.PartitionID, "error", err)
			continue
		}
		pc, err := p.hub.open(p.group, o.PartitionID, start)
		if err != nil {
			return err
		}
		pc.store = p.store
		id := o.PartitionID
		pc.cleanup = func() {
			p.mu.Lock()
			if p.consumers[id] == pc {
				delete(p.consumers, id)
			}
			p.mu.Unlock()
		}
		p.mu.Lock()
		p.consumers[id] = pc
		p.mu.Unlock()
		select {
		case p.next <- pc:
		default:
			_ = pc.Close(ctx)
			p.log.Warn("memhub: partitions channel full", "partition", id)
		}
	}
	return nil
}

// startOf returns the sequence number a new client of partition id starts
// at: after its checkpoint, else the configured start position. On a
// geo-replicated hub a checkpoint's offset is refused, and the partition
// opens at its earliest event, inclusive, as the SDK falls back to.
func (p *Processor) startOf(id string, cps map[string]azeventhubs.Checkpoint) (int64, error) {
	part, err := p.hub.partition(id)
	if err != nil {
		return 0, err
	}
	earliest, end := part.bounds()
	if cp, ok := cps[id]; ok {
		switch {
		case cp.Offset != nil && p.hub.geo.Load():
			p.log.Info("memhub: geo-replication refuses an integer offset: starting at the earliest event, inclusive", "partition", id)
			return earliest, nil
		case cp.Offset != nil:
			n, err := strconv.ParseInt(*cp.Offset, 10, 64)
			if err != nil {
				return 0, fmt.Errorf("checkpoint offset %q: %w", *cp.Offset, err)
			}
			return n + 1, nil
		case cp.SequenceNumber != nil:
			return *cp.SequenceNumber + 1, nil
		}
		return 0, fmt.Errorf("invalid checkpoint for %s, no offset or sequence number", id)
	}
	sp := p.start.Default
	if s, ok := p.start.PerPartition[id]; ok {
		sp = s
	}
	inc := int64(1)
	if sp.Inclusive {
		inc = 0
	}
	switch {
	case sp.Earliest != nil && *sp.Earliest:
		return earliest, nil
	case sp.SequenceNumber != nil:
		return *sp.SequenceNumber + inc, nil
	case sp.Offset != nil && p.hub.geo.Load():
		return earliest, nil
	case sp.Offset != nil:
		n, err := strconv.ParseInt(*sp.Offset, 10, 64)
		if err != nil {
			return 0, fmt.Errorf("start offset %q: %w", *sp.Offset, err)
		}
		return n + inc, nil
	case sp.EnqueuedTime != nil:
		return 0, errors.New("memhub: enqueued-time start positions are not supported")
	}
	return end, nil // latest
}

// loadBalance is the SDK's processorLoadBalancer.LoadBalance.
func (p *Processor) loadBalance(ctx context.Context) ([]azeventhubs.Ownership, error) {
	all, err := p.store.ListOwnership(ctx, Namespace, p.hub.name, p.group, nil)
	if err != nil {
		return nil, err
	}
	ids := p.hub.PartitionIDs()
	added := map[string]bool{}
	byOwner := map[string][]azeventhubs.Ownership{p.owner: nil}
	var free []azeventhubs.Ownership
	for _, o := range all {
		added[o.PartitionID] = true
		if time.Since(o.LastModifiedTime.UTC()) > p.expiry || o.OwnerID == "" {
			free = append(free, o)
			continue
		}
		byOwner[o.OwnerID] = append(byOwner[o.OwnerID], o)
	}
	for _, id := range ids {
		if !added[id] {
			free = append(free, azeventhubs.Ownership{FullyQualifiedNamespace: Namespace, EventHubName: p.hub.name,
				ConsumerGroup: p.group, PartitionID: id, OwnerID: p.owner})
		}
	}
	minRequired := len(ids) / len(byOwner)
	maxAllowed := minRequired
	extra := len(ids)%len(byOwner) > 0
	if extra && len(byOwner[p.owner]) >= minRequired {
		maxAllowed++
	}
	var aboveMax []azeventhubs.Ownership
	for id, os := range byOwner {
		if id != p.owner && len(os) > maxAllowed {
			aboveMax = append(aboveMax, os...)
		}
	}
	current := byOwner[p.owner]
	more := true
	if len(current) >= maxAllowed {
		more = false
	} else if extra && len(current) == maxAllowed-1 {
		more = len(free) > 0 || len(aboveMax) > 0
	}
	ours := current
	if more {
		switch p.strategy {
		case azeventhubs.ProcessorStrategyGreedy:
			ours = append(ours, p.pick(free, maxAllowed-len(ours))...)
			if len(ours) < maxAllowed {
				ours = append(ours, p.pick(aboveMax, maxAllowed-len(ours))...)
			}
		default:
			if len(free) > 0 {
				ours = append(ours, free[p.rnd.IntN(len(free))])
			} else if len(aboveMax) > 0 {
				ours = append(ours, aboveMax[p.rnd.IntN(len(aboveMax))])
			}
		}
	}
	claim := make([]azeventhubs.Ownership, len(ours))
	for i, o := range ours {
		o.OwnerID = p.owner
		claim[i] = o
	}
	got, err := p.store.ClaimOwnership(ctx, claim, nil)
	if err != nil {
		return nil, err
	}
	p.log.Debug("memhub: balanced", "owner", p.owner, "asked", len(claim), "got", len(got))
	return got, nil
}

// pick is the SDK's getRandomOwnerships: the first min(count, len) of a
// permutation of that many (sic: of the first ones).
func (p *Processor) pick(os []azeventhubs.Ownership, count int) []azeventhubs.Ownership {
	n := min(count, len(os))
	if n <= 0 {
		return nil
	}
	var out []azeventhubs.Ownership
	for _, i := range p.rnd.Perm(n) {
		out = append(out, os[i])
	}
	return out
}

// isNil reports whether v is nil or holds a nil pointer.
func isNil(v any) bool {
	if v == nil {
		return true
	}
	rv := reflect.ValueOf(v)
	return rv.Kind() == reflect.Pointer && rv.IsNil()
}
