// Package actionctx carries, in the context of an exhaustion action, where
// a given-up record came from beyond its topic, partition and offset: an
// adapter sets it (WithSource) when it hands a claim to the engine, and
// stream.SourceFrom reads it for an action. It is internal so that the
// user's view of package stream holds the reading side only.
package actionctx

import "context"

// Source is stream.Source: the consumer group that gave the record up and
// why, in the consumer's words (empty: the ExhaustedError's message).
type Source struct {
	Group  string
	Reason string
}

type sourceKey struct{}

// WithSource returns ctx carrying s, for an exhaustion action.
func WithSource(ctx context.Context, s Source) context.Context {
	return context.WithValue(ctx, sourceKey{}, s)
}

// SourceFrom returns the Source that ctx carries, if any.
func SourceFrom(ctx context.Context) (Source, bool) {
	s, ok := ctx.Value(sourceKey{}).(Source)
	return s, ok
}
