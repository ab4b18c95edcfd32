package franz_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/redeliver-go/redeliver/adapters/franz"
	"github.com/redeliver-go/redeliver/stream"
)

// One slow handler does not stall the partitions that are caught up: while
// partition 0's handler takes 500ms a batch and its buffer stays full,
// records produced to partition 1 one at a time are handled within a
// bound, not when partition 0 has drained its buffer.
func TestSlowPartitionDoesNotStallCaughtUpOnes(t *testing.T) {
	addrs := newCluster(t, "t", 2)
	produce(t, addrs, "t", 0, 0, 400)
	var (
		mu      sync.Mutex
		handled = map[string]time.Time{}
		slowAt  = make(chan struct{}, 1)
	)
	h := stream.HandlerFunc(func(ctx context.Context, b *stream.Batch) error {
		if b.Partition == 0 {
			select {
			case slowAt <- struct{}{}:
			default:
			}
			select {
			case <-time.After(500 * time.Millisecond):
			case <-ctx.Done():
			}
			return nil
		}
		mu.Lock()
		for _, r := range b.Records {
			handled[string(r.Value)] = time.Now()
		}
		mu.Unlock()
		return nil
	})
	start(t, addrs, "g", "t", newProcessor(t, h), franz.WithMaxBatch(10), franz.WithBufferBytes(8<<10),
		kgo.FetchMaxWait(100*time.Millisecond))
	select {
	case <-slowAt:
	case <-time.After(wait):
		t.Fatal("partition 0 was not delivered")
	}
	time.Sleep(300 * time.Millisecond) // partition 0's buffer is full by now
	const n = 8
	var worst time.Duration
	for i := range n {
		produced := time.Now()
		produce(t, addrs, "t", 1, i, 1)
		v := fmt.Sprintf("1-%d", i)
		for {
			mu.Lock()
			at, ok := handled[v]
			mu.Unlock()
			if ok {
				worst = max(worst, at.Sub(produced))
				break
			}
			if time.Since(produced) > wait {
				t.Fatalf("record %s of the caught-up partition not handled in %v", v, wait)
			}
			time.Sleep(5 * time.Millisecond)
		}
		time.Sleep(100 * time.Millisecond)
	}
	t.Logf("worst latency of the caught-up partition: %v", worst)
	if worst > time.Second {
		t.Errorf("a record of the caught-up partition took %v to be handled while another partition's handler was slow, want at most 1s", worst)
	}
}
