package eventhubs_test

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"strings"
	"testing"
	"testing/synctest"
	"time"
	"unicode/utf8"

	"github.com/Azure/azure-sdk-for-go/sdk/messaging/azeventhubs/v2"

	"github.com/redeliver-go/redeliver/adapters/eventhubs"
	"github.com/redeliver-go/redeliver/adapters/eventhubs/memhub"
	"github.com/redeliver-go/redeliver/redrive"
	"github.com/redeliver-go/redeliver/redrive/redrivetest"
	"github.com/redeliver-go/redeliver/stream"
	"github.com/redeliver-go/redeliver/stream/streamtest"
)

func TestPublisherSendsRecordsAsEvents(t *testing.T) {
	dlq, _ := memhub.New("dlq", 4)
	pub, err := eventhubs.NewSenderPublisher("dlq", dlq)
	if err != nil {
		t.Fatal(err)
	}
	recs := []stream.Record{
		{Key: []byte("k1"), Value: []byte("a"), Headers: []stream.Header{{Key: "text", Value: []byte("x")}, {Key: "bin", Value: []byte{0xff, 0xfe}}}},
		{Key: []byte("k1"), Value: []byte("b")},
		{Value: []byte("c")},
	}
	if err := pub.Publish(context.Background(), "other", recs); err == nil {
		t.Fatal("publish to another hub's name succeeded")
	}
	if err := pub.Publish(context.Background(), "dlq", recs); err != nil {
		t.Fatal(err)
	}
	var got []stream.Record
	for i, id := range dlq.PartitionIDs() {
		evs, _ := dlq.Events(id)
		for _, ev := range evs {
			got = append(got, eventhubs.Record("dlq", int32(i), ev))
		}
	}
	if len(got) != 3 {
		t.Fatalf("%d events, want 3", len(got))
	}
	byValue := map[string]stream.Record{}
	for _, r := range got {
		byValue[string(r.Value)] = r
	}
	a, b := byValue["a"], byValue["b"]
	if string(a.Key) != "k1" || string(b.Key) != "k1" || a.Partition != b.Partition {
		t.Errorf("records with key k1: %+v and %+v, want the key kept and one partition", a, b)
	}
	if len(a.Headers) != 2 || a.Headers[0].Key != "bin" || string(a.Headers[0].Value) != "\xff\xfe" || a.Headers[1].Key != "text" || string(a.Headers[1].Value) != "x" {
		t.Errorf("headers %+v, want bin and text kept", a.Headers)
	}
	if c := byValue["c"]; c.Key != nil {
		t.Errorf("record without a key got key %q", c.Key)
	}
}

// A given-up event near the hub's size limit no longer fits once the
// dead-letter headers are added: it is sent with those headers cut down
// as far as it needs, and the partition moves on. One too large for the
// dead-letter hub even without them gets an error that says so.
func TestDeadLetterTooLargeIsCutToFit(t *testing.T) {
	longErr := strings.Repeat("é", 1000) // 2000 bytes of error text
	for _, c := range []struct {
		name     string
		value    int
		srcLimit int
		kept     []string // the dead-letter headers the event keeps
		cutError bool
		never    bool
	}{
		{name: "error-texts-cut", value: 100, srcLimit: 1000, kept: []string{stream.HeaderTopic, stream.HeaderError, stream.HeaderDLQMessage}, cutError: true},
		{name: "position-only", value: 900, srcLimit: 1000, kept: []string{stream.HeaderTopic, stream.HeaderPartition, stream.HeaderOffset}},
		{name: "none", value: 985, srcLimit: 1000},
		{name: "never-fits", value: 1100, never: true},
	} {
		t.Run(c.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				var l logs
				prev := slog.Default()
				slog.SetDefault(slog.New(&l))
				defer slog.SetDefault(prev)
				src, _ := memhub.New("orders", 1)
				src.SetMaxEventBytes(c.srcLimit)
				if err := src.Send("0", &azeventhubs.EventData{Body: bytes.Repeat([]byte("x"), c.value), Properties: map[string]any{"trace": "abc"}}); err != nil {
					t.Fatal(err)
				}
				dlq, _ := memhub.New("orders-dlq", 1)
				dlq.SetMaxEventBytes(1000)
				pub, _ := eventhubs.NewSenderPublisher("orders-dlq", dlq)
				action, err := stream.DeadLetter(pub, "orders-dlq")
				if err != nil {
					t.Fatal(err)
				}
				tries := make(chan error, 100)
				proc, _ := stream.NewProcessor(stream.HandlerFunc(func(context.Context, *stream.Batch) error {
					return errors.New(longErr)
				}), stream.WithExhaustionAction(action), stream.WithHooks(stream.Hooks{ActionTried: func(e stream.ActionEvent) {
					select {
					case tries <- e.Err:
					default:
					}
				}}))
				store := memhub.NewStore()
				start(t, src, store, "a", proc)
				if c.never {
					err := <-tries
					if err == nil || !strings.Contains(err.Error(), "can never be sent") || !errors.Is(err, azeventhubs.ErrEventDataTooLarge) {
						t.Fatalf("dead letter larger than the hub's limit with no headers: %v, want an error that says it can never be sent", err)
					}
					return
				}
				waitPositions(t, store, map[string]int64{"0": 1})
				evs, _ := dlq.Events("0")
				if len(evs) != 1 {
					t.Fatalf("%d dead letters, want 1", len(evs))
				}
				r := eventhubs.Record("orders-dlq", 0, evs[0])
				if len(r.Value) != c.value {
					t.Errorf("dead letter of %d bytes, want the record's %d", len(r.Value), c.value)
				}
				got := map[string]string{}
				for _, h := range r.Headers {
					got[h.Key] = string(h.Value)
				}
				if got["trace"] != "abc" {
					t.Errorf("the record's own header was not kept: %v", got)
				}
				for _, k := range c.kept {
					if _, ok := got[k]; !ok {
						t.Errorf("header %s not kept: %v", k, got)
					}
				}
				n := 0
				for k := range got {
					if k != "trace" {
						n++
					}
				}
				if c.cutError {
					if e := got[stream.HeaderError]; !utf8.ValidString(e) || len(e) > 260 || !strings.HasSuffix(e, "...") {
						t.Errorf("error header %d bytes %q, want at most 256 and a mark", len(e), e)
					}
				} else if n != len(c.kept) {
					t.Errorf("dead-letter headers %v, want only %v", got, c.kept)
				}
				if w := l.find(slog.LevelWarn, "dead letter too large"); len(w) == 0 {
					t.Error("no Warn log line for the cut headers")
				}
			})
		})
	}
}

