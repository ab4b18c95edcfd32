package kafkatest

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/redeliver-go/redeliver/stream"
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

// CommitAnsweredAtShutdown checks that a consumer's shutdown keeps the
// commit it has in flight when the broker answers it soon (100ms): the
// broker holds the consumer's first OffsetCommit of topic "t" (1 partition,
// 10 records, group "g"), the consumer's context is cancelled, and the
// broker then writes and answers the commit. The consumer's worker must
// report the commit the broker wrote (the Checkpointed hook, which the
// history checker and the telemetry read), and Run must return nil within
// ShutdownBound. A shutdown that cut the commit short at once would leave
// the broker ahead of what the consumer reports. run starts the adapter's
// consumer of "t" in group "g" with ctx and a processor that has hooks,
// and returns a channel that gets Run's error.
func CommitAnsweredAtShutdown(t *testing.T, run func(t *testing.T, ctx context.Context, addrs []string, hooks stream.Hooks) <-chan error) {
	kc, addrs := NewCluster(t, "t", 1)
	Produce(t, addrs, "t", 0, 0, 10)
	held, release := Hold(t, kc, kmsg.OffsetCommit)
	var (
		mu       sync.Mutex
		reported = int64(-1) // the latest commit the worker reported
	)
	hooks := stream.Hooks{Checkpointed: func(ev stream.CheckpointEvent) {
		mu.Lock()
		reported = max(reported, ev.Next)
		mu.Unlock()
	}}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := run(t, ctx, addrs, hooks)
	select {
	case <-held:
	case err := <-done:
		t.Fatalf("Run returned %v before it committed", err)
	case <-time.After(Wait):
		t.Fatalf("the consumer made no commit in %v", Wait)
	}
	cancelled := time.Now()
	cancel()
	time.Sleep(100 * time.Millisecond)
	release()
	select {
	case err := <-done:
		if took := time.Since(cancelled); took > ShutdownBound {
			t.Errorf("Run took %v to return after its context was cancelled, want at most %v", took, ShutdownBound)
		}
		if err != nil {
			t.Errorf("Run returned %v, want nil: a clean shutdown", err)
		}
	case <-time.After(Wait):
		t.Fatalf("Run did not return in %v after its context was cancelled", Wait)
	}
	at := OffsetsOf(Committed(t, addrs, "g"), "t")[0]
	mu.Lock()
	defer mu.Unlock()
	switch {
	case at <= 0:
		t.Fatalf("the broker has %d committed after the shutdown, want the commit that was in flight: the shutdown cut it short, and the records handled will be delivered again", at)
	case reported != at:
		t.Errorf("the broker wrote the commit of %d, answered 100ms after the shutdown began, but the consumer reported %d as checkpointed (-1: none): its shutdown cut the commit short", at, reported)
	}
}
