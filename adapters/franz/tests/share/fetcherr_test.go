package share_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/redeliver-go/redeliver/adapters/franz/internal/fetcherr"
	"github.com/redeliver-go/redeliver/adapters/franz/share"
	"github.com/redeliver-go/redeliver/adapters/internal/kafkatest"
	"github.com/redeliver-go/redeliver/stream"
	"github.com/redeliver-go/redeliver/stream/streamtest"
)

// A share fetch error that franz-go reports on every fetch (here
// TOPIC_AUTHORIZATION_FAILED) is logged once, not once a poll of each
// lane, and the lanes back off instead of spinning; Health reports it;
// once the error stops, records flow again.
func TestFetchErrorIsLoggedAtABoundedRate(t *testing.T) {
	kc, addrs := kafkatest.NewCluster(t, "t", 1)
	var buf kafkatest.LogBuffer
	handled := make(chan struct{}, 100)
	proc, err := stream.NewProcessor(stream.HandlerFunc(func(context.Context, *stream.Batch) error {
		handled <- struct{}{}
		return nil
	}))
	if err != nil {
		t.Fatal(err)
	}
	c, err := share.New(proc, share.WithLogger(buf.Logger()), share.WithResetEarliest(), share.WithLanes(2),
		share.WithKgoOptions(kgo.SeedBrokers(addrs...), kgo.ShareGroup("g"), kgo.ConsumeTopics("t"), kgo.FetchMaxWait(100*time.Millisecond)))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- c.Run(ctx) }()
	defer func() {
		cancel()
		<-done
	}()
	kafkatest.Produce(t, addrs, "t", 0, 0, 1)
	select {
	case <-handled:
	case <-time.After(wait):
		t.Fatal("no record handled")
	}

	fetches := kc.Fault(kfake.Fault{Keys: []kmsg.Key{kmsg.ShareFetch}, Topic: "t", Err: kerr.TopicAuthorizationFailed, Count: -1})
	const window = 2 * time.Second
	time.Sleep(window)
	n := fetches.Hits()
	if err := c.Health(); err == nil || !strings.Contains(err.Error(), "TOPIC_AUTHORIZATION_FAILED") {
		t.Errorf("Health during the fetch errors: %v, want them reported", err)
	}
	fetches.Remove()
	lines := strings.Count(buf.String(), "fetch error")
	t.Logf("in %v of fetch errors: %d share fetch requests, %d log lines", window, n, lines)
	if lines > 2 {
		t.Errorf("%d log lines in %v of the same fetch error, want it logged once", lines, window)
	}
	if n > 80 {
		t.Errorf("%d share fetch requests of 2 lanes in %v of fetch errors, want the lanes to back off (at most 80)", n, window)
	}
	kafkatest.Produce(t, addrs, "t", 0, 1, 1)
	select {
	case <-handled:
	case <-time.After(wait):
		t.Fatal("no record handled once the fetch error stopped")
	}
	select {
	case err := <-done:
		t.Fatalf("Run returned %v during a passing fetch error", err)
	default:
	}
}

// A fetch error that lasts ends Run with an error that names the partition
// and the error.
func TestLastingFetchErrorEndsRun(t *testing.T) {
	defer fetcherr.SetPermanentAfter(time.Second)()
	kc, addrs := kafkatest.NewCluster(t, "t", 1)
	kc.Fault(kfake.Fault{Keys: []kmsg.Key{kmsg.ShareFetch}, Topic: "t", Err: kerr.TopicAuthorizationFailed, Count: -1})
	proc, err := stream.NewProcessor(streamtest.Succeed)
	if err != nil {
		t.Fatal(err)
	}
	c, err := share.New(proc, share.WithLanes(2),
		share.WithKgoOptions(kgo.SeedBrokers(addrs...), kgo.ShareGroup("g"), kgo.ConsumeTopics("t"), kgo.FetchMaxWait(100*time.Millisecond)))
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- c.Run(context.Background()) }()
	defer c.Close()
	select {
	case err := <-done:
		if err == nil || !strings.Contains(err.Error(), "TOPIC_AUTHORIZATION_FAILED") || !strings.Contains(err.Error(), "t/0") {
			t.Fatalf("Run returned %v, want an error naming the partition and TOPIC_AUTHORIZATION_FAILED", err)
		}
		t.Log(err)
	case <-time.After(wait):
		t.Fatal("Run did not end under a lasting fetch error")
	}
}
