package engine

import (
	"context"
	"errors"
	"fmt"
	"net"
	"reflect"
	"strconv"
	"time"

	"github.com/segmentio/kafka-go"
	"github.com/segmentio/kafka-go/protocol/heartbeat"
)

// defaultHeartbeatInterval is kafka-go's, for a ConsumerGroupConfig that
// sets none.
const defaultHeartbeatInterval = 3 * time.Second

// keepSession heartbeats the generation's member to the group's
// coordinator from the generation's end (gctx) until done closes: while
// the member waits for its workers before it joins again or leaves. It
// stops too when Run's drain gives up on the workers (Consumer.gaveUp):
// the member is then left to the broker, which takes it out of the group
// at its session timeout.
//
// kafka-go stops a generation's heartbeats as soon as the generation
// ends, and its next join waits for every function the generation
// started, the manager's wait for the workers included. A member that
// sends no heartbeat for the session timeout is taken out of the group,
// and its partitions are given to another member while its handlers
// still run. The heartbeats keep the member in the group, so that the
// rebalance waits for it as the other clients' rebalances wait for
// theirs: up to the group's rebalance timeout, past which the broker
// takes the member out anyway; keepSession then stops, with a Warn line.
func (g *generation) keepSession(gctx context.Context, done <-chan struct{}) {
	select {
	case <-gctx.Done():
	case <-done:
		return
	}
	select {
	case <-g.stale:
		return // the coordinator said the member's generation is over
	default:
	}
	interval := g.c.cfg.Group.HeartbeatInterval
	if interval <= 0 {
		interval = defaultHeartbeatInterval
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() {
		select {
		case <-done:
		case <-g.c.gaveUp:
		}
		cancel()
	}()
	var coordinator net.Addr
	t := time.NewTimer(0) // the first heartbeat at once: kafka-go's last may be an interval old
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		var err error
		if coordinator == nil {
			coordinator, err = g.coordinator(ctx, interval)
		}
		if err == nil {
			err = g.heartbeat(ctx, coordinator, interval)
		}
		switch {
		case err == nil:
		case errors.Is(err, kafka.UnknownMemberId), errors.Is(err, kafka.IllegalGeneration), errors.Is(err, kafka.FencedInstanceID):
			if ctx.Err() == nil {
				g.c.log.Warn("redeliver: the broker took this member out of the group while it waited for its handlers "+
					"(past the group's rebalance timeout, or its heartbeats failed for a session timeout): another member may deliver their partitions' records while the handlers still run",
					"group", g.gen.GroupID, "generation", g.gen.ID, "member", g.gen.MemberID, "error", err)
			}
			return
		case ctx.Err() != nil:
			return
		default:
			// The coordinator moved, or did not answer: look it up
			// again for the next heartbeat.
			coordinator = nil
			g.c.log.Debug("redeliver: heartbeat while a rebalance waits failed; trying again", "group", g.gen.GroupID, "error", err)
		}
		t.Reset(interval)
	}
}

// coordinator looks up the group's coordinator.
func (g *generation) coordinator(ctx context.Context, within time.Duration) (net.Addr, error) {
	ctx, cancel := context.WithTimeout(ctx, within)
	defer cancel()
	res, err := g.c.client.FindCoordinator(ctx, &kafka.FindCoordinatorRequest{
		Addr: g.c.client.Addr, Key: g.gen.GroupID, KeyType: kafka.CoordinatorKeyTypeConsumer,
	})
	switch {
	case err != nil:
		return nil, err
	case res.Error != nil:
		return nil, res.Error
	case res.Coordinator == nil:
		return nil, errors.New("no coordinator in the answer")
	}
	return kafka.TCP(net.JoinHostPort(res.Coordinator.Host, strconv.Itoa(res.Coordinator.Port))), nil
}

// heartbeat sends one heartbeat of the generation's member to coordinator.
// The coordinator's answer during a rebalance, RebalanceInProgress, keeps
// the member's session as a plain success does.
func (g *generation) heartbeat(ctx context.Context, coordinator net.Addr, within time.Duration) error {
	ctx, cancel := context.WithTimeout(ctx, within)
	defer cancel()
	m, err := g.c.roundTripTo(ctx, coordinator, &heartbeat.Request{GroupID: g.gen.GroupID, GenerationID: g.gen.ID, MemberID: g.gen.MemberID})
	if err != nil {
		return err
	}
	res, ok := m.(*heartbeat.Response)
	if !ok {
		return fmt.Errorf("unexpected answer %T", m)
	}
	switch code := heartbeatCode(res); code {
	case 0, kafka.RebalanceInProgress:
		return nil
	default:
		return code
	}
}

// heartbeatCode returns the error code of a heartbeat's answer.
//
// kafka-go's heartbeat.Response declares its error code before its
// throttle time, while the answers of version 1 and later carry the
// throttle time first (segmentio/kafka-go#1371): the error code is then
// decoded as the throttle time's low 16 bits, and the throttle time's high
// bits (0 for a throttle under 65 s) as the error code. The field order of
// the kafka-go in use says which it is.
func heartbeatCode(res *heartbeat.Response) kafka.Error {
	if swappedHeartbeat && res.ThrottleTimeMs != 0 {
		return kafka.Error(int16(res.ThrottleTimeMs))
	}
	return kafka.Error(res.ErrorCode)
}

// swappedHeartbeat reports whether kafka-go's heartbeat.Response has its
// error code before its throttle time (see heartbeatCode).
var swappedHeartbeat = func() bool {
	t := reflect.TypeFor[heartbeat.Response]()
	code, ok1 := t.FieldByName("ErrorCode")
	throttle, ok2 := t.FieldByName("ThrottleTimeMs")
	return ok1 && ok2 && code.Index[0] < throttle.Index[0]
}()
