package stream

// MergeHooks returns hooks that call each of hs's in turn, in the order
// given; a hook none of them sets stays nil.
func MergeHooks(hs ...Hooks) Hooks {
	var m Hooks
	for _, h := range hs {
		m.Claimed = chain(m.Claimed, h.Claimed)
		m.Released = chain(m.Released, h.Released)
		m.Delivered = chain(m.Delivered, h.Delivered)
		m.RetryScheduled = chain(m.RetryScheduled, h.RetryScheduled)
		m.Exhausted = chain(m.Exhausted, h.Exhausted)
		m.ActionTried = chain(m.ActionTried, h.ActionTried)
		m.Stopped = chain(m.Stopped, h.Stopped)
		m.Checkpointed = chain(m.Checkpointed, h.Checkpointed)
		m.Abandoned = chain(m.Abandoned, h.Abandoned)
		m.OutageBegan = chain(m.OutageBegan, h.OutageBegan)
		m.OutageEnded = chain(m.OutageEnded, h.OutageEnded)
		m.Probing = chain(m.Probing, h.Probing)
	}
	return m
}

func chain[E any](a, b func(E)) func(E) {
	switch {
	case a == nil:
		return b
	case b == nil:
		return a
	}
	return func(e E) { a(e); b(e) }
}
