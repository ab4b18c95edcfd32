package tests

import (
	"context"
	"net"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/segmentio/kafka-go"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/redeliver-go/redeliver/adapters/internal/kafkatest"
	"github.com/redeliver-go/redeliver/adapters/kafkago"
	"github.com/redeliver-go/redeliver/stream"
)

// valueLog keeps the values a handler was given, in order.
type valueLog struct {
	mu     sync.Mutex
	values []string
	seen   chan struct{} // closed once the value waited for was seen
	want   string
	once   sync.Once
}

func newValueLog(want string) *valueLog { return &valueLog{seen: make(chan struct{}), want: want} }

func (l *valueLog) handler() stream.Handler {
	return stream.HandlerFunc(func(_ context.Context, b *stream.Batch) error {
		l.mu.Lock()
		defer l.mu.Unlock()
		for _, r := range b.Records {
			l.values = append(l.values, string(r.Value))
			if string(r.Value) == l.want {
				l.once.Do(func() { close(l.seen) })
			}
		}
		return nil
	})
}

func (l *valueLog) wait(t *testing.T) []string {
	t.Helper()
	select {
	case <-l.seen:
	case <-time.After(wait):
		l.mu.Lock()
		defer l.mu.Unlock()
		t.Fatalf("%q not delivered in %v; delivered %q", l.want, wait, l.values)
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	return slices.Clone(l.values)
}

// TestCommitsLeaderEpoch moves the partition's leadership (its leader epoch
// goes from 0 to 1) between two halves of the records, consumes them all,
// and checks that the commit carries the epoch of the last record, so that
// franz-go (or Kafka's Java consumer) taking the group over does not take
// the commit for one from before a truncation and read records again.
func TestCommitsLeaderEpoch(t *testing.T) {
	kc, addrs := newCluster(t, "t", 1)
	produce(t, addrs, "t", 0, 0, 50)
	if err := kc.MoveTopicPartition("t", 0, kc.LeaderFor("t", 0)); err != nil {
		t.Fatal(err)
	}
	produce(t, addrs, "t", 0, 50, 50)

	r := start(t, addrs, "g", "t", newProcessor(t, newValueLog("").handler()), kafkago.WithMaxBatch(30))
	waitCommitted(t, addrs, "g", "t", map[int32]int64{0: 100})
	if err := r.Stop(t); err != nil {
		t.Fatalf("Run returned %v, want nil: a clean shutdown", err)
	}
	o, _ := committed(t, addrs, "g").Lookup("t", 0)
	if o.LeaderEpoch != 1 {
		t.Errorf("committed offset %d with leader epoch %d, want the last record's epoch 1", o.At, o.LeaderEpoch)
	}

	// franz-go takes the group over: it validates the committed epoch
	// and must start at 100.
	produce(t, addrs, "t", 0, 100, 5)
	cl, err := kgo.NewClient(kgo.SeedBrokers(addrs...), kgo.ConsumerGroup("g"), kgo.ConsumeTopics("t"),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()), kgo.FetchMaxWait(100*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), wait)
	defer cancel()
	var again []int64 // offsets below 100 read again
	for seen := 0; seen < 5; {
		fs := cl.PollFetches(ctx)
		if ctx.Err() != nil {
			t.Fatalf("franz-go got %d of the 5 new records in %v", seen, wait)
		}
		fs.EachRecord(func(r *kgo.Record) {
			if r.Offset < 100 {
				again = append(again, r.Offset)
			} else {
				seen++
			}
		})
	}
	if len(again) > 0 {
		t.Errorf("franz-go read %d records again, offsets %d to %d, below the committed 100", len(again), again[0], again[len(again)-1])
	}
}

// TestCommittedPastEnd commits an offset past the partition's end (the
// topic was deleted and created again, or an unclean leader election
// truncated the log) and checks that the consumer resets as Kafka's
// auto.offset.reset does, per its start offset, and says so at Error:
// FirstOffset reads the partition from its start, LastOffset from its end.
func TestCommittedPastEnd(t *testing.T) {
	for _, tc := range []struct {
		name  string
		start int64
		want  []string // values delivered
		log   string
	}{
		{"FirstOffset", kafka.FirstOffset, []string{"0-0", "0-1", "0-2", "0-3", "0-4", "0-5", "0-6", "0-7", "0-8", "0-9", "0-10", "0-11"}, "re-reading offsets 0 to 9"},
		{"LastOffset", kafka.LastOffset, []string{"0-10", "0-11"}, "skipping offsets 0 to 9"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, addrs := newCluster(t, "t", 1)
			produce(t, addrs, "t", 0, 0, 10)
			kafkatest.Commit(t, addrs, "g", "t", 0, 500, "")
			var lr logRecorder
			vl := newValueLog("0-11")
			start(t, addrs, "g", "t", newProcessor(t, vl.handler()), kafkago.WithLogger(lr.logger()),
				func(gc *kafka.ConsumerGroupConfig) { gc.StartOffset = tc.start })
			waitLog(t, &lr, "ERROR", "past the end")
			produce(t, addrs, "t", 0, 10, 2)
			got := vl.wait(t)
			if !slices.Equal(got, tc.want) {
				t.Errorf("handler saw %q, want %q", got, tc.want)
			}
			if m := lr.matching(tc.log); len(m) != 1 || !strings.HasPrefix(m[0], "ERROR") {
				t.Errorf("logged %q, want one Error saying %q", lr.matching("past the end"), tc.log)
			}
			waitCommitted(t, addrs, "g", "t", map[int32]int64{0: 12})
		})
	}
}

