package stream_test

import (
	"reflect"
	"testing"

	"github.com/redeliver-go/redeliver/stream"
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
