package engine

import (
	"context"
	"time"

	"github.com/segmentio/kafka-go"

	"github.com/redeliver-go/redeliver/stream"
)

// TestGeneration is a generation of a group with a claim of one partition
// whose worker is not started, for the adapter's tests of commits and of a
// generation's end.
type TestGeneration struct {
	g  *generation
	cl *claim
}

// NewTestGeneration returns the generation c would serve for gen, with gctx
// as kafka-go's context of the generation, and a claim of the partition
// with no committed offset.
func NewTestGeneration(c *Consumer, gen *kafka.Generation, gctx context.Context, topic string, partition int32) *TestGeneration {
	g := &generation{c: c, gen: gen, gctx: gctx, fail: func(error) {}, stale: make(chan struct{}), commitCtx: context.Background()}
	cl := newClaim(g, tp{topic, partition}, -1, "", context.Background())
	g.claims = append(g.claims, cl)
	return &TestGeneration{g: g, cl: cl}
}

// Claim returns the partition's claim.
func (t *TestGeneration) Claim() stream.Claim { return t.cl }

// AddClaim adds a claim of another partition to the generation, its worker
// not started either, and returns it.
func (t *TestGeneration) AddClaim(topic string, partition int32) stream.Claim {
	cl := newClaim(t.g, tp{topic, partition}, -1, "", context.Background())
	t.g.claims = append(t.g.claims, cl)
	return cl
}

// Buffer hands the partition's claim n records, at offsets 0 to n-1, as its
// pump does: the claim is not caught up until a Fetch takes them.
func (t *TestGeneration) Buffer(n int) {
	recs := make([]record, n)
	for i := range recs {
		recs[i] = record{offset: int64(i), epoch: -1}
	}
	t.cl.push(recs)
}

// End ends the generation as a rebalance does, and returns when it has
// ended.
func (t *TestGeneration) End() { t.g.end(errGenerationEnded, nil) }

// Stale reports whether the coordinator refused a commit of the generation
// as stale.
func (t *TestGeneration) Stale() bool {
	select {
	case <-t.g.stale:
		return true
	default:
		return false
	}
}

// SetPermanentAfter sets how long a lasting fetch failure may last before
// it ends Run, for tests, and returns a function that restores it. Call it
// while no consumer runs.
func SetPermanentAfter(d time.Duration) (restore func()) {
	saved := permanentAfter
	permanentAfter = d
	return func() { permanentAfter = saved }
}
