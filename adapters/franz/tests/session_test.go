package franz_test

import (
	"context"
	"errors"
	"sync"
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

// joinedClient returns a client built with ClientOptions that has joined
// group "g" on kc, consuming topic "t", and never polls.
func joinedClient(t *testing.T, kc *kfake.Cluster) *kgo.Client {
	t.Helper()
	cl, err := kgo.NewClient(append([]kgo.Opt{kgo.SeedBrokers(kc.ListenAddrs()...), kgo.ConsumerGroup("g"), kgo.ConsumeTopics("t"),
		kgo.HeartbeatInterval(100 * time.Millisecond)}, franz.ClientOptions()...)...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cl.Close)
	waitUntil(t, "the client joins the group", func() bool { _, gen := cl.GroupMetadata(); return gen > 0 })
	return cl
}

func waitUntil(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(wait); !cond(); {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting until %s", what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// commitSpy counts the OffsetCommit requests kfake receives for each
// partition of "t".
type commitSpy struct {
	mu    sync.Mutex
	parts map[int32]int
}

func spyCommits(kc *kfake.Cluster) *commitSpy {
	s := &commitSpy{parts: map[int32]int{}}
	kc.ControlKey(kmsg.OffsetCommit.Int16(), func(r kmsg.Request) (kmsg.Response, error, bool) {
		kc.KeepControl()
		s.mu.Lock()
		defer s.mu.Unlock()
		for _, t := range r.(*kmsg.OffsetCommitRequest).Topics {
			for _, p := range t.Partitions {
				s.parts[p.Partition]++
			}
		}
		return nil, nil, false
	})
	return s
}

func (s *commitSpy) count(p int32) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.parts[p]
}

// TestCommitWaitsForTheSessionsAssignment reproduces the window found by
// the network-fault scenario NetPartitionBeyondSession: franz-go stores a
// new generation when SyncGroup returns, and a commit it builds before the
// consumer has revoked what the new session took away carries the new
// generation, which the broker accepts for any partition. Here the client
// moves to a new generation (a second member joins) while a claim stays
// confirmed in the old one only, as a lost partition's claim is until its
// revocation: its commit must not reach the broker. Once the claim is
// confirmed in the new generation (a partition the session kept), the
// same commit goes out.
func TestCommitWaitsForTheSessionsAssignment(t *testing.T) {
	kc, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(2, "t"))
	if err != nil {
		t.Fatal(err)
	}
	defer kc.Close()
	cl := joinedClient(t, kc)
	member, gen := cl.GroupMetadata()
	spy := spyCommits(kc)

	m := engine.NewTestCommitter(cl, wait)
	defer m.Stop()
	c := engine.NewTestClaim(cl, "t", 0, engine.DefaultConfig(), nil)
	c.Confirm(member, gen)
	if err := m.Commit(c, 5, ""); err != nil {
		t.Fatalf("commit in the claim's own session: %v", err)
	}
	if n := spy.count(0); n != 1 {
		t.Fatalf("the broker got %d commits of partition 0, want 1", n)
	}

	// A second member joins: the client rejoins under a new generation.
	other, err := kgo.NewClient(kgo.SeedBrokers(kc.ListenAddrs()...), kgo.ConsumerGroup("g"), kgo.ConsumeTopics("t"))
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close()
	waitUntil(t, "the client moves to a new generation", func() bool { _, g := cl.GroupMetadata(); return g != gen })

	err = m.Commit(c, 3, "")
	if !engine.IsUnconfirmed(err) {
		t.Fatalf("commit under a generation the claim is not confirmed in: %v, want errUnconfirmed", err)
	}
	if n := spy.count(0); n != 1 {
		t.Fatalf("the broker got %d commits of partition 0, want still 1: a commit went out under a generation the claim was not confirmed in", n)
	}
	offs, err := kadm.NewClient(cl).FetchOffsets(context.Background(), "g")
	if err != nil {
		t.Fatal(err)
	}
	if o, _ := offs.Lookup("t", 0); o.At != 5 {
		t.Fatalf("the group's checkpoint of t/0 is %d, want 5 (the unconfirmed commit of 3 moved it)", o.At)
	}

	// Confirmed in the new session (the partition was kept): it goes out.
	// A cooperative rebalance takes two generations; one confirmed too
	// early is left out again.
	for deadline := time.Now().Add(wait); ; {
		c.Confirm(cl.GroupMetadata())
		err := m.Commit(c, 7, "")
		if err == nil {
			break
		}
		if !engine.IsUnconfirmed(err) || time.Now().After(deadline) {
			t.Fatalf("commit once confirmed in the new generation: %v", err)
		}
	}
	if n := spy.count(0); n != 2 {
		t.Fatalf("the broker got %d commits of partition 0, want 2", n)
	}
}

// TestClaimCommitWaitsForConfirmationOrEnd checks what claim.Commit does
// with a commit the committer left out: it waits, and sends it again once
// the claim is confirmed in the client's session (the partition was kept
// across the rebalance: its commits must not stall), or returns
// stream.ErrRevoked once the claim ends (the partition was lost).
func TestClaimCommitWaitsForConfirmationOrEnd(t *testing.T) {
	kc, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(2, "t"))
	if err != nil {
		t.Fatal(err)
	}
	defer kc.Close()
	cl := joinedClient(t, kc)
	spy := spyCommits(kc)
	m := engine.NewTestCommitter(cl, wait)
	defer m.Stop()
	stale := func(p int32) *engine.TestClaim {
		k := engine.NewTestClaim(cl, "t", p, syncCommits(), m)
		k.Confirm("gone-member", 1) // an older session's
		return k
	}

	kept, lost := stale(0), stale(1)
	keptErr, lostErr := make(chan error, 1), make(chan error, 1)
	go func() { keptErr <- kept.Claim().Commit(context.Background(), 4, "") }()
	go func() { lostErr <- lost.Claim().Commit(context.Background(), 4, "") }()
	time.Sleep(200 * time.Millisecond) // both go to the committer and are left out
	select {
	case err := <-keptErr:
		t.Fatalf("Commit of an unconfirmed claim returned %v before its confirmation", err)
	case err := <-lostErr:
		t.Fatalf("Commit of an unconfirmed claim returned %v before its end", err)
	default:
	}
	if n, k := spy.count(0), spy.count(1); n+k != 0 {
		t.Fatalf("the broker got %d and %d commits, want none", n, k)
	}

	kept.Confirm(cl.GroupMetadata())
	lost.Revoke()
	for _, w := range []struct {
		name string
		ch   chan error
		want error
	}{{"kept", keptErr, nil}, {"lost", lostErr, stream.ErrRevoked}} {
		select {
		case err := <-w.ch:
			if !errors.Is(err, w.want) && err != w.want {
				t.Errorf("%s: Commit returned %v, want %v", w.name, err, w.want)
			}
		case <-time.After(wait):
			t.Fatalf("%s: Commit did not return", w.name)
		}
	}
	if n, k := spy.count(0), spy.count(1); n != 1 || k != 0 {
		t.Fatalf("the broker got %d commits of the kept partition and %d of the lost one, want 1 and 0", n, k)
	}
}

