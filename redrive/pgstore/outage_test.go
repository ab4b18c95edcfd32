package pgstore_test

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redeliver-go/redeliver/redrive"
	"github.com/redeliver-go/redeliver/redrive/pgstore"
	"github.com/redeliver-go/redeliver/redrive/redrivetest"
	"github.com/redeliver-go/redeliver/stream"
	"github.com/redeliver-go/redeliver/stream/streamtest"
)

// proxy forwards a loopback port to the database and can cut it: Down
// closes the port and every connection through it, Up opens it again on
// the same port. It stands for a database that goes away and comes back.
type proxy struct {
	target string
	addr   string

	mu    sync.Mutex
	ln    net.Listener
	conns map[net.Conn]bool
}

func newProxy(t *testing.T, target string) *proxy {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &proxy{target: target, addr: ln.Addr().String(), conns: map[net.Conn]bool{}}
	p.serve(ln)
	t.Cleanup(p.Down)
	return p
}

func (p *proxy) serve(ln net.Listener) {
	p.ln = ln
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			up, err := net.Dial("tcp", p.target)
			if err != nil {
				c.Close()
				continue
			}
			p.mu.Lock()
			p.conns[c], p.conns[up] = true, true
			p.mu.Unlock()
			go func() { io.Copy(up, c); up.Close() }()
			go func() { io.Copy(c, up); c.Close() }()
		}
	}()
}

func (p *proxy) Down() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.ln != nil {
		p.ln.Close()
		p.ln = nil
	}
	for c := range p.conns {
		c.Close()
	}
	clear(p.conns)
}

func (p *proxy) Up(t *testing.T) {
	p.mu.Lock()
	defer p.mu.Unlock()
	ln, err := net.Listen("tcp", p.addr)
	if err != nil {
		t.Fatalf("proxy up again on %s: %v", p.addr, err)
	}
	p.serve(ln)
}

// via returns the connection URL u with its host replaced by the proxy's.
func (p *proxy) via(t *testing.T, u string) string {
	pu, err := url.Parse(u)
	if err != nil {
		t.Fatalf("REDELIVER_POSTGRES_URL: %v", err)
	}
	pu.Host = p.addr
	return pu.String()
}

func hostOf(t *testing.T, u string) string {
	pu, err := url.Parse(u)
	if err != nil || pu.Host == "" {
		t.Skipf("REDELIVER_POSTGRES_URL %q is not a URL with a host: the outage tests need one", u)
	}
	return pu.Host
}

var t0 = time.Date(2026, 3, 1, 9, 0, 0, 0, time.UTC)

func parked(n int, prefix string, due time.Time) []redrive.Entry {
	es := make([]redrive.Entry, n)
	for i := range es {
		es[i] = redrive.Entry{Key: fmt.Sprintf("%s-%05d", prefix, i), Base: redrive.ParkedState, Status: redrive.Parked,
			StateTime: due.Add(-time.Minute), Created: due.Add(-time.Minute), Expiry: time.Minute, DueAt: due,
			Message: stream.Record{Topic: "orders", Offset: int64(i), Value: []byte("v")}}
	}
	return es
}

func publishedKeys(p *redrivetest.Publisher, topic string) map[string]int {
	m := map[string]int{}
	for _, r := range p.Topic(topic) {
		k, _ := redrivetest.Header(r, redrive.HeaderKey)
		m[k]++
	}
	return m
}

// TestDatabaseDownAtStart: Open fails at once with an error that names the
// address; a store opened with WithDeferredMigrate lets the scheduler
// start, each sweep fails with a clear error, and when the database comes
// back every entry parked before is re-driven.
func TestDatabaseDownAtStart(t *testing.T) {
	u := pgURL(t)
	p := newProxy(t, hostOf(t, u))
	p.Down()
	schema := newSchema(t, u)
	direct := openStore(t, u, schema)
	es := parked(300, "start", t0)
	if n, err := direct.Park(context.Background(), es); err != nil || n != len(es) {
		t.Fatalf("Park: %d, %v", n, err)
	}

	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	_, err := pgstore.Open(ctx, p.via(t, u), pgstore.WithSchema(schema))
	if err == nil || !strings.Contains(err.Error(), p.addr) {
		t.Fatalf("Open with the database down: %v; want an error naming %s", err, p.addr)
	}
	t.Logf("Open with the database down: %v", err)

	s, err := pgstore.Open(ctx, p.via(t, u), pgstore.WithSchema(schema), pgstore.WithDeferredMigrate())
	if err != nil {
		t.Fatalf("Open with WithDeferredMigrate: %v", err)
	}
	defer s.Close()
	pub := &redrivetest.Publisher{}
	var storeFailures atomic.Int32
	clock := streamtest.NewClock(t0.Add(time.Hour))
	sch, err := redrive.NewScheduler(s, pub, redrive.WithClock(clock), redrive.WithRetryTopic("retry"), redrive.WithBatchSize(100),
		redrive.WithHooks(redrive.Hooks{StoreFailed: func(redrive.SweepEvent) { storeFailures.Add(1) }}))
	if err != nil {
		t.Fatal(err)
	}
	for range 2 {
		ev := sch.Sweep(ctx)
		if ev.Err == nil || !strings.Contains(ev.Err.Error(), p.addr) {
			t.Fatalf("sweep with the database down: %+v; want an error naming %s", ev, p.addr)
		}
	}
	if storeFailures.Load() != 2 {
		t.Fatalf("StoreFailed called %d times for 2 failed sweeps", storeFailures.Load())
	}
	if n := len(pub.Records()); n != 0 {
		t.Fatalf("%d records published with the database down", n)
	}

	p.Up(t)
	var ev redrive.SweepEvent
	for range 3 { // the pool may hold a connection broken by the outage
		if ev = sch.Sweep(ctx); ev.Err == nil {
			break
		}
	}
	if ev.Err != nil || ev.Redriven != len(es) {
		t.Fatalf("sweep after the database came back: %+v", ev)
	}
	got := publishedKeys(pub, "retry")
	for _, e := range es {
		if got[e.Key] != 1 {
			t.Fatalf("%s published %d times, want once", e.Key, got[e.Key])
		}
	}
}

