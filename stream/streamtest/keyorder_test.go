package streamtest_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/redeliver-go/redeliver/checkpoint"
	"github.com/redeliver-go/redeliver/internal/retrystate"
	"github.com/redeliver-go/redeliver/stream"
	"github.com/redeliver-go/redeliver/stream/streamtest"
)

// TestCheckKeysCatchesDisorder feeds CheckKeys histories of a key-ordered
// consumer by hand: a good one passes, and each bad one is caught with
// the sentence that names its fault.
func TestCheckKeysCatchesDisorder(t *testing.T) {
	tp := streamtest.TopicPartition{Topic: "t", Partition: 0}
	// Records 0-5; keys a b a b a c.
	keys := map[streamtest.TopicPartition][]string{tp: {"a", "b", "a", "b", "a", "c"}}
	type hist struct{ h *streamtest.History }
	ev := func(x hist, e streamtest.Event) {
		e.Topic = "t"
		if e.Member == "" {
			e.Member = "m"
		}
		x.h.Add(e)
	}
	start := func(x hist, o int64, retry int) {
		ev(x, streamtest.Event{Kind: streamtest.Started, First: o, Last: o, Retry: retry, MaxRetries: 2})
	}
	ret := func(x hist, o int64, out stream.Outcome) {
		e := streamtest.Event{Kind: streamtest.Delivered, First: o, Last: o, Outcome: out, MaxRetries: 2}
		if out == stream.Succeeded {
			e.Handled = 1
		}
		ev(x, e)
	}
	handle := func(x hist, o int64) { start(x, o, 0); ret(x, o, stream.Succeeded) }
	commit := func(x hist, next int64, md string) {
		ev(x, streamtest.Event{Kind: streamtest.Committed, Offset: next, Metadata: md})
	}
	// window returns the metadata of a window from base whose records in
	// done are finished, up to next.
	window := func(base, next int64, done ...int64) string {
		w, err := retrystate.NewWindow(base, checkpoint.WindowLimits{})
		if err != nil {
			t.Fatal(err)
		}
		for o := base; o < next; o++ {
			if err := w.Admit(o); err != nil {
				t.Fatal(err)
			}
		}
		for _, o := range done {
			if err := w.Finish(o); err != nil {
				t.Fatal(err)
			}
		}
		if w.Base() != base {
			t.Fatalf("window base %d, want %d", w.Base(), base)
		}
		return w.Encode()
	}
	all := func(x hist) {
		for o := range int64(6) {
			handle(x, o)
		}
		commit(x, 6, "")
	}
	tests := []struct {
		name string
		run  func(x hist)
		want string // "" for none
	}{
		{"in order", all, ""},
		{"two records of a key at once", func(x hist) {
			start(x, 0, 0) // a
			start(x, 1, 0) // b, at the same time: allowed
			ret(x, 0, stream.Succeeded)
			handle(x, 3) // b again, while 1 is being delivered
			ret(x, 1, stream.Succeeded)
			all(x)
		}, "record 3 (key \"b\") delivered while the earlier record 1 of its key is being delivered"},
		{"a retrying record holds its key, others flow", func(x hist) {
			ev(x, streamtest.Event{Kind: streamtest.Claimed, Offset: -1})
			start(x, 0, 0)
			ret(x, 0, stream.Failed)
			handle(x, 1)
			handle(x, 3)
			handle(x, 5)
			commit(x, 0, window(0, 6, 1, 3, 5))
			start(x, 0, 1)
			ret(x, 0, stream.Succeeded)
			handle(x, 2)
			handle(x, 4)
			commit(x, 6, "")
		}, ""},
		{"before an earlier record of its key finished", func(x hist) {
			start(x, 0, 0)
			ret(x, 0, stream.Failed)
			handle(x, 2) // key a, 0 not finished
			start(x, 0, 1)
			ret(x, 0, stream.Succeeded)
			for _, o := range []int64{1, 3, 4, 5} {
				handle(x, o)
			}
			commit(x, 6, "")
		}, "delivered before the earlier record 0 of its key was finished"},
		{"while an earlier record of its key is delivered again", func(x hist) {
			handle(x, 0)
			start(x, 0, 0) // a replay of 0
			handle(x, 2)
			ret(x, 0, stream.Succeeded)
			for _, o := range []int64{1, 3, 4, 5} {
				handle(x, o)
			}
			commit(x, 6, "")
		}, "while the earlier record 0 of its key is being delivered"},
		{"while a later record of its key is delivered", func(x hist) {
			handle(x, 0)
			start(x, 2, 0)
			handle(x, 0) // a replay of 0 during 2
			ret(x, 2, stream.Succeeded)
			for _, o := range []int64{1, 3, 4, 5} {
				handle(x, o)
			}
			commit(x, 6, "")
		}, "while the later record 2 of its key is being delivered"},
		{"given up, then its key moves on", func(x hist) {
			start(x, 0, 0)
			ret(x, 0, stream.Failed)
			ev(x, streamtest.Event{Kind: streamtest.GivenUp, First: 0, Last: 0})
			handle(x, 2) // allowed: 0 was given up
			ev(x, streamtest.Event{Kind: streamtest.ActionTried, First: 0, Last: 0})
			for _, o := range []int64{1, 3, 4, 5} {
				handle(x, o)
			}
			commit(x, 6, "")
		}, ""},
		{"retry past the limit", func(x hist) {
			for n := range 3 {
				start(x, 0, n)
				ret(x, 0, stream.Failed)
			}
			start(x, 0, 3)
			ret(x, 0, stream.Succeeded)
			for o := int64(1); o < 6; o++ {
				handle(x, o)
			}
			commit(x, 6, "")
		}, "as retry 3, past the limit of 2"},
		{"more deliveries than the policy allows", func(x hist) {
			for range 4 {
				start(x, 0, 0) // told retry 0 each time: a count lost
				ret(x, 0, stream.Failed)
			}
			start(x, 0, 1)
			ret(x, 0, stream.Succeeded)
			for o := int64(1); o < 6; o++ {
				handle(x, o)
			}
			commit(x, 6, "")
		}, "record 0 failed 4 times, but its policy allows 3 failed deliveries"},
		{"one more delivery per move", func(x hist) {
			ev(x, streamtest.Event{Kind: streamtest.Claimed, Offset: -1})
			for n := range 3 {
				start(x, 0, n)
				ret(x, 0, stream.Failed)
			}
			ev(x, streamtest.Event{Kind: streamtest.Claimed, Member: "n", Offset: -1})
			start(x, 0, 2)
			ret(x, 0, stream.Succeeded)
			for o := int64(1); o < 6; o++ {
				handle(x, o)
			}
			commit(x, 6, "")
		}, ""},
		{"uncounted failures in an outage", func(x hist) {
			for range 5 {
				start(x, 0, 0)
				ev(x, streamtest.Event{Kind: streamtest.Delivered, First: 0, Last: 0, Outcome: stream.Failed, MaxRetries: 2, Uncounted: true})
			}
			all(x)
		}, ""},
		{"finished and committed, delivered again", func(x hist) {
			start(x, 0, 0)
			ret(x, 0, stream.Failed)
			handle(x, 1)
			commit(x, 0, window(0, 2, 1))
			handle(x, 1) // the window said 1 was finished
			start(x, 0, 1)
			ret(x, 0, stream.Succeeded)
			for o := int64(2); o < 6; o++ {
				handle(x, o)
			}
			commit(x, 6, "")
		}, "record 1 delivered again, but a commit said it was finished"},
		{"a crash's commits not written, delivered again by the next owner", func(x hist) {
			ev(x, streamtest.Event{Kind: streamtest.Claimed, Claim: 1, Offset: -1})
			handle(x, 0)
			handle(x, 1)
			commit(x, 2, "") // coalesced, never written: the process dies
			ev(x, streamtest.Event{Kind: streamtest.Claimed, Member: "n", Claim: 2, Offset: 0, Metadata: window(0, 2, 1)})
			start(x, 0, 0) // 0 again; 1 the claim read as finished
			ret(x, 0, stream.Succeeded)
			for o := int64(2); o < 6; o++ {
				handle(x, o)
			}
			commit(x, 6, "")
		}, ""},
		{"a crash's commits, delivered again past what the next owner read", func(x hist) {
			ev(x, streamtest.Event{Kind: streamtest.Claimed, Claim: 1, Offset: -1})
			handle(x, 0)
			handle(x, 1)
			commit(x, 2, "")
			ev(x, streamtest.Event{Kind: streamtest.Claimed, Member: "n", Claim: 2, Offset: 0, Metadata: window(0, 2, 1)})
			handle(x, 1) // the claim read 1 as finished
			all(x)
		}, "record 1 delivered again, but a commit said it was finished"},
		{"a released claim's commits, delivered again", func(x hist) {
			ev(x, streamtest.Event{Kind: streamtest.Claimed, Claim: 1, Offset: -1})
			handle(x, 0)
			handle(x, 1)
			commit(x, 2, "")
			ev(x, streamtest.Event{Kind: streamtest.Released, Claim: 1})
			ev(x, streamtest.Event{Kind: streamtest.Claimed, Member: "n", Claim: 2, Offset: 0})
			handle(x, 0)
			all(x)
		}, "record 0 delivered again, but a commit said it was finished"},
		{"a released claim's last commit unwritten, delivered again", func(x hist) {
			ev(x, streamtest.Event{Kind: streamtest.Claimed, Claim: 1, Offset: -1})
			handle(x, 0)
			handle(x, 1)
			// coalesced; not written when the claim was released
			ev(x, streamtest.Event{Kind: streamtest.Committed, Claim: 1, Offset: 2})
			ev(x, streamtest.Event{Kind: streamtest.Released, Claim: 1})
			ev(x, streamtest.Event{Kind: streamtest.Unwritten, Offset: 2})
			ev(x, streamtest.Event{Kind: streamtest.Claimed, Member: "n", Claim: 2, Offset: 0})
			handle(x, 0)
			all(x)
		}, ""},
		{"committed as finished, not handled", func(x hist) {
			handle(x, 0)
			commit(x, 0, window(0, 2, 1)) // 1 never handled
			all(x)
		}, "says record 1 is finished, but it was neither handled"},
		{"given up, committed before its action", func(x hist) {
			start(x, 0, 0)
			ret(x, 0, stream.Failed)
			ev(x, streamtest.Event{Kind: streamtest.GivenUp, First: 0, Last: 0})
			commit(x, 1, "")
			ev(x, streamtest.Event{Kind: streamtest.ActionTried, First: 0, Last: 0})
			for o := int64(1); o < 6; o++ {
				handle(x, o)
			}
			commit(x, 6, "")
		}, "says record 0 is finished, but it was neither handled nor resolved"},
		{"lost", func(x hist) {
			for _, o := range []int64{0, 1, 2, 3, 5} {
				handle(x, o)
			}
		}, "record 4 lost"},
		{"returned without a start", func(x hist) {
			ret(x, 0, stream.Succeeded)
			all(x)
		}, "no delivery of it began"},
		{"foreign metadata", func(x hist) {
			handle(x, 0)
			commit(x, 1, "other tool")
			all(x)
		}, "does not read"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			x := hist{&streamtest.History{}}
			tc.run(x)
			r := x.h.CheckKeys(keys)
			got := strings.Join(r.Violations, "\n")
			switch {
			case tc.want == "" && got != "":
				t.Fatalf("violations:\n%s", got)
			case tc.want != "" && !strings.Contains(got, tc.want):
				t.Fatalf("want a violation with %q, got:\n%s", tc.want, got)
			}
		})
	}
}