// A re-driven record near the hub's size limit: the headers that tie it to
// its entry (the re-drive's key and number) are never cut to make it fit,
// or the record, failing again, would be parked as a new entry and could
// never complete its own. One that fits with them is sent with the other
// headers cut; one that does not is a failed re-drive, which the scheduler
// reports and tries again.
func TestRedriveHeadersNeverCut(t *testing.T) {
	for _, c := range []struct {
		name  string
		value int
		sent  bool
	}{
		{"others-cut", 850, true},
		{"does-not-fit", 960, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			var l logs
			prev := slog.Default()
			slog.SetDefault(slog.New(&l))
			defer slog.SetDefault(prev)
			hub, _ := memhub.New("orders", 1)
			hub.SetMaxEventBytes(1000)
			pub, _ := eventhubs.NewSenderPublisher("orders", hub)
			store := redrivetest.NewMemStore()
			now := time.Date(2026, 3, 1, 9, 0, 0, 0, time.UTC)
			if _, err := store.Park(t.Context(), []redrive.Entry{{Key: "orders/0/5", Base: redrive.ParkedState, Status: redrive.Parked,
				StateTime: now, Created: now, Expiry: time.Minute, DueAt: now, LastError: strings.Repeat("e", 500),
				Message: stream.Record{Topic: "orders", Offset: 5, Value: bytes.Repeat([]byte("x"), c.value)}}}); err != nil {
				t.Fatal(err)
			}
			sch, err := redrive.NewScheduler(store, pub, redrive.WithClock(streamtest.NewClock(now)), redrive.WithLogger(slog.New(slog.DiscardHandler)))
			if err != nil {
				t.Fatal(err)
			}
			ev := sch.Sweep(t.Context())
			evs, _ := hub.Events("0")
			if !c.sent {
				if ev.Failed != 1 || len(evs) != 0 {
					t.Fatalf("sweep %+v, %d events sent; want the re-drive failed and nothing sent", ev, len(evs))
				}
				return
			}
			if ev.Redriven != 1 || len(evs) != 1 {
				t.Fatalf("sweep %+v, %d events sent; want 1 re-driven", ev, len(evs))
			}
			r := eventhubs.Record("orders", 0, evs[0])
			if k, _ := redrivetest.Header(r, redrive.HeaderKey); k != "orders/0/5" {
				t.Errorf("re-driven event's headers %q: want %s orders/0/5", r.Headers, redrive.HeaderKey)
			}
			if n, _ := redrivetest.Header(r, redrive.HeaderNumber); n != "1" {
				t.Errorf("re-driven event's headers %q: want %s 1", r.Headers, redrive.HeaderNumber)
			}
		})
	}
}

// refusingSender sends to hub, but refuses the calls whose partition key
// is refuse.
type refusingSender struct {
	hub    *memhub.Hub
	refuse string
}

var errRefused = errors.New("the service refused the send")

func (s refusingSender) SendEvents(ctx context.Context, key *string, evs []*azeventhubs.EventData) error {
	if key != nil && *key == s.refuse {
		return errRefused
	}
	return s.hub.SendEvents(ctx, key, evs)
}

// A Publish whose records go out in several sends (one per key), one of
// which fails after others went through: the error says which records were
// sent (a *stream.PublishError), so that a re-drive or a dead-letter
// action sends only the others again.
func TestPublishSaysWhichRecordsWereSent(t *testing.T) {
	hub, _ := memhub.New("dlq", 1)
	pub, _ := eventhubs.NewSenderPublisher("dlq", refusingSender{hub, "b"})
	recs := []stream.Record{{Key: []byte("a"), Value: []byte("1")}, {Key: []byte("a"), Value: []byte("2")},
		{Key: []byte("b"), Value: []byte("3")}, {Key: []byte("c"), Value: []byte("4")}}
	err := pub.Publish(t.Context(), "dlq", recs)
	var pe *stream.PublishError
	if !errors.As(err, &pe) || len(pe.Errs) != len(recs) || !pe.Written(0) || !pe.Written(1) || pe.Written(2) || pe.Written(3) {
		t.Fatalf("Publish with the second send refused: %v; want a *stream.PublishError: records 0 and 1 written, 2 and 3 not", err)
	}
	if !errors.Is(err, errRefused) {
		t.Errorf("Publish's error %v does not match the sender's", err)
	}
	if evs, _ := hub.Events("0"); len(evs) != 2 {
		t.Errorf("%d events in the hub, want the 2 sent", len(evs))
	}
	// Nothing sent: a plain error.
	pub, _ = eventhubs.NewSenderPublisher("dlq", refusingSender{hub, "a"})
	if err := pub.Publish(t.Context(), "dlq", recs); err == nil || errors.As(err, &pe) || !errors.Is(err, errRefused) {
		t.Errorf("Publish with its first send refused: %v; want the sender's error, not a PublishError", err)
	}
}
