package conformance

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redeliver-go/redeliver/adapters/franz"
	"github.com/redeliver-go/redeliver/checkpoint"
	"github.com/redeliver-go/redeliver/stream"
)

// RunOutage runs the outage case for the adapter on a broker of p: a
// downstream outage across 8 partitions that lasts far longer than the
// policy's worst-case retry time, under an outage budget, with a poison
// record on one partition. Nothing but the poison record is dead-lettered:
// the failing partitions wait, one probe at a time tests the downstream,
// and after the recovery every record is handled, the history keeping the
// delivery contract.
func RunOutage(t *testing.T, p Provider, a Adapter) {
	b := p.Start(t)
	if a.NeedsKIP848() && !b.KIP848 {
		t.Skipf("%s needs the KIP-848 protocol; the %s broker does not run it", a.Name(), p.Name())
	}
	e := newEnv(t, b, a)
	if e.backend != nil {
		t.Skip("reads the dead-letter topic through Kafka")
	}
	outage(t, e)
}

var errOutage = errors.New("conformance: downstream unavailable")

func outage(t *testing.T, e *env) {
	const (
		partitions = 8
		perPart    = 20
		down       = 2 * time.Second
	)
	poison := [2]int64{3, 7} // partition, offset
	// 3 retries 100ms apart, and none later than 1s after the first
	// failure: a batch is given up within about 300ms of failing when
	// nothing holds it, and never later than 1s.
	policy := checkpoint.Policy{MaxRetries: 3, Backoff: checkpoint.Fixed(100 * time.Millisecond), MaxRetryTime: time.Second}
	budget, err := stream.NewBudget(stream.BudgetConfig{ProbeBackoff: checkpoint.Capped(400*time.Millisecond, checkpoint.Exponential(100*time.Millisecond))})
	if err != nil {
		t.Fatal(err)
	}

	e.createTopic(partitions)
	dlq := e.topic + ".dlq"
	ctx, cancel := context.WithTimeout(context.Background(), wait)
	defer cancel()
	if resp, err := e.adm.CreateTopic(ctx, 1, 1, nil, dlq); err != nil || resp.Err != nil {
		t.Fatalf("create %s: %v %v", dlq, err, resp.Err)
	}
	for p := range int32(partitions) {
		e.produce(p, 0, perPart)
	}
	pub, err := franz.NewPublisher(e.cl)
	if err != nil {
		t.Fatal(err)
	}
	dl, err := stream.DeadLetter(pub, dlq)
	if err != nil {
		t.Fatal(err)
	}

	// The downstream is down from the first delivery for down.
	var (
		once     sync.Once
		recovery atomic.Pointer[time.Time]
		mu       sync.Mutex
		handled  = map[[2]int64]bool{}
		during   int // deliveries during the outage
		began    atomic.Int32
		ended    atomic.Int32
		probes   atomic.Int32
		given    []stream.BatchInfo
	)
	h := stream.PerRecord(func(_ context.Context, r *stream.Record) error {
		once.Do(func() { at := time.Now().Add(down); recovery.Store(&at) })
		if time.Now().Before(*recovery.Load()) {
			mu.Lock()
			during++
			mu.Unlock()
			return errOutage
		}
		key := [2]int64{int64(r.Partition), r.Offset}
		if key == poison {
			return errHandler
		}
		mu.Lock()
		handled[key] = true
		mu.Unlock()
		return nil
	})
	e.start("a", spec{handler: h, maxBatch: 5, policy: policy,
		opts: []stream.Option{stream.WithExhaustionAction(dl), stream.WithOutageBudget(budget)},
		hooks: stream.Hooks{
			Exhausted: func(ev stream.ExhaustedEvent) {
				mu.Lock()
				given = append(given, ev.BatchInfo)
				mu.Unlock()
			},
			OutageBegan: func(stream.OutageEvent) { began.Add(1) },
			OutageEnded: func(stream.OutageEvent) { ended.Add(1) },
			Probing:     func(stream.ProbeEvent) { probes.Add(1) },
		},
	})
	want := map[int32]int64{}
	for p := range int32(partitions) {
		want[p] = perPart
	}
	e.waitCommitted(want)
	e.hist.check(t, want)

	mu.Lock()
	defer mu.Unlock()
	t.Logf("outages began %d, ended %d, probes %d, deliveries during the outage %d, given up %v",
		began.Load(), ended.Load(), probes.Load(), during, given)
	if began.Load() < 1 || ended.Load() != began.Load() || probes.Load() < 1 {
		t.Errorf("outages began %d, ended %d, probes %d: want the outage seen, probed and ended", began.Load(), ended.Load(), probes.Load())
	}
	// Without the budget, 8 partitions failing for 2s with batches given
	// up within 1s would dead-letter most of the topic; with it, the
	// partitions wait and a probe at a time fails.
	if during > 60 {
		t.Errorf("%d deliveries during the outage: want the partitions to wait, not to retry", during)
	}
	if len(given) != 1 || given[0].Partition != int32(poison[0]) || given[0].FirstOffset != poison[1] || given[0].Records != 1 {
		t.Errorf("given up %+v, want the poison record %d/%d alone", given, poison[0], poison[1])
	}
	for p := range int64(partitions) {
		for o := range int64(perPart) {
			if k := [2]int64{p, o}; !handled[k] && k != poison {
				t.Errorf("record %d/%d never handled", p, o)
			}
		}
	}
	ends, err := e.adm.ListEndOffsets(ctx, dlq)
	if err != nil {
		t.Fatal(err)
	}
	end, ok := ends.Lookup(dlq, 0)
	if !ok || end.Err != nil || end.Offset != 1 {
		t.Errorf("%s ends at %+v, want 1 record: the poison one", dlq, end)
	}
	if t.Failed() {
		t.Log(e.hist.dump())
		t.Log(fmt.Sprintf("budget: %+v", budget.State()))
	}
}
