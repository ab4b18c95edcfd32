package conformance

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/redeliver-go/redeliver/checkpoint"
	"github.com/redeliver-go/redeliver/stream"
	"github.com/redeliver-go/redeliver/stream/streamtest"
)

// Scenarios of the Kafka adapters' own hazards: a topic deleted and created
// again while consumed, and one slow handler among caught-up partitions.

// recreateTopic deletes the case's topic and creates it again with the
// given partitions, waiting until the broker accepts the creation.
func (e *env) recreateTopic(partitions int32) {
	e.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), longWait)
	defer cancel()
	if resp, err := e.adm.DeleteTopics(ctx, e.topic); err != nil || resp.Error() != nil {
		e.t.Fatalf("delete topic %s: %v %v", e.topic, err, resp.Error())
	}
	for {
		resp, err := e.adm.CreateTopic(ctx, partitions, 1, nil, e.topic)
		if err == nil {
			err = resp.Err
		}
		if err == nil {
			return
		}
		if ctx.Err() != nil || !errors.Is(err, kerr.TopicAlreadyExists) && !errors.Is(err, kerr.UnknownTopicOrPartition) {
			e.t.Fatalf("create topic %s again: %v", e.topic, err)
		}
		time.Sleep(100 * time.Millisecond) // the deletion is still going on
	}
}

// produceValues appends values to the partition through a client of its
// own: the env's client holds the topic's old ID after a recreation, and
// franz-go fails its produce (UNKNOWN_TOPIC_ID).
func (e *env) produceValues(partition int32, values []string) {
	e.t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(e.b.Addrs...), kgo.RecordPartitioner(kgo.ManualPartitioner()))
	if err != nil {
		e.t.Fatal(err)
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), longWait)
	defer cancel()
	recs := make([]*kgo.Record, len(values))
	for i, v := range values {
		recs[i] = &kgo.Record{Topic: e.topic, Partition: partition, Value: []byte(v)}
		if e.keyed() {
			recs[i].Key = e.key(partition, int64(len(e.keys[partition]))) // one producer: the next offset
		}
	}
	for {
		err := cl.ProduceSync(ctx, recs...).FirstErr()
		if err == nil {
			return
		}
		if ctx.Err() != nil {
			e.t.Fatalf("produce to %s/%d: %v", e.topic, partition, err)
		}
		time.Sleep(100 * time.Millisecond) // the new topic's leader is not known yet
	}
}

// incarnations splits the events of a topic that was deleted and created
// again into two histories, one per incarnation, each checked on its own:
// the handler marks a partition's claim as reading the new topic when it
// is given a record of it, and every later event of that claim goes to
// the second history, which gets a Claimed event at no checkpoint first.
// Claims made after the recreation (fresh) go to the second at once.
type incarnations struct {
	first, second streamtest.History

	mu    sync.Mutex
	fresh bool                   // claims made from now on read the new topic
	newer map[claimRef]bool      // claims reading the new topic
	open  map[claimRef]bool      // claims with a Claimed event in second
	seen  map[partitionRef]bool  // partitions whose handler got a new record, not yet tied to a claim
	keys  map[claimRef]claimInfo // the claims' partitions, from their Claimed events
}

type claimRef struct {
	member string
	claim  uint64
}

type partitionRef struct {
	member    string
	partition int32
}

type claimInfo struct {
	topic     string
	partition int32
}

func newIncarnations() *incarnations {
	return &incarnations{newer: map[claimRef]bool{}, open: map[claimRef]bool{}, seen: map[partitionRef]bool{}, keys: map[claimRef]claimInfo{}}
}

// handled notes that member's handler got a batch of partition holding a
// record of the new topic (its value starts with "new:").
func (in *incarnations) handled(member string, b *stream.Batch) {
	for _, r := range b.Records {
		if strings.HasPrefix(string(r.Value), "new:") {
			in.mu.Lock()
			in.seen[partitionRef{member, b.Partition}] = true
			in.mu.Unlock()
			return
		}
	}
}

