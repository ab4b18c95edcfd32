package conformance

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	toxiproxy "github.com/Shopify/toxiproxy/v2"
	"github.com/rs/zerolog"

	"github.com/redeliver-go/redeliver/checkpoint"
	"github.com/redeliver-go/redeliver/stream/streamtest"
)

// Network faults between the consumers and the broker, made by toxiproxy
// run in process as a library: a TCP proxy on loopback per broker address
// and consumer, with toxics (latency, resets, a blackhole) added and removed
// while the consumers run.
//
// Kafka clients connect to the bootstrap address, then to the addresses the
// brokers advertise in their metadata, so a proxy in front of the bootstrap
// address alone would see only the first request. Instead each consumer
// gets a dialer ([Config.Dial]: franz-go's kgo.Dialer, kafka-go's
// Dialer.DialFunc, which the kafka-go adapter also uses for its fetch
// connections and its commits) that sends every connection, to whatever
// address, through a proxy of its own for that address, made on first use.
// The broker's advertised address stays what it is, every connection of
// the consumer crosses the faulty network, and the test's own admin client
// (producing, reading committed offsets) dials the broker directly. A
// client that takes no dialer (librdkafka) bootstraps from a [Front] that
// uses the dialer for it.

// EnvSoak makes the network-fault scenarios run longer (more records,
// more faults, longer outages); CI runs the short versions.
const EnvSoak = "REDELIVER_SOAK"

// faultNet is one consumer's network: a toxiproxy proxy per address the
// consumer dials, and the toxics in force on all of them.
type faultNet struct {
	t   *testing.T
	srv *toxiproxy.ApiServer

	mu      sync.Mutex
	proxies map[string]*toxiproxy.Proxy // by the address dialed
	toxics  map[string]string           // in force: name -> the toxic's JSON
	closed  bool

	dials  atomic.Int64 // connections the consumer opened
	sent   atomic.Int64 // writes of at least a byte on them
	broken atomic.Int64 // connections that failed under the consumer (not closed by it)
}

// watchedConn counts, for its faultNet, the consumer's writes and the
// connection's failure: the first read or write error that does not
// follow the consumer's own Close.
type watchedConn struct {
	net.Conn
	n      *faultNet
	closed atomic.Bool
	failed atomic.Bool
}

func (c *watchedConn) Read(b []byte) (int, error) {
	k, err := c.Conn.Read(b)
	c.failure(err)
	return k, err
}

func (c *watchedConn) Write(b []byte) (int, error) {
	if len(b) > 0 {
		c.n.sent.Add(1)
	}
	k, err := c.Conn.Write(b)
	c.failure(err)
	return k, err
}

func (c *watchedConn) Close() error {
	c.closed.Store(true)
	return c.Conn.Close()
}

func (c *watchedConn) failure(err error) {
	if err == nil || c.closed.Load() || errors.Is(err, os.ErrDeadlineExceeded) {
		return
	}
	if c.failed.CompareAndSwap(false, true) {
		c.n.broken.Add(1)
	}
}

func newFaultNet(t *testing.T) *faultNet {
	n := &faultNet{
		t:       t,
		srv:     toxiproxy.NewServer(toxiproxy.NewMetricsContainer(nil), zerolog.Nop()),
		proxies: make(map[string]*toxiproxy.Proxy),
		toxics:  make(map[string]string),
	}
	t.Cleanup(n.close)
	return n
}

// dial connects to address through the proxy for it, which it makes on
// first use with the toxics in force.
func (n *faultNet) dial(ctx context.Context, network, address string) (net.Conn, error) {
	p, err := n.proxy(address)
	if err != nil {
		return nil, err
	}
	n.dials.Add(1)
	var d net.Dialer
	c, err := d.DialContext(ctx, network, p.Listen)
	if err != nil {
		return nil, err
	}
	return &watchedConn{Conn: c, n: n}, nil
}

