package tests

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/IBM/sarama"

	"github.com/redeliver-go/redeliver/adapters/internal/kafkatest"
	rdsarama "github.com/redeliver-go/redeliver/adapters/sarama"
	"github.com/redeliver-go/redeliver/checkpoint"
	"github.com/redeliver-go/redeliver/stream"
	"github.com/redeliver-go/redeliver/stream/streamtest"
)

const wait = kafkatest.Wait

func start(t testing.TB, addrs []string, group, topic string, proc *stream.Processor, opts ...any) *kafkatest.Running {
	t.Helper()
	return kafkatest.Start(t, adapter, kafkatest.Config{Addrs: addrs, Group: group, Topic: topic, Processor: proc, Options: opts})
}

// A backoff of one partition pauses it in sarama's consumer: the other
// partition goes on meanwhile, and nothing delivered before the pause is
// lost or reordered.
func TestBackoffKeepsOrderAndOtherPartitions(t *testing.T) {
	_, addrs := kafkatest.NewCluster(t, "t", 2)
	kafkatest.Produce(t, addrs, "t", 0, 0, 3000)
	kafkatest.Produce(t, addrs, "t", 1, 0, 100)
	var (
		rec     streamtest.Recorder
		once    sync.Once
		retried = make(chan struct{})
	)
	h := stream.HandlerFunc(func(ctx context.Context, b *stream.Batch) error {
		// The batch that holds offset 20: how sarama's deliveries are
		// cut into batches depends on the timing of its fetches.
		has20 := b.Partition == 0 && b.FirstOffset() <= 20 && b.LastOffset() >= 20
		if has20 && b.Attempt.Retries == 0 {
			return errors.New("fail once")
		}
		if has20 {
			once.Do(func() { close(retried) })
		}
		return nil
	})
	proc := kafkatest.NewProcessor(t, stream.Chain(h, rec.Middleware()),
		stream.WithPolicy(checkpoint.Policy{MaxRetries: 3, Backoff: checkpoint.Fixed(400 * time.Millisecond)}))
	start(t, addrs, "g", "t", proc, rdsarama.WithMaxBatch(10))
	select {
	case <-retried:
	case <-time.After(wait):
		t.Fatal("the batch holding offset 20 was not retried")
	}
	kafkatest.WaitCommitted(t, addrs, "g", "t", map[int32]int64{0: 3000, 1: 100})
	kafkatest.CheckHistory(t, rec.Of("t", 0), 3000)
	kafkatest.CheckHistory(t, rec.Of("t", 1), 100)
}

