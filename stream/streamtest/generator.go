package streamtest

import (
	"context"

	"github.com/redeliver-go/redeliver/stream"
)

// Generator is a [stream.Claim] that produces a fixed number of batches of
// generated records without storing them, for benchmarks and soak tests of
// handlers and of the engine. Each batch reuses the same records with new
// offsets. Once the last batch is committed, Fetch blocks until its context
// ends and Done is closed. A Generator is used by one worker only.
type Generator struct {
	recs    []stream.Record
	batches int
	sent    int
	next    int64
	last    int64
	done    chan struct{}
}

// NewGenerator returns a Generator of batches batches of size records, each
// with a value of valueLen bytes.
func NewGenerator(batches, size, valueLen int) *Generator {
	g := &Generator{recs: make([]stream.Record, max(size, 1)), batches: batches, done: make(chan struct{})}
	for i := range g.recs {
		g.recs[i] = stream.Record{Topic: "generated", Value: make([]byte, valueLen)}
	}
	if batches <= 0 {
		close(g.done)
	}
	return g
}

// Done is closed when the last batch has been committed (at once for a
// zero Generator, which has no batch).
func (g *Generator) Done() <-chan struct{} {
	if g.done == nil {
		g.done = make(chan struct{})
		close(g.done)
	}
	return g.done
}

// Committed returns the last committed offset.
func (g *Generator) Committed() (int64, string) {
	if g.last == 0 {
		return -1, ""
	}
	return g.last, ""
}

// Topic returns "generated".
func (g *Generator) Topic() string { return "generated" }

// Partition returns 0.
func (g *Generator) Partition() int32 { return 0 }

// Pause does nothing.
func (g *Generator) Pause() {}

// Resume does nothing.
func (g *Generator) Resume() {}

// Fetch returns the next generated batch.
func (g *Generator) Fetch(ctx context.Context) ([]stream.Record, error) {
	if g.sent == g.batches {
		<-ctx.Done()
		return nil, context.Cause(ctx)
	}
	g.sent++
	// In locals: written through g, the offset would be stored and loaded
	// again for every record, behind the records' own stores.
	recs, next := g.recs, g.next
	for i := range recs {
		recs[i].Offset = next
		next++
	}
	g.next = next
	return recs, nil
}

// Commit records next; the commit of the last batch closes Done.
func (g *Generator) Commit(_ context.Context, next int64, _ string) error {
	g.last = next
	if next == g.next && g.sent == g.batches && g.done != nil {
		select {
		case <-g.done:
		default:
			close(g.done)
		}
	}
	return nil
}
