package franz_test

import (
	"context"
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/redeliver-go/redeliver/adapters/franz"
	"github.com/redeliver-go/redeliver/adapters/franz/internal/engine"
	"github.com/redeliver-go/redeliver/stream"
)

// cluster starts kfake with one 1-partition topic "t" holding n records and
// returns its addresses and an admin client.
func cluster(t *testing.T, n int) (*kfake.Cluster, []string, *kadm.Client) {
	t.Helper()
	c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(1, "t"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	addrs := c.ListenAddrs()
	cl, err := kgo.NewClient(kgo.SeedBrokers(addrs...), kgo.DefaultProduceTopic("t"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cl.Close)
	ctx, cancel := context.WithTimeout(context.Background(), wait)
	defer cancel()
	for range n {
		if err := cl.ProduceSync(ctx, &kgo.Record{Value: []byte("v")}).FirstErr(); err != nil {
			t.Fatal(err)
		}
	}
	return c, addrs, kadm.NewClient(cl)
}

// runConsumer runs a consumer of "t" in group "g" over h until the test
// ends: the engine's, whose claims the test reaches.
func runConsumer(t *testing.T, addrs []string, h stream.HandlerFunc) *engine.Consumer {
	t.Helper()
	return runConsumerWith(t, addrs, h, engine.DefaultConfig())
}

// syncCommits is the configuration that writes every commit before Commit
// returns (franz.WithCommitWindow(0, 0)).
func syncCommits() engine.Config {
	cfg := engine.DefaultConfig()
	cfg.CommitInterval, cfg.CommitRecords = 0, 0
	return cfg
}

// runConsumerWith is runConsumer with the consumer's configuration cfg.
func runConsumerWith(t *testing.T, addrs []string, h stream.HandlerFunc, cfg engine.Config) *engine.Consumer {
	t.Helper()
	proc, err := stream.NewProcessor(h)
	if err != nil {
		t.Fatal(err)
	}
	return runProcessorWith(t, addrs, proc, cfg)
}

// runProcessorWith runs proc as runConsumerWith does.
func runProcessorWith(t *testing.T, addrs []string, proc *stream.Processor, cfg engine.Config) *engine.Consumer {
	t.Helper()
	cfg.Kopts, cfg.KoptsSet = []kgo.Opt{kgo.SeedBrokers(addrs...), kgo.ConsumerGroup("g"), kgo.ConsumeTopics("t"),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart())}, true
	c, err := engine.New(proc, cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); c.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		select {
		case <-done:
		case <-time.After(wait):
			t.Error("Run did not return")
		}
	})
	return c
}

func fetchOffset(t *testing.T, adm *kadm.Client) kadm.OffsetResponse {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), wait)
	defer cancel()
	offs, err := adm.FetchOffsets(ctx, "g")
	if err != nil {
		t.Fatal(err)
	}
	o, _ := offs.Lookup("t", 0)
	return o
}

// TestCommittedAndMetadata checks that a claim's Committed is what the group
// had committed, metadata included, that fetching starts there, and that the
// metadata given to Commit reaches the broker.
func TestCommittedAndMetadata(t *testing.T) {
	_, addrs, adm := cluster(t, 10)
	ctx, cancel := context.WithTimeout(context.Background(), wait)
	defer cancel()
	var pre kadm.Offsets
	pre.Add(kadm.Offset{Topic: "t", Partition: 0, At: 5, LeaderEpoch: -1, Metadata: "other-tool:1"})
	if _, err := adm.CommitOffsets(ctx, "g", pre); err != nil {
		t.Fatal(err)
	}

	type seen struct {
		first     int64
		committed int64
		metadata  string
		err       error
	}
	got := make(chan seen, 1)
	var c *engine.Consumer
	ready := make(chan struct{})
	c = runConsumer(t, addrs, func(ctx context.Context, b *stream.Batch) error {
		<-ready
		cl := engine.ClaimOf(c, "t", 0)
		off, md := cl.Committed()
		err := cl.Commit(ctx, 7, "rd-test;x=1")
		select {
		case got <- seen{b.FirstOffset(), off, md, err}:
		default:
		}
		<-ctx.Done() // abandon: the engine commits nothing of its own
		return ctx.Err()
	})
	close(ready)
	var s seen
	select {
	case s = <-got:
	case <-time.After(wait):
		t.Fatal("no batch delivered")
	}
	if s.first != 5 || s.committed != 5 || s.metadata != "other-tool:1" || s.err != nil {
		t.Fatalf("first offset %d, Committed() = %d %q, Commit error %v; want 5, 5 \"other-tool:1\", nil", s.first, s.committed, s.metadata, s.err)
	}
	if o := fetchOffset(t, adm); o.At != 7 || o.Metadata != "rd-test;x=1" {
		t.Fatalf("broker has offset %d metadata %q, want 7 %q", o.At, o.Metadata, "rd-test;x=1")
	}
}

