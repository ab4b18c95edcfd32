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

// partitionLogger returns l with the attributes topic and partition, as
// l.With("topic", topic, "partition", partition) would, without having l's
// handler format them until a record is logged: a partition's worker logs
// rarely, and With costs every idle partition its handler's copy.
func partitionLogger(l *slog.Logger, topic string, partition int32) *slog.Logger {
	return slog.New(&partitionHandler{h: l.Handler(), topic: topic, partition: partition})
}

type partitionHandler struct {
	h         slog.Handler
	topic     string
	partition int32
}

func (h *partitionHandler) with() slog.Handler {
	return h.h.WithAttrs([]slog.Attr{slog.String("topic", h.topic), slog.Any("partition", h.partition)})
}

func (h *partitionHandler) Enabled(ctx context.Context, l slog.Level) bool {
	return h.h.Enabled(ctx, l)
}

func (h *partitionHandler) Handle(ctx context.Context, r slog.Record) error {
	return h.with().Handle(ctx, r)
}

func (h *partitionHandler) WithAttrs(as []slog.Attr) slog.Handler {
	if len(as) == 0 {
		return h
	}
	return h.with().WithAttrs(as)
}

func (h *partitionHandler) WithGroup(name string) slog.Handler {
	if name == "" {
		return h
	}
	return h.with().WithGroup(name)
}
