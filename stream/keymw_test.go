package stream_test

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redeliver-go/redeliver/checkpoint"
	"github.com/redeliver-go/redeliver/stream"
	"github.com/redeliver-go/redeliver/stream/streamtest"
)

// TestKeyMiddleware: in ByKey ordering, WithKeyMiddleware sees each
// record with its ordering key (WithKeyFunc's) in OrderKey, and so does
// the exhaustion action; in ByPartition ordering OrderKey says none, and
// NewProcessor refuses the middleware outside ByKey, or nil, and an
// exhaustion action given beside one the middleware brings.
func TestKeyMiddleware(t *testing.T) {
	var (
		mu      sync.Mutex
		mwKeys  = map[int64]string{}
		actKeys = map[int64]string{}
	)
	mw := func(next stream.Handler) stream.Handler {
		return stream.HandlerFunc(func(ctx context.Context, b *stream.Batch) error {
			k, ok := stream.OrderKey(ctx)
			if !ok {
				return errors.New("no order key in ByKey ordering")
			}
			mu.Lock()
			mwKeys[b.Records[0].Offset] = k
			mu.Unlock()
			return next.Handle(ctx, b)
		})
	}
	action := func(ctx context.Context, b *stream.Batch, _ *checkpoint.ExhaustedError) error {
		k, _ := stream.OrderKey(ctx)
		mu.Lock()
		actKeys[b.Records[0].Offset] = k
		mu.Unlock()
		return nil
	}
	handler := stream.HandlerFunc(func(_ context.Context, b *stream.Batch) error {
		if string(b.Records[0].Key) == "bad" {
			return errors.New("poison")
		}
		return nil
	})
	proc, err := stream.NewProcessor(handler, stream.Options(stream.WithOrdering(stream.ByKey), stream.WithKeyMiddleware("test", mw, nil)),
		stream.WithKeyFunc(func(r *stream.Record) string { return "k-" + string(r.Key) }), stream.WithExhaustionAction(action))
	if err != nil {
		t.Fatal(err)
	}
	p := streamtest.NewPartition("t", 0, 10)
	end := p.AppendKeyed(time.Now(), "a", "bad", "a")
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	go func() { _ = p.WaitCommitted(ctx, end); cancel() }()
	_ = streamtest.Run(ctx, proc, p)
	if n, _ := p.Committed(); n != end {
		t.Fatalf("committed %d, want %d", n, end)
	}
	if mwKeys[0] != "k-a" || mwKeys[1] != "k-bad" || mwKeys[2] != "k-a" || actKeys[1] != "k-bad" {
		t.Fatalf("order keys seen by the middleware %v and the action %v", mwKeys, actKeys)
	}

	if k, ok := stream.OrderKey(t.Context()); ok || k != "" {
		t.Fatalf("OrderKey of a context without one = %q, %v", k, ok)
	}
	for _, c := range []struct {
		opts []stream.Option
		want string
	}{
		{[]stream.Option{stream.WithKeyMiddleware("mine", mw, nil)}, "mine applies to ByKey ordering only"},
		{[]stream.Option{stream.WithKeyMiddleware("mine", mw, nil), stream.WithOrdering(stream.ByNone)}, "mine applies to ByKey ordering only"},
		{[]stream.Option{stream.WithKeyMiddleware("mine", nil, nil), stream.WithOrdering(stream.ByKey)}, "mine: nil middleware"},
		{[]stream.Option{stream.Options(stream.WithOrdering(stream.ByKey), nil)}, "Options holds a nil option"},
		{[]stream.Option{stream.WithOrdering(stream.ByKey), stream.WithKeyMiddleware("mine", mw, action), stream.WithExhaustionAction(action)}, "WithExhaustionAction beside mine"},
		{[]stream.Option{stream.WithOrdering(stream.ByKey), stream.WithExhaustionAction(action), stream.WithKeyMiddleware("mine", mw, action)}, "WithExhaustionAction beside mine"},
		{[]stream.Option{stream.WithOrdering(stream.ByKey), stream.WithKeyMiddleware("a", mw, action), stream.WithKeyMiddleware("b", mw, action)}, "a and b each bring an exhaustion action"},
	} {
		if _, err := stream.NewProcessor(handler, c.opts...); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("NewProcessor: %v, want %q", err, c.want)
		}
	}
}