func (n *faultNet) proxy(address string) (*toxiproxy.Proxy, error) {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.closed {
		return nil, fmt.Errorf("faultnet: closed")
	}
	if p, ok := n.proxies[address]; ok {
		return p, nil
	}
	p := toxiproxy.NewProxy(n.srv, fmt.Sprintf("to-%s", address), "127.0.0.1:0", address)
	if err := p.Start(); err != nil {
		return nil, fmt.Errorf("faultnet: proxy to %s: %w", address, err)
	}
	for _, js := range n.toxics {
		if _, err := p.Toxics.AddToxicJson(strings.NewReader(js)); err != nil {
			p.Stop()
			return nil, fmt.Errorf("faultnet: toxic %s: %w", js, err)
		}
	}
	n.proxies[address] = p
	return p, nil
}

// add puts a toxic on every proxy, now and to come: typ is a toxiproxy
// toxic type, stream "upstream" (consumer to broker) or "downstream".
func (n *faultNet) add(name, typ, stream string, attrs string) {
	n.t.Helper()
	js := fmt.Sprintf(`{"name":%q,"type":%q,"stream":%q,"toxicity":1,"attributes":%s}`, name, typ, stream, attrs)
	n.mu.Lock()
	defer n.mu.Unlock()
	n.toxics[name] = js
	for _, p := range n.proxies {
		if _, err := p.Toxics.AddToxicJson(strings.NewReader(js)); err != nil {
			n.t.Errorf("faultnet: toxic %s: %v", js, err)
		}
	}
}

// remove takes the named toxic off every proxy.
func (n *faultNet) remove(name string) {
	n.t.Helper()
	n.mu.Lock()
	defer n.mu.Unlock()
	delete(n.toxics, name)
	for _, p := range n.proxies {
		if err := p.Toxics.RemoveToxic(context.Background(), name); err != nil {
			n.t.Errorf("faultnet: remove toxic %s: %v", name, err)
		}
	}
}

// close stops every proxy, which closes their connections.
func (n *faultNet) close() {
	n.mu.Lock()
	n.closed = true
	ps := n.proxies
	n.proxies = nil
	n.mu.Unlock()
	for _, p := range ps {
		p.Stop()
	}
}

// RunNetworkFaults runs the network-fault scenarios for the adapter on the
// provider's broker: latency with jitter on every connection, connections
// reset while requests (fetches, commits, heartbeats) cross them, and one
// consumer cut off from the broker for longer than the session timeout and
// then back. Every delivery and commit goes into a [streamtest.History]
// that [streamtest.History.Check] verifies; the figures go where the
// reliability suite's go.
func RunNetworkFaults(t *testing.T, p Provider, a Adapter) {
	soak := os.Getenv(EnvSoak) == "1"
	for _, s := range []struct {
		name string
		run  func(t *testing.T, e *env, soak bool) Figures
	}{
		{"NetLatencyJitter", netLatencyScenario},
		{"NetConnectionResets", netResetsScenario},
		{"NetPartitionBeyondSession", netPartitionScenario},
	} {
		t.Run(s.name, func(t *testing.T) {
			b := p.Start(t)
			if a.NeedsKIP848() && !b.KIP848 {
				t.Skipf("%s needs the KIP-848 protocol; the %s broker does not run it", a.Name(), p.Name())
			}
			begin := time.Now()
			f := s.run(t, newEnv(t, b, a), soak)
			f.Scenario, f.Provider, f.Adapter, f.Took = s.name, p.Name(), a.Name(), time.Since(begin)
			if soak {
				f.Note = "soak; " + f.Note
			}
			report(t, f)
		})
	}
}

// netPolicy retries for ever with short backoffs: no batch is given up, so
// every record must be handled.
var netPolicy = checkpoint.Policy{MaxRetries: checkpoint.Infinite, Backoff: checkpoint.FullJitter(checkpoint.Capped(50*time.Millisecond, checkpoint.Exponential(5*time.Millisecond)))}

