// Package kclient closes the franz-go clients the consumers own (package
// franz and its share consumer) within a bound.
package kclient

import (
	"context"
	"log/slog"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
)

// LeaveWait is how long closing a client waits for the broker to answer
// its requests in flight and the leave of its group.
const LeaveWait = 400 * time.Millisecond

// Close closes cl, which was built with kgo.WithContext(ctx) where cancel
// cancels ctx, and leaves its group. franz-go's Close waits for the
// requests in flight and for the leave, which the broker may hold (a
// JoinGroup, a heartbeat, a fetch of a group's share session): past
// LeaveWait, cancel is called, which fails the requests in flight, and the
// broker removes the member at its session timeout. cancel is called
// before Close returns in any case.
func Close(cl *kgo.Client, cancel context.CancelFunc, log *slog.Logger) {
	defer cancel()
	closed := make(chan struct{})
	go func() {
		cl.Close()
		close(closed)
	}()
	t := time.NewTimer(LeaveWait)
	defer t.Stop()
	select {
	case <-closed:
	case <-t.C:
		log.Warn("redeliver: the client did not close in time: a request to the broker is still waiting for its answer; it is cancelled, and the broker removes the member at its session timeout", "waited", LeaveWait)
		cancel()
		<-closed
	}
}
