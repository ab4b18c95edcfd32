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

// lostPlace are the errors of a last commit that the member could not
// have written whatever it did: the broker refused it because the member
// had lost its place in the group, the broker could not be reached, or it
// did not answer before the adapter stopped waiting (confluent's "no
// answer": the revocation's or the shutdown's bound, while the member was
// cut off from the broker).
// (An adapter's own refusal, such as franz-go's "the partition's
// assignment in the group's new session is not known yet", is not one:
// a commit it should have written and did not is a defect the checker
// must see.) Matched case-insensitively in the warning's error.
var lostPlace = []string{
	"unknown member", "unknown_member_id", "not known in the current generation",
	"illegal_generation", "illegal generation", "generation id is not valid",
	"rebalance_in_progress", "rebalance in progress", "fenced",
	"not_coordinator", "not coordinator", "coordinator_not_available", "coordinator not available",
	"waiting for coordinator", "run out of available brokers", "broker not connected",
	"connection refused", "connection reset", "broken pipe", "eof", "unable to dial",
	"i/o timeout", "deadline exceeded", "timed out", "no answer",
}

// unwrittenHandler passes every record on to next, and records each of
// member's last commits that could not be written (lostPlace) into hist as
// an Unwritten event, so that the history checker knows which released
// claim's coalesced checkpoints are gone (see streamtest.Unwritten).
type unwrittenHandler struct {
	hist   *streamtest.History
	member string
	next   slog.Handler
	min    slog.Level  // the records below it are not passed on
	attrs  []slog.Attr // from WithAttrs
}

// unwrittenLogger returns a logger for member's processor that records its
// unwritten commits into hist and passes every record on to next; when
// next is nil, it passes on to the default logger's handler the warnings
// and errors only, as a processor's own default logger does.
func unwrittenLogger(hist *streamtest.History, member string, next slog.Handler) *slog.Logger {
	least := slog.Level(-1 << 10) // every record
	if next == nil {
		next, least = slog.Default().Handler(), slog.LevelWarn
	}
	return slog.New(&unwrittenHandler{hist: hist, member: member, next: next, min: least})
}

func (h *unwrittenHandler) Enabled(ctx context.Context, l slog.Level) bool {
	return l >= slog.LevelWarn || l >= h.min && h.next.Enabled(ctx, l)
}

func (h *unwrittenHandler) Handle(ctx context.Context, rec slog.Record) error {
	if strings.HasPrefix(rec.Message, unwrittenMessage) {
		ev := streamtest.Event{Kind: streamtest.Unwritten, Member: h.member, Offset: -1}
		known, lost := 0, false
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
			case "error":
				msg := strings.ToLower(v.String())
				for _, l := range lostPlace {
					lost = lost || strings.Contains(msg, l)
				}
			}
			return true
		}
		for _, a := range h.attrs {
			read(a)
		}
		rec.Attrs(read)
		if known == 3 && lost {
			h.hist.Add(ev)
		}
	}
	if rec.Level < h.min || !h.next.Enabled(ctx, rec.Level) {
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
