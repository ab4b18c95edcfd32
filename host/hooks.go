package host

import "github.com/redeliver-go/redeliver/stream"

// joinHooks returns hooks that call each of hs's, in order.
func joinHooks(hs []stream.Hooks) stream.Hooks {
	var out stream.Hooks
	for _, h := range hs {
		out.Claimed = join(out.Claimed, h.Claimed)
		out.Released = join(out.Released, h.Released)
		out.Delivered = join(out.Delivered, h.Delivered)
		out.RetryScheduled = join(out.RetryScheduled, h.RetryScheduled)
		out.Exhausted = join(out.Exhausted, h.Exhausted)
		out.Checkpointed = join(out.Checkpointed, h.Checkpointed)
		out.Stopped = join(out.Stopped, h.Stopped)
		out.Abandoned = join(out.Abandoned, h.Abandoned)
	}
	return out
}

// join returns a function calling a then b; nil when both are.
func join[E any](a, b func(E)) func(E) {
	switch {
	case a == nil:
		return b
	case b == nil:
		return a
	}
	return func(e E) { a(e); b(e) }
}