// TestRevokeWaitsForCommitInFlight holds an offset commit in the broker,
// revokes the partition meanwhile, and checks that the revocation waits for
// the commit and that the claim refuses commits afterwards (every commit
// synchronous; TestRevokeWritesCoalescedCommit is the coalesced one).
func TestRevokeWaitsForCommitInFlight(t *testing.T) {
	kc, addrs, adm := cluster(t, 3)
	var (
		c        *engine.Consumer
		ready    = make(chan struct{})
		inCommit = make(chan struct{})
		release  = make(chan struct{})
		results  = make(chan error, 2)
	)
	kc.ControlKey(kmsg.OffsetCommit.Int16(), func(kmsg.Request) (kmsg.Response, error, bool) {
		kc.DropControl() // hold the first commit only
		close(inCommit)
		kc.SleepControl(func() { <-release })
		return nil, nil, false
	})
	c = runConsumerWith(t, addrs, func(ctx context.Context, b *stream.Batch) error {
		<-ready
		cl := engine.ClaimOf(c, "t", 0)
		results <- cl.Commit(ctx, 1, "")
		results <- cl.Commit(ctx, 2, "")
		<-ctx.Done()
		return ctx.Err()
	}, syncCommits())
	close(ready)
	select {
	case <-inCommit:
	case <-time.After(wait):
		t.Fatal("no commit reached the broker")
	}
	revokeBehindCommitInFlight(t, c, release)
	if err := <-results; err != nil {
		t.Errorf("commit in flight: %v, want success", err)
	}
	if err := <-results; !errors.Is(err, stream.ErrRevoked) {
		t.Errorf("commit after the revocation: %v, want stream.ErrRevoked", err)
	}
	if o := fetchOffset(t, adm); o.At != 1 {
		t.Errorf("broker has offset %d, want 1", o.At)
	}
}

// TestCommitsCoalesce checks that commits of several partitions asked for
// while one is in flight go out together, each with its own metadata.
func TestCommitsCoalesce(t *testing.T) {
	kc, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(4, "t"))
	if err != nil {
		t.Fatal(err)
	}
	defer kc.Close()
	cl, err := kgo.NewClient(append([]kgo.Opt{kgo.SeedBrokers(kc.ListenAddrs()...), kgo.ConsumerGroup("g"), kgo.ConsumeTopics("t")}, franz.ClientOptions()...)...)
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	// Join the group, so that commits carry a live generation.
	ctx, cancel := context.WithTimeout(context.Background(), wait)
	defer cancel()
	for {
		if _, gen := cl.GroupMetadata(); gen > 0 {
			break
		}
		if ctx.Err() != nil {
			t.Fatal("the client did not join the group")
		}
		time.Sleep(10 * time.Millisecond)
	}

	var (
		reqs    = make(chan *kmsg.OffsetCommitRequest, 10)
		release = make(chan struct{})
	)
	first := true
	kc.ControlKey(kmsg.OffsetCommit.Int16(), func(r kmsg.Request) (kmsg.Response, error, bool) {
		kc.KeepControl()
		reqs <- r.(*kmsg.OffsetCommitRequest)
		if first {
			first = false
			kc.SleepControl(func() { <-release })
		}
		return nil, nil, false
	})
	m := engine.NewTestCommitter(cl, wait)
	defer m.Stop()
	errs := make(chan error, 4)
	for p := range int32(4) {
		go func() {
			c := engine.NewTestClaim(nil, "t", p, engine.DefaultConfig(), nil)
			c.Confirm(cl.GroupMetadata())
			errs <- m.Commit(c, int64(p)+1, "m"+string(rune('0'+p)))
		}()
		if p == 0 {
			<-reqs // the first is in flight; the others queue behind it
		}
	}
	time.Sleep(100 * time.Millisecond)
	close(release)
	for range 4 {
		select {
		case err := <-errs:
			if err != nil {
				t.Error(err)
			}
		case <-time.After(wait):
			t.Fatal("a commit did not return")
		}
	}
	second := <-reqs
	if n := len(second.Topics[0].Partitions); n != 3 {
		t.Errorf("second request carries %d partitions, want the 3 queued", n)
	}
	for _, p := range second.Topics[0].Partitions {
		if want := "m" + string(rune('0'+p.Partition)); p.Metadata == nil || *p.Metadata != want {
			t.Errorf("partition %d: metadata %v, want %q", p.Partition, p.Metadata, want)
		}
	}
	offs, err := kadm.NewClient(cl).FetchOffsets(ctx, "g")
	if err != nil {
		t.Fatal(err)
	}
	for p := range int32(4) {
		if o, _ := offs.Lookup("t", p); o.At != int64(p)+1 || o.Metadata != "m"+string(rune('0'+p)) {
			t.Errorf("partition %d: broker has %d %q", p, o.At, o.Metadata)
		}
	}
}