// netLatencyScenario: two consumers whose every connection has 20ms ± 20ms
// of latency each way, and a handler that fails now and then.
func netLatencyScenario(t *testing.T, e *env, soak bool) Figures {
	parts, n := int32(3), 400
	if soak {
		n = 5000
	}
	e.fill(parts, n)
	var (
		hist   streamtest.History
		faults atomic.Int64
	)
	h := faultyHandler(0, 0.1, 0.02, &faults)
	for _, name := range []string{"a", "b"} {
		fn := newFaultNet(t)
		fn.add("lat-up", "latency", "upstream", `{"latency":20,"jitter":20}`)
		fn.add("lat-down", "latency", "downstream", `{"latency":20,"jitter":20}`)
		e.start(name, spec{handler: h, policy: netPolicy, maxBatch: 10, hooks: hist.Hooks(name), rec: &hist, session: true, dial: fn.dial})
	}
	e.waitTotal(int64(parts)*int64(n), longWait)
	e.stopAll()
	r := check(t, &hist, e.ends(parts, int64(n)))
	f := figures(r, faults.Load())
	f.Note = "latency 20ms±20ms each way on every connection; faults = handler errors and panics"
	return f
}

// netResetsScenario: 1800 records, two consumers; every 300-700ms one of
// them has every connection reset (TCP RST) as soon as data crosses it
// either way (fetch requests and answers, commits, heartbeats, joins), for
// 50ms and until it has sent a byte.
func netResetsScenario(t *testing.T, e *env, soak bool) Figures {
	parts, n, windows := int32(3), 600, 12
	if soak {
		n, windows = 6000, 150
	}
	e.fill(parts, n)
	var hist streamtest.History
	// A slow handler (100ms a batch of 10) keeps the run going through
	// every window.
	h := faultyHandler(100*time.Millisecond, 0, 0, new(atomic.Int64))
	nets := make([]*faultNet, 2)
	for i, name := range []string{"a", "b"} {
		nets[i] = newFaultNet(t)
		e.start(name, spec{handler: h, policy: netPolicy, maxBatch: 10, hooks: hist.Hooks(name), rec: &hist, session: true, dial: nets[i].dial})
	}
	total := int64(parts) * int64(n)
	// A window resets a connection only if a byte crosses it meanwhile,
	// so it stays until the consumer has sent one (a request, a commit, a
	// heartbeat) or for at most a few seconds: a client whose connections
	// all wait on a long poll, or that waits out a backoff before it
	// dials again, sends nothing for a while.
	const (
		minWindow = 50 * time.Millisecond
		settle    = 20 * time.Millisecond // for the byte to reach the proxy
	)
	maxWindow := 2*time.Second + e.b.SessionTimeout/10
	e.waitTotal(total/10, longWait)
	dials0 := nets[0].dials.Load() + nets[1].dials.Load()
	broken0 := nets[0].broken.Load() + nets[1].broken.Load()
	var resets, unsent int64
	for i := range windows {
		if e.committedTotal() >= total {
			break
		}
		fn := nets[i%2]
		sent := fn.sent.Load()
		fn.add("rst-up", "reset_peer", "upstream", `{"timeout":0}`)
		fn.add("rst-down", "reset_peer", "downstream", `{"timeout":0}`)
		began := time.Now()
		time.Sleep(minWindow)
		for fn.sent.Load() == sent && time.Since(began) < maxWindow {
			time.Sleep(5 * time.Millisecond)
		}
		if fn.sent.Load() == sent {
			unsent++
		}
		time.Sleep(settle)
		fn.remove("rst-up")
		fn.remove("rst-down")
		resets++
		time.Sleep(300*time.Millisecond + rand.N(400*time.Millisecond))
	}
	e.waitTotal(total, longWait)
	// A commit whose answer a reset cut off may have landed: the broker
	// shows it, while the consumer tries it again after a backoff and
	// reports it only then.
	waitReported(t, &hist, e.ends(parts, int64(n)), longWait)
	redials := nets[0].dials.Load() + nets[1].dials.Load() - dials0
	broken := nets[0].broken.Load() + nets[1].broken.Load() - broken0
	e.stopAll()
	// Most windows must have cut a connection under the consumer. (The
	// consumers' own counts of reconnections differ: some clients dial
	// again at once, some after a backoff, some only for the next
	// request.)
	if broken < (resets+1)/2 {
		t.Errorf("%d connections failed under the consumers in %d windows of resets (%d of them with no byte sent in %v): the resets did not reach the consumers", broken, resets, unsent, maxWindow)
	}
	r := check(t, &hist, e.ends(parts, int64(n)))
	f := figures(r, resets)
	f.Note = fmt.Sprintf("faults = windows in which every connection of one consumer is reset on its next byte, from %v until it sends one; %d connections failed, %d opened again", minWindow, broken, redials)
	return f
}

