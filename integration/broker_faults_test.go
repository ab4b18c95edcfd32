package integration_test

// Issue 10's broker-side defects of the kafka-go adapter, on kfake and on
// the external broker, through both adapters: transactional topics,
// leader epochs across a broker restart, and a committed offset past the
// end of the log.

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/segmentio/kafka-go"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/redeliver-go/redeliver/adapters/franz"
	"github.com/redeliver-go/redeliver/adapters/kafkago"
	"github.com/redeliver-go/redeliver/integration/conformance"
	"github.com/redeliver-go/redeliver/integration/provider"
	"github.com/redeliver-go/redeliver/stream"
)

const faultWait = time.Minute

// bench is a topic and a group on a broker, for one test.
type bench struct {
	t     *testing.T
	addrs []string
	topic string
	group string
	cl    *kgo.Client
	adm   *kadm.Client
}

func newBench(t *testing.T, b conformance.Broker) *bench {
	t.Helper()
	suffix := fmt.Sprintf("%08x", rand.Uint32())
	name := strings.NewReplacer("/", "-", " ", "-").Replace(t.Name())
	cl, err := kgo.NewClient(kgo.SeedBrokers(b.Addrs...), kgo.RecordPartitioner(kgo.ManualPartitioner()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cl.Close)
	bn := &bench{t: t, addrs: b.Addrs, topic: "rd-" + name + "-" + suffix, group: "rd-g-" + name + "-" + suffix, cl: cl, adm: kadm.NewClient(cl)}
	ctx, cancel := context.WithTimeout(context.Background(), faultWait)
	defer cancel()
	resp, err := bn.adm.CreateTopic(ctx, 1, 1, nil, bn.topic)
	if err == nil {
		err = resp.Err
	}
	if err != nil {
		t.Fatalf("create topic: %v", err)
	}
	return bn
}

// produce writes the values to partition 0, in a transaction that commits
// or aborts when txn is "commit" or "abort", plainly when it is "".
func (bn *bench) produce(txn string, values ...string) {
	bn.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), faultWait)
	defer cancel()
	cl := bn.cl
	if txn != "" {
		var err error
		cl, err = kgo.NewClient(kgo.SeedBrokers(bn.addrs...), kgo.RecordPartitioner(kgo.ManualPartitioner()),
			kgo.TransactionalID(bn.topic+"-"+txn))
		if err != nil {
			bn.t.Fatal(err)
		}
		defer cl.Close()
		if err := cl.BeginTransaction(); err != nil {
			bn.t.Fatal(err)
		}
	}
	recs := make([]*kgo.Record, len(values))
	for i, v := range values {
		recs[i] = &kgo.Record{Topic: bn.topic, Partition: 0, Value: []byte(v)}
	}
	if err := cl.ProduceSync(ctx, recs...).FirstErr(); err != nil {
		bn.t.Fatalf("produce: %v", err)
	}
	if txn != "" {
		if err := cl.EndTransaction(ctx, kgo.TransactionEndTry(txn == "commit")); err != nil {
			bn.t.Fatalf("end transaction (%s): %v", txn, err)
		}
	}
}

// committed returns the group's committed offset of partition 0 and its
// leader epoch, -1 and -1 for none.
func (bn *bench) committed() (int64, int32) {
	bn.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), faultWait)
	defer cancel()
	// After a broker restart the admin client's first request can fail on
	// its old connection (EOF): ask again until the deadline.
	offs, err := bn.adm.FetchOffsets(ctx, bn.group)
	for err != nil && !errors.Is(err, kerr.GroupIDNotFound) && ctx.Err() == nil {
		time.Sleep(50 * time.Millisecond)
		offs, err = bn.adm.FetchOffsets(ctx, bn.group)
	}
	if errors.Is(err, kerr.GroupIDNotFound) {
		return -1, -1
	}
	if err != nil {
		bn.t.Fatalf("fetch offsets: %v", err)
	}
	o, ok := offs.Lookup(bn.topic, 0)
	if !ok || o.Err != nil {
		return -1, -1
	}
	return o.At, o.LeaderEpoch
}

