package tests

import (
	"reflect"
	"testing"
	"time"

	"github.com/redeliver-go/redeliver/adapters/kafkago"
	"github.com/redeliver-go/redeliver/stream/streamtest"
)

// TestOnAssigned checks that WithOnAssigned reports the assignment of each
// generation the consumer joins.
func TestOnAssigned(t *testing.T) {
	_, addrs := newCluster(t, "t", 3)
	got := make(chan map[string][]int32, 10)
	start(t, addrs, "g", "t", newProcessor(t, streamtest.Succeed),
		kafkago.WithOnAssigned(func(a map[string][]int32) { got <- a }))
	select {
	case a := <-got:
		if want := map[string][]int32{"t": {0, 1, 2}}; !reflect.DeepEqual(a, want) {
			t.Errorf("assigned %v, want %v", a, want)
		}
	case <-time.After(wait):
		t.Fatal("WithOnAssigned's function not called")
	}
}