// netPartitionScenario: two consumers; one is cut off from the broker (a
// blackhole: connections open, nothing crosses) for longer than the
// session timeout, so the group moves its partitions to the other, and then
// comes back while the other is still consuming.
func netPartitionScenario(t *testing.T, e *env, soak bool) Figures {
	parts, n := int32(4), 1500
	if soak {
		n = 6000
	}
	e.fill(parts, n)
	var hist streamtest.History
	h := faultyHandler(3*time.Millisecond, 0.05, 0, new(atomic.Int64))
	cut := newFaultNet(t)
	e.start("a", spec{handler: h, policy: netPolicy, maxBatch: 10, hooks: hist.Hooks("a"), rec: &hist, session: true, dial: cut.dial})
	e.start("b", spec{handler: h, policy: netPolicy, maxBatch: 10, hooks: hist.Hooks("b"), rec: &hist, session: true, dial: newFaultNet(t).dial})
	total := int64(parts) * int64(n)
	e.waitTotal(total/5, longWait)
	// The cut must take something from a: wait until it holds a
	// partition. (With a commit window the first fifth of the records can
	// be committed by b alone, before the group has taken a in.)
	for deadline := time.Now().Add(longWait); !holds(hist.Events(), "a"); time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("the first consumer held no partition %v after the second had committed a fifth of the records", longWait)
		}
	}

	outage := 2*e.b.SessionTimeout + 2*time.Second
	cut.add("hole-up", "timeout", "upstream", `{"timeout":0}`)
	cut.add("hole-down", "timeout", "downstream", `{"timeout":0}`)
	began := time.Now()
	cutAt := len(hist.Events())
	time.Sleep(300 * time.Millisecond) // commits that crossed before the cut land
	at := e.committed()
	// Recovery: until every partition the cut consumer held moves on
	// again, under the other consumer (or has reached its end).
	var recovery time.Duration
	for recovery == 0 && time.Since(began) < longWait {
		now := e.committed()
		moved := true
		for p := range parts {
			if o := now[p]; o.At <= at[p].At && o.At < int64(n) {
				moved = false
			}
		}
		if moved {
			recovery = time.Since(began)
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	if recovery == 0 {
		t.Errorf("the partitions did not move on within %v of the cut", longWait)
	}
	if rest := outage - time.Since(began); rest > 0 {
		time.Sleep(rest)
	}
	// The cut reached the consumer only if the group moved its
	// partitions: the other claimed some while it was cut off. (A
	// consumer whose connections went around the faulty network would
	// keep them, and its commits would move on all the same.)
	if !claimedSince(hist.Events()[cutAt:], "b") {
		t.Errorf("the other consumer claimed no partition while the first was cut off for %v: the cut did not reach the consumer", outage)
	}
	cut.remove("hole-up")
	cut.remove("hole-down")
	e.waitTotal(total, longWait)
	waitReported(t, &hist, e.ends(parts, int64(n)), longWait) // as in netResetsScenario
	e.stopAll()
	r := check(t, &hist, e.ends(parts, int64(n)))
	f := figures(r, 1)
	f.Recovery = recovery
	f.Note = fmt.Sprintf("one consumer blackholed for %v (session timeout %v); recovery = from the cut until every partition moves on", outage, e.b.SessionTimeout)
	return f
}

// holds says whether member holds a partition at the end of events: a
// claim of its that was not released.
func holds(events []streamtest.Event, member string) bool {
	live := map[uint64]bool{}
	for _, e := range events {
		switch {
		case e.Member != member:
		case e.Kind == streamtest.Claimed:
			live[e.Claim] = true
		case e.Kind == streamtest.Released:
			delete(live, e.Claim)
		}
	}
	return len(live) > 0
}

// claimedSince says whether member claimed a partition in events.
func claimedSince(events []streamtest.Event, member string) bool {
	for _, e := range events {
		if e.Kind == streamtest.Claimed && e.Member == member {
			return true
		}
	}
	return false
}
