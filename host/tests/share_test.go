package tests

import (
	"context"
	"fmt"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/redeliver-go/redeliver/host"
	"github.com/redeliver-go/redeliver/stream"
)

// TestShareTrigger binds a function to a share group from host.json: the
// host becomes ready, every record is handled, the one that fails is
// retried on its own (the records beside it are not delivered again), and
// the status says the group is a share group, its partitions flowing once
// the retry went through.
func TestShareTrigger(t *testing.T) {
	addrs := shareCluster(t, 2)
	for p := range int32(2) {
		produce(t, addrs, "emails", p, 10)
	}
	cfg := parse(t, `{
  "checkpointRetryPolicy": {"retryCount": 2, "sleepDuration": "00:00:00.05"},
  "triggers": {"emails": {"type": "kafka", "topic": "emails", "shareGroup": "emails-app"}},
}`)
	h, err := host.New(cfg, onKafka(t, addrs)...)
	if err != nil {
		t.Fatal(err)
	}
	var (
		mu         sync.Mutex
		deliveries = map[string]int{}
	)
	if err := h.Register("emails", stream.PerRecord(func(_ context.Context, r *stream.Record) error {
		key := fmt.Sprintf("%d/%d", r.Partition, r.Offset)
		mu.Lock()
		deliveries[key]++
		n := deliveries[key]
		mu.Unlock()
		if key == "1/4" && n == 1 {
			return errBoom
		}
		return nil
	})); err != nil {
		t.Fatal(err)
	}
	start(t, h)
	waitFor(t, "the host ready", func() bool { ok, _ := h.Ready(); return ok })
	waitFor(t, "every record handled, 1/4 twice", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(deliveries) == 20 && deliveries["1/4"] == 2
	})
	time.Sleep(200 * time.Millisecond) //nolint:forbidigo // a redelivery that should not come
	mu.Lock()
	for key, n := range deliveries {
		if want := map[bool]int{true: 2, false: 1}[key == "1/4"]; n != want {
			t.Errorf("record %s delivered %d times, want %d", key, n, want)
		}
	}
	mu.Unlock()
	st := status(t, h.Handler())
	if len(st.Functions) != 1 || !st.Functions[0].Share || st.Functions[0].Group != "emails-app" {
		t.Errorf("status %+v, want the function on share group emails-app", st.Functions)
	}
	// The retry of 1/4 went through: its partition is flowing again (a
	// share group checkpoints nothing, so no checkpoint says so).
	for _, f := range st.Functions {
		for _, p := range f.Partitions {
			if p.State != host.StateFlowing || p.LastError != "" {
				t.Errorf("partition %d: state %q (%q) once every record is done, want flowing", p.Partition, p.State, p.LastError)
			}
		}
	}
}

// TestShareTriggerOnKafkaGo: a share group bound in code to the kafka-go
// adapter is an error at start, not a silent consumer group.
func TestShareTriggerOnKafkaGo(t *testing.T) {
	addrs := newCluster(t, 1, "emails")
	h, err := host.New(parse(t, `{}`), onKafka(t, addrs)...)
	if err != nil {
		t.Fatal(err)
	}
	if err := h.Register("emails", stream.HandlerFunc(func(context.Context, *stream.Batch) error { return nil }),
		host.Kafka{Adapter: "kafkago", Topic: "emails", Group: "emails-app", Share: true}); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), wait)
	defer cancel()
	err = h.Run(ctx)
	if err == nil || !strings.Contains(err.Error(), "kafka-go has no share-group consumer") {
		t.Fatalf("Run = %v, want the share group refused on kafka-go", err)
	}
}

// shareCluster starts a kfake cluster with topic "emails" of the given
// partitions, made for share group emails-app: a short heartbeat, a lock
// of 5s, and records read from the earliest.
func shareCluster(t *testing.T, partitions int32) []string {
	t.Helper()
	c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(partitions, "emails"), kfake.BrokerConfigs(map[string]string{
		"group.share.heartbeat.interval.ms":   "100",
		"group.share.record.lock.duration.ms": "5000",
	}))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	addrs := c.ListenAddrs()
	setShareGroupConfig(t, addrs, "emails-app", "share.auto.offset.reset", "earliest")
	return addrs
}

// setShareGroupConfig sets one configuration of a share group.
func setShareGroupConfig(t *testing.T, addrs []string, group, name, value string) {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(addrs...))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	req := kmsg.NewPtrIncrementalAlterConfigsRequest()
	res := kmsg.NewIncrementalAlterConfigsRequestResource()
	res.ResourceType, res.ResourceName = kmsg.ConfigResourceTypeGroupConfig, group
	c := kmsg.NewIncrementalAlterConfigsRequestResourceConfig()
	c.Name, c.Op, c.Value = name, kmsg.IncrementalAlterConfigOpSet, &value
	res.Configs = append(res.Configs, c)
	req.Resources = append(req.Resources, res)
	ctx, cancel := context.WithTimeout(context.Background(), wait)
	defer cancel()
	resp, err := req.RequestWith(ctx, cl)
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range resp.Resources {
		if r.ErrorCode != 0 {
			t.Fatalf("set %s=%s on group %s: error code %d", name, value, group, r.ErrorCode)
		}
	}
}