// TestOnAssignedBeforeNew: franz-go joins the group as soon as a client is
// built, so the session's assignment can end before a Consumer is bound to
// the client; WithOnAssigned still hears of it, from New (a host waiting
// for readiness otherwise waited for the next rebalance: 1 run in 20 of
// the host's readiness test).
func TestOnAssignedBeforeNew(t *testing.T) {
	kc, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(2, "t"))
	if err != nil {
		t.Fatal(err)
	}
	defer kc.Close()
	cl := joinedClient(t, kc)
	waitUntil(t, "the assignment kept for a Consumer not bound yet", func() bool { return engine.EarlyAssignment(cl) })
	proc, err := stream.NewProcessor(stream.HandlerFunc(func(context.Context, *stream.Batch) error { return nil }))
	if err != nil {
		t.Fatal(err)
	}
	var got map[string][]int32
	if _, err := franz.New(proc, franz.WithClient(cl), franz.WithOnAssigned(func(a map[string][]int32) { got = a })); err != nil {
		t.Fatal(err)
	}
	if len(got["t"]) != 2 {
		t.Fatalf("New reported the earlier assignment as %v, want the topic's 2 partitions", got)
	}
}

// TestSupersededCoalescedCommitWrittenAtRevocation: a success commit was
// coalesced (Commit returned, the Processor reported the checkpoint), then
// a retry state commit superseded it and was refused as the claim ended
// while it waited for the member's new session to be confirmed: the
// revocation still writes the coalesced commit. Before, the superseding
// commit had dropped it, nothing wrote it, and the partition's next owner
// read the checkpoint before it (the reliability scenarios
// MembersJoinAndLeave on a real broker with cooperative-sticky and a commit
// window: "checkpoint went back").
func TestSupersededCoalescedCommitWrittenAtRevocation(t *testing.T) {
	kc, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(1, "t"))
	if err != nil {
		t.Fatal(err)
	}
	defer kc.Close()
	cl := joinedClient(t, kc)
	m := engine.NewTestCommitter(cl, wait)
	defer m.Stop()
	k := engine.NewTestClaim(cl, "t", 0, coalescing(), m)
	// Confirmed in the session before the client's current one: the
	// client has moved on to a new generation whose assignment is not
	// seen through yet, as when a cooperative rebalance revokes the
	// partition.
	member, gen := cl.GroupMetadata()
	k.Confirm(member, gen-1)
	pushUnread(k, 20)

	ctx := context.Background()
	if err := k.Claim().Commit(ctx, 5, ""); err != nil {
		t.Fatalf("coalesced commit: %v", err)
	}
	stateErr := make(chan error, 1)
	go func() { stateErr <- k.Claim().Commit(ctx, 5, "retry state") }()
	time.Sleep(200 * time.Millisecond) // the state commit is left out of the request and waits
	k.Revoke()
	select {
	case err := <-stateErr:
		if !errors.Is(err, stream.ErrRevoked) {
			t.Fatalf("retry state commit: %v, want stream.ErrRevoked", err)
		}
	case <-time.After(wait):
		t.Fatal("the retry state commit did not return at the revocation")
	}
	if o := fetchOffset(t, kadm.NewClient(cl)); o.At != 5 || o.Metadata != "" {
		t.Fatalf("broker has offset %d (metadata %q), want 5 with no metadata: the coalesced commit the state commit superseded was not written", o.At, o.Metadata)
	}
}