func TestClaimRefusesCommitAfterRevoke(t *testing.T) {
	cl := engine.NewTestClaim(nil, "t", 0, engine.DefaultConfig(), nil)
	cl.Revoke()
	if err := cl.Claim().Commit(context.Background(), 1, ""); !errors.Is(err, stream.ErrRevoked) {
		t.Fatalf("Commit after revoke: %v, want stream.ErrRevoked", err)
	}
}

// push tells fetchAhead's repeats from a rewind: the polls' repeats of what
// fetchAhead got are dropped, an earlier offset otherwise is delivered in a
// batch of its own, and fetchAhead's records that do not follow the last
// one (a rewind came first) are dropped.
func TestPushTellsRepeatsFromRewinds(t *testing.T) {
	cfg := engine.DefaultConfig()
	cfg.BufferBytes, cfg.MaxBatch = 1<<20, 100
	cl := engine.NewTestClaim(nil, "t", 0, cfg, nil)
	ctx := context.Background()
	recs := func(from, to int64) []*kgo.Record {
		var rs []*kgo.Record
		for o := from; o <= to; o++ {
			rs = append(rs, &kgo.Record{Topic: "t", Offset: o})
		}
		return rs
	}
	cl.Push(recs(0, 4), 10, -1)   // polled
	cl.Push(recs(5, 9), 20, 5)    // fetchAhead from 5
	cl.Push(recs(5, 12), 20, -1)  // the poll repeats 5-9
	cl.Push(recs(0, 3), 4, -1)    // a rewind: the log starts over
	cl.Push(recs(30, 31), 40, 30) // fetchAhead from a position before the rewind
	cl.Push(recs(4, 5), 6, -1)
	var got [][2]int64
	for cl.Buffered() > 0 {
		b, err := cl.Claim().Fetch(ctx)
		if err != nil {
			t.Fatal(err)
		}
		got = append(got, [2]int64{b[0].Offset, b[len(b)-1].Offset})
		for i := 1; i < len(b); i++ {
			if b[i].Offset != b[i-1].Offset+1 {
				t.Fatalf("batch %v: offset %d after %d", got[len(got)-1], b[i].Offset, b[i-1].Offset)
			}
		}
	}
	want := [][2]int64{{0, 12}, {0, 5}}
	if !slices.Equal(got, want) {
		t.Fatalf("batches %v, want %v", got, want)
	}
}

// revokeBehindCommitInFlight revokes t/0 from c while a commit is held in
// the broker (release lets it go): the revocation must wait for it, and
// return once it is let go.
func revokeBehindCommitInFlight(t *testing.T, c *engine.Consumer, release chan struct{}) {
	t.Helper()
	revoked := make(chan struct{})
	go func() {
		engine.Revoke(c, "t", 0)
		close(revoked)
	}()
	select {
	case <-revoked:
		t.Fatal("the revocation returned while a commit was in flight")
	case <-time.After(200 * time.Millisecond):
	}
	close(release)
	select {
	case <-revoked:
	case <-time.After(wait):
		t.Fatal("the revocation did not return")
	}
}