// hooks returns member's hooks, which record into the history of the
// incarnation each event belongs to.
func (in *incarnations) hooks(member string) stream.Hooks {
	h1, h2 := in.first.Hooks(member), in.second.Hooks(member)
	// which returns the hooks an event of claim id on partition goes to,
	// opening the claim in the second history when it moves there.
	which := func(topic string, partition int32, id uint64) stream.Hooks {
		in.mu.Lock()
		defer in.mu.Unlock()
		ref := claimRef{member, id}
		if !in.newer[ref] && in.seen[partitionRef{member, partition}] {
			delete(in.seen, partitionRef{member, partition})
			in.newer[ref] = true
		}
		if !in.newer[ref] {
			return h1
		}
		if !in.open[ref] {
			in.open[ref] = true
			h2.Claimed(stream.ClaimEvent{Topic: topic, Partition: partition, ClaimID: id, Committed: -1})
		}
		return h2
	}
	return stream.Hooks{
		Claimed: func(ev stream.ClaimEvent) {
			in.mu.Lock()
			ref := claimRef{member, ev.ClaimID}
			in.keys[ref] = claimInfo{ev.Topic, ev.Partition}
			fresh := in.fresh
			if fresh {
				in.newer[ref], in.open[ref] = true, true
			}
			in.mu.Unlock()
			if fresh {
				h2.Claimed(ev)
			} else {
				h1.Claimed(ev)
			}
		},
		Released: func(ev stream.ReleaseEvent) {
			in.mu.Lock()
			ref := claimRef{member, ev.ClaimID}
			newer := in.newer[ref]
			in.mu.Unlock()
			if newer {
				h2.Released(ev)
			} else {
				h1.Released(ev)
			}
		},
		Delivered: func(ev stream.DeliveredEvent) {
			which(ev.Topic, ev.Partition, ev.ClaimID).Delivered(ev)
		},
		Exhausted: func(ev stream.ExhaustedEvent) {
			which(ev.Topic, ev.Partition, ev.ClaimID).Exhausted(ev)
		},
		ActionTried: func(ev stream.ActionEvent) {
			which(ev.Topic, ev.Partition, ev.ClaimID).ActionTried(ev)
		},
		Checkpointed: func(ev stream.CheckpointEvent) {
			which(ev.Topic, ev.Partition, ev.ClaimID).Checkpointed(ev)
		},
		Abandoned: func(ev stream.AbandonedEvent) {
			which(ev.Topic, ev.Partition, ev.ClaimID).Abandoned(ev)
		},
	}
}

// topicRecreatedScenario: a topic is consumed to its end (40 records per
// partition), deleted, and created again with 15 records per partition,
// fewer than the consumer had read. No record of the new topic may be
// lost: the consumer goes on with it from its start (the kafka-go adapter,
// which reads the topic by name and resets its position), or its Run ends
// with an error that says the topic was deleted (the franz-go adapter,
// whose client never consumes a topic again under a new ID), and then a
// consumer started anew reads it. Each incarnation's history is checked
// on its own.
func topicRecreatedScenario(t *testing.T, e *env) Figures {
	if e.keyed() {
		t.Skipf("in %s ordering a rewound log stops its partition with an error (docs/KEYS.md) instead of following the new topic", e.ordering)
	}
	if e.backend != nil {
		t.Skip("the backend cannot delete a topic")
	}
	const parts, n1, n2 = 2, 40, 15
	e.fill(parts, n1)
	in := newIncarnations()
	h := func(member string) stream.Handler {
		return stream.HandlerFunc(func(_ context.Context, b *stream.Batch) error {
			in.handled(member, b)
			return nil
		})
	}
	policy := checkpoint.Policy{MaxRetries: 3, Backoff: checkpoint.Fixed(10 * time.Millisecond)}
	a := e.start("a", spec{handler: h("a"), policy: policy, maxBatch: 5, hooks: in.hooks("a")})
	e.waitTotal(parts*n1, longWait)
	e.recreateTopic(parts)
	in.mu.Lock()
	in.fresh = true // claims made from now on read the new topic
	in.mu.Unlock()
	for p := range int32(parts) {
		vs := make([]string, n2)
		for i := range vs {
			vs[i] = fmt.Sprintf("new:%d:%d", p, i)
		}
		e.produceValues(p, vs)
	}
	var (
		ended   error
		started bool
	)
	deadline := time.Now().Add(longWait)
	for {
		if offs, err := e.tryCommitted(); err == nil && len(offs) == parts && offs[0].At == n2 && offs[1].At == n2 {
			break
		}
		select {
		case <-a.done:
			if !started {
				ended = a.err
				if ended == nil {
					t.Fatal("the consumer's Run returned nil after its topic was created again, not an error that says why it stopped")
				}
				t.Logf("consumer a stopped: %v", ended)
				if !strings.Contains(ended.Error(), "deleted") {
					t.Errorf("consumer a stopped with %q, want an error that says the topic was deleted", ended)
				}
				e.start("b", spec{handler: h("b"), policy: policy, maxBatch: 5, hooks: in.hooks("b")})
				started = true
			}
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("the new topic's records were not all committed in %v (committed %v)", longWait, e.committed())
		}
		time.Sleep(20 * time.Millisecond)
	}
	e.stopAll()
	r1 := check(t, &in.first, e.ends(parts, n1))
	r2 := check(t, &in.second, e.ends(parts, n2))
	f := figures(r2, 1)
	f.Records, f.Lost = r1.Records+r2.Records, r1.Lost+r2.Lost
	f.Note = "went on with the new topic"
	if ended != nil {
		f.Note = "stopped with an error, a new consumer read the new topic"
	}
	return f
}

