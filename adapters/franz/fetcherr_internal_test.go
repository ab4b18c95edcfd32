package franz

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
	"github.com/redeliver-go/redeliver/stream"
)

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
	c, err := New(proc, WithKgoOptions(kgo.SeedBrokers(addrs...), kgo.ConsumerGroup("g"), kgo.ConsumeTopics("t"),
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
	case <-time.After(testWait):
		t.Fatal("Run did not end under a lasting fetch error")
	}
}