// TestShareStopSeenByTheHost: in a share group, StopPartition ("stop")
// holds one record; the host's status shows its partition stopped at the
// record, and the host's Skip reaches it (issue 47).
func TestShareStopSeenByTheHost(t *testing.T) {
	addrs := shareCluster(t, 1)
	produce(t, addrs, "emails", 0, 5)
	cfg := parse(t, `{
  "checkpointRetryPolicy": {"retryCount": 0, "onExhausted": "stop"},
  "triggers": {"emails": {"type": "kafka", "topic": "emails", "shareGroup": "emails-app"}},
}`)
	h, err := host.New(cfg, onKafka(t, addrs, host.WithToken(token))...)
	if err != nil {
		t.Fatal(err)
	}
	if err := h.Register("emails", stream.PerRecord(func(_ context.Context, r *stream.Record) error {
		if r.Offset == 2 {
			return errBoom
		}
		return nil
	})); err != nil {
		t.Fatal(err)
	}
	start(t, h)
	var stopped host.PartitionStatus
	waitFor(t, "the partition stopped at offset 2 in the status", func() bool {
		for _, f := range h.Status().Functions {
			for _, p := range f.Partitions {
				if p.State == host.StateStopped && p.FirstOffset == 2 {
					stopped = p
					return true
				}
			}
		}
		return false
	})
	if stopped.Topic != "emails" || stopped.Partition != 0 {
		t.Errorf("stopped %+v, want emails/0", stopped)
	}
	if err := h.Skip(context.Background(), "emails", "emails", 0); err != nil {
		t.Fatalf("Skip: %v", err)
	}
	waitFor(t, "the partition no longer stopped", func() bool {
		for _, f := range h.Status().Functions {
			for _, p := range f.Partitions {
				if p.State == host.StateStopped {
					return false
				}
			}
		}
		return true
	})
}

// TestShareStoppedRecordsEachReachable: in share mode StopPartition holds
// records, not their partition; with three records of one partition
// stopped, the partition's Resume names them, the status lists them, and
// each is reached by its offset: ResumeRecord, SkipRecord, and the status
// page's resume action with an offset.
func TestShareStoppedRecordsEachReachable(t *testing.T) {
	addrs := shareCluster(t, 1)
	produce(t, addrs, "emails", 0, 3) // one batch: one lane gets all three
	cfg := parse(t, `{
  "checkpointRetryPolicy": {"retryCount": 0, "onExhausted": "stop"},
  "triggers": {"emails": {"type": "kafka", "topic": "emails", "shareGroup": "emails-app"}},
}`)
	h, err := host.New(cfg, onKafka(t, addrs, host.WithToken(token))...)
	if err != nil {
		t.Fatal(err)
	}
	var (
		mu         sync.Mutex
		deliveries = map[int64]int{}
	)
	if err := h.Register("emails", stream.PerRecord(func(_ context.Context, r *stream.Record) error {
		mu.Lock()
		defer mu.Unlock()
		deliveries[r.Offset]++
		if deliveries[r.Offset] == 1 {
			return errBoom
		}
		return nil
	})); err != nil {
		t.Fatal(err)
	}
	hd := h.Handler()
	start(t, h)
	waitFor(t, "three records stopped", func() bool {
		p, ok := partition(status(t, hd), "emails")
		return ok && p.State == host.StateStopped && len(p.StoppedRecords) == 3
	})
	if p, _ := partition(status(t, hd), "emails"); fmt.Sprint(p.StoppedRecords) != "[0 1 2]" {
		t.Errorf("stopped records %v, want [0 1 2]", p.StoppedRecords)
	}
	if code, page := get(t, hd, "/"); code != 200 || !strings.Contains(page, `name="offset" value="1"`) {
		t.Errorf("the page (%d) has no action for the record at offset 1", code)
	}
	ctx, cancel := context.WithTimeout(context.Background(), wait)
	defer cancel()
	if err := h.Resume(ctx, "emails", "emails", 0); err == nil || !strings.Contains(err.Error(), "offsets [0 1 2]") {
		t.Errorf("Resume of the partition = %v, want an error naming the three offsets", err)
	}
	if err := h.ResumeRecord(ctx, "emails", "emails", 0, 0); err != nil {
		t.Fatalf("ResumeRecord(0) = %v", err)
	}
	if err := h.SkipRecord(ctx, "emails", "emails", 0, 1); err != nil {
		t.Fatalf("SkipRecord(1) = %v", err)
	}
	if err := h.SkipRecord(ctx, "emails", "emails", 0, 1); err == nil {
		t.Error("a second SkipRecord(1) succeeded")
	}
	if p, _ := partition(status(t, hd), "emails"); p.State != host.StateStopped || fmt.Sprint(p.StoppedRecords) != "[2]" {
		t.Errorf("after two records released: %s %v, want stopped with [2]", p.State, p.StoppedRecords)
	}
	rec := post(hd, "/actions/resume", url.Values{"function": {"emails"}, "topic": {"emails"}, "partition": {"0"}, "offset": {"2"}},
		map[string]string{"Accept": "application/json", "Authorization": "Bearer " + token})
	if rec.Code != 200 || !strings.Contains(rec.Body.String(), "offset 2") {
		t.Fatalf("resume action with offset 2 = %d %s", rec.Code, rec.Body)
	}
	if rec := post(hd, "/actions/skip", url.Values{"function": {"emails"}, "topic": {"emails"}, "partition": {"0"}, "offset": {"x"}},
		map[string]string{"Accept": "application/json", "Authorization": "Bearer " + token}); rec.Code != 400 {
		t.Errorf("skip with offset x = %d %s, want 400", rec.Code, rec.Body)
	}
	waitFor(t, "records 0 and 2 delivered again", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return deliveries[0] == 2 && deliveries[2] == 2
	})
	waitFor(t, "the partition flowing", func() bool {
		p, _ := partition(status(t, hd), "emails")
		return p.State == host.StateFlowing && len(p.StoppedRecords) == 0
	})
	mu.Lock()
	defer mu.Unlock()
	if deliveries[1] != 1 {
		t.Errorf("the skipped record was delivered %d times, want once", deliveries[1])
	}
}

