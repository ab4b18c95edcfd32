package stream

import (
	"context"
	"log/slog"
	"slices"
)

// defaultLogger is the logger of a Processor given none: its warnings and
// errors (a give-up, an outage, a failing commit or exhaustion action) go
// to slog.Default(), read when each record is logged, so that a program
// that sets its default logger after building the processor is heard;
// records below Warn are dropped.
func defaultLogger() *slog.Logger { return slog.New(warnHandler{}) }

type warnHandler struct {
	ops []func(slog.Handler) slog.Handler // WithAttrs and WithGroup, in order
}

func (h warnHandler) Enabled(ctx context.Context, l slog.Level) bool {
	return l >= slog.LevelWarn && slog.Default().Handler().Enabled(ctx, l)
}

func (h warnHandler) Handle(ctx context.Context, r slog.Record) error {
	d := slog.Default().Handler()
	for _, op := range h.ops {
		d = op(d)
	}
	return d.Handle(ctx, r)
}

func (h warnHandler) WithAttrs(as []slog.Attr) slog.Handler {
	as = slices.Clone(as)
	return warnHandler{ops: append(slices.Clone(h.ops), func(d slog.Handler) slog.Handler { return d.WithAttrs(as) })}
}

func (h warnHandler) WithGroup(name string) slog.Handler {
	return warnHandler{ops: append(slices.Clone(h.ops), func(d slog.Handler) slog.Handler { return d.WithGroup(name) })}
}
