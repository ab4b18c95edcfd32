package tests

import (
	"context"
	"errors"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/confluentinc/confluent-kafka-go/v2/kafka"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/redeliver-go/redeliver/adapters/confluent"
	"github.com/redeliver-go/redeliver/adapters/internal/kafkatest"
	"github.com/redeliver-go/redeliver/checkpoint"
	"github.com/redeliver-go/redeliver/stream"
	"github.com/redeliver-go/redeliver/stream/streamtest"
)

const wait = kafkatest.Wait

func start(t testing.TB, addrs []string, group, topic string, proc *stream.Processor, opts ...any) *kafkatest.Running {
	t.Helper()
	return kafkatest.Start(t, adapter, kafkatest.Config{Addrs: addrs, Group: group, Topic: topic, Processor: proc, Options: opts})
}

// A backoff of one partition pauses it in librdkafka: the other partition
// goes on meanwhile, and nothing polled before the pause is lost or
// reordered.
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
	start(t, addrs, "g", "t", proc, confluent.WithMaxBatch(10))
	select {
	case <-retried:
	case <-time.After(wait):
		t.Fatal("the batch holding offset 20 was not retried")
	}
	kafkatest.WaitCommitted(t, addrs, "g", "t", map[int32]int64{0: 3000, 1: 100})
	kafkatest.CheckHistory(t, rec.Of("t", 0), 3000)
	kafkatest.CheckHistory(t, rec.Of("t", 1), 100)
}

// A worker that does not keep up holds its full buffer for a while: its
// partition is then paused in librdkafka, and the other partition, whose
// records come through the same Poll, goes on; once the slow worker goes
// on, nothing of its partition is lost or reordered.
func TestSlowWorkerDoesNotHoldOthers(t *testing.T) {
	_, addrs := kafkatest.NewCluster(t, "t", 2)
	kafkatest.Produce(t, addrs, "t", 0, 0, 5000)
	var (
		rec       streamtest.Recorder
		stuck     = make(chan struct{})
		goOn      = make(chan struct{})
		stuckOnce sync.Once
	)
	h := stream.HandlerFunc(func(ctx context.Context, b *stream.Batch) error {
		if b.Partition == 0 && b.FirstOffset() == 0 {
			stuckOnce.Do(func() { close(stuck) })
			select {
			case <-goOn:
			case <-ctx.Done():
				return ctx.Err()
			}
		}
		return nil
	})
	proc := kafkatest.NewProcessor(t, stream.Chain(h, rec.Middleware()))
	start(t, addrs, "g", "t", proc, confluent.WithMaxBatch(10))
	select {
	case <-stuck:
	case <-time.After(wait):
		t.Fatal("partition 0 was not delivered")
	}
	time.Sleep(300 * time.Millisecond) // partition 0's buffer fills up
	kafkatest.Produce(t, addrs, "t", 1, 0, 100)
	kafkatest.WaitCommitted(t, addrs, "g", "t", map[int32]int64{1: 100})
	close(goOn)
	kafkatest.WaitCommitted(t, addrs, "g", "t", map[int32]int64{0: 5000, 1: 100})
	kafkatest.CheckHistory(t, rec.Of("t", 0), 5000)
	kafkatest.CheckHistory(t, rec.Of("t", 1), 100)
}

