package kafkatest

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// SlowKeys are the requests of a group consumer whose slow answers
// [ShutdownUnderSlowAnswers] tries: every request it makes on its way from
// joining to committing.
var SlowKeys = []kmsg.Key{kmsg.Metadata, kmsg.ListOffsets, kmsg.JoinGroup, kmsg.SyncGroup, kmsg.Fetch, kmsg.OffsetCommit}

// ShareSlowKeys are the same for a share-group consumer: reading and
// setting the group's configuration, joining, fetching and acknowledging.
var ShareSlowKeys = []kmsg.Key{kmsg.Metadata, kmsg.FindCoordinator, kmsg.IncrementalAlterConfigs, kmsg.DescribeConfigs,
	kmsg.ShareGroupHeartbeat, kmsg.ShareFetch, kmsg.ShareAcknowledge}

// ShutdownBound is how soon after its context's cancellation a consumer's
// Run must return, whatever the broker is slow to answer.
const ShutdownBound = time.Second

// Hold makes kc hold every request of key, unanswered, until release is
// called (by the end of the test at the latest); held gets a value each
// time a request is held.
func Hold(t testing.TB, kc *kfake.Cluster, key kmsg.Key) (held <-chan struct{}, release func()) {
	ch := make(chan struct{}, 1)
	rel := make(chan struct{})
	var once sync.Once
	release = func() { once.Do(func() { close(rel) }) }
	kc.ControlKey(int16(key), func(kmsg.Request) (kmsg.Response, error, bool) {
		kc.KeepControl()
		select {
		case <-rel:
			return nil, nil, false
		default:
		}
		select {
		case ch <- struct{}{}:
		default:
		}
		kc.SleepControl(func() { <-rel })
		return nil, nil, false
	})
	t.Cleanup(release) // before the cluster closes: cleanups run last first
	return ch, release
}

// ShutdownUnderSlowAnswers checks, for each of keys ([SlowKeys],
// [ShareSlowKeys]), that a consumer's Run returns nil within ShutdownBound
// of its context's cancellation while the broker holds every request of
// that key. Each key gets a new kfake cluster with topic "t" of 2
// partitions holding 10 records each; run starts the adapter's consumer of
// "t" in group "g" with ctx, and returns a channel that gets Run's error.
func ShutdownUnderSlowAnswers(t *testing.T, keys []kmsg.Key, run func(t *testing.T, ctx context.Context, addrs []string) <-chan error) {
	for _, key := range keys {
		t.Run(key.Name(), func(t *testing.T) {
			kc, addrs := NewCluster(t, "t", 2)
			for p := range int32(2) {
				Produce(t, addrs, "t", p, 0, 10)
			}
			held, _ := Hold(t, kc, key)
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			done := run(t, ctx, addrs)
			select {
			case <-held:
			case err := <-done:
				t.Fatalf("Run returned %v before the broker held a %s request", err, key.Name())
			case <-time.After(Wait):
				t.Fatalf("the consumer made no %s request in %v", key.Name(), Wait)
			}
			time.Sleep(50 * time.Millisecond) // into the wait
			cancelled := time.Now()
			cancel()
			select {
			case err := <-done:
				took := time.Since(cancelled)
				if took > ShutdownBound {
					t.Errorf("Run took %v to return after its context was cancelled while the broker held a %s request, want at most %v", took, key.Name(), ShutdownBound)
				}
				if err != nil {
					t.Errorf("Run returned %v, want nil: a clean shutdown", err)
				}
				t.Logf("Run returned %v after the cancellation", took.Round(time.Millisecond))
			case <-time.After(Wait):
				t.Fatalf("Run did not return in %v after its context was cancelled while the broker held a %s request", Wait, key.Name())
			}
		})
	}
}
