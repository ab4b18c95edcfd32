package kafkatest

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"net"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/redeliver-go/redeliver/checkpoint"
	"github.com/redeliver-go/redeliver/internal/health"
	"github.com/redeliver-go/redeliver/internal/lifecycle"
	"github.com/redeliver-go/redeliver/stream"
	"github.com/redeliver-go/redeliver/stream/streamtest"
)

// Adapter describes a Kafka adapter to the tests every adapter runs
// ([Run]), as the conformance suite describes one to its cases.
type Adapter struct {
	// Name names the adapter in messages: "franz", "kafkago".
	Name string
	// New returns a consumer of cfg, not running.
	New func(cfg Config) (Consumer, error)
	// NewPublisher returns a publisher of the adapter on a client (or
	// writer) of its own on the brokers at addrs, closed at the end of t:
	// it spreads records over a topic's partitions round robin, and tries
	// a record once when its topic does not exist.
	NewPublisher func(t testing.TB, addrs []string) stream.Publisher
	// BoundPublisher returns an unbound publisher of the adapter, and the
	// option of the adapter's own ([Config.Options]) that binds it to the
	// consumer it is given to (its WithPublisher); nil when the adapter
	// has none.
	BoundPublisher func() (pub stream.Publisher, option any)
	// FetchByName are options of the adapter's own ([Config.Options])
	// under which its consumer fetches by topic name, as with brokers
	// before 2.8, so that a topic deleted and created again is the same
	// topic rewound; nil when it always fetches by name.
	FetchByName []any
	// Cooperative are options of the adapter's own ([Config.Options])
	// under which its consumer rebalances cooperatively (a revocation
	// takes some partitions and the member keeps the others), when that is
	// not its default; nil when it is, or when the client has no such
	// protocol.
	Cooperative []any
	// CommitHoldsRebalance, when not empty, says why the adapter's client
	// holds a rebalance while a commit is in flight, so that a member
	// learns that it lost a partition only once its commit has had an
	// answer or its timeout: RevocationEndsCommitWait is skipped with it.
	CommitHoldsRebalance string
	// Throughput are options of the adapter's own ([Config.Options]) that
	// the benchmarks' redeliver loop runs with: the commit window the
	// adapter's doc recommends for throughput, where it has one.
	Throughput []any
}

// Config is one consumer for [Adapter.New]: it consumes Topic in Group on
// the brokers at Addrs, from the topic's start when the group has no
// commit, through Processor, with fast group heartbeats.
type Config struct {
	Addrs     []string
	Group     string
	Topic     string
	Processor *stream.Processor
	// MaxBatch and MaxWait are the adapter's options of those names; 0
	// for its defaults.
	MaxBatch int
	MaxWait  time.Duration
	// FetchMaxWait is how long a fetch may wait at the broker for
	// records; 0 for 100ms.
	FetchMaxWait time.Duration
	// ReadCommitted reads records of committed transactions only.
	ReadCommitted bool
	// Logger, when not nil, is the consumer's logger (the processor's
	// otherwise).
	Logger *slog.Logger
	// OnAssigned, when not nil, is the adapter's WithOnAssigned function.
	OnAssigned func(map[string][]int32)
	// Defaults runs the consumer with the adapter's and its client's
	// defaults for what Config does not set, as a program would
	// (benchmarks); the tests shorten group timings otherwise.
	Defaults bool
	// Drain, when not 0, is the adapter's WithDrain; FailAfter its
	// WithFailAfter.
	Drain, FailAfter time.Duration
	// Options are options of the adapter's own, for its own tests.
	Options []any
}

// FetchWait returns cfg.FetchMaxWait, or its default.
func (cfg Config) FetchWait() time.Duration {
	if cfg.FetchMaxWait > 0 {
		return cfg.FetchMaxWait
	}
	return 100 * time.Millisecond
}

// Consumer is a consumer an adapter built.
type Consumer interface {
	Run(ctx context.Context) error
	Close() error
	Health() error
}

// Running is a consumer started by [Start].
type Running struct {
	C      Consumer
	cancel context.CancelFunc
	done   chan struct{}
	err    error // Run's, once done is closed
}

// Start builds a consumer of cfg with a, runs it, and stops it at the end
// of the test.
func Start(t testing.TB, a Adapter, cfg Config) *Running {
	t.Helper()
	c, err := a.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return StartConsumer(t, c)
}

// StartConsumer runs c, and stops it at the end of the test.
func StartConsumer(t testing.TB, c Consumer) *Running {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	r := &Running{C: c, cancel: cancel, done: make(chan struct{})}
	go func() {
		defer close(r.done)
		r.err = c.Run(ctx)
	}()
	t.Cleanup(func() { r.Stop(t) })
	return r
}

// Stop cancels the consumer's context and returns Run's error, failing the
// test when Run does not return within Wait.
func (r *Running) Stop(t testing.TB) error {
	t.Helper()
	r.cancel()
	select {
	case <-r.done:
		return r.err
	case <-time.After(Wait):
		t.Fatal("consumer did not stop")
		return nil
	}
}

// Done returns a channel closed when Run has returned; [Running.Err] then
// returns its error.
func (r *Running) Done() <-chan struct{} { return r.done }

// Err returns Run's error once [Running.Done] is closed.
func (r *Running) Err() error {
	<-r.done
	return r.err
}

