// Package kclient closes the franz-go clients the consumers own (package
// franz and its share consumer) within a bound.
package kclient

import (
	"context"
	"log/slog"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// LeaveWait is how long closing a client waits for the broker to answer
// its requests in flight and the leave of its group, leaveAlone of it for
// the leave Close sends itself (see leaveNow).
const (
	LeaveWait  = 400 * time.Millisecond
	leaveAlone = 100 * time.Millisecond
)

// Close closes cl, which was built with kgo.WithContext(ctx) where cancel
// cancels ctx, and leaves its group. franz-go's Close waits for the
// requests in flight and for the leave, which the broker may hold (a
// JoinGroup, a heartbeat, a fetch of a group's share session): when it
// has not returned within LeaveWait less leaveAlone, the member's leave is
// sent at once (see leaveNow), then cancel is called, which fails the
// requests in flight; a member that could not leave so is removed by the
// broker at its session timeout. cancel is called before Close returns in
// any case.
func Close(cl *kgo.Client, cancel context.CancelFunc, log *slog.Logger) {
	defer cancel()
	start := time.Now()
	closed := make(chan struct{})
	go func() {
		cl.Close()
		close(closed)
	}()
	t := time.NewTimer(LeaveWait - leaveAlone)
	defer t.Stop()
	select {
	case <-closed:
	case <-t.C:
		after := "it is cancelled, and the broker removes the member at its session timeout"
		if leaveNow(cl) {
			after = "the member's leave was sent on its own, and the request is cancelled"
		}
		log.Warn("redeliver: the client did not close in time: a request to the broker is still waiting for its answer; "+after,
			"waited", time.Since(start).Round(time.Millisecond))
		cancel()
		<-closed
	}
}

// leaveNow sends the classic group member's LeaveGroup itself, within
// leaveAlone, and reports whether the broker took it. franz-go sends its
// own only once its group loop has ended, which a JoinGroup the broker
// holds (until the other members' next heartbeats) keeps from ending:
// cancelled then, the leave was never sent, and a member the broker had
// counted in the join (its leader, whose SyncGroup carries the
// assignment) held the group until its session timeout. A static member
// (an instance ID) is left to franz-go, which keeps it in the group on
// Close so that its restart gets its assignment back; a KIP-848 member
// leaves by its heartbeat, which the broker does not hold, and a share
// group's member has no member ID here: both are left to franz-go.
func leaveNow(cl *kgo.Client) bool {
	group, _ := cl.OptValue(kgo.ConsumerGroup).(string)
	member, _ := cl.GroupMetadata()
	kip848, _ := cl.OptValue(kgo.ServerSideBalancer).(bool)
	if group == "" || member == "" || kip848 || static(cl) {
		return false
	}
	ctx, cancel := context.WithTimeout(context.Background(), leaveAlone)
	defer cancel()
	req := kmsg.NewPtrLeaveGroupRequest()
	req.Group, req.MemberID = group, member
	m := kmsg.NewLeaveGroupRequestMember()
	m.MemberID = member
	req.Members = append(req.Members, m)
	resp, err := req.RequestWith(ctx, cl)
	if err != nil || resp.ErrorCode != 0 {
		return false
	}
	for _, m := range resp.Members {
		if m.ErrorCode != 0 {
			return false
		}
	}
	return true
}

// static reports whether cl's group member has an instance ID.
func static(cl *kgo.Client) bool {
	v := cl.OptValues(kgo.InstanceID)
	if len(v) < 2 {
		return false
	}
	set, _ := v[1].(bool)
	return set
}
