package conformance

import (
	"context"
	"log/slog"
	"strings"

	"github.com/redeliver-go/redeliver/stream/streamtest"
)

// unwrittenMessage begins the warning a Kafka adapter logs when the last
// success commit it had coalesced (a commit window) could not be written
// before the partition was given up, typically because the member had
// lost its place in the group and the broker refused it.
const unwrittenMessage = "redeliver: the last success commit was not written"

// unwrittenHandler passes every record on to next, and records each of
// member's unwritten last commits into hist as an Unwritten event, so
// that the history checker knows which released claim's coalesced
// checkpoints are gone (see streamtest.Unwritten).
type unwrittenHandler struct {
	hist   *streamtest.History
	member string
	next   slog.Handler
	attrs  []slog.Attr // from WithAttrs
}

// unwrittenLogger returns a logger for member's processor that records its
// unwritten commits into hist and passes every record on to next (the
// default logger's handler when nil).
func unwrittenLogger(hist *streamtest.History, member string, next slog.Handler) *slog.Logger {
	if next == nil {
		next = slog.Default().Handler()
	}
	return slog.New(&unwrittenHandler{hist: hist, member: member, next: next})
}

func (h *unwrittenHandler) Enabled(ctx context.Context, l slog.Level) bool {
	return l >= slog.LevelWarn || h.next.Enabled(ctx, l)
}

func (h *unwrittenHandler) Handle(ctx context.Context, rec slog.Record) error {
	if strings.HasPrefix(rec.Message, unwrittenMessage) {
		ev := streamtest.Event{Kind: streamtest.Unwritten, Member: h.member, Offset: -1}
		known := 0
		read := func(a slog.Attr) bool {
			v := a.Value.Resolve()
			switch a.Key {
			case "topic":
				ev.Topic = v.String()
				known |= 1
			case "partition":
				if p, ok := partitionOf(a); ok {
					ev.Partition = int32(p)
					known |= 2
				}
			case "next":
				if v.Kind() == slog.KindInt64 {
					ev.Offset = v.Int64()
				}
			}
			return true
		}
		for _, a := range h.attrs {
			read(a)
		}
		rec.Attrs(read)
		if known == 3 {
			h.hist.Add(ev)
		}
	}
	if !h.next.Enabled(ctx, rec.Level) {
		return nil
	}
	return h.next.Handle(ctx, rec)
}

func (h *unwrittenHandler) WithAttrs(as []slog.Attr) slog.Handler {
	c := *h
	c.attrs = append(append([]slog.Attr(nil), h.attrs...), as...)
	c.next = h.next.WithAttrs(as)
	return &c
}

func (h *unwrittenHandler) WithGroup(name string) slog.Handler {
	c := *h
	c.next = h.next.WithGroup(name)
	return &c
}