// waitCommitted waits for the group's commit of partition 0 to reach at.
func (bn *bench) waitCommitted(at int64) {
	bn.t.Helper()
	deadline := time.Now().Add(faultWait)
	for {
		if o, _ := bn.committed(); o >= at {
			return
		}
		if time.Now().After(deadline) {
			o, _ := bn.committed()
			bn.t.Fatalf("committed offset %d, waiting for %d", o, at)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// waitCommittedAt waits until the committed offset of partition 0 is at.
func (bn *bench) waitCommittedAt(at int64) {
	bn.t.Helper()
	deadline := time.Now().Add(faultWait)
	for {
		o, _ := bn.committed()
		if o == at {
			return
		}
		if time.Now().After(deadline) {
			bn.t.Fatalf("committed offset %d, waiting for %d", o, at)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// commit commits offset for partition 0, as another tool would.
func (bn *bench) commit(offset int64) {
	bn.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), faultWait)
	defer cancel()
	offs := kadm.Offsets{}
	offs.Add(kadm.Offset{Topic: bn.topic, Partition: 0, At: offset, LeaderEpoch: -1})
	resp, err := bn.adm.CommitOffsets(ctx, bn.group, offs)
	if err == nil {
		err = resp.Error()
	}
	if err != nil {
		bn.t.Fatalf("commit: %v", err)
	}
}

// delivered keeps the records a handler was given.
type delivered struct {
	mu      sync.Mutex
	values  []string
	offsets []int64
}

func (d *delivered) handler() stream.Handler {
	return stream.HandlerFunc(func(_ context.Context, b *stream.Batch) error {
		d.mu.Lock()
		defer d.mu.Unlock()
		for _, r := range b.Records {
			d.values = append(d.values, string(r.Value))
			d.offsets = append(d.offsets, r.Offset)
		}
		return nil
	})
}

// waitFor waits until value was delivered and returns its offset.
func (d *delivered) waitFor(t *testing.T, value string) int64 {
	t.Helper()
	deadline := time.Now().Add(faultWait)
	for {
		vs, offs := d.get()
		if i := slices.Index(vs, value); i >= 0 {
			return offs[i]
		}
		if time.Now().After(deadline) {
			t.Fatalf("%q not delivered in %v; delivered %q", value, faultWait, vs)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func (d *delivered) get() ([]string, []int64) {
	d.mu.Lock()
	defer d.mu.Unlock()
	return slices.Clone(d.values), slices.Clone(d.offsets)
}

// consumer options of these tests.
type consumerOpts struct {
	readCommitted bool
}

// run runs a consumer of the named adapter ("franz" or "kafkago") in the
// bench's group over h until the returned stop is called.
func (bn *bench) run(adapter string, h stream.Handler, o consumerOpts) (stop func()) {
	bn.t.Helper()
	proc, err := stream.NewProcessor(h)
	if err != nil {
		bn.t.Fatal(err)
	}
	var c interface{ Run(context.Context) error }
	switch adapter {
	case "franz":
		iso := kgo.ReadUncommitted()
		if o.readCommitted {
			iso = kgo.ReadCommitted()
		}
		c, err = franz.New(proc, franz.WithKgoOptions(kgo.SeedBrokers(bn.addrs...), kgo.ConsumerGroup(bn.group),
			kgo.ConsumeTopics(bn.topic), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()),
			kgo.FetchMaxWait(100*time.Millisecond), kgo.FetchIsolationLevel(iso)))
	case "kafkago":
		iso := kafka.ReadUncommitted
		if o.readCommitted {
			iso = kafka.ReadCommitted
		}
		c, err = kafkago.New(proc, kafkago.WithGroupConfig(kafka.ConsumerGroupConfig{
			ID: bn.group, Brokers: bn.addrs, Topics: []string{bn.topic}, StartOffset: kafka.FirstOffset,
			RebalanceTimeout: 5 * time.Second,
		}), kafkago.WithFetchConfig(kafka.ReadBatchConfig{MaxWait: 100 * time.Millisecond, IsolationLevel: iso}))
	default:
		bn.t.Fatalf("adapter %q", adapter)
	}
	if err != nil {
		bn.t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = c.Run(ctx)
	}()
	var once sync.Once
	stop = func() {
		once.Do(func() {
			cancel()
			select {
			case <-done:
			case <-time.After(faultWait):
				bn.t.Errorf("the %s consumer did not stop", adapter)
			}
		})
	}
	bn.t.Cleanup(stop)
	return stop
}

var faultProviders = []conformance.Provider{provider.Kfake(), provider.External()}

// TestTransactionalTopics consumes a partition with plain records, an
// aborted and a committed transaction through each adapter under each
// isolation level: a handler never sees a transaction marker (a control
// record), and under read_committed never an aborted record.
func TestTransactionalTopics(t *testing.T) {
	for _, p := range faultProviders {
		for _, adapter := range []string{"franz", "kafkago"} {
			for _, rc := range []bool{true, false} {
				iso := "read_uncommitted"
				if rc {
					iso = "read_committed"
				}
				t.Run(p.Name()+"/"+adapter+"/"+iso, func(t *testing.T) {
					bn := newBench(t, p.Start(t))
					bn.produce("", "p0", "p1")
					bn.produce("abort", "a0", "a1", "a2")
					bn.produce("commit", "c0", "c1", "c2")
					bn.produce("", "p2", "p3")
					// The markers are written after EndTransaction returns,
					// so where they land among the records varies.
					want := []string{"p0", "p1", "a0", "a1", "a2", "c0", "c1", "c2", "p2", "p3"}
					if rc {
						want = slices.DeleteFunc(want, func(v string) bool { return v[0] == 'a' })
					}
					var d delivered
					stop := bn.run(adapter, d.handler(), consumerOpts{readCommitted: rc})
					bn.waitCommitted(d.waitFor(t, "p3") + 1)
					stop()
					if got, offs := d.get(); !slices.Equal(got, want) {
						t.Errorf("handler saw %q at offsets %v\nwant %q", got, offs, want)
					}
				})
			}
		}
	}
}

// TestLeaderEpochHandOver restarts the external broker (the partition's
// leader epoch moves on), consumes the partition to its end with the
// kafka-go adapter, and hands the group to the franz-go adapter, which
// checks the committed leader epoch: nothing below the committed offset is
// delivered again.
func TestLeaderEpochHandOver(t *testing.T) {
	cmd := os.Getenv(conformance.EnvRestart)
	if cmd == "" {
		t.Skipf("needs an external broker and %s, a command that restarts it (integration/kafka.sh restart)", conformance.EnvRestart)
	}
	bn := newBench(t, provider.External().Start(t))
	values := func(from, n int) []string {
		vs := make([]string, n)
		for i := range vs {
			vs[i] = fmt.Sprint(from + i)
		}
		return vs
	}
	bn.produce("", values(0, 100)...)
	if out, err := exec.Command("bash", "-c", cmd).CombinedOutput(); err != nil {
		t.Fatalf("restart the broker: %v\n%s", err, out)
	}
	bn.produce("", values(100, 100)...) // retried by the client until the broker is back

	var first delivered
	stop := bn.run("kafkago", first.handler(), consumerOpts{})
	bn.waitCommitted(200)
	stop()
	at, epoch := bn.committed()
	t.Logf("the kafka-go adapter committed offset %d with leader epoch %d", at, epoch)

	bn.produce("", values(200, 10)...)
	var second delivered
	stop = bn.run("franz", second.handler(), consumerOpts{})
	bn.waitCommitted(210)
	stop()
	_, offs := second.get()
	if again := slices.DeleteFunc(offs, func(o int64) bool { return o >= at }); len(again) > 0 {
		t.Errorf("franz-go adapter delivered %d records below the committed offset %d again (committed with leader epoch %d)", len(again), at, epoch)
	}
}

// TestCommittedPastEnd commits an offset past the end of the partition (as
// after the topic was deleted and created again) and checks that each
// adapter, starting at the partition's start when it has no usable
// commit, reads the partition from its start and commits its end.
func TestCommittedPastEnd(t *testing.T) {
	for _, p := range faultProviders {
		for _, adapter := range []string{"franz", "kafkago"} {
			t.Run(p.Name()+"/"+adapter, func(t *testing.T) {
				bn := newBench(t, p.Start(t))
				bn.produce("", "0", "1", "2", "3", "4")
				bn.commit(500)
				var d delivered
				stop := bn.run(adapter, d.handler(), consumerOpts{})
				deadline := time.Now().Add(15 * time.Second)
				for {
					if vs, _ := d.get(); len(vs) >= 5 {
						break
					}
					if time.Now().After(deadline) {
						t.Fatalf("nothing delivered in 15s with the committed offset past the end")
					}
					time.Sleep(50 * time.Millisecond)
				}
				bn.produce("", "5")
				// Exactly the end: the commit past the end (500) is
				// above it from the start.
				bn.waitCommittedAt(6)
				stop()
				if got, _ := d.get(); !slices.Equal(got, []string{"0", "1", "2", "3", "4", "5"}) {
					t.Errorf("handler saw %q, want 0 to 5", got)
				}
			})
		}
	}
}