// NewProcessor returns a processor of h with opts, failing the test on an
// error.
func NewProcessor(t testing.TB, h stream.Handler, opts ...stream.Option) *stream.Processor {
	t.Helper()
	p, err := stream.NewProcessor(h, opts...)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// LogBuffer keeps what a text logger writes; safe for concurrent use.
type LogBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *LogBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

// String returns what was written.
func (l *LogBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// Logger returns a text logger, at every level from Info, writing to l.
func (l *LogBuffer) Logger() *slog.Logger { return slog.New(slog.NewTextHandler(l, nil)) }

// WaitFor waits until l holds s, failing the test after within.
func (l *LogBuffer) WaitFor(t testing.TB, s string, within time.Duration) {
	t.Helper()
	deadline := time.Now().Add(within)
	for !strings.Contains(l.String(), s) {
		if time.Now().After(deadline) {
			t.Fatalf("no log line with %q in %v:\n%s", s, within, l.String())
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// CreateTopics creates topics of one partition.
func CreateTopics(t testing.TB, addrs []string, topics ...string) {
	t.Helper()
	withAdmin(t, addrs, func(ctx context.Context, adm *kadm.Client) error {
		resps, err := adm.CreateTopics(ctx, 1, 1, nil, topics...)
		if err == nil {
			err = resps.Error()
		}
		return err
	})
}

// Value is the value [Produce] gives the record at offset of partition,
// when the partition was produced from 0.
func Value(partition int32, offset int64) string {
	return strconv.Itoa(int(partition)) + "-" + strconv.FormatInt(offset, 10)
}

// Run runs the tests every Kafka adapter passes, as subtests of t: what
// the adapters would otherwise each test with copies of one test. Each
// gets its own in-process kfake cluster.
func Run(t *testing.T, a Adapter) {
	for _, tc := range []struct {
		name string
		run  func(*testing.T, Adapter)
	}{
		{"ConsumeInOrderInBatches", consumeInOrderInBatches},
		{"MaxWaitFillsBatches", maxWaitFillsBatches},
		{"TransactionalTopic", transactionalTopic},
		{"TrailingTransactionMarkers", trailingTransactionMarkers},
		{"RunRule", runRule},
		{"CloseFromInside", closeFromInside},
		{"OnAssigned", onAssigned},
		{"LoggerDefaultsToTheProcessors", loggerDefaultsToTheProcessors},
		{"DeadLetterThroughKafka", deadLetterThroughKafka},
		{"DeadLetterThroughBoundPublisher", deadLetterThroughBoundPublisher},
		{"DrainReportsAndBounds", drainReportsAndBounds},
		{"WrongTopicEndsRun", wrongTopicEndsRun},
		{"UnreachableBrokersEndRun", unreachableBrokersEndRun},
		{"DeadLetterToMissingTopic", deadLetterToMissingTopic},
		{"PublishReportsPartialWrites", publishReportsPartialWrites},
		{"StartChecks", startChecks},
		{"ShutdownUnderSlowAnswers", shutdownUnderSlowAnswers},
		{"ShutdownKeepsCommitInFlight", shutdownKeepsCommitInFlight},
		{"RewindIsDelivered", rewindIsDelivered},
		{"KeyedRetryAcrossMove", keyedRetryAcrossMove},
		{"RevocationEndsCommitWait", revocationEndsCommitWait},
		{"StopDuringRebalance", stopDuringRebalance},
		{"RevocationReportsHeldHandlers", revocationReportsHeldHandlers},
	} {
		t.Run(tc.name, func(t *testing.T) { tc.run(t, a) })
	}
}

// Batches of one partition's records, in order, each at most MaxBatch
// records, every record once.
func consumeInOrderInBatches(t *testing.T, a Adapter) {
	_, addrs := NewCluster(t, "t", 3)
	for p := range int32(3) {
		Produce(t, addrs, "t", p, 0, 250)
	}
	var (
		rec      streamtest.Recorder
		maxSeen  atomic.Int64
		badValue atomic.Value
	)
	h := stream.Chain(stream.HandlerFunc(func(ctx context.Context, b *stream.Batch) error {
		maxSeen.Store(max(maxSeen.Load(), int64(len(b.Records))))
		for _, r := range b.Records {
			if r.Topic != "t" || r.Partition != b.Partition || string(r.Value) != Value(r.Partition, r.Offset) {
				badValue.Store(r)
			}
		}
		return nil
	}), rec.Middleware())
	Start(t, a, Config{Addrs: addrs, Group: "g", Topic: "t", Processor: NewProcessor(t, h), MaxBatch: 40})
	WaitCommitted(t, addrs, "g", "t", map[int32]int64{0: 250, 1: 250, 2: 250})
	for p := range int32(3) {
		CheckHistory(t, rec.Of("t", p), 250)
	}
	if n := maxSeen.Load(); n > 40 {
		t.Errorf("a batch had %d records, want at most 40", n)
	}
	if v := badValue.Load(); v != nil {
		t.Errorf("wrong record in a batch: %+v", v)
	}
}

// Records that come a few milliseconds apart are gathered into a batch
// for up to MaxWait.
func maxWaitFillsBatches(t *testing.T, a Adapter) {
	const maxWait = 300 * time.Millisecond
	_, addrs := NewCluster(t, "t", 1)
	var rec streamtest.Recorder
	Start(t, a, Config{Addrs: addrs, Group: "g", Topic: "t", Processor: NewProcessor(t, stream.Chain(streamtest.Succeed, rec.Middleware())),
		MaxBatch: 10, MaxWait: maxWait, FetchMaxWait: 10 * time.Millisecond})
	// Let the consumer join and reach the end of the empty partition.
	time.Sleep(300 * time.Millisecond)
	began := time.Now()
	for i := range 10 {
		Produce(t, addrs, "t", 0, i, 1)
		time.Sleep(5 * time.Millisecond)
	}
	// The records are meant to arrive within 50ms, but each produce waits
	// for its answer: on a loaded machine they can be spread over more
	// than one maximum wait, and each wait that ends before the last record
	// arrives may close a batch.
	spread := time.Since(began)
	WaitCommitted(t, addrs, "g", "t", map[int32]int64{0: 10})
	ds := rec.Of("t", 0)
	CheckHistory(t, ds, 10)
	if want := 3 + int(spread/maxWait); len(ds) > want {
		t.Errorf("%d batches for 10 records produced within %v with a %v maximum wait, want at most %d", len(ds), spread, maxWait, want)
	}
}

// A topic written by a transactional producer: read_committed delivers the
// committed transaction's records and not the aborted one's,
// read_uncommitted both; neither delivers the transaction markers, and the
// checkpoint goes past them.
func transactionalTopic(t *testing.T, a Adapter) {
	for _, committed := range []bool{true, false} {
		name := "read_uncommitted"
		if committed {
			name = "read_committed"
		}
		t.Run(name, func(t *testing.T) {
			_, addrs := NewCluster(t, "t", 1)
			Produce(t, addrs, "t", 0, 0, 3)
			ProduceTxn(t, addrs, "t", 0, false, TxnValues("aborted", 4)...)
			ProduceTxn(t, addrs, "t", 0, true, TxnValues("committed", 4)...)
			Produce(t, addrs, "t", 0, 3, 3)
			// Offsets: 0-2 plain, 3-6 aborted, 7 abort marker, 8-11
			// committed, 12 commit marker, 13-15 plain.
			want := []string{"0-0", "0-1", "0-2"}
			if !committed {
				want = append(want, TxnValues("aborted", 4)...)
			}
			want = append(want, TxnValues("committed", 4)...)
			want = append(want, "0-3", "0-4", "0-5")
			var (
				mu   sync.Mutex
				got  []string
				done = make(chan struct{})
				once sync.Once
			)
			h := stream.HandlerFunc(func(_ context.Context, b *stream.Batch) error {
				mu.Lock()
				defer mu.Unlock()
				for _, r := range b.Records {
					got = append(got, string(r.Value))
					if string(r.Value) == "0-5" {
						once.Do(func() { close(done) })
					}
				}
				return nil
			})
			Start(t, a, Config{Addrs: addrs, Group: "g", Topic: "t", Processor: NewProcessor(t, h), MaxBatch: 5, ReadCommitted: committed})
			select {
			case <-done:
			case <-time.After(Wait):
				t.Fatalf("0-5 not delivered in %v", Wait)
			}
			mu.Lock()
			if !slices.Equal(got, want) {
				t.Errorf("handler saw %q\nwant        %q", got, want)
			}
			mu.Unlock()
			WaitCommitted(t, addrs, "g", "t", map[int32]int64{0: 16})
		})
	}
}

// Logs that end with a transaction marker, after a committed transaction
// (partition 0) and an aborted one (partition 1): the checkpoint reaches
// each log's end, past the marker (and the aborted records), as Kafka's
// own consumers commit their position, not one short of it (a group lag
// of 1, or of the aborted records and 1, for as long as nothing more is
// written). Records of an aborted transaction are never delivered under
// read_committed.
func trailingTransactionMarkers(t *testing.T, a Adapter) {
	for _, committed := range []bool{true, false} {
		name := "read_uncommitted"
		if committed {
			name = "read_committed"
		}
		t.Run(name, func(t *testing.T) {
			_, addrs := NewCluster(t, "t", 2)
			// Offsets on each partition: 0-2 plain, 3-6 the
			// transaction's, 7 its marker; the log ends at 8.
			for p := range int32(2) {
				Produce(t, addrs, "t", p, 0, 3)
			}
			ProduceTxn(t, addrs, "t", 0, true, TxnValues("committed", 4)...)
			ProduceTxn(t, addrs, "t", 1, false, TxnValues("aborted", 4)...)
			var (
				mu  sync.Mutex
				got []string
			)
			h := stream.HandlerFunc(func(_ context.Context, b *stream.Batch) error {
				mu.Lock()
				defer mu.Unlock()
				for _, r := range b.Records {
					got = append(got, fmt.Sprintf("%d:%s", r.Partition, r.Value))
				}
				return nil
			})
			Start(t, a, Config{Addrs: addrs, Group: "g", Topic: "t", Processor: NewProcessor(t, h), MaxBatch: 5, ReadCommitted: committed})
			WaitCommitted(t, addrs, "g", "t", map[int32]int64{0: 8, 1: 8})
			want := []string{"0:0-0", "0:0-1", "0:0-2", "1:1-0", "1:1-1", "1:1-2"}
			for _, v := range TxnValues("committed", 4) {
				want = append(want, "0:"+v)
			}
			if !committed {
				for _, v := range TxnValues("aborted", 4) {
					want = append(want, "1:"+v)
				}
			}
			mu.Lock()
			defer mu.Unlock()
			slices.Sort(got)
			slices.Sort(want)
			if !slices.Equal(got, want) {
				t.Errorf("handler saw %q\nwant        %q", got, want)
			}
		})
	}
}

// The Run rule ([RunRule]) of the adapter's consumers.
func runRule(t *testing.T, a Adapter) {
	_, addrs := NewCluster(t, "t", 1)
	proc := NewProcessor(t, streamtest.Succeed)
	RunRule(t, func(group string) Consumer {
		c, err := a.New(Config{Addrs: addrs, Group: group, Topic: "t", Processor: proc})
		if err != nil {
			t.Fatal(err)
		}
		return c
	})
}

// RunRule checks the Run rule on consumers newConsumer makes, each of a
// group of its own of a running cluster: Run returns nil after a clean
// shutdown (its context cancelled, or Close), ErrClosed when Close came
// first, and an error when called twice; a second Close returns nil.
func RunRule(t *testing.T, newConsumer func(group string) Consumer) {
	run := func(c Consumer, ctx context.Context) chan error {
		done := make(chan error, 1)
		go func() { done <- c.Run(ctx) }()
		return done
	}
	await := func(done chan error) error {
		select {
		case err := <-done:
			return err
		case <-time.After(Wait):
			t.Fatal("Run did not return")
			return nil
		}
	}
	t.Run("context", func(t *testing.T) {
		c := newConsumer("g1")
		ctx, cancel := context.WithCancelCause(context.Background())
		done := run(c, ctx)
		time.Sleep(50 * time.Millisecond)
		cancel(errors.New("shutting down"))
		if err := await(done); err != nil {
			t.Errorf("Run returned %v after its context was cancelled, want nil: a clean shutdown", err)
		}
		if err := c.Run(context.Background()); err == nil {
			t.Error("a second Run returned nil")
		}
	})
	t.Run("close", func(t *testing.T) {
		c := newConsumer("g2")
		done := run(c, context.Background())
		time.Sleep(50 * time.Millisecond)
		if err := c.Close(); err != nil {
			t.Fatal(err)
		}
		if err := await(done); err != nil {
			t.Errorf("Run returned %v after Close, want nil: a clean shutdown", err)
		}
		if err := c.Close(); err != nil {
			t.Errorf("a second Close: %v", err)
		}
	})
	t.Run("close before run", func(t *testing.T) {
		c := newConsumer("g3")
		if err := c.Close(); err != nil {
			t.Fatal(err)
		}
		if err := c.Run(context.Background()); !errors.Is(err, stream.ErrClosed) {
			t.Errorf("Run returned %v, want stream.ErrClosed", err)
		}
	})
}

// Close called from a handler, a hook or the WithOnAssigned function
// returns, and so does Run, with nil.
func closeFromInside(t *testing.T, a Adapter) {
	for _, from := range []string{"handler", "hook", "OnAssigned"} {
		t.Run(from, func(t *testing.T) {
			kc, addrs := NewCluster(t, "t", 2)
			Produce(t, addrs, "t", 0, 0, 10)
			var (
				cp     atomic.Pointer[Consumer]
				closed = make(chan error, 1)
			)
			closeIt := func() {
				if c := cp.Load(); c != nil {
					select {
					case closed <- (*c).Close():
					default:
					}
				}
			}
			h := stream.HandlerFunc(func(context.Context, *stream.Batch) error {
				if from == "handler" {
					closeIt()
				}
				return nil
			})
			var opts []stream.Option
			if from == "hook" {
				opts = append(opts, stream.WithHooks(stream.Hooks{Delivered: func(stream.DeliveredEvent) { closeIt() }}))
			}
			cfg := Config{Addrs: addrs, Group: "g", Topic: "t", Processor: NewProcessor(t, h, opts...)}
			if from == "OnAssigned" {
				cfg.OnAssigned = func(map[string][]int32) { closeIt() }
			}
			// The group's join waits until the consumer is made, so that
			// the assignment is reported from the client's callback even
			// where the client joins as it is built.
			joined := make(chan struct{})
			kc.ControlKey(kmsg.JoinGroup.Int16(), func(kmsg.Request) (kmsg.Response, error, bool) {
				kc.SleepControl(func() { <-joined })
				return nil, nil, false
			})
			c, err := a.New(cfg)
			if err != nil {
				t.Fatal(err)
			}
			cp.Store(&c)
			close(joined)
			RunClosedFromInside(t, c, from, closed)
			if err := c.Close(); err != nil {
				t.Fatal(err)
			}
		})
	}
}

// RunClosedFromInside runs c until Close, called from inside it (from
// names where: "handler", "hook"), answers on closed: it fails the test
// unless Close returns nil and then Run returns nil, each within Wait.
func RunClosedFromInside(t *testing.T, c Consumer, from string, closed <-chan error) {
	t.Helper()
	done := make(chan error, 1)
	go func() { done <- c.Run(context.Background()) }()
	select {
	case err := <-closed:
		if err != nil {
			t.Fatalf("Close from the %s: %v", from, err)
		}
	case <-time.After(Wait):
		t.Fatalf("Close called from the %s did not return", from)
	}
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("Run returned %v after Close, want nil", err)
		}
	case <-time.After(Wait):
		t.Fatalf("Run did not return after Close from the %s", from)
	}
}

// WithOnAssigned reports the partitions assigned.
func onAssigned(t *testing.T, a Adapter) {
	_, addrs := NewCluster(t, "t", 3)
	got := make(chan map[string][]int32, 10)
	Start(t, a, Config{Addrs: addrs, Group: "g", Topic: "t", Processor: NewProcessor(t, streamtest.Succeed),
		OnAssigned: func(m map[string][]int32) { got <- m }})
	select {
	case m := <-got:
		m = maps.Clone(m)
		for topic, ps := range m {
			m[topic] = slices.Sorted(slices.Values(ps))
		}
		if want := map[string][]int32{"t": {0, 1, 2}}; !maps.EqualFunc(m, want, slices.Equal) {
			t.Errorf("assigned %v, want %v", m, want)
		}
	case <-time.After(Wait):
		t.Fatal("WithOnAssigned's function not called")
	}
}

// Without a logger of its own, the consumer logs to the processor's.
func loggerDefaultsToTheProcessors(t *testing.T, a Adapter) {
	_, addrs := NewCluster(t, "t", 1)
	var buf LogBuffer
	proc := NewProcessor(t, streamtest.Succeed, stream.WithLogger(buf.Logger()))
	r := Start(t, a, Config{Addrs: addrs, Group: "g", Topic: "t", Processor: proc})
	time.Sleep(50 * time.Millisecond)
	if err := r.Stop(t); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(buf.String(), "redeliver: consumer stopped") {
		t.Fatalf("the processor's logger did not get the consumer's log:\n%s", buf.String())
	}
}

// A batch given up goes to the dead-letter topic through the adapter's
// Publisher: every record, with its key, value and headers, and the
// dead-letter headers naming where it came from, its deliveries and its
// error.
func deadLetterThroughKafka(t *testing.T, a Adapter) { deadLetterThrough(t, a, false) }

// The same through a publisher made before the consumer and bound to it by
// the adapter's WithPublisher.
func deadLetterThroughBoundPublisher(t *testing.T, a Adapter) {
	if a.BoundPublisher == nil {
		t.Skipf("the %s adapter has no WithPublisher here", a.Name)
	}
	deadLetterThrough(t, a, true)
}

func deadLetterThrough(t *testing.T, a Adapter, bound bool) {
	_, addrs := NewCluster(t, "orders", 1, kfake.SeedTopics(1, "orders.dlq"))
	cl, err := kgo.NewClient(kgo.SeedBrokers(addrs...))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), Wait)
	defer cancel()
	recs := make([]*kgo.Record, 6)
	for i := range recs {
		recs[i] = &kgo.Record{Topic: "orders", Key: []byte("k" + strconv.Itoa(i)), Value: []byte(Value(0, int64(i))),
			Headers: []kgo.RecordHeader{{Key: "trace", Value: []byte("x" + strconv.Itoa(i))}}}
	}
	if err := cl.ProduceSync(ctx, recs...).FirstErr(); err != nil {
		t.Fatal(err)
	}
	h := stream.HandlerFunc(func(_ context.Context, b *stream.Batch) error {
		for _, r := range b.Records {
			if r.Offset == 2 {
				return errors.New("schema mismatch")
			}
		}
		return nil
	})
	var (
		pub  stream.Publisher
		opts []any
	)
	if bound {
		var opt any
		pub, opt = a.BoundPublisher()
		opts = append(opts, opt)
	} else {
		pub = a.NewPublisher(t, addrs)
	}
	dl, err := stream.DeadLetter(pub, "orders.dlq")
	if err != nil {
		t.Fatal(err)
	}
	given := make(chan stream.BatchInfo, 1)
	proc := NewProcessor(t, h,
		stream.WithPolicy(checkpoint.Policy{MaxRetries: 2, Backoff: checkpoint.Fixed(10 * time.Millisecond)}),
		stream.WithExhaustionAction(dl),
		stream.WithHooks(stream.Hooks{Exhausted: func(e stream.ExhaustedEvent) { given <- e.BatchInfo }}))
	r := Start(t, a, Config{Addrs: addrs, Group: "g", Topic: "orders", Processor: proc, MaxBatch: 3, Options: opts})
	WaitCommitted(t, addrs, "g", "orders", map[int32]int64{0: 6})
	_ = r.Stop(t)
	batch := <-given // the batch holding offset 2, however the records were batched

	rd, err := kgo.NewClient(kgo.SeedBrokers(addrs...), kgo.ConsumeTopics("orders.dlq"), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	if err != nil {
		t.Fatal(err)
	}
	defer rd.Close()
	var got []*kgo.Record
	for len(got) < batch.Records && ctx.Err() == nil {
		got = append(got, rd.PollFetches(ctx).Records()...)
	}
	if len(got) != batch.Records || batch.FirstOffset > 2 || batch.LastOffset < 2 {
		t.Fatalf("%d records dead-lettered for batch %+v", len(got), batch)
	}
	for i, rec := range got {
		off := batch.FirstOffset + int64(i)
		hs := map[string]string{}
		for _, h := range rec.Headers {
			hs[h.Key] = string(h.Value)
		}
		if string(rec.Key) != "k"+strconv.FormatInt(off, 10) || string(rec.Value) != Value(0, off) || hs["trace"] != "x"+strconv.FormatInt(off, 10) ||
			hs[stream.HeaderTopic] != "orders" || hs[stream.HeaderPartition] != "0" || hs[stream.HeaderOffset] != strconv.FormatInt(off, 10) ||
			hs[stream.HeaderDeliveries] != "3" || hs[stream.HeaderError] != "schema mismatch" {
			t.Errorf("dead letter %d: key %q value %q headers %v", i, rec.Key, rec.Value, hs)
		}
		// KIP-1191's headers too, with the group the adapter consumes in.
		if hs[stream.HeaderDLQTopic] != "orders" || hs[stream.HeaderDLQPartition] != "0" || hs[stream.HeaderDLQOffset] != strconv.FormatInt(off, 10) ||
			hs[stream.HeaderDLQDeliveryCount] != "3" || hs[stream.HeaderDLQGroup] != "g" {
			t.Errorf("dead letter %d: __dlq.errors.* headers %v, want the group g among them", i, hs)
		}
		if _, err := time.Parse(time.RFC3339Nano, hs[stream.HeaderFirstFailure]); err != nil {
			t.Errorf("dead letter %d: first failure header %q: %v", i, hs[stream.HeaderFirstFailure], err)
		}
	}
}

// A dead-letter topic that does not exist: each failed try is reported
// with an error that names the topic and says what to do, the checkpoint
// stays, and once the topic is created the dead letter succeeds and the
// partition goes on.
func deadLetterToMissingTopic(t *testing.T, a Adapter) {
	_, addrs := NewCluster(t, "orders", 1)
	Produce(t, addrs, "orders", 0, 0, 3)
	dl, err := stream.DeadLetter(a.NewPublisher(t, addrs), "orders.dlq")
	if err != nil {
		t.Fatal(err)
	}
	var (
		mu    sync.Mutex
		tries []stream.ActionEvent
	)
	failed := make(chan struct{}, 1)
	h := stream.HandlerFunc(func(context.Context, *stream.Batch) error { return checkpoint.Permanent(errors.New("schema mismatch")) })
	proc := NewProcessor(t, h, stream.WithExhaustionAction(dl), stream.WithOperationBackoff(checkpoint.Fixed(20*time.Millisecond)),
		stream.WithHooks(stream.Hooks{ActionTried: func(e stream.ActionEvent) {
			mu.Lock()
			tries = append(tries, e)
			mu.Unlock()
			if e.Err != nil {
				select {
				case failed <- struct{}{}:
				default:
				}
			}
		}}))
	Start(t, a, Config{Addrs: addrs, Group: "g", Topic: "orders", Processor: proc})
	select {
	case <-failed:
	case <-time.After(Wait):
		t.Fatal("no failed try of the dead-letter reported")
	}
	mu.Lock()
	msg := tries[0].Err.Error()
	mu.Unlock()
	for _, want := range []string{`topic "orders.dlq"`, "check that the topic exists", `topic "orders.dlq" does not exist (create it)`} {
		if !strings.Contains(msg, want) {
			t.Errorf("failed try's error %q does not say %q", msg, want)
		}
	}
	if o, ok := Committed(t, addrs, "g").Lookup("orders", 0); ok && o.At > 0 {
		t.Fatalf("checkpoint %d moved past a batch whose dead-letter failed", o.At)
	}
	CreateTopics(t, addrs, "orders.dlq")
	WaitCommitted(t, addrs, "g", "orders", map[int32]int64{0: 3})
	mu.Lock()
	defer mu.Unlock()
	if last := tries[len(tries)-1]; last.Err != nil {
		t.Fatalf("last try %+v, want a success", last)
	}
}

// A publish the broker takes in part (one partition refusing) returns a
// *stream.PublishError that says which records were written, and they are
// exactly those read back from the topic.
func publishReportsPartialWrites(t *testing.T, a Adapter) {
	c, addrs := NewCluster(t, "t", 2)
	c.Fault(kfake.Fault{Keys: []kmsg.Key{kmsg.Produce}, Topic: "t", Partitions: []int32{1}, Err: kerr.PolicyViolation, Count: -1})
	pub := a.NewPublisher(t, addrs)
	ctx, cancel := context.WithTimeout(context.Background(), Wait)
	defer cancel()
	// Keyed records, so that the clients' partitioners spread them over
	// both partitions: without keys a client may put all six on the one
	// that refuses (librdkafka's sticky partitioner did), and nothing is
	// written in part.
	recs := make([]stream.Record, 6)
	for i := range recs {
		recs[i] = stream.Record{Key: []byte("k" + strconv.Itoa(i)), Value: []byte("v" + strconv.Itoa(i))}
	}
	err := pub.Publish(ctx, "t", recs)
	var pe *stream.PublishError
	if !errors.As(err, &pe) || len(pe.Errs) != len(recs) {
		t.Fatalf("Publish with one partition refusing: %v (%T), want a *stream.PublishError of %d records", err, err, len(recs))
	}
	var written []string
	for i, r := range recs {
		if pe.Written(i) {
			written = append(written, string(r.Value))
		}
	}
	if len(written) == 0 || len(written) == len(recs) || pe.Failed() != len(recs)-len(written) {
		t.Fatalf("written %v, %d failed: want some of each", written, pe.Failed())
	}
	rd, err := kgo.NewClient(kgo.SeedBrokers(addrs...), kgo.ConsumeTopics("t"), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()),
		kgo.FetchMaxWait(100*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	defer rd.Close()
	var in []string
	// Read until the topic's end; then a few more polls find nothing more.
	for quiet := 0; quiet < 3 && ctx.Err() == nil; {
		fs := rd.PollFetches(ctx)
		if fs.NumRecords() == 0 {
			quiet++
		}
		fs.EachRecord(func(r *kgo.Record) { in = append(in, string(r.Value)) })
	}
	slices.Sort(written)
	slices.Sort(in)
	if !slices.Equal(written, in) {
		t.Fatalf("reported written %v, the topic holds %v", written, in)
	}
}

// A wrong topic name and a missing dead-letter topic are logged at Warn
// within seconds of the start and reported by Health until the topics are
// created; brokers that do not answer are logged at Error.
func startChecks(t *testing.T, a Adapter) {
	t.Run("topic", func(t *testing.T) {
		_, addrs := NewCluster(t, "t", 1)
		var buf LogBuffer
		r := Start(t, a, Config{Addrs: addrs, Group: "g", Topic: "tt", Processor: NewProcessor(t, streamtest.Succeed), Logger: buf.Logger()})
		buf.WaitFor(t, `level=WARN msg="redeliver: a topic the consumer reads is not there`, 5*time.Second)
		if err := r.C.Health(); err == nil || !strings.Contains(err.Error(), `consumed topic "tt"`) || !strings.Contains(err.Error(), "UNKNOWN_TOPIC_OR_PARTITION") && !strings.Contains(err.Error(), "Unknown Topic Or Partition") {
			t.Errorf("Health: %v, want it to name the consumed topic tt and what the broker said", err)
		}
		CreateTopics(t, addrs, "tt")
		waitHealthy(t, r.C, 10*time.Second)
		buf.WaitFor(t, "start check passes now", time.Second)
	})
	deadLetterTopic := func(t *testing.T, bound bool) {
		_, addrs := NewCluster(t, "t", 1)
		var buf LogBuffer
		var (
			pub  stream.Publisher
			opts []any
		)
		if bound {
			var opt any
			pub, opt = a.BoundPublisher()
			opts = append(opts, opt)
		} else {
			pub = a.NewPublisher(t, addrs)
		}
		dl, err := stream.DeadLetter(pub, "t.dlq")
		if err != nil {
			t.Fatal(err)
		}
		proc := NewProcessor(t, streamtest.Succeed, stream.WithExhaustionAction(dl))
		r := Start(t, a, Config{Addrs: addrs, Group: "g", Topic: "t", Processor: proc, Logger: buf.Logger(), Options: opts})
		buf.WaitFor(t, `level=WARN msg="redeliver: a dead-letter topic is not there`, 5*time.Second)
		if err := r.C.Health(); err == nil || !strings.Contains(err.Error(), `dead-letter topic "t.dlq"`) {
			t.Errorf("Health: %v, want it to name the dead-letter topic t.dlq", err)
		}
		CreateTopics(t, addrs, "t.dlq")
		// kafka-go's writer refreshes what it knows of the cluster every
		// few seconds (its transport's MetadataTTL, 6s).
		waitHealthy(t, r.C, 15*time.Second)
		buf.WaitFor(t, "start check passes now", time.Second)
	}
	t.Run("dead-letter topic", func(t *testing.T) { deadLetterTopic(t, false) })
	t.Run("dead-letter topic of a bound publisher", func(t *testing.T) {
		if a.BoundPublisher == nil {
			t.Skipf("the %s adapter has no WithPublisher here", a.Name)
		}
		deadLetterTopic(t, true)
	})
	t.Run("unreachable", func(t *testing.T) {
		var buf LogBuffer
		r := Start(t, a, Config{Addrs: []string{"127.0.0.1:1"}, Group: "g", Topic: "t", Processor: NewProcessor(t, streamtest.Succeed), Logger: buf.Logger()})
		buf.WaitFor(t, `level=ERROR msg="redeliver: the brokers do not answer"`, 8*time.Second)
		if err := r.C.Health(); err == nil || !strings.Contains(err.Error(), "do not answer") {
			t.Errorf("Health: %v, want it to say the brokers do not answer", err)
		}
	})
}

// waitHealthy waits until c's Health is nil, failing the test after within.
func waitHealthy(t *testing.T, c Consumer, within time.Duration) {
	t.Helper()
	for deadline := time.Now().Add(within); c.Health() != nil; time.Sleep(50 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("Health still says %v %v after the topics were created", c.Health(), within)
		}
	}
}

// Run returns within a second of its context's cancellation whatever
// request the broker is slow to answer.
func shutdownUnderSlowAnswers(t *testing.T, a Adapter) {
	ShutdownUnderSlowAnswers(t, SlowKeys, func(t *testing.T, ctx context.Context, addrs []string) <-chan error {
		c, err := a.New(Config{Addrs: addrs, Group: "g", Topic: "t", Processor: NewProcessor(t, streamtest.Succeed)})
		if err != nil {
			t.Fatal(err)
		}
		done := make(chan error, 1)
		go func() { done <- c.Run(ctx) }()
		return done
	})
}

// A commit in flight when Run's context is cancelled, answered by the
// broker soon after, is reported to the worker: a clean shutdown keeps the
// final commit of the records it handled.
func shutdownKeepsCommitInFlight(t *testing.T, a Adapter) {
	CommitAnsweredAtShutdown(t, func(t *testing.T, ctx context.Context, addrs []string, hooks stream.Hooks) <-chan error {
		c, err := a.New(Config{Addrs: addrs, Group: "g", Topic: "t", Processor: NewProcessor(t, streamtest.Succeed, stream.WithHooks(hooks))})
		if err != nil {
			t.Fatal(err)
		}
		done := make(chan error, 1)
		go func() { done <- c.Run(ctx) }()
		return done
	})
}

// A handler that ignores the end of its context holds the consumer's
// stop: Run logs at Warn which partition it waits for and for how long,
// once and then on an interval, and returns an error naming it after the
// drain time, leaving it running. Run waited in silence for as long as the
// handler took.
func drainReportsAndBounds(t *testing.T, a Adapter) {
	t.Cleanup(lifecycle.SetDrainReport(100*time.Millisecond, 200*time.Millisecond))
	t.Cleanup(lifecycle.SetRevokeReport(100*time.Millisecond, 200*time.Millisecond))

	_, addrs := NewCluster(t, "orders", 1)
	Produce(t, addrs, "orders", 0, 0, 1)
	started, release := make(chan struct{}, 1), make(chan struct{})
	t.Cleanup(func() { close(release) })
	h := stream.HandlerFunc(func(context.Context, *stream.Batch) error {
		select {
		case started <- struct{}{}:
		default:
		}
		<-release // ignores its context
		return nil
	})
	var logs LogBuffer
	const drain = 1500 * time.Millisecond
	r := Start(t, a, Config{Addrs: addrs, Group: "g", Topic: "orders", Processor: NewProcessor(t, h), Logger: logs.Logger(), Drain: drain})
	select {
	case <-started:
	case <-time.After(Wait):
		t.Fatal("the handler was never called")
	}
	stop := time.Now()
	err := r.Stop(t)
	took := time.Since(stop)
	if err == nil || !strings.Contains(err.Error(), "drain time (1.5s) over") || !strings.Contains(err.Error(), "orders/0") {
		t.Errorf("Run = %v, want the drain's error naming orders/0", err)
	}
	if took < drain || took > drain+5*time.Second {
		t.Errorf("Run returned %v after the stop, want about the drain time %v", took, drain)
	}
	if n := strings.Count(logs.String(), "level=WARN msg=\"redeliver: stopping: waiting for partitions"); n < 2 || !strings.Contains(logs.String(), "partitions=orders/0") {
		t.Errorf("%d Warn lines naming the partition waited for, want 2 or more:\n%s", n, logs.String())
	}
	if strings.Contains(logs.String(), "a rebalance waits") {
		t.Errorf("the stop's wait was reported as a rebalance's (the drain reports it):\n%s", logs.String())
	}
}

// A topic that does not exist: the problem is logged again while it lasts,
// with how long it has, and Run ends with it after WithFailAfter. Run
// logged it once and returned nil when its context ended, 80s later, as if
// the consumer had been healthy and idle.
func wrongTopicEndsRun(t *testing.T, a Adapter) {
	repeat := health.RepeatEvery
	health.RepeatEvery = time.Second
	t.Cleanup(func() { health.RepeatEvery = repeat })
	_, addrs := NewCluster(t, "orders", 1)
	var logs LogBuffer
	const failAfter = 3 * time.Second
	r := Start(t, a, Config{Addrs: addrs, Group: "g", Topic: "ordres", Processor: NewProcessor(t, streamtest.Succeed), Logger: logs.Logger(), FailAfter: failAfter})
	start := time.Now()
	select {
	case <-r.Done():
	case <-time.After(failAfter + 15*time.Second):
		t.Fatalf("Run still runs %v after the start, with a missing topic and WithFailAfter(%v):\n%s", time.Since(start), failAfter, logs.String())
	}
	if err := r.Err(); err == nil || !strings.Contains(err.Error(), `consumed topic "ordres"`) || !strings.Contains(err.Error(), "the limit") {
		t.Errorf("Run = %v, want the missing topic's error", err)
	}
	if took := time.Since(start); took < failAfter {
		t.Errorf("Run ended after %v, before WithFailAfter's %v", took, failAfter)
	}
	if n := strings.Count(logs.String(), `subject="topic ordres"`); n < 2 || !strings.Contains(logs.String(), "(still)") || !strings.Contains(logs.String(), "lasted=") {
		t.Errorf("the missing topic logged %d times, want again while it lasts, with how long:\n%s", n, logs.String())
	}
}

// Brokers that do not answer: Run ends with it after WithFailAfter, having
// logged it again while it lasted.
func unreachableBrokersEndRun(t *testing.T, a Adapter) {
	repeat := health.RepeatEvery
	health.RepeatEvery = time.Second
	t.Cleanup(func() { health.RepeatEvery = repeat })
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close() // nothing listens there now
	var logs LogBuffer
	const failAfter = 3 * time.Second
	r := Start(t, a, Config{Addrs: []string{addr}, Group: "g", Topic: "orders", Processor: NewProcessor(t, streamtest.Succeed), Logger: logs.Logger(), FailAfter: failAfter})
	start := time.Now()
	select {
	case <-r.Done():
	case <-time.After(failAfter + 20*time.Second):
		t.Fatalf("Run still runs %v after the start, with brokers that do not answer:\n%s", time.Since(start), logs.String())
	}
	if err := r.Err(); err == nil || !strings.Contains(err.Error(), "the brokers do not answer") {
		t.Errorf("Run = %v, want the brokers' error", err)
	}
	if n := strings.Count(logs.String(), "redeliver: the brokers do not answer"); n < 2 {
		t.Errorf("the brokers' problem logged %d times, want again while it lasts:\n%s", n, logs.String())
	}
}