// The retry state of a withheld batch moves with its partition, under
// each of sarama's rebalance strategies: a second member joins and the
// first leaves while the batch is retried, and the retry count goes on
// where it was instead of starting again.
func TestRetryStateMovesWithThePartition(t *testing.T) {
	for _, s := range []struct {
		name     string
		strategy sarama.BalanceStrategy
	}{
		{"range", sarama.NewBalanceStrategyRange()},
		{"roundrobin", sarama.NewBalanceStrategyRoundRobin()},
		{"sticky", sarama.NewBalanceStrategySticky()},
		{"cooperative-sticky", sarama.NewBalanceStrategyCooperativeSticky()},
	} {
		t.Run(s.name, func(t *testing.T) {
			_, addrs := kafkatest.NewCluster(t, "t", 2)
			kafkatest.Produce(t, addrs, "t", 0, 0, 10)
			kafkatest.Produce(t, addrs, "t", 1, 0, 10)
			var (
				mu       sync.Mutex
				attempts []int // of partition 0's batch at offset 0
				second   = make(chan struct{})
				once     sync.Once
			)
			h := stream.HandlerFunc(func(ctx context.Context, b *stream.Batch) error {
				if b.Partition != 0 || b.FirstOffset() != 0 {
					return nil
				}
				n := b.Attempt.Number()
				mu.Lock()
				attempts = append(attempts, n)
				mu.Unlock()
				if n >= 2 {
					once.Do(func() { close(second) })
				}
				if n < 5 {
					return errors.New("downstream unavailable")
				}
				return nil
			})
			newProc := func() *stream.Processor {
				return kafkatest.NewProcessor(t, h, stream.WithPolicy(checkpoint.Policy{MaxRetries: 10, Backoff: checkpoint.Fixed(300 * time.Millisecond)}))
			}
			strategy := func(c *sarama.Config) {
				c.Consumer.Group.Rebalance.GroupStrategies = []sarama.BalanceStrategy{s.strategy}
			}
			first := start(t, addrs, "g", "t", newProc(), strategy, rdsarama.WithMaxBatch(10))
			select {
			case <-second:
			case <-time.After(wait):
				t.Fatal("the failing batch was not retried")
			}
			start(t, addrs, "g", "t", newProc(), strategy, rdsarama.WithMaxBatch(10))
			time.Sleep(500 * time.Millisecond)
			if err := first.Stop(t); err != nil {
				t.Fatal(err)
			}
			kafkatest.WaitCommitted(t, addrs, "g", "t", map[int32]int64{0: 10, 1: 10})
			mu.Lock()
			defer mu.Unlock()
			for i := 1; i < len(attempts); i++ {
				if attempts[i] < attempts[i-1] {
					t.Fatalf("attempts %v: the retry count started again after the move", attempts)
				}
			}
			if attempts[len(attempts)-1] != 5 {
				t.Fatalf("attempts %v, want the last to be 5", attempts)
			}
		})
	}
}

// A commit with metadata made by another tool is where the claim starts,
// and the claim reports the metadata.
func TestCommittedMetadataIsRead(t *testing.T) {
	_, addrs := kafkatest.NewCluster(t, "t", 1)
	kafkatest.Produce(t, addrs, "t", 0, 0, 10)
	kafkatest.Commit(t, addrs, "g", "t", 0, 5, "other-tool:1")
	kafkatest.ConsumeFromTheCommit(t, addrs, func(p *stream.Processor) { start(t, addrs, "g", "t", p) }, nil)
}

// A commit written after sarama read the partition's committed offset for
// its session, and before the claim read it (the previous owner's last
// commit, written late), is where the claim starts: sarama's consumer
// starts at its own, earlier read, and the records between, handled and
// committed, are not delivered again.
func TestCommitBetweenSaramasReadAndTheClaims(t *testing.T) {
	kc, addrs := kafkatest.NewCluster(t, "t", 1)
	kafkatest.Produce(t, addrs, "t", 0, 0, 20)
	commit := kafkatest.CommitAsMember(kc, addrs, "g")
	var (
		rec       streamtest.Recorder
		once      sync.Once
		commitErr = make(chan error, 1)
	)
	// Setup, where WithOnAssigned is called, runs after sarama read the
	// committed offsets (none: it starts at the oldest) and before
	// ConsumeClaim.
	late := rdsarama.WithOnAssigned(func(map[string][]int32) {
		once.Do(func() { commitErr <- commit("t", 0, 10) })
	})
	proc := kafkatest.NewProcessor(t, rec.Middleware()(stream.HandlerFunc(func(context.Context, *stream.Batch) error { return nil })))
	start(t, addrs, "g", "t", proc, late)
	select {
	case err := <-commitErr:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(wait):
		t.Fatal("the partition was not assigned")
	}
	kafkatest.WaitCommitted(t, addrs, "g", "t", map[int32]int64{0: 20})
	next := int64(10) // the committed offset, and from there each record once
	for _, d := range rec.Of("t", 0) {
		if d.FirstOffset != next {
			t.Fatalf("a delivery of %d-%d, want one from %d: deliveries %+v", d.FirstOffset, d.LastOffset, next, rec.Of("t", 0))
		}
		next = d.LastOffset + 1
	}
	if next != 20 {
		t.Fatalf("deliveries up to %d, want up to 20", next)
	}
}

