package conformance

import (
	"context"
	"log/slog"
	"strings"
	"sync"
)

// givenUpCommits counts, by partition, the commits that processors logging
// through its logger gave up when their claims ended ("redeliver: commit
// given up"), and passes every record on to the default logger. The zero
// value is ready to use.
type givenUpCommits struct {
	mu sync.Mutex
	n  map[int32]int
}

// handler returns a handler that counts into g and passes every record on
// to the default logger's handler.
func (g *givenUpCommits) handler() slog.Handler {
	return &givenUpHandler{g: g, next: slog.Default().Handler()}
}

// count returns how many commits of the partition were given up.
func (g *givenUpCommits) count(partition int32) int {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.n[partition]
}

func (g *givenUpCommits) add(partition int32) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.n == nil {
		g.n = map[int32]int{}
	}
	g.n[partition]++
}

// givenUpHandler is givenUpCommits' slog.Handler: the partition is an
// attribute of the logger (the processor's partition logger) or of the
// record.
type givenUpHandler struct {
	g         *givenUpCommits
	next      slog.Handler
	partition int64 // -1 for none
	known     bool
}

func (h *givenUpHandler) Enabled(ctx context.Context, l slog.Level) bool {
	return l >= slog.LevelWarn || h.next.Enabled(ctx, l)
}

func (h *givenUpHandler) Handle(ctx context.Context, rec slog.Record) error {
	if strings.HasPrefix(rec.Message, "redeliver: commit given up") {
		p, known := h.partition, h.known
		rec.Attrs(func(a slog.Attr) bool {
			if v, ok := partitionOf(a); ok {
				p, known = v, true
				return false
			}
			return true
		})
		if known {
			h.g.add(int32(p))
		}
	}
	if !h.next.Enabled(ctx, rec.Level) {
		return nil
	}
	return h.next.Handle(ctx, rec)
}

func (h *givenUpHandler) WithAttrs(as []slog.Attr) slog.Handler {
	c := *h
	for _, a := range as {
		if v, ok := partitionOf(a); ok {
			c.partition, c.known = v, true
		}
	}
	c.next = h.next.WithAttrs(as)
	return &c
}

func (h *givenUpHandler) WithGroup(name string) slog.Handler {
	c := *h
	c.next = h.next.WithGroup(name)
	return &c
}

// partitionOf reads a "partition" attribute.
func partitionOf(a slog.Attr) (int64, bool) {
	if a.Key != "partition" {
		return 0, false
	}
	switch v := a.Value.Resolve(); v.Kind() {
	case slog.KindInt64:
		return v.Int64(), true
	case slog.KindUint64:
		return int64(v.Uint64()), true
	}
	return 0, false
}
