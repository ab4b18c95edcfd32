package engine

import (
	"context"
	"errors"
	"net"
	"sync"

	"github.com/segmentio/kafka-go"
)

// errGroupClosed answers a dial of the group after its connections were
// closed.
var errGroupClosed = errors.New("kafkago: the consumer is stopping")

// groupConns keeps the connections kafka-go's consumer group makes, so that
// a shutdown can close them: kafka-go's ConsumerGroup.Close waits for a
// JoinGroup, SyncGroup or metadata request in flight, which a broker may
// hold for as long as the group's rebalance timeout.
type groupConns struct {
	dial func(ctx context.Context, network, address string) (net.Conn, error)

	mu     sync.Mutex
	conns  map[*groupConn]struct{}
	closed bool
}

// trackDialer returns a copy of d (kafka.DefaultDialer when nil) whose
// connections are kept in the returned groupConns. It dials as d does:
// through its DialFunc, or a net.Dialer made of its settings; the resolver
// and TLS still apply around it.
func trackDialer(d *kafka.Dialer) (*kafka.Dialer, *groupConns) {
	if d == nil {
		d = kafka.DefaultDialer
	}
	dc := *d
	gc := &groupConns{dial: d.DialFunc, conns: make(map[*groupConn]struct{})}
	if gc.dial == nil {
		gc.dial = (&net.Dialer{LocalAddr: d.LocalAddr, DualStack: d.DualStack, FallbackDelay: d.FallbackDelay, KeepAlive: d.KeepAlive}).DialContext
	}
	dc.DialFunc = gc.dialContext
	return &dc, gc
}

func (gc *groupConns) dialContext(ctx context.Context, network, address string) (net.Conn, error) {
	c, err := gc.dial(ctx, network, address)
	if err != nil {
		return nil, err
	}
	gc.mu.Lock()
	defer gc.mu.Unlock()
	if gc.closed {
		c.Close()
		return nil, errGroupClosed
	}
	t := &groupConn{Conn: c, gc: gc}
	gc.conns[t] = struct{}{}
	return t, nil
}

// closeAll closes every connection and refuses new ones.
func (gc *groupConns) closeAll() {
	gc.mu.Lock()
	gc.closed = true
	conns := gc.conns
	gc.conns = nil
	gc.mu.Unlock()
	for c := range conns {
		c.Conn.Close()
	}
}

// groupConn is a connection of the group, kept until it is closed.
type groupConn struct {
	net.Conn
	gc   *groupConns
	once sync.Once
}

func (c *groupConn) Close() error {
	c.once.Do(func() {
		c.gc.mu.Lock()
		delete(c.gc.conns, c)
		c.gc.mu.Unlock()
	})
	return c.Conn.Close()
}
