package redrive_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/redeliver-go/redeliver/checkpoint"
	"github.com/redeliver-go/redeliver/redrive"
	"github.com/redeliver-go/redeliver/redrive/redrivetest"
	"github.com/redeliver-go/redeliver/stream"
)

// hungStore is a store whose database stopped answering (it accepts
// connections, or holds a lock, and never replies): every call waits
// until its context ends.
type hungStore struct{ *redrivetest.MemStore }

func (hungStore) Park(ctx context.Context, _ []redrive.Entry) (int, error) {
	<-ctx.Done()
	return 0, ctx.Err()
}

func (hungStore) Repark(ctx context.Context, _ string, _ int, _ string) (redrive.Entry, bool, error) {
	<-ctx.Done()
	return redrive.Entry{}, false, ctx.Err()
}

func (hungStore) Complete(ctx context.Context, _ string, _ time.Time) (redrive.Entry, error) {
	<-ctx.Done()
	return redrive.Entry{}, ctx.Err()
}

// The Park action and the CompleteOnSuccess middleware run under the
// engine's context, which has no deadline: against a store that stopped
// answering, each call gives up after its bound with an error that says
// so, so the engine logs the failure and tries again, instead of holding
// the partition without a word.
func TestStoreCallsAreBounded(t *testing.T) {
	rec := stream.Record{Topic: "orders", Offset: 7, Value: []byte("v")}
	redriven := rec
	redriven.Headers = []stream.Header{{Key: redrive.HeaderKey, Value: []byte("orders/0/1")}, {Key: redrive.HeaderNumber, Value: []byte("1")}}
	xerr := &checkpoint.ExhaustedError{Reason: checkpoint.RetriesSpent, Last: errors.New("poison")}
	check := func(t *testing.T, what string, call func() error) {
		t.Helper()
		start := time.Now()
		err := call()
		if !errors.Is(err, context.DeadlineExceeded) || !strings.Contains(err.Error(), "did not answer within") {
			t.Errorf("%s against a hung store: %v; want an error that says the store did not answer", what, err)
		}
		if d := time.Since(start); d > time.Minute {
			t.Errorf("%s returned after %v, want within a minute", what, d)
		}
	}
	for _, c := range []struct {
		name string
		rec  stream.Record
	}{{"park", rec}, {"repark", redriven}} {
		t.Run(c.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				mem := redrivetest.NewMemStore()
				now := time.Now()
				if _, err := mem.Park(t.Context(), []redrive.Entry{{Key: "orders/0/1", Base: redrive.ParkedState, Status: redrive.Retrying,
					StateTime: now, Created: now, Expiry: time.Minute, DueAt: now.Add(time.Minute), Message: rec}}); err != nil {
					t.Fatal(err)
				}
				park, err := redrive.Park(hungStore{mem}, time.Minute)
				if err != nil {
					t.Fatal(err)
				}
				check(t, "the Park action", func() error {
					return park(context.Background(), &stream.Batch{Topic: "orders", Records: []stream.Record{c.rec}}, xerr)
				})
			})
		})
	}
	t.Run("complete", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			h := redrive.CompleteOnSuccess(hungStore{redrivetest.NewMemStore()})(stream.HandlerFunc(func(context.Context, *stream.Batch) error { return nil }))
			check(t, "CompleteOnSuccess", func() error {
				return h.Handle(context.Background(), &stream.Batch{Topic: "orders", Records: []stream.Record{redriven}})
			})
		})
	})
}
