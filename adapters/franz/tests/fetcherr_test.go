package franz_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/redeliver-go/redeliver/adapters/franz"
	"github.com/redeliver-go/redeliver/adapters/franz/internal/fetcherr"
	"github.com/redeliver-go/redeliver/adapters/internal/kafkatest"
	"github.com/redeliver-go/redeliver/stream"
	"github.com/redeliver-go/redeliver/stream/streamtest"
)

// A fetch error that franz-go reports on every fetch (here
// TOPIC_AUTHORIZATION_FAILED) is logged once, not once a poll, and the
// poll loop backs off instead of spinning; once the error stops, the
// partition goes on.
func TestFetchErrorIsLoggedAtABoundedRate(t *testing.T) {
	kc, addrs := kafkatest.NewCluster(t, "t", 1)
	produce(t, addrs, "t", 0, 0, 5)
	var buf kafkatest.LogBuffer
	var rec streamtest.Recorder
	proc := newProcessor(t, stream.Chain(streamtest.Succeed, rec.Middleware()))
	r := start(t, addrs, "g", "t", proc, franz.WithLogger(buf.Logger()))
	waitCommitted(t, addrs, "g", "t", map[int32]int64{0: 5})

	fetches := kc.Fault(kfake.Fault{Keys: []kmsg.Key{kmsg.Fetch}, Topic: "t", Err: kerr.TopicAuthorizationFailed, Count: -1})
	const window = 2 * time.Second
	time.Sleep(window)
	n := fetches.Hits()
	if err := r.C.Health(); err == nil || !strings.Contains(err.Error(), "TOPIC_AUTHORIZATION_FAILED") {
		t.Errorf("Health during the fetch errors: %v, want them reported", err)
	}
	fetches.Remove()
	lines := strings.Count(buf.String(), "redeliver: fetch error")
	t.Logf("in %v of fetch errors: %d fetch requests, %d log lines", window, n, lines)
	if lines > 2 {
		t.Errorf("%d log lines in %v of the same fetch error, want it logged once", lines, window)
	}
	if n > 40 {
		t.Errorf("%d fetch requests in %v of fetch errors, want the poll loop to back off (at most 40)", n, window)
	}
	produce(t, addrs, "t", 0, 5, 2)
	waitCommitted(t, addrs, "g", "t", map[int32]int64{0: 7})
	if err := r.C.Health(); err != nil {
		t.Errorf("Health once fetching works again: %v", err)
	}
	select {
	case <-r.Done():
		t.Fatalf("Run returned %v during a passing fetch error", r.Err())
	default:
	}
}

// A topic deleted and created again while consumed: franz-go (fetching by
// topic ID) never consumes it again under its old ID and reports
// UNKNOWN_TOPIC_ID. Run ends with an error that says so, instead of
// logging it on every poll for as long as it runs.
func TestRecreatedTopicEndsRun(t *testing.T) {
	addrs := newCluster(t, "t", 1)
	produce(t, addrs, "t", 0, 0, 5)
	var buf kafkatest.LogBuffer
	c, err := franz.New(newProcessor(t, streamtest.Succeed), franz.WithLogger(buf.Logger()),
		franz.WithKgoOptions(kgo.SeedBrokers(addrs...), kgo.ConsumerGroup("g"), kgo.ConsumeTopics("t"),
			kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()), kgo.FetchMaxWait(100*time.Millisecond)))
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- c.Run(context.Background()) }()
	defer c.Close()
	waitCommitted(t, addrs, "g", "t", map[int32]int64{0: 5})
	kafkatest.Recreate(t, addrs, "t")
	produce(t, addrs, "t", 0, 0, 5)
	select {
	case err := <-done:
		if err == nil || !strings.Contains(err.Error(), "deleted") || !strings.Contains(err.Error(), "UNKNOWN_TOPIC_ID") {
			t.Fatalf("Run returned %v, want an error saying the topic was deleted (UNKNOWN_TOPIC_ID)", err)
		}
		t.Log(err)
	case <-time.After(wait):
		t.Fatalf("Run did not end after the topic was created again; %d fetch error lines logged", strings.Count(buf.String(), "fetch error"))
	}
	if n := strings.Count(buf.String(), "redeliver: fetch error"); n > 3 {
		t.Errorf("%d fetch error lines, want a few", n)
	}
}

// A fetch error that lasts (here TOPIC_AUTHORIZATION_FAILED, with
// permanentAfter shortened) ends Run with an error that says what failed
// and for how long.
func TestLastingFetchErrorEndsRun(t *testing.T) {
	t.Cleanup(fetcherr.SetPermanentAfter(time.Second))
	kc, addrs, _ := cluster(t, 3)
	proc, err := stream.NewProcessor(stream.HandlerFunc(func(context.Context, *stream.Batch) error { return nil }))
	if err != nil {
		t.Fatal(err)
	}
	c, err := franz.New(proc, franz.WithKgoOptions(kgo.SeedBrokers(addrs...), kgo.ConsumerGroup("g"), kgo.ConsumeTopics("t"),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()), kgo.FetchMaxWait(100*time.Millisecond)))
	if err != nil {
		t.Fatal(err)
	}
	kc.Fault(kfake.Fault{Keys: []kmsg.Key{kmsg.Fetch}, Topic: "t", Err: kerr.TopicAuthorizationFailed, Count: -1})
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