// The retry state of a withheld batch moves with its partition, under
// eager and cooperative assignment: a second member joins and the first
// leaves while the batch is retried, and the retry count goes on where it
// was instead of starting again.
func TestRetryStateMovesWithThePartition(t *testing.T) {
	for _, strategy := range []string{"range", "roundrobin", "cooperative-sticky"} {
		t.Run(strategy, func(t *testing.T) {
			_, addrs := kafkatest.NewCluster(t, "t", 2)
			kafkatest.Produce(t, addrs, "t", 0, 0, 10)
			kafkatest.Produce(t, addrs, "t", 1, 0, 10)
			var (
				mu       sync.Mutex
				attempts []int
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
			set := func(c kafka.ConfigMap) { c["partition.assignment.strategy"] = strategy }
			first := start(t, addrs, "g", "t", newProc(), set, confluent.WithMaxBatch(10))
			select {
			case <-second:
			case <-time.After(wait):
				t.Fatal("the failing batch was not retried")
			}
			start(t, addrs, "g", "t", newProc(), set, confluent.WithMaxBatch(10))
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

// New refuses every nil or zero input with an error that names it, and
// never panics; so do the methods of values not made by the constructors.
func TestNewErrorsAndZeroValues(t *testing.T) {
	proc := kafkatest.NewProcessor(t, streamtest.Succeed)
	conf := kafka.ConfigMap{"bootstrap.servers": "b:1", "group.id": "g"}
	for _, c := range []struct {
		name string
		proc *stream.Processor
		opts []confluent.Option
		want string
	}{
		{"nil processor", nil, []confluent.Option{confluent.WithGroup(conf, "t")}, "nil processor"},
		{"nil option", proc, []confluent.Option{confluent.WithGroup(conf, "t"), nil}, "option 2 of New is nil"},
		{"no group", proc, nil, "no consumer group"},
		{"nil config", proc, []confluent.Option{confluent.WithGroup(nil, "t")}, "no bootstrap.servers"},
		{"no group ID", proc, []confluent.Option{confluent.WithGroup(kafka.ConfigMap{"bootstrap.servers": "b:1"}, "t")}, "no group.id"},
		{"no topics", proc, []confluent.Option{confluent.WithGroup(conf)}, "no topics"},
		{"empty topic", proc, []confluent.Option{confluent.WithGroup(conf, "")}, "topic 1 is empty"},
		{"max batch", proc, []confluent.Option{confluent.WithGroup(conf, "t"), confluent.WithMaxBatch(0)}, "WithMaxBatch(0)"},
		{"max wait", proc, []confluent.Option{confluent.WithGroup(conf, "t"), confluent.WithMaxWait(-1)}, "WithMaxWait(-1ns)"},
		{"commit timeout", proc, []confluent.Option{confluent.WithGroup(conf, "t"), confluent.WithCommitTimeout(0)}, "WithCommitTimeout(0s)"},
		{"drain", proc, []confluent.Option{confluent.WithGroup(conf, "t"), confluent.WithDrain(-time.Second)}, "WithDrain(-1s)"},
		{"fail after", proc, []confluent.Option{confluent.WithGroup(conf, "t"), confluent.WithFailAfter(-time.Second)}, "WithFailAfter(-1s)"},
		{"commit window half", proc, []confluent.Option{confluent.WithGroup(conf, "t"), confluent.WithCommitWindow(time.Second, 0)}, "WithCommitWindow(1s, 0): want both more than 0, or both 0"},
		{"commit window negative", proc, []confluent.Option{confluent.WithGroup(conf, "t"), confluent.WithCommitWindow(-time.Second, -1)}, "WithCommitWindow(-1s, -1)"},
	} {
		t.Run(c.name, func(t *testing.T) {
			cons, err := confluent.New(c.proc, c.opts...)
			if err == nil || !strings.Contains(err.Error(), c.want) || cons != nil {
				t.Fatalf("New: %v, %v; want an error saying %q", cons, err, c.want)
			}
		})
	}
	for _, c := range []*confluent.Consumer{nil, {}} {
		if c.Run(context.Background()) == nil || c.Health() == nil || c.Close() == nil {
			t.Error("a Consumer not made by New returned nil from a method")
		}
	}
	for _, p := range []*confluent.Publisher{nil, {}} {
		if err := p.Publish(context.Background(), "t", []stream.Record{{}}); err == nil || !strings.Contains(err.Error(), "NewPublisher") {
			t.Errorf("Publish of a Publisher not made by NewPublisher: %v", err)
		}
	}
	if _, err := confluent.NewPublisher(nil); err == nil || !strings.Contains(err.Error(), "nil producer") {
		t.Errorf("NewPublisher(nil): %v", err)
	}
	var pub *confluent.Publisher
	if _, err := stream.DeadLetter(pub, "dlq"); err == nil || !strings.Contains(err.Error(), "nil *confluent.Publisher") {
		t.Errorf("DeadLetter with a nil *confluent.Publisher: %v", err)
	}
}

// A worker that keeps up empties its buffer after each batch while
// librdkafka holds more of the partition fetched ahead: that is not being
// caught up, and a coalesced success commit waits for the window instead
// of going out at once. Before, each emptied buffer wrote a commit (15 to
// 37 commits for the 400 batches here, in 3 runs); now the broker gets the
// commit at the log's end, and at most a few more.
func TestCoalescedCommitsWaitBehindTheLogsEnd(t *testing.T) {
	kc, addrs := kafkatest.NewCluster(t, "t", 1)
	kafkatest.Produce(t, addrs, "t", 0, 0, 20000)
	var commits atomic.Int32
	kc.ControlKey(kmsg.OffsetCommit.Int16(), func(kmsg.Request) (kmsg.Response, error, bool) {
		kc.KeepControl()
		commits.Add(1)
		return nil, nil, false
	})
	proc := kafkatest.NewProcessor(t, stream.HandlerFunc(func(context.Context, *stream.Batch) error { return nil }))
	start(t, addrs, "g", "t", proc, confluent.WithMaxBatch(50), confluent.WithCommitWindow(time.Minute, 10_000_000))
	kafkatest.WaitCommitted(t, addrs, "g", "t", map[int32]int64{0: 20000})
	if n := commits.Load(); n > 5 {
		t.Errorf("the broker got %d commits for 400 batches of a log produced before the consumer started, want at most 5 (the one at the log's end)", n)
	}
}

// A consumer of one partition polls on its worker while the worker has
// nothing buffered, so a rebalance's callback runs there: the revocation
// does not wait for that worker (it would wait for itself, the commit
// timeout long, holding the whole group's rebalance), and the records
// produced after the rebalance are handled at once.
func TestRevocationOnTheWorkersPoll(t *testing.T) {
	_, addrs := kafkatest.NewCluster(t, "t", 1)
	kafkatest.Produce(t, addrs, "t", 0, 0, 10)
	handled := make(chan int64, 100)
	h := stream.HandlerFunc(func(ctx context.Context, b *stream.Batch) error {
		handled <- b.LastOffset()
		return nil
	})
	until := func(off int64, within time.Duration, what string) {
		t.Helper()
		timeout := time.After(within)
		for {
			select {
			case got := <-handled:
				if got >= off {
					return
				}
			case <-timeout:
				t.Fatalf("%s: offset %d not handled within %v", what, off, within)
			}
		}
	}
	set := func(c kafka.ConfigMap) { c["partition.assignment.strategy"] = "range" }
	start(t, addrs, "g", "t", kafkatest.NewProcessor(t, h), set, confluent.WithCommitTimeout(20*time.Second))
	until(9, wait, "the first member")
	time.Sleep(200 * time.Millisecond) // idle: the worker polls
	// The second member's join revokes the first member's partition (eager
	// protocol) in the first member's Poll, on its worker.
	start(t, addrs, "g", "t", kafkatest.NewProcessor(t, h), set, confluent.WithCommitTimeout(20*time.Second))
	time.Sleep(time.Second)
	kafkatest.Produce(t, addrs, "t", 0, 10, 1)
	until(10, 8*time.Second, "after the second member joined")
	kafkatest.WaitCommitted(t, addrs, "g", "t", map[int32]int64{0: 11})
}

// A success commit still pending when the revocation runs in the worker's
// own Poll (one partition, idle) is written before the partition is given
// up, so that its next owner starts past the records handled. A success
// taken when the partition is caught up is written at once, whatever the
// window (the worker of an idle partition has handled its last batch), so
// an idle worker's success is pending only when its background write failed
// (or is in flight, which Final waits for). Here the
// background write of the success at 10 fails (the broker refuses it once),
// so that it is still pending, with a commit window of a minute, when a
// second member joins and the eager protocol revokes the partition in the
// idle worker's Poll: the revocation writes it (endClaims, Final), and
// whoever owns the partition next claims it at 10 and delivers no record
// again. Written by the worker only once the callback has returned, the
// commit came after the rebalance (the member's generation was over, or
// the first member claimed the partition again in the same Poll), and the
// next owner delivered the 10 records again.
func TestRevocationOnTheWorkersPollWritesThePendingCommit(t *testing.T) {
	kc, addrs := kafkatest.NewCluster(t, "t", 1)
	kafkatest.Produce(t, addrs, "t", 0, 0, 10)
	var refused atomic.Int32
	kc.ControlKey(kmsg.OffsetCommit.Int16(), func(r kmsg.Request) (kmsg.Response, error, bool) {
		kc.DropControl() // the first commit only
		refused.Add(1)
		return kafkatest.CommitError(r.(*kmsg.OffsetCommitRequest), kerr.OffsetMetadataTooLarge.Code), nil, true
	})
	var (
		rec    streamtest.Recorder
		mu     sync.Mutex
		claims []stream.ClaimEvent
	)
	hooks := stream.WithHooks(stream.Hooks{Claimed: func(e stream.ClaimEvent) {
		mu.Lock()
		claims = append(claims, e)
		mu.Unlock()
	}})
	newProc := func() *stream.Processor {
		return kafkatest.NewProcessor(t, stream.Chain(streamtest.Succeed, rec.Middleware()), hooks)
	}
	set := func(c kafka.ConfigMap) { c["partition.assignment.strategy"] = "range" }
	window := confluent.WithCommitWindow(time.Minute, 10_000_000)
	start(t, addrs, "g", "t", newProc(), set, window, confluent.WithCommitTimeout(20*time.Second))
	deadline := time.Now().Add(wait)
	for len(rec.Of("t", 0)) == 0 || refused.Load() == 0 {
		if time.Now().After(deadline) {
			t.Fatalf("%d deliveries and %d commits refused: the first member did not handle the records and try to commit them", len(rec.Of("t", 0)), refused.Load())
		}
		time.Sleep(10 * time.Millisecond)
	}
	time.Sleep(300 * time.Millisecond) // idle: the worker polls
	if o, ok := kafkatest.Committed(t, addrs, "g").Lookup("t", 0); ok && o.At >= 0 {
		t.Fatalf("the group's checkpoint is %d before the revocation, want none: the success commit is not pending", o.At)
	}
	// The second member's join revokes the partition (eager protocol) in
	// the first member's Poll, on its worker.
	start(t, addrs, "g", "t", newProc(), set, window, confluent.WithCommitTimeout(20*time.Second))
	deadline = time.Now().Add(wait)
	for {
		mu.Lock()
		n := len(claims)
		mu.Unlock()
		if n >= 2 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the partition was not claimed again after the second member joined")
		}
		time.Sleep(10 * time.Millisecond)
	}
	kafkatest.Produce(t, addrs, "t", 0, 10, 5)
	kafkatest.WaitCommitted(t, addrs, "g", "t", map[int32]int64{0: 15})
	mu.Lock()
	next := claims[1]
	mu.Unlock()
	if next.Committed != 10 {
		t.Errorf("the partition's next claim starts at %d, want 10: the pending success commit was not written before the partition was given up", next.Committed)
	}
	seen := map[int64]int{}
	for _, d := range rec.Of("t", 0) {
		for o := d.FirstOffset; o <= d.LastOffset; o++ {
			if seen[o]++; seen[o] == 2 {
				t.Errorf("offset %d delivered again after the revocation", o)
			}
		}
	}
	if !t.Failed() {
		kafkatest.CheckHistory(t, rec.Of("t", 0), 15)
	}
}

// The committed offsets a new claim starts from are read again when the
// broker answers the read with an error for a partition: the claim never
// takes such an answer for "no commit" (it would start the partition's
// retry count over, and librdkafka from auto.offset.reset), and librdkafka
// starts fetching where the claim starts.
func TestCommittedReadAgainAfterAPartitionError(t *testing.T) {
	kc, addrs := kafkatest.NewCluster(t, "t", 1)
	kafkatest.Produce(t, addrs, "t", 0, 0, 10)
	kafkatest.Commit(t, addrs, "g", "t", 0, 5, "other-tool:1")
	var refused atomic.Int32
	kc.ControlKey(kmsg.OffsetFetch.Int16(), func(r kmsg.Request) (kmsg.Response, error, bool) {
		req := r.(*kmsg.OffsetFetchRequest)
		// librdkafka's reads only: the test's own franz-go client (which
		// waits for the commits) asks with version 10, which librdkafka
		// does not speak.
		if req.Version >= 10 || (req.Group != "g" && (len(req.Groups) == 0 || req.Groups[0].Group != "g")) {
			return nil, nil, false
		}
		kc.DropControl() // the first read only
		refused.Add(1)
		return offsetFetchError(req, kerr.CoordinatorLoadInProgress.Code), nil, true
	})
	kafkatest.ConsumeFromTheCommit(t, addrs, func(p *stream.Processor) { start(t, addrs, "g", "t", p) }, func() {
		if refused.Load() == 0 {
			t.Fatal("no read of the committed offsets was answered with an error: the test did not test")
		}
	})
}

// librdkafka starts fetching a new claim's partition at the offset the
// claim read (Assign with that offset), not at what a read of its own
// answers: here every read after the claim's is answered with an error,
// which librdkafka would take for no commit (and start from
// auto.offset.reset, offset 0).
func TestFetchStartsWhereTheClaimStarts(t *testing.T) {
	kc, addrs := kafkatest.NewCluster(t, "t", 1)
	kafkatest.Produce(t, addrs, "t", 0, 0, 10)
	kafkatest.Commit(t, addrs, "g", "t", 0, 5, "")
	var reads atomic.Int32
	kc.ControlKey(kmsg.OffsetFetch.Int16(), func(r kmsg.Request) (kmsg.Response, error, bool) {
		kc.KeepControl()
		req := r.(*kmsg.OffsetFetchRequest)
		if req.Version >= 10 { // the test's own client (see above)
			return nil, nil, false
		}
		if reads.Add(1) == 1 {
			return nil, nil, false // the claim's read
		}
		return offsetFetchError(req, kerr.CoordinatorLoadInProgress.Code), nil, true
	})
	var rec streamtest.Recorder
	start(t, addrs, "g", "t", kafkatest.NewProcessor(t, stream.Chain(streamtest.Succeed, rec.Middleware())))
	kafkatest.WaitCommitted(t, addrs, "g", "t", map[int32]int64{0: 10})
	if ds := rec.Of("t", 0); len(ds) == 0 || ds[0].FirstOffset != 5 {
		t.Errorf("deliveries %+v, want the first at offset 5, where the claim starts", ds)
	}
}

// offsetFetchError answers req with code for every partition it asks for.
func offsetFetchError(req *kmsg.OffsetFetchRequest, code int16) *kmsg.OffsetFetchResponse {
	resp := req.ResponseKind().(*kmsg.OffsetFetchResponse)
	resp.Version = req.Version
	if len(req.Groups) > 0 {
		for _, rg := range req.Groups {
			g := kmsg.NewOffsetFetchResponseGroup()
			g.Group = rg.Group
			for _, rt := range rg.Topics {
				t := kmsg.NewOffsetFetchResponseGroupTopic()
				t.Topic = rt.Topic
				for _, p := range rt.Partitions {
					rp := kmsg.NewOffsetFetchResponseGroupTopicPartition()
					rp.Partition, rp.Offset, rp.LeaderEpoch, rp.ErrorCode = p, -1, -1, code
					t.Partitions = append(t.Partitions, rp)
				}
				g.Topics = append(g.Topics, t)
			}
			resp.Groups = append(resp.Groups, g)
		}
		return resp
	}
	for _, rt := range req.Topics {
		t := kmsg.NewOffsetFetchResponseTopic()
		t.Topic = rt.Topic
		for _, p := range rt.Partitions {
			rp := kmsg.NewOffsetFetchResponseTopicPartition()
			rp.Partition, rp.Offset, rp.LeaderEpoch, rp.ErrorCode = p, -1, -1, code
			t.Partitions = append(t.Partitions, rp)
		}
		resp.Topics = append(resp.Topics, t)
	}
	return resp
}
