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

// DeadLetter refuses a nil publisher, a typed nil one and an empty topic,
// instead of panicking at the first give-up.
func TestDeadLetterRejectsBadInput(t *testing.T) {
	var typedNil *memPublisher
	for _, tt := range []struct {
		name  string
		pub   stream.Publisher
		topic string
		want  string
	}{
		{"nil publisher", nil, "dlq", "nil publisher"},
		{"typed nil publisher", typedNil, "dlq", "nil *stream_test.memPublisher"},
		{"no topic", &memPublisher{}, "", "no topic"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			a, err := stream.DeadLetter(tt.pub, tt.topic)
			if err == nil || a != nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("DeadLetter: action %v, error %v; want an error saying %q", a != nil, err, tt.want)
			}
		})
	}
}

// A panicking exhaustion action is a failed try: the process survives, the
// ActionTried hook reports the panic, and the action is tried again.
func TestPanickingExhaustionActionIsAFailedTry(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p := streamtest.NewPartition("t", 0, 5)
		p.AppendN(time.Now(), 5)
		var (
			mu    sync.Mutex
			calls int
			tries []stream.ActionEvent
		)
		action := func(context.Context, *stream.Batch, *checkpoint.ExhaustedError) error {
			mu.Lock()
			defer mu.Unlock()
			calls++
			if calls == 1 {
				var pub stream.Publisher
				return pub.Publish(context.Background(), "x", nil) // a nil dereference
			}
			return nil
		}
		hooks := stream.Hooks{ActionTried: func(e stream.ActionEvent) { tries = append(tries, e) }}
		hs := start(t, streamtest.FailFirst(-1, nil)(streamtest.Succeed), []*streamtest.Partition{p},
			stream.WithExhaustionAction(action), stream.WithHooks(hooks))
		hs.waitAll()
		hs.stop()
		var pe *stream.PanicError
		if len(tries) != 2 || !errors.As(tries[0].Err, &pe) || tries[0].Try != 1 || tries[1].Err != nil || tries[1].Try != 2 {
			t.Fatalf("action tries %+v, want a panic, then a success", tries)
		}
		if !strings.Contains(tries[0].Err.Error(), "exhaustion action panicked") {
			t.Fatalf("panic error %q does not say where", tries[0].Err)
		}
	})
}

// A dead-letter that succeeds is logged; one that fails says what to do.
func TestDeadLetterLogsAndExplains(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p := streamtest.NewPartition("orders", 0, 5)
		p.AppendN(time.Now(), 5)
		var buf bytes.Buffer
		var mu sync.Mutex
		log := slog.New(slog.NewTextHandler(&lockedWriter{mu: &mu, w: &buf}, nil))
		pub := &memPublisher{fail: 1}
		dl, err := stream.DeadLetter(pub, "orders.dlq")
		if err != nil {
			t.Fatal(err)
		}
		var tries []stream.ActionEvent
		hooks := stream.Hooks{ActionTried: func(e stream.ActionEvent) { tries = append(tries, e) }}
		hs := start(t, streamtest.FailFirst(-1, nil)(streamtest.Succeed), []*streamtest.Partition{p},
			stream.WithExhaustionAction(dl), stream.WithLogger(log), stream.WithHooks(hooks))
		hs.waitAll()
		hs.stop()
		if len(tries) != 2 || tries[0].Err == nil {
			t.Fatalf("tries %+v", tries)
		}
		if msg := tries[0].Err.Error(); !strings.Contains(msg, `dead-letter of 5 records to topic "orders.dlq"`) ||
			!strings.Contains(msg, "check that the topic exists") {
			t.Errorf("failed dead-letter's error %q does not say what to do", msg)
		}
		mu.Lock()
		out := buf.String()
		mu.Unlock()
		if want := `msg="redeliver: dead-lettered" topic=orders partition=0 offset=0 records=5 dead_letter_topic=orders.dlq`; !strings.Contains(out, want) {
			t.Errorf("log lacks %q:\n%s", want, out)
		}
	})
}

// How a handler's result is read: a RetryResult, wrapped or not, asks for
// a retry; a failure joined to it wins; Permanent wins; an invalid
// RetryResult is a failure that says why.
func TestResultReading(t *testing.T) {
	real := errors.New("database down")
	for _, tt := range []struct {
		name    string
		result  error
		outcome stream.Outcome
		given   bool   // given up (the policy never retries)
		errHas  string // in the ExhaustedError's last error
	}{
		{"RetryResult", stream.Retry(1, time.Second), stream.RetryRequested, false, ""},
		{"wrapped RetryResult", fmt.Errorf("stock low: %w", stream.Retry(1, time.Second)), stream.RetryRequested, false, ""},
		{"joined with a failure", errors.Join(real, stream.Retry(1, time.Second)), stream.Failed, true, "database down"},
		{"joined, failure second", errors.Join(stream.Retry(1, time.Second), real), stream.Failed, true, "database down"},
		{"joined RetryResults", errors.Join(stream.Retry(1, time.Second), stream.Retry(2, time.Second)), stream.RetryRequested, false, ""},
		{"Permanent RetryResult", checkpoint.Permanent(stream.Retry(1, time.Second)), stream.Failed, true, "retry requested"},
		{"negative count", stream.Retry(-5, time.Second), stream.Failed, true, "invalid RetryResult: MaxRetries -5"},
		{"negative delay", stream.Retry(3, -time.Second), stream.Failed, true, "invalid RetryResult: Delay -1s"},
		{"FailedAt a RetryResult", stream.FailedAt(0, stream.Retry(1, time.Second)), stream.RetryRequested, false, ""},
	} {
		t.Run(tt.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				p := streamtest.NewPartition("t", 0, 5)
				p.AppendN(time.Now(), 5)
				h := stream.HandlerFunc(func(_ context.Context, b *stream.Batch) error {
					if b.Attempt.Retries == 0 {
						return tt.result
					}
					return nil
				})
				g := &givenUp{}
				hs := start(t, h, []*streamtest.Partition{p}, stream.WithExhaustionAction(g.action))
				hs.waitAll()
				hs.stop()
				if got := hs.ev.delivered[0].Outcome; got != tt.outcome {
					t.Errorf("outcome %v, want %v", got, tt.outcome)
				}
				if given := len(g.got) > 0; given != tt.given {
					t.Fatalf("given up %v, want %v (deliveries %d)", given, tt.given, len(hs.ev.delivered))
				}
				if tt.given && !strings.Contains(g.errs[0].Last.Error(), tt.errHas) {
					t.Errorf("last error %q, want it to say %q", g.errs[0].Last, tt.errHas)
				}
			})
		})
	}
}
