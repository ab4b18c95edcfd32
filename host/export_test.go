package host

import "github.com/redeliver-go/redeliver/stream"

// JoinHooks exposes joinHooks to the tests.
func JoinHooks(hs ...stream.Hooks) stream.Hooks { return joinHooks(hs) }