// A committed offset past the partition's end (the topic deleted and made
// again) is one sarama cannot use: it starts at Consumer.Offsets.Initial
// (the oldest here), and so does the claim, which skips nothing.
func TestCommittedPastTheEndStartsWhereSaramaDoes(t *testing.T) {
	_, addrs := kafkatest.NewCluster(t, "t", 1)
	kafkatest.Produce(t, addrs, "t", 0, 0, 5)
	kafkatest.Commit(t, addrs, "g", "t", 0, 500, "")
	var rec streamtest.Recorder
	proc := kafkatest.NewProcessor(t, rec.Middleware()(stream.HandlerFunc(func(context.Context, *stream.Batch) error { return nil })))
	start(t, addrs, "g", "t", proc)
	deadline := time.Now().Add(wait)
	for len(rec.Of("t", 0)) == 0 || rec.Of("t", 0)[len(rec.Of("t", 0))-1].LastOffset < 4 {
		if time.Now().After(deadline) {
			t.Fatalf("deliveries %+v in %v, want records 0 to 4", rec.Of("t", 0), wait)
		}
		time.Sleep(10 * time.Millisecond)
	}
	if ds := rec.Of("t", 0); ds[0].FirstOffset != 0 {
		t.Fatalf("first delivery at %d, want 0: deliveries %+v", ds[0].FirstOffset, ds)
	}
	kafkatest.Produce(t, addrs, "t", 0, 5, 1)
	kafkatest.WaitCommitted(t, addrs, "g", "t", map[int32]int64{0: 6})
}

// New refuses every nil or zero input with an error that names it, and
// never panics.
func TestNewErrors(t *testing.T) {
	proc := kafkatest.NewProcessor(t, streamtest.Succeed)
	group := rdsarama.WithGroup([]string{"localhost:9092"}, "g", "t")
	old := sarama.NewConfig()
	old.Version = sarama.V2_0_0_0
	old.Consumer.Group.InstanceId = "i"
	// A session timeout a heartbeat stuck behind a fetch can miss: on
	// kfake the member fell out of its group every 1.5-2s.
	tight := sarama.NewConfig()
	tight.Consumer.Group.Session.Timeout = time.Second
	tight.Consumer.Group.Heartbeat.Interval = 100 * time.Millisecond
	for _, c := range []struct {
		name string
		proc *stream.Processor
		opts []rdsarama.Option
		want string
	}{
		{"nil processor", nil, []rdsarama.Option{group}, "nil processor"},
		{"nil option", proc, []rdsarama.Option{group, nil}, "option 2 of New is nil"},
		{"no group", proc, nil, "no consumer group"},
		{"no brokers", proc, []rdsarama.Option{rdsarama.WithGroup(nil, "g", "t")}, "no brokers"},
		{"empty broker", proc, []rdsarama.Option{rdsarama.WithGroup([]string{""}, "g", "t")}, "broker 1 is empty"},
		{"no group ID", proc, []rdsarama.Option{rdsarama.WithGroup([]string{"b:1"}, "", "t")}, "empty group ID"},
		{"no topics", proc, []rdsarama.Option{rdsarama.WithGroup([]string{"b:1"}, "g")}, "no topics"},
		{"empty topic", proc, []rdsarama.Option{rdsarama.WithGroup([]string{"b:1"}, "g", "")}, "topic 1 is empty"},
		{"nil config", proc, []rdsarama.Option{group, rdsarama.WithConfig(nil)}, "nil *sarama.Config"},
		{"bad config", proc, []rdsarama.Option{group, rdsarama.WithConfig(old)}, "InstanceId"},
		{"session within 4 fetch waits", proc, []rdsarama.Option{group, rdsarama.WithConfig(tight)},
			"Consumer.Group.Session.Timeout (1s) is less than 4 x Consumer.MaxWaitTime (500ms)"},
		{"max batch", proc, []rdsarama.Option{group, rdsarama.WithMaxBatch(0)}, "WithMaxBatch(0)"},
		{"max wait", proc, []rdsarama.Option{group, rdsarama.WithMaxWait(-1)}, "WithMaxWait(-1ns)"},
		{"commit timeout", proc, []rdsarama.Option{group, rdsarama.WithCommitTimeout(0)}, "WithCommitTimeout(0s)"},
		{"drain", proc, []rdsarama.Option{group, rdsarama.WithDrain(-time.Second)}, "WithDrain(-1s)"},
		{"fail after", proc, []rdsarama.Option{group, rdsarama.WithFailAfter(-time.Second)}, "WithFailAfter(-1s)"},
		{"commit window half", proc, []rdsarama.Option{group, rdsarama.WithCommitWindow(0, 10)}, "WithCommitWindow(0s, 10): want both more than 0, or both 0"},
		{"commit window negative", proc, []rdsarama.Option{group, rdsarama.WithCommitWindow(-time.Second, -1)}, "WithCommitWindow(-1s, -1)"},
	} {
		t.Run(c.name, func(t *testing.T) {
			cons, err := rdsarama.New(c.proc, c.opts...)
			if err == nil || !strings.Contains(err.Error(), c.want) || cons != nil {
				t.Fatalf("New: %v, %v; want an error saying %q", cons, err, c.want)
			}
		})
	}
}

