package conformance

import (
	"bufio"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"strconv"
	"sync"
	"testing"

	"github.com/twmb/franz-go/pkg/kmsg"
)

// Front gives a Kafka client that dials the brokers itself, with no dial
// function to give it (librdkafka, under confluent-kafka-go), a network
// of its own all the same: a listener on loopback for each broker address
// the client learns, whose connections it carries to the broker through
// a dial function (the consumer's faultNet), rewriting the broker
// addresses in the answers that carry them (Metadata, FindCoordinator,
// DescribeCluster, and the leader hints of Fetch and Produce from v16 and
// v10) to its own listeners. The client bootstraps from
// [Front.Bootstrap]'s addresses and from then on connects only to the
// front's listeners; every byte of every connection crosses the dial
// function's network. Nothing else in
// the protocol is changed: requests go through as they are, and answers
// the front cannot read go through as they came.
type Front struct {
	t    *testing.T
	dial func(ctx context.Context, network, address string) (net.Conn, error)

	mu        sync.Mutex
	listeners map[string]net.Listener // by the broker address they stand for
	conns     map[net.Conn]struct{}
	closed    bool
	wg        sync.WaitGroup
}

// NewFront returns a front whose connections reach the brokers through
// dial. It closes its listeners and connections when the test ends.
func NewFront(t *testing.T, dial func(ctx context.Context, network, address string) (net.Conn, error)) *Front {
	f := &Front{t: t, dial: dial, listeners: make(map[string]net.Listener), conns: make(map[net.Conn]struct{})}
	t.Cleanup(f.close)
	return f
}

// Bootstrap returns the front's addresses for the brokers' addresses
// (host:port), to give the client as its bootstrap servers.
func (f *Front) Bootstrap(addrs []string) ([]string, error) {
	out := make([]string, 0, len(addrs))
	for _, a := range addrs {
		l, err := f.listener(a)
		if err != nil {
			return nil, err
		}
		out = append(out, l)
	}
	return out, nil
}

// listener returns the address of the front's listener for the broker
// address, which it opens on first use.
func (f *Front) listener(broker string) (string, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.closed {
		return "", errors.New("front: closed")
	}
	if l, ok := f.listeners[broker]; ok {
		return l.Addr().String(), nil
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", fmt.Errorf("front: listen for %s: %w", broker, err)
	}
	f.listeners[broker] = l
	f.wg.Add(1)
	go f.accept(l, broker)
	return l.Addr().String(), nil
}

func (f *Front) accept(l net.Listener, broker string) {
	defer f.wg.Done()
	for {
		c, err := l.Accept()
		if err != nil {
			return
		}
		if !f.track(c) {
			c.Close()
			return
		}
		f.wg.Add(1)
		go func() {
			defer f.wg.Done()
			defer f.untrack(c)
			f.carry(c, broker)
		}()
	}
}

func (f *Front) track(c net.Conn) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.closed {
		return false
	}
	f.conns[c] = struct{}{}
	return true
}

func (f *Front) untrack(c net.Conn) {
	f.mu.Lock()
	delete(f.conns, c)
	f.mu.Unlock()
	c.Close()
}

// carry joins the client's connection to one to the broker through the
// dial function, until either side closes or fails: closing one closes
// the other, so a reset on the faulty network reaches the client.
func (f *Front) carry(client net.Conn, broker string) {
	server, err := f.dial(context.Background(), "tcp", broker)
	if err != nil {
		return // the client sees its connection closed, as a refused one
	}
	if !f.track(server) {
		server.Close()
		return
	}
	defer f.untrack(server)
	var (
		mu       sync.Mutex
		inFlight = make(map[int32][2]int16) // correlation ID -> API key, version
	)
	done := make(chan struct{}, 2)
	go func() { // client to broker: as it is, noting what each request is
		defer func() { done <- struct{}{} }()
		r := bufio.NewReader(client)
		for {
			frame, err := readFrame(r)
			if err != nil {
				return
			}
			if len(frame) >= 12 {
				key := int16(binary.BigEndian.Uint16(frame[4:]))
				ver := int16(binary.BigEndian.Uint16(frame[6:]))
				corr := int32(binary.BigEndian.Uint32(frame[8:]))
				mu.Lock()
				inFlight[corr] = [2]int16{key, ver}
				mu.Unlock()
			}
			if _, err := server.Write(frame); err != nil {
				return
			}
		}
	}()
	go func() { // broker to client: addresses rewritten
		defer func() { done <- struct{}{} }()
		r := bufio.NewReader(server)
		for {
			frame, err := readFrame(r)
			if err != nil {
				return
			}
			if len(frame) >= 8 {
				corr := int32(binary.BigEndian.Uint32(frame[4:]))
				mu.Lock()
				req, ok := inFlight[corr]
				delete(inFlight, corr)
				mu.Unlock()
				if ok {
					frame = f.rewrite(frame, req[0], req[1])
				}
			}
			if _, err := client.Write(frame); err != nil {
				return
			}
		}
	}()
	<-done
	client.Close()
	server.Close()
	<-done
}

