package tests

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/segmentio/kafka-go"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/redeliver-go/redeliver/adapters/internal/kafkatest"
	"github.com/redeliver-go/redeliver/adapters/kafkago/internal/engine"
	"github.com/redeliver-go/redeliver/stream"
	"github.com/redeliver-go/redeliver/stream/streamtest"
)

const testWait = 20 * time.Second

// joined joins a kafka-go group on a new kfake cluster with one topic of
// one partition and returns the cluster, the group's generation, and the
// generation as the adapter's engine serves it under gctx, with a claim of
// the partition whose worker is not started.
func joined(t *testing.T, gctx context.Context) (*kfake.Cluster, *kafka.Generation, *engine.TestGeneration) {
	t.Helper()
	// The claims' tests check each commit's own outcome: every commit
	// synchronous (coalesce_test.go has the coalesced ones).
	return joinedWindow(t, gctx, 0, 0)
}

// joinedWindow is joined with the commit window interval and records.
func joinedWindow(t *testing.T, gctx context.Context, interval time.Duration, records int64) (*kfake.Cluster, *kafka.Generation, *engine.TestGeneration) {
	t.Helper()
	kc, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(1, "t"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(kc.Close)
	proc, err := stream.NewProcessor(streamtest.Succeed)
	if err != nil {
		t.Fatal(err)
	}
	gc := kafka.ConsumerGroupConfig{ID: "g", Brokers: kc.ListenAddrs(), Topics: []string{"t"}, HeartbeatInterval: 100 * time.Millisecond}
	cfg := engine.DefaultConfig()
	cfg.Group, cfg.GroupSet = gc, true
	cfg.CommitInterval, cfg.CommitRecords = interval, records
	c, err := engine.New(proc, cfg)
	if err != nil {
		t.Fatal(err)
	}
	cg, err := kafka.NewConsumerGroup(gc)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cg.Close() })
	ctx, cancel := context.WithTimeout(context.Background(), testWait)
	defer cancel()
	gen, err := cg.Next(ctx)
	if err != nil {
		t.Fatal(err)
	}
	return kc, gen, engine.NewTestGeneration(c, gen, gctx, "t", 0)
}

// admin returns an admin client of kc, closed when the test ends.
func admin(t *testing.T, kc *kfake.Cluster) *kadm.Client {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(kc.ListenAddrs()...))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cl.Close)
	return kadm.NewClient(cl)
}

func brokerOffset(t *testing.T, kc *kfake.Cluster) kadm.Offset {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), testWait)
	defer cancel()
	offs, err := admin(t, kc).FetchOffsets(ctx, "g")
	if err != nil {
		t.Fatal(err)
	}
	o, _ := offs.Lookup("t", 0)
	return o.Offset
}

// TestEndDoesNotWaitForCommitInFlight holds an offset commit in the broker,
// ends the generation meanwhile (a rebalance), and checks that the end
// does not wait for the commit, which returns stream.ErrRevoked (issue 51:
// a coordinator that does not answer held the rebalance up to the commit
// timeout, while the partition's next owner delivered it); that the
// request still lands once the broker answers it; and that commits are
// refused afterwards, without reaching the broker.
func TestEndDoesNotWaitForCommitInFlight(t *testing.T) {
	kc, _, g := joined(t, context.Background())
	cl := g.Claim()
	var (
		inCommit = make(chan struct{})
		release  = make(chan struct{})
		commits  atomic.Int32
		results  = make(chan error, 2)
	)
	kc.ControlKey(kmsg.OffsetCommit.Int16(), func(kmsg.Request) (kmsg.Response, error, bool) {
		kc.KeepControl()
		if commits.Add(1) == 1 {
			close(inCommit)
			kc.SleepControl(func() { <-release })
		}
		return nil, nil, false
	})
	go func() { results <- cl.Commit(context.Background(), 1, "rd1;r=1") }()
	select {
	case <-inCommit:
	case <-time.After(testWait):
		t.Fatal("no commit reached the broker")
	}
	ended := make(chan struct{})
	go func() {
		g.End()
		close(ended)
	}()
	select {
	case <-ended:
	case <-time.After(testWait):
		t.Fatal("the generation's end waited for a commit the broker holds")
	}
	select {
	case err := <-results:
		if !errors.Is(err, stream.ErrRevoked) {
			t.Errorf("commit in flight at the end: %v, want stream.ErrRevoked", err)
		}
	case <-time.After(testWait):
		t.Fatal("the commit in flight did not return at the generation's end")
	}
	close(release)
	// The request lands all the same: the generation is still the
	// coordinator's.
	for deadline := time.Now().Add(testWait); brokerOffset(t, kc).At != 1; time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the commit in flight at the end did not land once the broker answered it")
		}
	}
	if err := cl.Commit(context.Background(), 2, ""); !errors.Is(err, stream.ErrRevoked) {
		t.Errorf("commit after the end: %v, want stream.ErrRevoked", err)
	}
	if n := commits.Load(); n != 1 {
		t.Errorf("%d commits reached the broker, want 1", n)
	}
	if o := brokerOffset(t, kc); o.At != 1 || o.Metadata != "rd1;r=1" {
		t.Errorf("broker has offset %d metadata %q, want 1 %q", o.At, o.Metadata, "rd1;r=1")
	}
}

