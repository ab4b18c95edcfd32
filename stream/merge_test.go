package stream_test

import (
	"context"
	"reflect"
	"testing"

	"github.com/redeliver-go/redeliver/stream"
	"github.com/redeliver-go/redeliver/stream/streamtest"
)

// MergeHooks keeps every hook of every set: a hook added to Hooks and
// forgotten in MergeHooks fails here.
func TestMergeHooksCallsEveryHook(t *testing.T) {
	called := map[string]int{}
	var hooks stream.Hooks
	v := reflect.ValueOf(&hooks).Elem()
	for i := range v.NumField() {
		name := v.Type().Field(i).Name
		v.Field(i).Set(reflect.MakeFunc(v.Field(i).Type(), func([]reflect.Value) []reflect.Value { called[name]++; return nil }))
	}
	merged := reflect.ValueOf(stream.MergeHooks(hooks, stream.Hooks{}, hooks))
	for i := range merged.NumField() {
		f := merged.Field(i)
		if f.IsNil() {
			t.Errorf("hook %s dropped", merged.Type().Field(i).Name)
			continue
		}
		f.Call([]reflect.Value{reflect.Zero(f.Type().In(0))})
	}
	for i := range v.NumField() {
		if name := v.Type().Field(i).Name; called[name] != 2 {
			t.Errorf("hook %s called %d times, want 2", name, called[name])
		}
	}
	if got := stream.MergeHooks(stream.Hooks{}); got.Delivered != nil {
		t.Error("merging empty hooks set a hook")
	}
}

// WithHooks given twice calls both sets, in order: a later one never
// silently replaces an earlier one (a host's status hooks, say).
func TestWithHooksAdds(t *testing.T) {
	var calls []string
	hook := func(name string) stream.Hooks {
		return stream.Hooks{Claimed: func(stream.ClaimEvent) { calls = append(calls, name) }}
	}
	proc, err := stream.NewProcessor(stream.HandlerFunc(func(context.Context, *stream.Batch) error { return nil }),
		stream.WithHooks(hook("first")), stream.WithHooks(hook("second")))
	if err != nil {
		t.Fatal(err)
	}
	p := streamtest.NewPartition("t", 0, 1)
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	_ = streamtest.Run(ctx, proc, p)
	if !reflect.DeepEqual(calls, []string{"first", "second"}) {
		t.Errorf("Claimed hooks called: %v, want [first second]", calls)
	}
}