// TestShareConsumerDrainsWithinTheHostsDrain: franzhost gives the host's
// drain time to a share function's consumer, so that a stop cancels a
// handler call that ignores it at the host's drain time, not at the share
// consumer's default 25s.
func TestShareConsumerDrainsWithinTheHostsDrain(t *testing.T) {
	addrs := shareCluster(t, 1)
	produce(t, addrs, "emails", 0, 1)
	cfg := parse(t, `{"triggers": {"emails": {"type": "kafka", "topic": "emails", "shareGroup": "emails-app"}}}`)
	const drain = 2 * time.Second
	h, err := host.New(cfg, onKafka(t, addrs, host.WithDrain(drain))...)
	if err != nil {
		t.Fatal(err)
	}
	entered, cut := make(chan struct{}, 1), make(chan struct{})
	if err := h.Register("emails", stream.PerRecord(func(ctx context.Context, _ *stream.Record) error {
		entered <- struct{}{}
		<-ctx.Done()
		close(cut)
		return ctx.Err()
	})); err != nil {
		t.Fatal(err)
	}
	start(t, h)
	select {
	case <-entered:
	case <-time.After(wait):
		t.Fatal("the handler never got the record")
	}
	begin := time.Now()
	go func() { _ = h.Close() }()
	select {
	case <-cut:
		if d := time.Since(begin); d < drain-100*time.Millisecond {
			t.Errorf("the handler's context ended %v after the stop, before the drain time %v", d, drain)
		}
	case <-time.After(drain + 2*time.Second):
		t.Fatalf("the handler's context did not end within %v of the stop (the host's drain is %v)", drain+2*time.Second, drain)
	}
}

// TestShareGivenUpRecordLeavesItsPartitionFlowing: in a share group a
// record given up, and rejected once its exhaustion action (here none:
// skip) is done, leaves its partition's row flowing: nothing is
// checkpointed there to say so.
func TestShareGivenUpRecordLeavesItsPartitionFlowing(t *testing.T) {
	addrs := shareCluster(t, 1)
	produce(t, addrs, "emails", 0, 5)
	cfg := parse(t, `{
  "checkpointRetryPolicy": {"retryCount": 0},
  "triggers": {"emails": {"type": "kafka", "topic": "emails", "shareGroup": "emails-app"}},
}`)
	h, err := host.New(cfg, onKafka(t, addrs)...)
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	handled := map[int64]bool{}
	if err := h.Register("emails", stream.PerRecord(func(_ context.Context, r *stream.Record) error {
		mu.Lock()
		defer mu.Unlock()
		handled[r.Offset] = true
		if r.Offset == 2 {
			return errBoom
		}
		return nil
	})); err != nil {
		t.Fatal(err)
	}
	start(t, h)
	waitFor(t, "every record handled and the partition flowing", func() bool {
		mu.Lock()
		n := len(handled)
		mu.Unlock()
		ps, ok := partition(h.Status(), "emails")
		return n == 5 && ok && ps.State == host.StateFlowing
	})
}
