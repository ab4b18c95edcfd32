package stream_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/redeliver-go/redeliver/checkpoint"
	"github.com/redeliver-go/redeliver/stream"
	"github.com/redeliver-go/redeliver/stream/streamtest"
)

var errPoison = errors.New("invalid order id")

// givenUp collects what the exhaustion action received.
type givenUp struct {
	mu   sync.Mutex
	got  []string // "first-last: last error"
	errs []*checkpoint.ExhaustedError
}

func (g *givenUp) action(_ context.Context, b *stream.Batch, xerr *checkpoint.ExhaustedError) error {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.got = append(g.got, fmt.Sprintf("%d-%d: %v", b.FirstOffset(), b.LastOffset(), xerr.Last))
	g.errs = append(g.errs, xerr)
	return nil
}

// A batch that failed at a known record (FailedAt) and is given up sends
// only that record to the exhaustion action, with its own error; the
// records after it are delivered as the next batch (issue 11: the failing
// record and everything after it were given up together).
func TestPoisonRecordGivenUpAlone(t *testing.T) {
	for _, tt := range []struct {
		name string
		h    stream.Handler
		want string // deliveries
		off  int64  // the poison record
	}{
		{"FailedAt", stream.HandlerFunc(func(_ context.Context, b *stream.Batch) error {
			for i, r := range b.Records {
				if r.Offset == 3 {
					return stream.FailedAt(i, errPoison)
				}
			}
			return nil
		}), "[0-9#0 3-9#1 3-9#2 4-9#0]", 3},
		{"PerRecord", stream.PerRecord(func(_ context.Context, r *stream.Record) error {
			if r.Offset == 3 {
				return errPoison
			}
			return nil
		}), "[0-9#0 3-9#1 3-9#2 4-9#0]", 3},
		{"first record", stream.PerRecord(func(_ context.Context, r *stream.Record) error {
			if r.Offset == 0 {
				return errPoison
			}
			return nil
		}), "[0-9#0 0-9#1 0-9#2 1-9#0]", 0},
		{"Permanent", stream.PerRecord(func(_ context.Context, r *stream.Record) error {
			if r.Offset == 3 {
				return checkpoint.Permanent(errPoison)
			}
			return nil
		}), "[0-9#0 4-9#0]", 3},
	} {
		t.Run(tt.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				p := streamtest.NewPartition("orders", 0, 10)
				p.AppendN(time.Now(), 10)
				g := &givenUp{}
				var exhausted []stream.ExhaustedEvent
				hooks := stream.Hooks{Exhausted: func(e stream.ExhaustedEvent) { exhausted = append(exhausted, e) }}
				hs := start(t, tt.h, []*streamtest.Partition{p}, fixed(2, time.Second),
					stream.WithExhaustionAction(g.action), stream.WithHooks(hooks))
				hs.waitAll()
				hs.stop()
				var got []string
				for _, d := range hs.rec.Deliveries() {
					got = append(got, fmt.Sprintf("%d-%d#%d", d.FirstOffset, d.LastOffset, d.Attempt.Retries))
				}
				if fmt.Sprint(got) != tt.want {
					t.Fatalf("deliveries %v, want %s", got, tt.want)
				}
				off := tt.off
				if want := fmt.Sprintf("[%d-%d: %v]", off, off, errPoison); fmt.Sprint(g.got) != want {
					t.Fatalf("exhaustion action got %v, want %s", g.got, want)
				}
				if len(exhausted) != 1 || exhausted[0].Records != 1 || exhausted[0].FirstOffset != off {
					t.Fatalf("Exhausted events %+v, want one of record %d alone", exhausted, off)
				}
				if c, _ := p.Committed(); c != 10 {
					t.Fatalf("checkpoint %d, want 10", c)
				}
			})
		})
	}
}

// Only the poison record is dead-lettered, with its own offset and error.
func TestPoisonRecordDeadLettered(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p := streamtest.NewPartition("orders", 0, 500)
		p.AppendN(time.Now(), 500)
		pub := &memPublisher{}
		h := stream.PerRecord(func(_ context.Context, r *stream.Record) error {
			if r.Offset == 123 {
				return fmt.Errorf("record %d: %w", r.Offset, errPoison)
			}
			return nil
		})
		dl, err := stream.DeadLetter(pub, "orders.dlq")
		if err != nil {
			t.Fatal(err)
		}
		hs := start(t, h, []*streamtest.Partition{p}, fixed(1, time.Second), stream.WithExhaustionAction(dl))
		hs.waitAll()
		hs.stop()
		dlq := pub.got["orders.dlq"]
		if len(dlq) != 1 {
			t.Fatalf("%d dead-lettered records, want 1", len(dlq))
		}
		h2 := map[string]string{}
		for _, x := range dlq[0].Headers {
			h2[x.Key] = string(x.Value)
		}
		if h2[stream.HeaderOffset] != "123" || h2[stream.HeaderError] != "record 123: invalid order id" || string(dlq[0].Value) != "123" {
			t.Fatalf("dead-lettered %q with headers %v", dlq[0].Value, h2)
		}
	})
}