// A Consumer and a Publisher not made by their constructors, nil or zero,
// return errors from every method; NewPublisher refuses a nil client and
// one that cannot make a SyncProducer that waits for acknowledgements.
func TestZeroValuesAndNilArguments(t *testing.T) {
	for _, c := range []*rdsarama.Consumer{nil, {}} {
		if err := c.Run(context.Background()); err == nil {
			t.Error("Run of a Consumer not made by New returned nil")
		}
		if err := c.Health(); err == nil {
			t.Error("Health of a Consumer not made by New returned nil")
		}
		if err := c.Close(); err == nil {
			t.Error("Close of a Consumer not made by New returned nil")
		}
	}
	for _, p := range []*rdsarama.Publisher{nil, {}} {
		if err := p.Publish(context.Background(), "t", []stream.Record{{}}); err == nil || !strings.Contains(err.Error(), "NewPublisher") {
			t.Errorf("Publish of a Publisher not made by NewPublisher: %v", err)
		}
		if err := p.Close(); err == nil {
			t.Error("Close of a Publisher not made by NewPublisher returned nil")
		}
	}
	if _, err := rdsarama.NewPublisher(nil); err == nil || !strings.Contains(err.Error(), "nil client") {
		t.Errorf("NewPublisher(nil): %v", err)
	}
	_, addrs := kafkatest.NewCluster(t, "t", 1)
	for _, c := range []struct {
		name string
		set  func(*sarama.Config)
		want string
	}{
		{"no acks", func(c *sarama.Config) {
			c.Producer.RequiredAcks = sarama.NoResponse
			c.Producer.Return.Successes = true
		}, "NoResponse"},
		{"no successes", func(c *sarama.Config) {}, "Return.Successes"},
	} {
		t.Run(c.name, func(t *testing.T) {
			sc := saramaConfig()
			c.set(sc)
			client, err := sarama.NewClient(addrs, sc)
			if err != nil {
				t.Fatal(err)
			}
			defer client.Close()
			if _, err := rdsarama.NewPublisher(client); err == nil || !strings.Contains(err.Error(), c.want) {
				t.Errorf("NewPublisher: %v, want an error saying %q", err, c.want)
			}
		})
	}
	var pub *rdsarama.Publisher
	if _, err := stream.DeadLetter(pub, "dlq"); err == nil || !strings.Contains(err.Error(), "nil *sarama.Publisher") {
		t.Errorf("DeadLetter with a nil *sarama.Publisher: %v", err)
	}
}