// TestMarkParkedBehind: a key middleware that parks a record instead of
// handling it says so with MarkParkedBehind, and the Delivered hook
// reports the ParkedBehind outcome (not Succeeded), with nothing after
// it, and the record finished for the commit; a marked call that returns
// an error is read from its error. Outside a keyed call of a processor
// with a key middleware, MarkParkedBehind reports false.
func TestMarkParkedBehind(t *testing.T) {
	var (
		mu       sync.Mutex
		outcomes = map[int64][]stream.Outcome{}
		retries  []int64
		marked   = map[int64]bool{}
		handled  []int64
	)
	mw := func(next stream.Handler) stream.Handler {
		return stream.HandlerFunc(func(ctx context.Context, b *stream.Batch) error {
			switch o := b.Records[0].Offset; o {
			case 1: // parked behind
				ok := stream.MarkParkedBehind(ctx)
				mu.Lock()
				marked[o] = ok
				mu.Unlock()
				return nil
			case 2: // marked, then failed once: a failure
				if b.Attempt.Retries == 0 {
					stream.MarkParkedBehind(ctx)
					return errors.New("store down")
				}
			}
			return next.Handle(ctx, b)
		})
	}
	handler := stream.HandlerFunc(func(ctx context.Context, b *stream.Batch) error {
		mu.Lock()
		defer mu.Unlock()
		handled = append(handled, b.Records[0].Offset)
		return nil
	})
	hooks := stream.Hooks{
		Delivered: func(e stream.DeliveredEvent) {
			mu.Lock()
			outcomes[e.FirstOffset] = append(outcomes[e.FirstOffset], e.Outcome)
			mu.Unlock()
		},
		RetryScheduled: func(e stream.RetryEvent) {
			mu.Lock()
			retries = append(retries, e.FirstOffset)
			mu.Unlock()
		},
	}
	proc, err := stream.NewProcessor(handler, stream.WithOrdering(stream.ByKey), stream.WithKeyMiddleware("test", mw, nil),
		stream.WithHooks(hooks), stream.WithPolicy(checkpoint.Policy{MaxRetries: 1, Backoff: checkpoint.Immediate()}))
	if err != nil {
		t.Fatal(err)
	}
	p := streamtest.NewPartition("t", 0, 10)
	end := p.AppendKeyed(time.Now(), "a", "a", "b")
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	go func() { _ = p.WaitCommitted(ctx, end); cancel() }()
	_ = streamtest.Run(ctx, proc, p)
	if n, _ := p.Committed(); n != end {
		t.Fatalf("committed %d, want %d", n, end)
	}
	mu.Lock()
	defer mu.Unlock()
	want := map[int64][]stream.Outcome{0: {stream.Succeeded}, 1: {stream.ParkedBehind}, 2: {stream.Failed, stream.Succeeded}}
	for o, w := range want {
		if got := outcomes[o]; len(got) != len(w) || got[0] != w[0] || got[len(got)-1] != w[len(w)-1] {
			t.Errorf("record %d: outcomes %v, want %v", o, got, w)
		}
	}
	if !marked[1] || len(retries) != 1 || retries[0] != 2 || len(handled) != 2 {
		t.Errorf("marked %v, retries of %v, handled %v: want record 1 marked, record 2 retried once, records 0 and 2 handled", marked, retries, handled)
	}
	if stream.MarkParkedBehind(t.Context()) {
		t.Error("MarkParkedBehind outside a handler call reported true")
	}
	if stream.ParkedBehind.String() != "parked behind" {
		t.Errorf("ParkedBehind.String() = %q", stream.ParkedBehind.String())
	}
}
