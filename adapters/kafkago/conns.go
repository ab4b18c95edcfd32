package kafkago

import (
	"context"
	"errors"
	"net"
	"sync"

	"github.com/segmentio/kafka-go"
)

// errConnsClosed refuses a dial once the claim that owns the reader ended.
var errConnsClosed = errors.New("kafkago: the partition's reader is closing")

// connSet tracks the network connections of one partition's reader, so
// that closing the claim can close them: a kafka-go reader waiting for a
// fetch answer does not see its context and would hold Reader.Close up
// for the fetch's MaxWait (10s by default).
type connSet struct {
	mu     sync.Mutex
	closed bool
	conns  map[*trackedConn]struct{}
}

func newConnSet() *connSet { return &connSet{conns: make(map[*trackedConn]struct{})} }

// dialer returns a copy of base whose connections are tracked by s. A
// DialFunc of base is kept; without one, the copy dials as kafka-go does
// with base's network settings.
func (s *connSet) dialer(base *kafka.Dialer) *kafka.Dialer {
	d := *base
	dial := base.DialFunc
	if dial == nil {
		nd := &net.Dialer{LocalAddr: base.LocalAddr, FallbackDelay: base.FallbackDelay, KeepAlive: base.KeepAlive}
		dial = nd.DialContext
	}
	d.DialFunc = func(ctx context.Context, network, address string) (net.Conn, error) {
		if s.isClosed() {
			return nil, errConnsClosed
		}
		conn, err := dial(ctx, network, address)
		if err != nil {
			return nil, err
		}
		tc := &trackedConn{Conn: conn, s: s}
		s.mu.Lock()
		defer s.mu.Unlock()
		if s.closed {
			conn.Close()
			return nil, errConnsClosed
		}
		s.conns[tc] = struct{}{}
		return tc, nil
	}
	return &d
}

func (s *connSet) isClosed() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.closed
}

// close closes every tracked connection and refuses new ones.
func (s *connSet) close() {
	s.mu.Lock()
	s.closed = true
	conns := make([]*trackedConn, 0, len(s.conns))
	for c := range s.conns {
		conns = append(conns, c)
	}
	s.mu.Unlock()
	for _, c := range conns {
		c.Close()
	}
}

// trackedConn is a connection that leaves its set when closed.
type trackedConn struct {
	net.Conn
	s    *connSet
	once sync.Once
	err  error
}

func (c *trackedConn) Close() error {
	c.once.Do(func() {
		c.err = c.Conn.Close()
		c.s.mu.Lock()
		delete(c.s.conns, c)
		c.s.mu.Unlock()
	})
	return c.err
}
