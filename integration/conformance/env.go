package conformance

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"net"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/redeliver-go/redeliver/checkpoint"
	"github.com/redeliver-go/redeliver/stream"
	"github.com/redeliver-go/redeliver/stream/streamtest"
)

// wait bounds every wait of the suite.
const wait = 30 * time.Second

// env is one case's broker, topic, group and history.
type env struct {
	t       *testing.T
	b       Broker
	a       Adapter
	topic   string
	group   string
	cl      *kgo.Client
	adm     *kadm.Client
	hist    history
	members []*member
	control Controller
	backend Backend // instead of cl and adm
	// ordering is the variant's ([Variant.Ordering]): in ByKey or ByNone
	// the records produced carry keys (keys), the consumers run in that
	// ordering, and the reliability scenarios check their histories with
	// [streamtest.History.CheckKeys].
	ordering stream.Ordering
	keys     map[int32][]string // each partition's records' keys, by offset
	// window is the variant's commit window ([Variant.CommitWindow]), or
	// else REDELIVER_COMMIT_WINDOW's (envCommitWindow): the consumers'
	// whose scenario sets none.
	window time.Duration
}

// keysPerPartition is how many keys the records of a partition cycle
// through in key ordering: the record at offset o has key "k<o mod 8>".
const keysPerPartition = 8

// keyed reports whether the case runs in key (or no) ordering.
func (e *env) keyed() bool { return e.ordering != stream.ByPartition }

// key returns the key of the record at offset o in key ordering, and
// notes it as the key of that record of the partition.
func (e *env) key(partition int32, o int64) []byte {
	k := fmt.Sprint("k", o%keysPerPartition)
	if e.keys == nil {
		e.keys = map[int32][]string{}
	}
	ks := e.keys[partition]
	for int64(len(ks)) <= o {
		ks = append(ks, "")
	}
	ks[o] = k
	e.keys[partition] = ks
	return []byte(k)
}

func newEnv(t *testing.T, b Broker, a Adapter) *env {
	e := newEnvOn(t, b, a)
	if l, ok := a.(LeaseAdapter); ok {
		e.hist.rec.LeaseOwnership = l.LeaseOwnership()
	}
	return e
}

// newVariantEnv is newEnv running variant v: in its ordering, and with
// its commit window where it sets one (else envCommitWindow's).
func newVariantEnv(t *testing.T, b Broker, a Adapter, v Variant) *env {
	e := newEnv(t, b, a)
	e.ordering, e.window = v.Ordering, cmp.Or(v.CommitWindow, e.window)
	return e
}

// envCommitWindow is REDELIVER_COMMIT_WINDOW (a duration, such as 500ms):
// the commit window of every Kafka scenario that sets none, so that the
// suites can be run with every adapter's success commits coalesced. 0
// when it is not set.
func envCommitWindow() time.Duration {
	d, err := time.ParseDuration(os.Getenv("REDELIVER_COMMIT_WINDOW"))
	if err != nil || d < 0 {
		return 0
	}
	return d
}

func newEnvOn(t *testing.T, b Broker, a Adapter) *env {
	name := strings.NewReplacer("/", "-", " ", "-", "(", "", ")", "").Replace(t.Name())
	suffix := fmt.Sprintf("%08x", rand.Uint32())
	if b.Backend != nil {
		e := &env{t: t, b: b, a: a, topic: "rd-" + name + "-" + suffix, group: "rd-g-" + name + "-" + suffix, backend: b.Backend}
		e.hist.topic = e.topic
		t.Cleanup(func() {
			for _, m := range e.members {
				m.stop()
			}
		})
		return e
	}
	seeds := b.Addrs
	if len(b.AdminAddrs) > 0 {
		seeds = b.AdminAddrs
	}
	cl, err := kgo.NewClient(kgo.SeedBrokers(seeds...), kgo.RecordPartitioner(kgo.ManualPartitioner()))
	if err != nil {
		t.Fatal(err)
	}
	e := &env{t: t, b: b, a: a, topic: "rd-" + name + "-" + suffix, group: "rd-g-" + name + "-" + suffix,
		cl: cl, adm: kadm.NewClient(cl), control: b.Control, window: envCommitWindow()}
	e.hist.topic = e.topic
	t.Cleanup(func() {
		for _, m := range e.members {
			m.stop()
		}
		cl.Close()
	})
	return e
}

// createTopic creates the case's topic.
func (e *env) createTopic(partitions int32) {
	e.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), wait)
	defer cancel()
	if e.backend != nil {
		if err := e.backend.CreateTopic(ctx, e.topic, partitions); err != nil {
			e.t.Fatalf("create topic %s: %v", e.topic, err)
		}
		return
	}
	resp, err := e.adm.CreateTopic(ctx, partitions, e.replication(), nil, e.topic)
	if err == nil {
		err = resp.Err
	}
	if err != nil {
		e.t.Fatalf("create topic %s: %v", e.topic, err)
	}
}

// replication is the replication factor of the topics the case creates.
func (e *env) replication() int16 {
	if e.b.Replication == 0 {
		return 1
	}
	return e.b.Replication
}

// produce appends n records to the partition, valued "<partition>:<i>"
// with i counting from first.
func (e *env) produce(partition int32, first, n int) {
	e.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), wait)
	defer cancel()
	if e.backend != nil {
		vs := make([][]byte, n)
		for i := range vs {
			vs[i] = fmt.Appendf(nil, "%d:%d", partition, first+i)
		}
		if err := e.backend.Produce(ctx, e.topic, partition, vs); err != nil {
			e.t.Fatalf("produce: %v", err)
		}
		return
	}
	recs := make([]*kgo.Record, n)
	for i := range recs {
		recs[i] = &kgo.Record{Topic: e.topic, Partition: partition, Value: fmt.Appendf(nil, "%d:%d", partition, first+i)}
		if e.keyed() {
			recs[i].Key = e.key(partition, int64(first+i))
		}
	}
	if err := e.cl.ProduceSync(ctx, recs...).FirstErr(); err != nil {
		e.t.Fatalf("produce: %v", err)
	}
}

