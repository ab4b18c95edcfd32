package kafkaadapter

import (
	"context"
	"errors"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/redeliver-go/redeliver/internal/health"
)

func TestOptionsCheck(t *testing.T) {
	for _, tc := range []struct {
		edit func(*Options)
		want string
	}{
		{func(*Options) {}, ""},
		{func(o *Options) { o.MaxBatch = 0 }, "x: WithMaxBatch(0): want 1 or more"},
		{func(o *Options) { o.MaxWait = -1 }, "x: WithMaxWait(-1ns): want 0 or more"},
		{func(o *Options) { o.CommitTimeout = 0 }, "x: WithCommitTimeout(0s): want more than 0"},
		{func(o *Options) { o.Drain = -time.Second }, "x: WithDrain(-1s): want 0 (no bound) or more"},
		{func(o *Options) { o.FailAfter = -time.Second }, "x: WithFailAfter(-1s): want 0 (never) or more"},
	} {
		o := Defaults()
		tc.edit(&o)
		err := o.Check("x")
		if (tc.want == "") != (err == nil) || err != nil && err.Error() != tc.want {
			t.Errorf("Check = %v, want %q", err, tc.want)
		}
	}
	if err := CheckTopics("x", []string{"a", ""}); err == nil || err.Error() != "x: WithGroup's topic 2 is empty" {
		t.Errorf("CheckTopics = %v", err)
	}
}

// Set replaces a partition's failure; Add keeps the first; Errs lists
// them by topic and partition, with how long each has lasted.
func TestFailing(t *testing.T) {
	var f Failing
	t0 := time.Unix(1000, 0)
	e1, e2 := errors.New("one"), errors.New("two")
	f.Add(Partition{"b", 1}, e1, t0)
	f.Add(Partition{"b", 1}, e2, t0.Add(time.Second))
	f.Set(Partition{"a", 10}, e1, t0)
	f.Set(Partition{"a", 10}, e2, t0.Add(2*time.Second))
	f.Set(Partition{"a", 9}, e1, t0)
	got := f.Errs(t0.Add(5*time.Second), "pkg", "consuming")
	want := []string{
		"pkg: consuming a/9 fails since 5s ago: one",
		"pkg: consuming a/10 fails since 3s ago: two",
		"pkg: consuming b/1 fails since 5s ago: one",
	}
	if len(got) != len(want) {
		t.Fatalf("Errs = %v", got)
	}
	for i := range want {
		if got[i].Error() != want[i] {
			t.Errorf("Errs[%d] = %q, want %q", i, got[i], want[i])
		}
	}
	if !errors.Is(got[1], e2) {
		t.Error("Errs does not wrap the partition's error")
	}
	f.Clear(Partition{"a", 9})
	f.Clear(Partition{"a", 9})
	if n := len(f.Errs(t0, "pkg", "x")); n != 2 {
		t.Errorf("%d failing after Clear, want 2", n)
	}
}

// CheckBeside runs both checks at once (each returns only once the other
// has begun) and returns the topics' problems first.
func TestCheckBeside(t *testing.T) {
	began := map[string]chan struct{}{"topics": make(chan struct{}), "dlq": make(chan struct{})}
	check := func(me, other string) func(context.Context) []health.Problem {
		return func(ctx context.Context) []health.Problem {
			close(began[me])
			select {
			case <-began[other]:
				return []health.Problem{{Subject: me}}
			case <-time.After(10 * time.Second):
				return []health.Problem{{Subject: me + " alone"}}
			}
		}
	}
	ps := CheckBeside(context.Background(), check("topics", "dlq"), check("dlq", "topics"))
	if len(ps) != 2 || ps[0].Subject != "topics" || ps[1].Subject != "dlq" {
		t.Errorf("CheckBeside = %+v", ps)
	}
	ps = CheckBeside(context.Background(), func(context.Context) []health.Problem { return nil }, nil)
	if len(ps) != 0 {
		t.Errorf("CheckBeside without a dead-letter check = %+v", ps)
	}
}

type option interface{ name() string }

type named string

func (n named) name() string { return string(n) }

func TestHostHelpers(t *testing.T) {
	if err := CheckNilOptions("h", []option{named("a"), nil}); err == nil || err.Error() != "h: option 2 of 2 is nil" {
		t.Errorf("CheckNilOptions = %v", err)
	}
	if err := CheckNilOptions("h", []option{named("a")}); err != nil {
		t.Errorf("CheckNilOptions = %v", err)
	}
	if err := NoShareGroups("h", "c"); !strings.HasPrefix(err.Error(), "h: c has no share-group consumer: a share group needs the franz adapter") {
		t.Errorf("NoShareGroups = %v", err)
	}
	ready := 0
	log := slog.New(slog.DiscardHandler)
	opts := TriggerOptions(Trigger{Logger: log, OnReady: func() { ready++ }, Drain: time.Second, MaxBatch: 7},
		func(*slog.Logger) string { return "logger" },
		func(fn func(map[string][]int32)) string { fn(nil); return "assigned" },
		func(d time.Duration) string { return "drain " + d.String() },
		func(n int) string { return "batch" })
	if strings.Join(opts, ",") != "assigned,logger,drain 1s,batch" || ready != 1 {
		t.Errorf("TriggerOptions = %v, ready %d", opts, ready)
	}
	opts = TriggerOptions(Trigger{},
		func(*slog.Logger) string { return "logger" },
		func(fn func(map[string][]int32)) string { fn(nil); return "assigned" },
		func(d time.Duration) string { return "drain" },
		func(n int) string { return "batch" })
	if strings.Join(opts, ",") != "assigned" {
		t.Errorf("TriggerOptions of an empty trigger = %v", opts)
	}
}
