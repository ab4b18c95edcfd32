package franz_test

import (
	"context"
	"testing"
	"sync/atomic"

	"github.com/redeliver-go/redeliver/stream"
)

func TestSmoke(t *testing.T) {
	addrs := newCluster(t, "t", 2)
	produce(t, addrs, "t", 0, 0, 100)
	produce(t, addrs, "t", 1, 0, 50)
	var n atomic.Int64
	proc, err := stream.NewProcessor(stream.HandlerFunc(func(ctx context.Context, b *stream.Batch) error {
		n.Add(int64(len(b.Records)))
		return nil
	}))
	if err != nil {
		t.Fatal(err)
	}
	start(t, addrs, "g", "t", proc)
	waitCommitted(t, addrs, "g", "t", map[int32]int64{0: 100, 1: 50})
	t.Log(n.Load())
}
