package stream_test

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/redeliver-go/redeliver/checkpoint"
	"github.com/redeliver-go/redeliver/internal/retrystate"
	"github.com/redeliver-go/redeliver/stream"
	"github.com/redeliver-go/redeliver/stream/streamtest"
)

// What a move carries (issue 46): a next owner retries or gives up
// exactly the records the committed state covers, whatever its fetch
// size and policy, never records that did not fail, and never delivers
// again a record a previous owner gave up.

// calls counts the handler's calls per offset.
type calls struct {
	mu sync.Mutex
	n  map[int64]int
}

func (c *calls) add(off int64) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.n == nil {
		c.n = map[int64]int{}
	}
	c.n[off]++
	return c.n[off]
}

func (c *calls) of(off int64) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.n[off]
}

// deadLettered returns the offsets published to "dlq", and each one's
// delivery count and last error headers.
func deadLettered(m *memPublisher) (offs []string, deliveries []string, lastErrs []string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	for _, r := range m.got["dlq"] {
		h := headers(r)
		offs = append(offs, h[stream.HeaderOffset])
		deliveries = append(deliveries, h[stream.HeaderDeliveries])
		lastErrs = append(lastErrs, h[stream.HeaderError])
	}
	return offs, deliveries, lastErrs
}

// moveAt runs proc over p until cut says so (it is called with every
// checkpoint written), then revokes p and waits for the worker to end.
func moveAt(t *testing.T, p *streamtest.Partition, newProc func(stream.Hooks) *stream.Processor, cut func(stream.CheckpointEvent) bool) {
	t.Helper()
	move := make(chan struct{}, 1)
	proc := newProc(stream.Hooks{Checkpointed: func(e stream.CheckpointEvent) {
		if cut(e) {
			select {
			case move <- struct{}{}:
			default:
			}
		}
	}})
	done := make(chan error, 1)
	go func() { done <- streamtest.Run(t.Context(), proc, p) }()
	<-move
	p.Revoke()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}

// A PerRecord poison record on its last retry when its partition moves
// (the retry started, cut short), or whose retry the next owner refuses
// (a lowered retry count, MaxRetryTime, MaxRecordAge): the next owner
// gives up that record alone, with its last error, and delivers the
// records after it, which never failed. The committed state said nothing
// of whose failure it was, and the next owner gave up its whole fetch
// from the poison record on: records 1-4 dead-lettered, and with the
// default action skipped unhandled; a refused retry had an empty last
// error.
func TestPoisonRecordMovesAlone(t *testing.T) {
	for _, tt := range []struct {
		name    string
		started bool // moved during the last retry; otherwise during the backoff before it
		next    checkpoint.Policy
		lastErr string
		n       string // its deliveries: 3 with the cut retry, 2 when the next owner refuses retry 2
	}{
		{"during its last retry", true, checkpoint.Policy{MaxRetries: 2, Backoff: checkpoint.Fixed(time.Second)}, retrystate.ErrInterrupted.Error(), "3"},
		{"a lowered retry count", false, checkpoint.Policy{MaxRetries: 1, Backoff: checkpoint.Fixed(time.Second)}, errPoison.Error(), "2"},
		{"MaxRetryTime", false, checkpoint.Policy{MaxRetries: 2, Backoff: checkpoint.Fixed(time.Second), MaxRetryTime: 1500 * time.Millisecond}, errPoison.Error(), "2"},
		{"MaxRecordAge", false, checkpoint.Policy{MaxRetries: 2, Backoff: checkpoint.Fixed(time.Second), MaxRecordAge: 1500 * time.Millisecond}, errPoison.Error(), "2"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				var hist streamtest.History
				p := streamtest.NewPartition("orders", 0, 5)
				p.AppendN(time.Now(), 5)
				var c calls
				h := stream.PerRecord(func(ctx context.Context, r *stream.Record) error {
					n := c.add(r.Offset)
					if r.Offset != 0 {
						return nil
					}
					if tt.started && n == 3 {
						<-ctx.Done() // the move cuts the last retry short
						return ctx.Err()
					}
					return errPoison
				})
				moveAt(t, p, func(hk stream.Hooks) *stream.Processor {
					dl, _ := stream.DeadLetter(hist.Publisher(&memPublisher{}), "dlq")
					proc, err := stream.NewProcessor(h, fixed(2, time.Second), stream.WithExhaustionAction(dl),
						stream.WithLogger(slog.New(slog.DiscardHandler)), stream.WithHooks(stream.MergeHooks(hist.Hooks("a"), hk)))
					if err != nil {
						t.Fatal(err)
					}
					return proc
				}, func(e stream.CheckpointEvent) bool {
					s, _ := retrystate.DecodeState(e.Metadata)
					return s.Retries == 2 && s.Started == tt.started
				})
				pub := &memPublisher{}
				dl, _ := stream.DeadLetter(hist.Publisher(pub), "dlq")
				b, err := stream.NewProcessor(h, stream.WithPolicy(tt.next), stream.WithExhaustionAction(dl),
					stream.WithLogger(slog.New(slog.DiscardHandler)), stream.WithHooks(hist.Hooks("b")))
				if err != nil {
					t.Fatal(err)
				}
				if !runParts(t, b, time.Hour, p) {
					t.Fatal("not done")
				}
				offs, deliveries, lastErrs := deadLettered(pub)
				if fmt.Sprint(offs) != "[0]" || fmt.Sprint(deliveries) != "["+tt.n+"]" || fmt.Sprint(lastErrs) != fmt.Sprint([]string{tt.lastErr}) {
					t.Errorf("dead-lettered %v with deliveries %v and last errors %q; want record 0 alone, %s deliveries, last error %q",
						offs, deliveries, lastErrs, tt.n, tt.lastErr)
				}
				for o := int64(1); o < 5; o++ {
					if c.of(o) == 0 {
						t.Errorf("record %d never delivered", o)
					}
				}
				if r := hist.Check(map[streamtest.TopicPartition]int64{{Topic: "orders", Partition: 0}: 5}); len(r.Violations) > 0 {
					t.Errorf("violations %v", r.Violations)
				}
			})
		})
	}
}