// readFrame reads one size-prefixed Kafka frame, the size included.
func readFrame(r *bufio.Reader) ([]byte, error) {
	var size [4]byte
	if _, err := io.ReadFull(r, size[:]); err != nil {
		return nil, err
	}
	n := binary.BigEndian.Uint32(size[:])
	if n > 256<<20 {
		return nil, fmt.Errorf("front: frame of %d bytes", n)
	}
	frame := make([]byte, 4+n)
	copy(frame, size[:])
	if _, err := io.ReadFull(r, frame[4:]); err != nil {
		return nil, err
	}
	return frame, nil
}

// rewrite returns the response frame to the request (key, version) with
// every broker address in it replaced by the front's listener for it; a
// frame it does not rewrite, or cannot read, comes back as it was.
func (f *Front) rewrite(frame []byte, key, version int16) []byte {
	switch {
	case key == 3, key == 10, key == 60: // Metadata, FindCoordinator, DescribeCluster
	case key == 1 && version >= 16, key == 0 && version >= 10: // Fetch, Produce: leader hints
	default:
		return frame
	}
	resp := kmsg.ResponseForKey(key)
	if resp == nil {
		return frame
	}
	resp.SetVersion(version)
	// The header: the correlation ID, then (flexible versions) tagged
	// fields, which the front keeps as they are.
	head := 8
	if resp.IsFlexible() {
		n, ok := skipTags(frame[head:])
		if !ok {
			return frame
		}
		head += n
	}
	if err := resp.ReadFrom(frame[head:]); err != nil {
		return frame
	}
	changed := false
	move := func(host *string, port *int32) {
		if *host == "" || *port < 0 {
			return
		}
		l, err := f.listener(net.JoinHostPort(*host, strconv.Itoa(int(*port))))
		if err != nil {
			return
		}
		h, p, _ := net.SplitHostPort(l)
		n, _ := strconv.Atoi(p)
		*host, *port = h, int32(n)
		changed = true
	}
	switch r := resp.(type) {
	case *kmsg.MetadataResponse:
		for i := range r.Brokers {
			move(&r.Brokers[i].Host, &r.Brokers[i].Port)
		}
	case *kmsg.FindCoordinatorResponse:
		if r.ErrorCode == 0 {
			move(&r.Host, &r.Port)
		}
		for i := range r.Coordinators {
			if r.Coordinators[i].ErrorCode == 0 {
				move(&r.Coordinators[i].Host, &r.Coordinators[i].Port)
			}
		}
	case *kmsg.DescribeClusterResponse:
		for i := range r.Brokers {
			move(&r.Brokers[i].Host, &r.Brokers[i].Port)
		}
	case *kmsg.FetchResponse:
		for i := range r.Brokers {
			move(&r.Brokers[i].Host, &r.Brokers[i].Port)
		}
	case *kmsg.ProduceResponse:
		for i := range r.Brokers {
			move(&r.Brokers[i].Host, &r.Brokers[i].Port)
		}
	}
	if !changed {
		return frame
	}
	out := append(make([]byte, 0, len(frame)+64), frame[:head]...)
	out = resp.AppendTo(out)
	binary.BigEndian.PutUint32(out, uint32(len(out)-4))
	return out
}

// skipTags returns the length of the tagged fields at the start of b.
func skipTags(b []byte) (int, bool) {
	num, n := binary.Uvarint(b)
	if n <= 0 {
		return 0, false
	}
	at := n
	for range num {
		_, n = binary.Uvarint(b[at:]) // the tag
		if n <= 0 {
			return 0, false
		}
		at += n
		size, n := binary.Uvarint(b[at:])
		if n <= 0 || uint64(len(b)-at-n) < size {
			return 0, false
		}
		at += n + int(size)
	}
	return at, true
}

// close stops the listeners and closes every connection.
func (f *Front) close() {
	f.mu.Lock()
	f.closed = true
	for _, l := range f.listeners {
		l.Close()
	}
	for c := range f.conns {
		c.Close()
	}
	f.mu.Unlock()
	f.wg.Wait()
}