// TestCheckKeysOnPartitionMode: a consumer in partition mode (today's
// engine: one batch at a time, in offset order) keeps every key's order,
// so a history of a run with failures, retries, a give-up and a move
// passes CheckKeys as it passes Check.
func TestCheckKeysOnPartitionMode(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var h streamtest.History
		p := streamtest.NewPartition("t", 0, 7)
		p.AppendN(time.Now(), 100)
		keys := make([]string, 100)
		for o := range keys {
			keys[o] = fmt.Sprint("k", o%7)
		}
		handler := stream.HandlerFunc(func(_ context.Context, b *stream.Batch) error {
			switch {
			case b.FirstOffset()%3 == 0 && b.Attempt.Retries < 2:
				return errors.New("transient")
			case b.FirstOffset() == 49:
				return checkpoint.Permanent(errors.New("poison"))
			}
			return nil
		})
		run := func(member string, until int64) {
			proc, err := stream.NewProcessor(stream.Chain(handler, h.Middleware(member)), stream.WithHooks(h.Hooks(member)),
				stream.WithPolicy(checkpoint.Policy{MaxRetries: 3, Backoff: checkpoint.Fixed(time.Second)}))
			if err != nil {
				t.Fatal(err)
			}
			ctx, cancel := context.WithCancel(t.Context())
			done := make(chan error, 1)
			go func() { done <- streamtest.Run(ctx, proc, p) }()
			wctx, wcancel := context.WithTimeout(ctx, time.Hour)
			defer wcancel()
			if err := p.WaitCommitted(wctx, until); err != nil {
				t.Fatal(err)
			}
			p.Revoke()
			cancel()
			<-done
		}
		run("a", 40)
		run("b", 100)
		tp := streamtest.TopicPartition{Topic: "t", Partition: 0}
		r := h.CheckKeys(map[streamtest.TopicPartition][]string{tp: keys})
		if len(r.Violations) > 0 || r.Lost != 0 || r.Records != 100 || r.Deliveries == 0 {
			t.Fatalf("report %+v", r)
		}
		if c := h.Check(map[streamtest.TopicPartition]int64{tp: 100}); len(c.Violations) > 0 {
			t.Fatalf("Check: %v", c.Violations)
		}
	})
}
