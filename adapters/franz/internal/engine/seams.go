package engine

import (
	"context"
	"errors"
	"log/slog"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/redeliver-go/redeliver/stream"
)

// ClaimOf returns the claim of a partition c is assigned, or nil.
func ClaimOf(c *Consumer, topic string, partition int32) stream.Claim {
	c.g.mu.Lock()
	defer c.g.mu.Unlock()
	if cl := c.g.claims.get(tp{topic, partition}); cl != nil {
		return cl
	}
	return nil
}

// Revoke revokes a partition of c's as the client's OnPartitionsRevoked
// does, and returns once its claim has ended.
func Revoke(c *Consumer, topic string, partition int32) {
	c.g.end(map[string][]int32{topic: {partition}}, nil)
}

// EarlyAssignment reports whether the group of cl, a client built with
// ClientOptions, keeps an assignment for a Consumer not bound to it yet.
func EarlyAssignment(cl *kgo.Client) bool {
	g := groupOf(cl)
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.hasEarly
}

// TestCommitter is the consumer's committer, alone, for the adapter's
// tests of commits.
type TestCommitter struct{ m *committer }

// NewTestCommitter returns a committer of cl's commits, started.
func NewTestCommitter(cl *kgo.Client, timeout time.Duration) *TestCommitter {
	m := newCommitter(cl, timeout)
	m.start(context.Background())
	return &TestCommitter{m}
}

// NewTestCommitterIn returns a committer of cl's commits, started with
// ctx as Run's context: once ctx is done, a commit in flight is cut short
// after the shutdown's grace.
func NewTestCommitterIn(ctx context.Context, cl *kgo.Client, timeout time.Duration) *TestCommitter {
	m := newCommitter(cl, timeout)
	m.start(ctx)
	return &TestCommitter{m}
}

// Stop stops the committer.
func (t *TestCommitter) Stop() { t.m.stop() }

// Commit commits offset with metadata for c's partition, and waits for the
// answer.
func (t *TestCommitter) Commit(c *TestClaim, offset int64, metadata string) error {
	return t.m.commit(c.cl, kgo.EpochOffset{Epoch: -1, Offset: offset}, metadata)
}

// IsUnconfirmed reports whether err is a committer's answer for a
// partition it left out of a commit: the request would have gone out under
// a group session the claim is not confirmed in.
func IsUnconfirmed(err error) bool { return errors.Is(err, errUnconfirmed) }

// TestClaim is a claim of one partition with no committed offset, whose
// worker is not started, for the adapter's tests of commits, revocations
// and its buffer.
type TestClaim struct{ cl *claim }

// NewTestClaim returns a claim of the partition in the group of cl, a
// client built with ClientOptions (a group of its own when cl is nil).
// Its batches follow cfg's MaxBatch, MaxWait and BufferBytes; its commits
// go through m when m is not nil.
func NewTestClaim(cl *kgo.Client, topic string, partition int32, cfg Config, m *TestCommitter) *TestClaim {
	g := &group{wakeup: make(chan struct{}, 1)}
	if cl != nil {
		g = groupOf(cl)
	}
	c := &Consumer{cfg: cfg, log: slog.New(slog.DiscardHandler)}
	if m != nil {
		c.commit = m.m
	}
	k := newClaim(g, tp{topic, partition}, -1, "")
	ctx, cancel := context.WithCancelCause(context.Background())
	k.begin(ctx, cancel, c)
	return &TestClaim{k}
}

// Claim returns the claim as the Processor sees it.
func (t *TestClaim) Claim() stream.Claim { return t.cl }

// Confirm confirms the claim in the group session of member and gen, as
// the end of a session's assignment does.
func (t *TestClaim) Confirm(member string, gen int32) { t.cl.confirm(member, gen) }

// Revoke ends the claim as a revocation does.
func (t *TestClaim) Revoke() { t.cl.revoke(errRevoked) }

// Push hands the claim records as the poll loop does (from -1) or as its
// fetch-ahead does (from the offset it fetched from), with the partition's
// high watermark.
func (t *TestClaim) Push(recs []*kgo.Record, hwm, from int64) { t.cl.push(recs, hwm, from) }

// Buffered returns how many records the claim's buffer holds.
func (t *TestClaim) Buffered() int {
	t.cl.mu.Lock()
	defer t.cl.mu.Unlock()
	return t.cl.buf.Len()
}