// slowPartitionScenario: partition 0 holds a backlog of big records (600 of
// 64 KiB, more than a consumer buffers) and its handler takes 100ms a
// batch; partitions 1 and 2 are caught up, and records are produced to
// them one at a time meanwhile. Their records are handled within a bound
// of their production (a slow partition must not hold back the others),
// and the history is checked.
func slowPartitionScenario(t *testing.T, e *env) Figures {
	if e.backend != nil {
		t.Skip("the backend's records are small")
	}
	const (
		parts   = 3
		backlog = 600
		fast    = 30
		bound   = 2 * time.Second
	)
	e.createTopic(parts)
	big := strings.Repeat("x", 64<<10)
	for i := 0; i < backlog; i += 50 {
		vs := make([]string, 50)
		for j := range vs {
			vs[j] = big
		}
		e.produceValues(0, vs)
	}
	var (
		mu        sync.Mutex
		latencies []time.Duration
		slowSeen  = newSignal()
	)
	h := stream.HandlerFunc(func(ctx context.Context, b *stream.Batch) error {
		if b.Partition == 0 {
			slowSeen.fire()
			select {
			case <-time.After(100 * time.Millisecond):
			case <-ctx.Done():
			}
			return nil
		}
		now := time.Now()
		mu.Lock()
		for _, r := range b.Records {
			latencies = append(latencies, now.Sub(r.Timestamp))
		}
		mu.Unlock()
		return nil
	})
	var hist streamtest.History
	e.start("a", spec{handler: h, policy: checkpoint.Policy{}, maxBatch: 10, hooks: hist.Hooks("a"), rec: &hist})
	e.await(slowSeen.ch, "partition 0's first delivery")
	time.Sleep(time.Second) // partition 0's buffer fills up
	for i := range fast {
		for p := int32(1); p < parts; p++ {
			e.produceValues(p, []string{fmt.Sprintf("%d:%d", p, i)})
		}
		time.Sleep(50 * time.Millisecond)
	}
	e.waitCommittedWithin(map[int32]int64{1: fast, 2: fast}, longWait)
	mu.Lock()
	lat := slices.Clone(latencies)
	mu.Unlock()
	slices.Sort(lat)
	worst, p50 := lat[len(lat)-1], lat[len(lat)/2]
	if worst > bound {
		t.Errorf("a record of a caught-up partition was handled %v after it was produced, while partition 0's handler was slow; want at most %v (p50 %v)", worst, bound, p50)
	}
	e.waitCommittedWithin(map[int32]int64{0: backlog, 1: fast, 2: fast}, longWait)
	e.stopAll()
	r := e.check(&hist, map[streamtest.TopicPartition]int64{
		{Topic: e.topic, Partition: 0}: backlog, {Topic: e.topic, Partition: 1}: fast, {Topic: e.topic, Partition: 2}: fast,
	})
	f := figures(r, 0)
	f.Note = fmt.Sprintf("caught-up-latency p50=%v max=%v (bound %v)", p50.Round(time.Millisecond), worst.Round(time.Millisecond), bound)
	return f
}