// TestCommittedPastEndLogGrows is the silent skip of the issue: the log
// grows past the committed offset while the consumer waits. Records below
// the committed offset must not be skipped without a word: the consumer
// resets at once (here to the start) instead of waiting for the log.
func TestCommittedPastEndLogGrows(t *testing.T) {
	_, addrs := newCluster(t, "t", 1)
	produce(t, addrs, "t", 0, 0, 5)
	kafkatest.Commit(t, addrs, "g", "t", 0, 20, "")
	var lr logRecorder
	vl := newValueLog("0-29")
	start(t, addrs, "g", "t", newProcessor(t, vl.handler()), kafkago.WithLogger(lr.logger()))
	time.Sleep(500 * time.Millisecond) // let the consumer meet the short log
	produce(t, addrs, "t", 0, 5, 25)
	got := vl.wait(t)
	if len(got) != 30 || got[0] != "0-0" {
		t.Errorf("handler saw %d records from %q, want the 30 from 0-0", len(got), got[0])
	}
	if m := lr.matching("past the end"); len(m) == 0 {
		t.Error("the reset was not logged")
	}
}

// TestFetchErrorsBackOff answers every fetch of the partition with
// NOT_LEADER_OR_FOLLOWER (and then UNKNOWN_TOPIC_OR_PARTITION) for a while:
// the fetcher reconnects with a backoff, as a kafka.Reader does, instead of
// storming the broker with metadata requests and connections, and goes on
// once the errors stop.
func TestFetchErrorsBackOff(t *testing.T) {
	for _, code := range []*kerr.Error{kerr.NotLeaderForPartition, kerr.UnknownTopicOrPartition, kerr.UnknownServerError} {
		t.Run(code.Message, func(t *testing.T) {
			var conns atomic.Int64
			kc, addrs := newCluster(t, "t", 1, kfake.ListenFn(func(network, address string) (net.Listener, error) {
				l, err := net.Listen(network, address)
				return countingListener{l, &conns}, err
			}))
			produce(t, addrs, "t", 0, 0, 10)
			vl := newValueLog("0-11")
			start(t, addrs, "g", "t", newProcessor(t, vl.handler()))
			waitCommitted(t, addrs, "g", "t", map[int32]int64{0: 10})

			fetches := kc.Fault(kfake.Fault{Keys: []kmsg.Key{kmsg.Fetch}, Topic: "t", Err: code, Count: -1})
			metadata := kc.Fault(kfake.Fault{Keys: []kmsg.Key{kmsg.Metadata}, Observe: true, Count: -1})
			c0 := conns.Load()
			const window = 3 * time.Second
			time.Sleep(window)
			f, m, c := fetches.Hits(), metadata.Hits(), conns.Load()-c0
			fetches.Remove()
			metadata.Remove()
			// kafka.Reader's backoff: 100ms, 400ms, 900ms, then 1s: about 6
			// tries in 3s. Allow for the group's own requests.
			if f > 12 || m > 20 || c > 12 {
				t.Errorf("in %v of fetch errors: %d fetches, %d metadata requests, %d new connections; want a backoff (at most 12, 20, 12)", window, f, m, c)
			}
			if f < 2 {
				t.Errorf("in %v of fetch errors: %d fetches, want the fetcher to go on trying", window, f)
			}
			produce(t, addrs, "t", 0, 10, 2)
			vl.wait(t)
		})
	}
}

type countingListener struct {
	net.Listener
	n *atomic.Int64
}

func (l countingListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err == nil {
		l.n.Add(1)
	}
	return c, err
}

// waitLog waits for a message logged at level that contains s.
func waitLog(t *testing.T, lr *logRecorder, level, s string) {
	t.Helper()
	deadline := time.Now().Add(wait)
	for {
		for _, m := range lr.matching(s) {
			if strings.HasPrefix(m, level+" ") {
				return
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("no %s message with %q in %v", level, s, wait)
		}
		time.Sleep(20 * time.Millisecond)
	}
}