// A batch of 5 given up, its exhaustion action failing, when the
// partition moves to an owner whose first fetch returns 3 records: the
// next owner fetches the 2 its first fetch did not return and gives the 5
// up at once, with the same count and error; the records after them are
// delivered once. It gave up the 3 and delivered records 3-4 again as a
// new batch with a fresh count: 6 deliveries under MaxRetries 2, and a
// second dead letter.
func TestGiveUpCoversRecordsTheNextFetchMissed(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var hist streamtest.History
		p := streamtest.NewPartition("orders", 0, 5)
		p.AppendN(time.Now(), 8)
		var c calls
		h := stream.HandlerFunc(func(_ context.Context, b *stream.Batch) error {
			for _, r := range b.Records {
				c.add(r.Offset)
			}
			if b.FirstOffset() < 5 {
				return errPoison
			}
			return nil
		})
		moveAt(t, p, func(hk stream.Hooks) *stream.Processor {
			dl, _ := stream.DeadLetter(hist.Publisher(&memPublisher{fail: 1 << 30}), "dlq")
			proc, err := stream.NewProcessor(h, fixed(2, time.Second), stream.WithExhaustionAction(dl),
				stream.WithLogger(slog.New(slog.DiscardHandler)), stream.WithHooks(stream.MergeHooks(hist.Hooks("a"), hk)))
			if err != nil {
				t.Fatal(err)
			}
			return proc
		}, func(e stream.CheckpointEvent) bool { return strings.Contains(e.Metadata, ";x=") })
		p.SetMaxBatch(3)
		pub := &memPublisher{}
		dl, _ := stream.DeadLetter(hist.Publisher(pub), "dlq")
		b, err := stream.NewProcessor(h, fixed(2, time.Second), stream.WithExhaustionAction(dl),
			stream.WithLogger(slog.New(slog.DiscardHandler)), stream.WithHooks(hist.Hooks("b")))
		if err != nil {
			t.Fatal(err)
		}
		if !runParts(t, b, time.Hour, p) {
			t.Fatal("not done")
		}
		offs, deliveries, _ := deadLettered(pub)
		if fmt.Sprint(offs) != "[0 1 2 3 4]" || fmt.Sprint(deliveries) != "[3 3 3 3 3]" {
			t.Errorf("dead-lettered %v with deliveries %v; want 0-4, 3 deliveries each", offs, deliveries)
		}
		for o := int64(0); o < 8; o++ {
			want := 3
			if o >= 5 {
				want = 1
			}
			if c.of(o) != want {
				t.Errorf("record %d delivered %d times, want %d", o, c.of(o), want)
			}
		}
		if r := hist.Check(map[streamtest.TopicPartition]int64{{Topic: "orders", Partition: 0}: 8}); len(r.Violations) > 0 {
			t.Errorf("violations %v", r.Violations)
		}
	})
}

// A whole-batch failure of 5 records whose partition moves during the
// backoff: a next owner that fetches fewer records fetches the rest
// before the retry, and one that fetches more retries the 5 alone; both
// give up exactly those 5 after 3 deliveries each, and the records after
// them are a batch of their own, with a count of its own.
func TestRetryAfterAMoveCoversItsBatch(t *testing.T) {
	for _, size := range []int{2, 3, 8} {
		t.Run(fmt.Sprint("next fetch ", size), func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				var hist streamtest.History
				p := streamtest.NewPartition("orders", 0, 5)
				p.AppendN(time.Now(), 8)
				var c calls
				h := stream.HandlerFunc(func(_ context.Context, b *stream.Batch) error {
					for _, r := range b.Records {
						c.add(r.Offset)
					}
					if b.FirstOffset() < 5 {
						return errTransient
					}
					return nil
				})
				moveAt(t, p, func(hk stream.Hooks) *stream.Processor {
					proc, err := stream.NewProcessor(h, fixed(2, time.Second), stream.WithLogger(slog.New(slog.DiscardHandler)),
						stream.WithHooks(stream.MergeHooks(hist.Hooks("a"), hk)))
					if err != nil {
						t.Fatal(err)
					}
					return proc
				}, func(e stream.CheckpointEvent) bool { return strings.Contains(e.Metadata, ";n=") })
				p.SetMaxBatch(size)
				var given givenUp
				b, err := stream.NewProcessor(h, fixed(2, time.Second), stream.WithExhaustionAction(given.action),
					stream.WithLogger(slog.New(slog.DiscardHandler)), stream.WithHooks(hist.Hooks("b")))
				if err != nil {
					t.Fatal(err)
				}
				if !runParts(t, b, time.Hour, p) {
					t.Fatal("not done")
				}
				if fmt.Sprint(given.got) != "[0-4: transient]" {
					t.Errorf("given up %v, want 0-4 together", given.got)
				}
				for o := int64(0); o < 8; o++ {
					want := 3
					if o >= 5 {
						want = 1
					}
					if c.of(o) != want {
						t.Errorf("record %d delivered %d times, want %d", o, c.of(o), want)
					}
				}
				if r := hist.Check(map[streamtest.TopicPartition]int64{{Topic: "orders", Partition: 0}: 8}); len(r.Violations) > 0 {
					t.Errorf("violations %v", r.Violations)
				}
			})
		})
	}
}
