package stream_test

import (
	"bytes"
	"context"
	"errors"
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

// syncBuffer is a bytes.Buffer safe for the processor's goroutines.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// A handler's result that is a programming error (a FailedAt index outside
// the batch, a RetryResult with a negative delay) is a failure of the whole
// batch under the policy, as a handler error is: retried while the policy
// allows, and, when given up, given up with an error that says the result
// was invalid and what is wrong. It is logged at Error when it happens, not
// only when the batch is given up as "retries spent".
func TestInvalidHandlerResultIsNamed(t *testing.T) {
	for _, tc := range []struct {
		name   string
		result error
		want   string
	}{
		{"FailedAt outside the batch", stream.FailedAt(100, errTransient),
			"stream: invalid handler result: FailedAt(100, ...) names no record of this batch of 3 (indexes 0 to 2): the whole batch fails: " + errTransient.Error()},
		{"FailedAt below 0 with no error", stream.FailedAt(-1, nil),
			"stream: invalid handler result: FailedAt(-1, ...) names no record of this batch of 3 (indexes 0 to 2): the whole batch fails, with no error given"},
		{"Retry with a negative delay", stream.Retry(-1, -time.Second),
			"stream: invalid RetryResult: Delay -1s, want 0 or more"},
	} {
		for _, retries := range []int{0, 2} {
			t.Run(tc.name+"/"+map[int]string{0: "no retries", 2: "two retries"}[retries], func(t *testing.T) {
				synctest.Test(t, func(t *testing.T) {
					p := streamtest.NewPartition("t", 0, 3)
					p.AppendN(time.Now(), 3)
					deliveries := 0
					h := stream.HandlerFunc(func(context.Context, *stream.Batch) error {
						deliveries++
						return tc.result
					})
					var given []*checkpoint.ExhaustedError
					var sizes []int
					var logs syncBuffer
					proc, err := stream.NewProcessor(h, fixed(retries, time.Second),
						stream.WithLogger(slog.New(slog.NewTextHandler(&logs, nil))),
						stream.WithExhaustionAction(func(_ context.Context, b *stream.Batch, x *checkpoint.ExhaustedError) error {
							given, sizes = append(given, x), append(sizes, len(b.Records))
							return nil
						}))
					if err != nil {
						t.Fatal(err)
					}
					if !runParts(t, proc, time.Hour, p) {
						t.Fatal("not done")
					}
					if deliveries != retries+1 {
						t.Errorf("%d deliveries, want %d: the policy's retries, as for a handler error", deliveries, retries+1)
					}
					if len(given) != 1 || !strings.Contains(given[0].Error(), tc.want) || sizes[0] != 3 {
						t.Fatalf("given up: %v, want the whole batch of 3 with an error containing %q", given, tc.want)
					}
					out := logs.String()
					if n := strings.Count(out, "the handler's result is invalid (a programming error)"); n != retries+1 || !strings.Contains(out, tc.want) {
						t.Errorf("log has %d invalid-result lines, want %d naming %q:\n%s", n, retries+1, tc.want, out)
					}
					if errors.Is(given[0], errTransient) != strings.Contains(tc.want, errTransient.Error()) {
						t.Errorf("errors.Is(given up, the handler's error) = %v", errors.Is(given[0], errTransient))
					}
				})
			})
		}
	}
}