// TestDatabaseDownMidRun cuts the database under a running scheduler, parks
// more entries meanwhile, and brings it back: Run goes on through the
// failed sweeps and re-drives every entry, none lost.
func TestDatabaseDownMidRun(t *testing.T) {
	u := pgURL(t)
	p := newProxy(t, hostOf(t, u))
	schema := newSchema(t, u)
	direct := openStore(t, u, schema)
	s := openStore(t, p.via(t, u), schema)

	pub := &redrivetest.Publisher{}
	var sweeps, failures atomic.Int32
	sch, err := redrive.NewScheduler(s, pub, redrive.WithInterval(20*time.Millisecond), redrive.WithRetryTopic("retry"), redrive.WithBatchSize(100),
		redrive.WithHooks(redrive.Hooks{
			Swept:       func(redrive.SweepEvent) { sweeps.Add(1) },
			StoreFailed: func(redrive.SweepEvent) { failures.Add(1) },
		}))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- sch.Run(ctx) }()
	defer func() {
		cancel()
		select {
		case err := <-done:
			if err != nil {
				t.Errorf("Run returned %v after its context was cancelled, want nil (a clean shutdown)", err)
			}
		case <-time.After(10 * time.Second):
			t.Error("Run did not return")
		}
	}()
	waitFor := func(what string, cond func() bool) {
		t.Helper()
		deadline := time.Now().Add(30 * time.Second)
		for !cond() {
			if time.Now().After(deadline) {
				t.Fatalf("timed out waiting for %s", what)
			}
			time.Sleep(10 * time.Millisecond)
		}
	}

	now := time.Now()
	before := parked(400, "before", now.Add(-time.Second))
	if _, err := direct.Park(ctx, before); err != nil {
		t.Fatal(err)
	}
	waitFor("the first entries re-driven and marked", func() bool {
		es, err := direct.List(ctx, redrive.Filter{Status: redrive.Retrying})
		return err == nil && len(es) == len(before)
	})

	p.Down()
	during := parked(400, "during", time.Now().Add(-time.Second))
	if _, err := direct.Park(ctx, during); err != nil {
		t.Fatal(err)
	}
	f := failures.Load()
	waitFor("two failed sweeps", func() bool { return failures.Load() >= f+2 })
	p.Up(t)
	waitFor("every entry re-driven and marked", func() bool {
		es, err := direct.List(ctx, redrive.Filter{Status: redrive.Retrying})
		return err == nil && len(es) == len(before)+len(during)
	})

	got := publishedKeys(pub, "retry")
	for _, e := range append(before, during...) {
		if got[e.Key] != 1 {
			t.Errorf("%s published %d times, want once (no sweep was cut between publish and mark)", e.Key, got[e.Key])
		}
		if st, err := direct.Get(ctx, e.Key); err != nil || st.Status != redrive.Retrying {
			t.Fatalf("%s: %v %v, want retrying", e.Key, st.State(), err)
		}
	}
	t.Logf("%d sweeps, %d failed while the database was away", sweeps.Load(), failures.Load())
}

// TestBadConnectionString: the error does not repeat the string, which may
// hold a password.
func TestBadConnectionString(t *testing.T) {
	_, err := pgstore.Open(context.Background(), "postgres://user:s3cret@127.0.0.1:notaport/db")
	if err == nil || strings.Contains(err.Error(), "s3cret") {
		t.Fatalf("Open with a bad connection string: %v", err)
	}
	_, err = pgstore.Open(context.Background(), "postgres://127.0.0.1/db", pgstore.WithSchema(`x"; DROP TABLE y; --`))
	if err == nil || !strings.Contains(err.Error(), "identifier") {
		t.Fatalf("Open with a bad schema name: %v", err)
	}
}