// TestCommitWritesMetadataUnderTheGeneration checks that a commit carries
// its metadata and the generation's ID and member ID.
func TestCommitWritesMetadataUnderTheGeneration(t *testing.T) {
	kc, gen, g := joined(t, context.Background())
	cl := g.Claim()
	reqs := make(chan *kmsg.OffsetCommitRequest, 1)
	kc.ControlKey(kmsg.OffsetCommit.Int16(), func(r kmsg.Request) (kmsg.Response, error, bool) {
		reqs <- r.(*kmsg.OffsetCommitRequest)
		return nil, nil, false
	})
	if err := cl.Commit(context.Background(), 7, "rd1;r=2"); err != nil {
		t.Fatal(err)
	}
	req := <-reqs
	if req.Generation != gen.ID || req.MemberID != gen.MemberID {
		t.Errorf("commit under generation %d member %q, want %d %q", req.Generation, req.MemberID, gen.ID, gen.MemberID)
	}
	if o := brokerOffset(t, kc); o.At != 7 || o.Metadata != "rd1;r=2" {
		t.Errorf("broker has offset %d metadata %q, want 7 %q", o.At, o.Metadata, "rd1;r=2")
	}
}

// TestStaleCommitIsRevoked answers a commit with ILLEGAL_GENERATION: the
// claim reports stream.ErrRevoked and the generation is marked stale.
func TestStaleCommitIsRevoked(t *testing.T) {
	kc, _, g := joined(t, context.Background())
	cl := g.Claim()
	kc.ControlKey(kmsg.OffsetCommit.Int16(), func(r kmsg.Request) (kmsg.Response, error, bool) {
		return kafkatest.CommitError(r.(*kmsg.OffsetCommitRequest), 22), nil, true // ILLEGAL_GENERATION
	})
	if err := cl.Commit(context.Background(), 3, ""); !errors.Is(err, stream.ErrRevoked) {
		t.Fatalf("commit answered ILLEGAL_GENERATION: %v, want stream.ErrRevoked", err)
	}
	if !g.Stale() {
		t.Error("the generation was not marked stale")
	}
}

// TestCommitRefusedOnceKafkaGoEndsTheGeneration ends the generation as
// kafka-go does (a failed heartbeat closes its context) before the manager
// has noticed: commits are refused at once and reach no broker.
func TestCommitRefusedOnceKafkaGoEndsTheGeneration(t *testing.T) {
	gctx, end := context.WithCancel(context.Background())
	defer end()
	kc, _, g := joined(t, gctx)
	cl := g.Claim()
	var commits atomic.Int32
	kc.ControlKey(kmsg.OffsetCommit.Int16(), func(kmsg.Request) (kmsg.Response, error, bool) {
		kc.KeepControl()
		commits.Add(1)
		return nil, nil, false
	})
	if err := cl.Commit(context.Background(), 1, ""); err != nil {
		t.Fatalf("commit in the generation: %v", err)
	}
	end()
	if err := cl.Commit(context.Background(), 2, ""); !errors.Is(err, stream.ErrRevoked) {
		t.Errorf("commit after the generation ended: %v, want stream.ErrRevoked", err)
	}
	if n := commits.Load(); n != 1 {
		t.Errorf("%d commits reached the broker, want 1", n)
	}
}