// committed returns the group's committed offsets of the topic as the
// broker's offset fetch answers them; -1 for none.
func (e *env) committed() map[int32]kadm.Offset {
	e.t.Helper()
	m, err := e.tryCommitted()
	if err != nil {
		e.t.Fatal(err)
	}
	return m
}

// tryCommitted is committed that returns its error, for polls that go on
// through a broker restart.
func (e *env) tryCommitted() (map[int32]kadm.Offset, error) {
	if e.backend != nil {
		return e.backendCommitted()
	}
	ctx, cancel := context.WithTimeout(context.Background(), wait)
	defer cancel()
	offs, err := e.adm.FetchOffsets(ctx, e.group)
	if errors.Is(err, kerr.GroupIDNotFound) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("fetch offsets of %s: %w", e.group, err)
	}
	m := make(map[int32]kadm.Offset)
	for p, o := range offs[e.topic] {
		if o.Err != nil {
			return nil, fmt.Errorf("fetch offsets of %s: partition %d: %w", e.group, p, o.Err)
		}
		m[p] = o.Offset
	}
	return m, nil
}

// waitCommitted waits until the broker has each partition's committed
// offset at want[partition].
func (e *env) waitCommitted(want map[int32]int64) {
	e.t.Helper()
	deadline := time.Now().Add(wait)
	for {
		got := e.committed()
		ok := true
		for p, w := range want {
			if o, found := got[p]; !found || o.At != w {
				ok = false
			}
		}
		if ok {
			return
		}
		if time.Now().After(deadline) {
			at := make(map[int32]int64)
			for p, o := range got {
				at[p] = o.At
			}
			e.t.Fatalf("committed offsets %v, want %v", at, want)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// spec describes a consumer for start.
type spec struct {
	handler  stream.Handler
	policy   checkpoint.Policy
	maxBatch int
	hooks    stream.Hooks // called after the history's own
	session  bool         // ask for the broker's short session timeout
	opts     []stream.Option
	dial     func(ctx context.Context, network, address string) (net.Conn, error) // Config.Dial
	window   time.Duration                                                        // Config.CommitWindow
	// rec is the history the scenario checks: in key ordering the
	// handler records each call's start into it (History.Middleware),
	// which CheckKeys needs; and the adapter's unwritten last commits go
	// into it (unwrittenLogger).
	rec *streamtest.History
	// log is where the processor's log records go (through
	// unwrittenLogger); nil for the default logger's handler. Set it
	// rather than a stream.WithLogger option, which would bypass
	// unwrittenLogger.
	log slog.Handler
}

// member is a running consumer.
type member struct {
	name    string
	cancel  context.CancelFunc
	done    chan struct{}
	err     error
	stopped time.Duration // how long Run took to return after stop
	once    sync.Once
}

// start builds and runs a consumer named name.
func (e *env) start(name string, s spec) *member {
	e.t.Helper()
	hooks := e.hist.hooks(name, s.hooks)
	rec := s.rec
	if rec == nil {
		rec = &e.hist.rec // the conformance cases check the env's history
	}
	handler, opts := s.handler, append([]stream.Option{stream.WithPolicy(s.policy), stream.WithHooks(hooks),
		stream.WithLogger(unwrittenLogger(rec, name, s.log))}, s.opts...)
	if e.keyed() {
		handler = stream.Chain(handler, rec.Middleware(name))
		opts = append(opts, stream.WithOrdering(e.ordering))
	}
	proc, err := stream.NewProcessor(handler, opts...)
	if err != nil {
		e.t.Fatal(err)
	}
	cfg := Config{Brokers: e.b.Addrs, Group: e.group, Topic: e.topic, Processor: proc, MaxBatch: max(s.maxBatch, 1), Dial: s.dial, Backend: e.backend,
		CommitWindow: cmp.Or(s.window, e.window)}
	if s.session {
		cfg.SessionTimeout = e.b.SessionTimeout
		cfg.HeartbeatInterval = e.b.SessionTimeout / 10
	}
	c, err := e.a.NewConsumer(e.t, cfg)
	if err != nil {
		e.t.Fatalf("%s: new consumer: %v", e.a.Name(), err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	m := &member{name: name, cancel: cancel, done: make(chan struct{})}
	go func() {
		defer close(m.done)
		m.err = c.Run(ctx)
	}()
	e.members = append(e.members, m)
	return m
}

// stop cancels the member's Run and waits for it to return.
func (m *member) stop() error {
	m.once.Do(func() {
		start := time.Now()
		m.cancel()
		select {
		case <-m.done:
			m.stopped = time.Since(start)
		case <-time.After(wait):
			m.stopped = -1
		}
	})
	if m.stopped < 0 {
		return fmt.Errorf("consumer %s: Run did not return within %v", m.name, wait)
	}
	return nil
}

// await waits for ch to close or fails the test with what.
func (e *env) await(ch <-chan struct{}, what string) {
	e.t.Helper()
	select {
	case <-ch:
	case <-time.After(wait):
		// What the consumers did by then (deliveries, checkpoints), so
		// that a time-out says where the run stood.
		e.t.Fatalf("timed out waiting for %s\n%s", what, e.hist.dump())
	}
}

// signal is a channel closed once.
type signal struct {
	once sync.Once
	ch   chan struct{}
}

func newSignal() *signal { return &signal{ch: make(chan struct{})} }

func (s *signal) fire() { s.once.Do(func() { close(s.ch) }) }