// TestLastCommitUnderALaterGeneration: the revocation's last commit goes
// out although the member's generation is two after the one the claim was
// confirmed in. That happens when a rebalance begins again before the
// member's SyncGroup answers (the generation moves on with no assignment,
// so nothing confirms the claims), and the next one revokes the partition,
// or Run stops meanwhile: members joining and leaving one after another.
// The commit was refused as unconfirmed, the warning "the last success
// commit was not written" was logged, and the partition's next owner
// delivered again records a reported checkpoint had finished (the keyed
// reliability scenario MembersJoinAndLeavePerRecord with a commit window).
// A commit under another member ID is still refused.
func TestLastCommitUnderALaterGeneration(t *testing.T) {
	kc, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(1, "t"))
	if err != nil {
		t.Fatal(err)
	}
	defer kc.Close()
	cl := joinedClient(t, kc)
	member, first := cl.GroupMetadata()
	// Two members join, one after the other: two rebalances.
	for i := range 2 {
		other, err := kgo.NewClient(kgo.SeedBrokers(kc.ListenAddrs()...), kgo.ConsumerGroup("g"), kgo.ConsumeTopics("t"),
			kgo.HeartbeatInterval(100*time.Millisecond))
		if err != nil {
			t.Fatal(err)
		}
		defer other.Close()
		go other.PollFetches(context.Background())
		waitUntil(t, "the client moves to a new generation", func() bool { _, g := cl.GroupMetadata(); return g >= first+int32(i)+1 })
	}
	_, gen := cl.GroupMetadata()

	m := engine.NewTestCommitter(cl, wait)
	defer m.Stop()
	cfg := coalescing()
	cfg.CommitInterval = time.Hour // written by the revocation only
	stale := engine.NewTestClaim(cl, "t", 0, cfg, m)
	stale.Confirm(member, gen-2)
	pushUnread(stale, 20)
	if err := stale.Claim().Commit(context.Background(), 5, ""); err != nil {
		t.Fatalf("coalesced commit: %v", err)
	}
	adm := kadm.NewClient(cl)
	if o := fetchOffset(t, adm); o.At == 5 {
		t.Fatal("the coalesced commit was written before the revocation")
	}
	stale.Revoke()
	if o := fetchOffset(t, adm); o.At != 5 {
		t.Fatalf("broker has offset %d, want 5: the revocation's last commit under generation %d (the claim confirmed in %d) was not written", o.At, gen, gen-2)
	}

	// The same under a member ID the claim was not confirmed as.
	gone := engine.NewTestClaim(cl, "t", 0, cfg, m)
	gone.Confirm("another member", gen-2)
	pushUnread(gone, 20)
	if err := gone.Claim().Commit(context.Background(), 9, ""); err != nil {
		t.Fatalf("coalesced commit: %v", err)
	}
	gone.Revoke()
	if o := fetchOffset(t, adm); o.At != 5 {
		t.Fatalf("broker has offset %d, want still 5: a last commit went out under a member ID its claim was not confirmed as", o.At)
	}
}