// Logs name the records' own offsets, not indexes into a trimmed batch.
func TestPoisonRecordLogsOffsets(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p := streamtest.NewPartition("orders", 0, 10)
		p.AppendN(time.Now(), 10)
		var buf bytes.Buffer
		var mu sync.Mutex
		log := slog.New(slog.NewTextHandler(&lockedWriter{mu: &mu, w: &buf}, nil))
		h := stream.PerRecord(func(_ context.Context, r *stream.Record) error {
			if r.Offset == 7 {
				return errPoison
			}
			return nil
		})
		hs := start(t, h, []*streamtest.Partition{p}, fixed(1, time.Second), stream.WithLogger(log))
		hs.waitAll()
		hs.stop()
		mu.Lock()
		out := buf.String()
		mu.Unlock()
		for _, want := range []string{
			`msg="redeliver: retry scheduled" topic=orders partition=0 offset=7 records=3 failed_offset=7`,
			`msg="redeliver: record given up" topic=orders partition=0 offset=7 `,
		} {
			if !strings.Contains(out, want) {
				t.Errorf("log lacks %q:\n%s", want, out)
			}
		}
	})
}

type lockedWriter struct {
	mu *sync.Mutex
	w  *bytes.Buffer
}

func (l *lockedWriter) Write(b []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(b)
}

// The history checker accepts a given-up record followed by the rest of
// its batch.
func TestPoisonRecordHistory(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var hist streamtest.History
		p := streamtest.NewPartition("orders", 0, 7)
		p.AppendN(time.Now(), 50)
		h := stream.PerRecord(func(_ context.Context, r *stream.Record) error {
			if r.Offset%9 == 4 {
				return errPoison
			}
			return nil
		})
		hs := start(t, h, []*streamtest.Partition{p}, fixed(2, time.Second), stream.WithHooks(hist.Hooks("a")))
		hs.waitAll()
		hs.stop()
		r := hist.Check(map[streamtest.TopicPartition]int64{{Topic: "orders", Partition: 0}: 50})
		if len(r.Violations) > 0 || r.Lost != 0 {
			t.Fatalf("report %+v", r)
		}
		// Each poison record is given up alone; the records after it are
		// delivered once more, as a new batch, not given up.
		given := 0
		for _, e := range hist.Events() {
			if e.Kind == streamtest.GivenUp {
				given++
				if e.First != e.Last || e.First%9 != 4 {
					t.Errorf("given up %d-%d, want a poison record alone", e.First, e.Last)
				}
			}
		}
		if given != 6 {
			t.Fatalf("%d give-ups, want 6 (offsets 4, 13, ..., 49)", given)
		}
	})
}

// StopPartition on a batch that failed at a known record stops at that
// record; Skip moves past it alone and the rest of the batch is delivered.
func TestPoisonRecordStopAndSkip(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p := streamtest.NewPartition("orders", 0, 10)
		p.AppendN(time.Now(), 10)
		h := stream.PerRecord(func(_ context.Context, r *stream.Record) error {
			if r.Offset == 6 {
				return errPoison
			}
			return nil
		})
		hs := start(t, h, []*streamtest.Partition{p}, fixed(1, time.Second),
			stream.WithExhaustionAction(stream.StopPartition))
		time.Sleep(time.Hour) // fake time
		synctest.Wait()
		st := hs.proc.Stopped()
		if len(st) != 1 || st[0].FirstOffset != 6 || st[0].LastOffset != 6 {
			t.Fatalf("stopped %+v, want record 6 alone", st)
		}
		if err := hs.proc.Skip(t.Context(), "orders", 0); err != nil {
			t.Fatal(err)
		}
		hs.waitAll()
		hs.stop()
		var got []string
		for _, d := range hs.rec.Deliveries() {
			got = append(got, fmt.Sprintf("%d-%d#%d", d.FirstOffset, d.LastOffset, d.Attempt.Retries))
		}
		if want := "[0-9#0 6-9#1 7-9#0]"; fmt.Sprint(got) != want {
			t.Fatalf("deliveries %v, want %s", got, want)
		}
	})
}