// TestConcurrentCommitsShareARequest holds a first commit in the broker
// while seven other partitions commit: the seven go in one request once it
// is answered, and each commit gets its own partition's outcome.
func TestConcurrentCommitsShareARequest(t *testing.T) {
	kc, _, g := joined(t, context.Background())
	ctx, cancel := context.WithTimeout(context.Background(), testWait)
	defer cancel()
	if _, err := admin(t, kc).CreateTopic(ctx, 8, 1, nil, "u"); err != nil {
		t.Fatal(err)
	}
	claims := make([]stream.Claim, 8)
	for p := range claims {
		claims[p] = g.AddClaim("u", int32(p))
	}
	var (
		inFirst = make(chan struct{})
		release = make(chan struct{})
		reqs    = make(chan *kmsg.OffsetCommitRequest, 16)
	)
	kc.ControlKey(kmsg.OffsetCommit.Int16(), func(r kmsg.Request) (kmsg.Response, error, bool) {
		kc.KeepControl()
		req := r.(*kmsg.OffsetCommitRequest)
		reqs <- req
		if len(reqs) == 1 {
			close(inFirst)
			kc.SleepControl(func() { <-release })
			return nil, nil, false
		}
		// The second request: partition 3 refused, the others stored.
		return kafkatest.CommitErrors(req, func(p int32) int16 {
			if p == 3 {
				return 29 // TOPIC_AUTHORIZATION_FAILED
			}
			return 0
		}), nil, true
	})
	results := make([]chan error, 8)
	for p := range results {
		results[p] = make(chan error, 1)
	}
	go func() { results[0] <- claims[0].Commit(ctx, 10, "") }()
	select {
	case <-inFirst:
	case <-time.After(testWait):
		t.Fatal("no commit reached the broker")
	}
	for p := 1; p < 8; p++ {
		go func() { results[p] <- claims[p].Commit(ctx, int64(10+p), "m") }()
	}
	time.Sleep(200 * time.Millisecond) // the seven queue behind the first
	close(release)
	for p := range results {
		select {
		case err := <-results[p]:
			if (err != nil) != (p == 3) {
				t.Errorf("partition %d: commit returned %v", p, err)
			}
		case <-time.After(testWait):
			t.Fatalf("partition %d: commit did not return", p)
		}
	}
	if n := len(reqs); n != 2 {
		t.Fatalf("%d commit requests, want 2 (the first, then the seven together)", n)
	}
	<-reqs
	second := <-reqs
	if len(second.Topics) != 1 || len(second.Topics[0].Partitions) != 7 {
		t.Fatalf("second request: %+v, want the seven partitions of u", second.Topics)
	}
	for _, p := range second.Topics[0].Partitions {
		if p.Offset != int64(10+p.Partition) || *p.Metadata != "m" {
			t.Errorf("partition %d committed at %d with %q", p.Partition, p.Offset, *p.Metadata)
		}
	}
}

// TestFailedCommitKeepsCoalescedCommit: a success commit was coalesced
// (Commit returned, the Processor reported the checkpoint), then a retry
// state commit superseded it and failed: the generation's end still
// writes the coalesced commit. Before, the failed commit had dropped it,
// and the partition's next owner read the checkpoint before it.
func TestFailedCommitKeepsCoalescedCommit(t *testing.T) {
	kc, _, g := joinedWindow(t, context.Background(), time.Hour, 1<<40)
	cl := g.Claim()
	g.Buffer(20) // not caught up: the success commit waits for the window
	var commits atomic.Int32
	kc.ControlKey(kmsg.OffsetCommit.Int16(), func(r kmsg.Request) (kmsg.Response, error, bool) {
		kc.KeepControl()
		if commits.Add(1) == 3 {
			return kafkatest.CommitError(r.(*kmsg.OffsetCommitRequest), 15), nil, true // COORDINATOR_NOT_AVAILABLE
		}
		return nil, nil, false
	})
	ctx := context.Background()
	// A retry state is written before Commit returns and the success that
	// clears it at once, in the background; the next success waits for
	// the window (an hour from now).
	for _, c := range []struct {
		next int64
		md   string
	}{{2, "rd1;r=1"}, {3, ""}, {5, ""}} {
		if err := cl.Commit(ctx, c.next, c.md); err != nil {
			t.Fatalf("commit of %d %q: %v", c.next, c.md, err)
		}
		for deadline := time.Now().Add(wait); c.next == 3 && commits.Load() < 2 && time.Now().Before(deadline); {
			time.Sleep(time.Millisecond)
		}
	}
	if n := commits.Load(); n != 2 {
		t.Fatalf("%d commits reached the broker, want 2: the success at 5 was not coalesced", n)
	}
	if err := cl.Commit(ctx, 5, "rd1;r=2"); err == nil || errors.Is(err, stream.ErrRevoked) {
		t.Fatalf("retry state commit answered COORDINATOR_NOT_AVAILABLE: %v, want that error", err)
	}
	g.End()
	if n := commits.Load(); n != 4 {
		t.Errorf("%d commits reached the broker, want 4 (two written, the failed one and the end's)", n)
	}
	if o := brokerOffset(t, kc); o.At != 5 || o.Metadata != "" {
		t.Fatalf("broker has offset %d (metadata %q), want 5 with no metadata: the coalesced commit the failed commit superseded was not written", o.At, o.Metadata)
	}
}