// TestShutdownWritesLastCommitBehindRebalance: Run stops while the client
// is in a rebalance's JoinGroup (franz-go holds commits until the session's
// SyncGroup ends), and the revocation writes the claim's coalesced success
// commit, which the Processor reported written: it waits for the new
// session rather than being cut short after the shutdown's 250ms grace.
// The JoinGroup is held 600ms in the broker, for real: the grace is real
// time.
func TestShutdownWritesLastCommitBehindRebalance(t *testing.T) {
	kc, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(1, "t"))
	if err != nil {
		t.Fatal(err)
	}
	defer kc.Close()
	cl := joinedClient(t, kc)
	member, _ := cl.GroupMetadata()
	runCtx, stopRun := context.WithCancel(context.Background())
	defer stopRun()
	m := engine.NewTestCommitterIn(runCtx, cl, wait)
	defer m.Stop()
	cfg := coalescing()
	cfg.CommitInterval = time.Hour // written by the revocation only
	k := engine.NewTestClaim(cl, "t", 0, cfg, m)
	k.Confirm(cl.GroupMetadata())
	pushUnread(k, 20)
	// The first success commit is written at once, the next waits.
	if err := k.Claim().Commit(context.Background(), 3, ""); err != nil {
		t.Fatalf("coalesced commit: %v", err)
	}
	adm := kadm.NewClient(cl)
	waitUntil(t, "the first commit is written", func() bool { return fetchOffset(t, adm).At == 3 })
	if err := k.Claim().Commit(context.Background(), 5, ""); err != nil {
		t.Fatalf("coalesced commit: %v", err)
	}

	inJoin := make(chan struct{})
	var once sync.Once
	kc.ControlKey(kmsg.JoinGroup.Int16(), func(req kmsg.Request) (kmsg.Response, error, bool) {
		kc.KeepControl()
		if req.(*kmsg.JoinGroupRequest).MemberID == member {
			once.Do(func() { close(inJoin) })
			kc.SleepControl(func() { time.Sleep(600 * time.Millisecond) })
		}
		return nil, nil, false
	})
	other, err := kgo.NewClient(kgo.SeedBrokers(kc.ListenAddrs()...), kgo.ConsumerGroup("g"), kgo.ConsumeTopics("t"))
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close()
	go other.PollFetches(runCtx) // joins: a rebalance
	select {
	case <-inJoin:
	case <-time.After(wait):
		t.Fatal("the client did not rejoin")
	}
	stopRun()
	k.Revoke()
	if o := fetchOffset(t, kadm.NewClient(other)); o.At != 5 {
		t.Fatalf("broker has offset %d, want 5: the revocation's last commit was cut short at shutdown", o.At)
	}
}

// pushUnread pushes n records of t/0 from offset 0 into k, the partition
// not caught up (its high watermark past them): a success commit waits
// for the commit window.
func pushUnread(k *engine.TestClaim, n int) {
	recs := make([]*kgo.Record, n)
	for i := range recs {
		recs[i] = &kgo.Record{Topic: "t", Offset: int64(i)}
	}
	k.Push(recs, int64(2*n), -1)
}
