package integration_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/redeliver-go/redeliver/adapters/franz"
	"github.com/redeliver-go/redeliver/adapters/franz/share"
	"github.com/redeliver-go/redeliver/checkpoint"
	"github.com/redeliver-go/redeliver/stream"
	"github.com/redeliver-go/redeliver/stream/streamtest"
)

// envShareChild carries a shareChild to this test binary run as a member
// of a share group.
const envShareChild = "REDELIVER_SHARE_CHILD"

// shareChild is what a child process runs: a share consumer whose handler
// takes SlowMS per record and fails the first delivery of every record
// whose offset is 3 modulo 17 (with FailedAt, so the records before it are
// accepted and the ones after it delivered again).
type shareChild struct {
	Brokers      []string
	Group, Topic string
	Member       string
	Lanes        int
	SlowMS       int
	BackoffMS    int
}

func init() {
	raw := os.Getenv(envShareChild)
	if raw == "" {
		return
	}
	if err := runShareChild(raw); err != nil && !errors.Is(err, context.Canceled) {
		fmt.Fprintln(os.Stderr, "share child:", err)
		os.Exit(1)
	}
	os.Exit(0)
}

func runShareChild(raw string) error {
	var cfg shareChild
	if err := json.Unmarshal([]byte(raw), &cfg); err != nil {
		return err
	}
	var mu sync.Mutex
	out := bufio.NewWriter(os.Stdout)
	emit := func(e share.Event) {
		b, _ := json.Marshal(toShareEvent(e))
		mu.Lock()
		defer mu.Unlock()
		out.Write(append(b, '\n'))
		out.Flush()
	}
	h := stream.HandlerFunc(func(ctx context.Context, b *stream.Batch) error {
		for i, r := range b.Records {
			select {
			case <-time.After(time.Duration(cfg.SlowMS) * time.Millisecond):
			case <-ctx.Done():
				return ctx.Err()
			}
			if b.Attempt.Retries == 0 && r.Offset%17 == 3 {
				return stream.FailedAt(i, errors.New("injected"))
			}
		}
		return nil
	})
	proc, err := stream.NewProcessor(h, stream.WithPolicy(checkpoint.Policy{MaxRetries: 3, Backoff: checkpoint.Fixed(time.Duration(cfg.BackoffMS) * time.Millisecond)}))
	if err != nil {
		return err
	}
	c, err := share.New(proc, share.WithKgoOptions(kgo.SeedBrokers(cfg.Brokers...), kgo.ShareGroup(cfg.Group), kgo.ConsumeTopics(cfg.Topic),
		kgo.FetchMaxWait(100*time.Millisecond), kgo.ShareMaxRecords(20)),
		share.WithLanes(cfg.Lanes), share.WithResetEarliest(), share.WithMember(cfg.Member), share.WithEvents(emit))
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	go func() {
		io.Copy(io.Discard, os.Stdin)
		cancel()
	}()
	return c.Run(ctx)
}

var shareKinds = map[share.EventKind]streamtest.ShareKind{
	share.Acquired: streamtest.ShareAcquired, share.Handled: streamtest.ShareHandled, share.Held: streamtest.ShareRetryAt,
	share.ActionDone: streamtest.ShareActionDone, share.Accepted: streamtest.ShareAccepted,
	share.Rejected: streamtest.ShareRejected, share.Released: streamtest.ShareReleased,
}

func toShareEvent(e share.Event) streamtest.ShareEvent {
	return streamtest.ShareEvent{Kind: shareKinds[e.Kind], Member: e.Member, Topic: e.Topic, Partition: e.Partition,
		Offset: e.Offset, DeliveryCount: e.DeliveryCount, OK: e.OK, Start: e.Start, At: e.At}
}

// shareMember is a child process in the group.
type shareMember struct {
	cmd     *exec.Cmd
	stdin   io.WriteCloser
	relayed chan struct{}
	stderr  bytes.Buffer
}

func startShareMember(t *testing.T, hist *streamtest.ShareHistory, cfg shareChild) *shareMember {
	t.Helper()
	raw, err := json.Marshal(cfg)
	if err != nil {
		t.Fatal(err)
	}
	m := &shareMember{relayed: make(chan struct{})}
	m.cmd = exec.Command(os.Args[0], "-test.run=^$")
	m.cmd.Env = append(os.Environ(), envShareChild+"="+string(raw))
	m.cmd.Stderr = &m.stderr
	if m.stdin, err = m.cmd.StdinPipe(); err != nil {
		t.Fatal(err)
	}
	stdout, err := m.cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := m.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() {
		defer close(m.relayed)
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			var e streamtest.ShareEvent
			if json.Unmarshal(sc.Bytes(), &e) == nil {
				hist.Add(e)
			}
		}
	}()
	t.Cleanup(func() { m.kill() })
	return m
}

// kill ends the member with SIGKILL and waits until its events are read.
func (m *shareMember) kill() {
	_ = m.cmd.Process.Kill()
	_ = m.cmd.Wait()
	<-m.relayed
	m.stdin.Close()
}

// stop ends the member cleanly (stdin closed) and waits for it.
func (m *shareMember) stop(t *testing.T) {
	m.stdin.Close()
	done := make(chan error, 1)
	go func() { done <- m.cmd.Wait() }()
	select {
	case err := <-done:
		<-m.relayed
		if err != nil {
			t.Errorf("member exited with %v\n%s", err, m.stderr.String())
		}
	case <-time.After(30 * time.Second):
		t.Errorf("member did not stop within 30s")
		m.kill()
	}
}

// Two and four members of one share group, one killed with SIGKILL while
// records are in its handler: no record lost, none accepted without a
// successful handling in the same acquisition (streamtest.ShareHistory),
// and at most 3 deliveries per record (its one injected failure, its
// retry, and one more for a record in flight at the kill).
func TestShareGroupMemberKilled(t *testing.T) {
	type target struct {
		name    string
		brokers func(t *testing.T, topic string) []string
	}
	targets := []target{{"kfake", func(t *testing.T, topic string) []string {
		c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(2, topic), kfake.BrokerConfigs(map[string]string{
			"group.share.record.lock.duration.ms": "2000",
			"share.record.lock.sweep.interval.ms": "100",
			"group.share.heartbeat.interval.ms":   "200",
			"group.share.session.timeout.ms":      "3000",
			"group.share.delivery.count.limit":    "10",
		}))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(c.Close)
		return c.ListenAddrs()
	}}}
	if b := os.Getenv("REDELIVER_KAFKA_BROKERS"); b != "" {
		targets = append(targets, target{"broker", func(t *testing.T, topic string) []string {
			brokers := strings.Split(b, ",")
			cl, err := kgo.NewClient(kgo.SeedBrokers(brokers...))
			if err != nil {
				t.Fatal(err)
			}
			defer cl.Close()
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			if _, err := kadm.NewClient(cl).CreateTopic(ctx, 2, 1, nil, topic); err != nil {
				t.Fatal(err)
			}
			return brokers
		}})
	}
	for _, tg := range targets {
		for _, members := range []int{2, 4} {
			t.Run(fmt.Sprintf("%s/%d members", tg.name, members), func(t *testing.T) {
				topic := fmt.Sprintf("share-kill-%d-%d", members, time.Now().UnixNano())
				group := topic + "-g"
				brokers := tg.brokers(t, topic)
				if tg.name == "broker" {
					setShareGroupConfigs(t, brokers, group, map[string]string{
						"share.record.lock.duration.ms": "2000",
						"share.session.timeout.ms":      "3000",
						"share.heartbeat.interval.ms":   "200",
						"share.delivery.count.limit":    "10",
					})
				}
				const perPartition = 300
				produceShare(t, brokers, topic, perPartition)
				var hist streamtest.ShareHistory
				ms := make([]*shareMember, members)
				start := func(i int) {
					ms[i] = startShareMember(t, &hist, shareChild{Brokers: brokers, Group: group, Topic: topic,
						Member: fmt.Sprintf("m%d-", i), Lanes: 2, SlowMS: 20, BackoffMS: 200})
				}
				handled := func(prefix string) int {
					n := 0
					for _, e := range hist.Events() {
						if e.Kind == streamtest.ShareHandled && strings.HasPrefix(e.Member, prefix) {
							n++
						}
					}
					return n
				}
				accepted := func() int {
					seen := map[[2]int64]bool{}
					for _, e := range hist.Events() {
						if e.Kind == streamtest.ShareAccepted || e.Kind == streamtest.ShareRejected {
							seen[[2]int64{int64(e.Partition), e.Offset}] = true
						}
					}
					return len(seen)
				}
				wait := func(what string, cond func() bool) {
					deadline := time.Now().Add(90 * time.Second)
					for !cond() {
						if time.Now().After(deadline) {
							t.Fatalf("timed out waiting for %s (%d records done)", what, accepted())
						}
						time.Sleep(20 * time.Millisecond)
					}
				}
				// Member 0 starts alone, so that it is mid-batch, with
				// records acquired and in its handler, when it is killed
				// after the others have joined and handled some.
				start(0)
				wait("member 0 to handle 20 records", func() bool { return handled("m0-") >= 20 })
				for i := 1; i < members; i++ {
					start(i)
				}
				wait("the others to handle 10 records", func() bool { return handled("")-handled("m0-") >= 10 })
				if n := accepted(); n >= 2*perPartition-50 {
					t.Fatalf("%d records done before the kill: member 0 was not mid-batch", n)
				}
				ms[0].kill()
				for lane := range 2 {
					hist.Add(streamtest.ShareEvent{Kind: streamtest.ShareCrashed, Member: fmt.Sprintf("m0-%d", lane)})
				}
				wait("every record accepted", func() bool { return accepted() == 2*perPartition })
				for _, m := range ms[1:] {
					m.stop(t)
				}
				r := hist.Check(map[streamtest.TopicPartition]int64{{Topic: topic, Partition: 0}: perPartition, {Topic: topic, Partition: 1}: perPartition})
				for _, v := range r.Violations {
					t.Error(v)
				}
				if r.MaxDeliveries > 3 {
					t.Errorf("a record was delivered %d times, want at most 3", r.MaxDeliveries)
				}
				t.Logf("%d records, %d deliveries, at most %d per record, %d lost, %d delivered again after their acknowledgement",
					r.Records, r.Deliveries, r.MaxDeliveries, r.Lost, r.Duplicates)
			})
		}
	}
}

func produceShare(t *testing.T, brokers []string, topic string, perPartition int) {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(brokers...), kgo.RecordPartitioner(kgo.ManualPartitioner()))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	// In batches of 10 per partition: a broker hands out whole record
	// batches, so one big batch would go to one member.
	for i := 0; i < perPartition; i += 10 {
		var recs []*kgo.Record
		for p := range int32(2) {
			for j := i; j < min(i+10, perPartition); j++ {
				recs = append(recs, &kgo.Record{Topic: topic, Partition: p, Value: fmt.Appendf(nil, "%d-%d", p, j)})
			}
		}
		if err := cl.ProduceSync(ctx, recs...).FirstErr(); err != nil {
			t.Fatal(err)
		}
	}
}

// setShareGroupConfigs sets configurations of a share group on the broker.
func setShareGroupConfigs(t *testing.T, brokers []string, group string, configs map[string]string) {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(brokers...))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	req := kmsg.NewPtrIncrementalAlterConfigsRequest()
	res := kmsg.NewIncrementalAlterConfigsRequestResource()
	res.ResourceType = kmsg.ConfigResourceTypeGroupConfig
	res.ResourceName = group
	for k, v := range configs {
		c := kmsg.NewIncrementalAlterConfigsRequestResourceConfig()
		c.Name, c.Op, c.Value = k, kmsg.IncrementalAlterConfigOpSet, &v
		res.Configs = append(res.Configs, c)
	}
	req.Resources = append(req.Resources, res)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	resp, err := req.RequestWith(ctx, cl)
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range resp.Resources {
		if r.ErrorCode != 0 {
			msg := ""
			if r.ErrorMessage != nil {
				msg = *r.ErrorMessage
			}
			t.Fatalf("setting group configs %v: error code %d %s", configs, r.ErrorCode, msg)
		}
	}
}

// A retry due after the record's lock runs out is held, its lock renewed
// (KIP-1222), and delivered again when due and not before; the broker
// hands the record out once (its delivery count stays 1), and records
// behind it on the same partition are done meanwhile. On kfake and, when
// REDELIVER_KAFKA_BROKERS is set, on the real broker.
func TestShareBackoffPastTheLock(t *testing.T) {
	type target struct {
		name  string
		setup func(t *testing.T, topic, group string) []string
	}
	targets := []target{{"kfake", func(t *testing.T, topic, _ string) []string {
		c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(1, topic), kfake.BrokerConfigs(map[string]string{
			"group.share.record.lock.duration.ms": "1000",
			"share.record.lock.sweep.interval.ms": "100",
		}))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(c.Close)
		return c.ListenAddrs()
	}}}
	if b := os.Getenv("REDELIVER_KAFKA_BROKERS"); b != "" {
		targets = append(targets, target{"broker", func(t *testing.T, topic, group string) []string {
			brokers := strings.Split(b, ",")
			cl, err := kgo.NewClient(kgo.SeedBrokers(brokers...))
			if err != nil {
				t.Fatal(err)
			}
			defer cl.Close()
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			if _, err := kadm.NewClient(cl).CreateTopic(ctx, 1, 1, nil, topic); err != nil {
				t.Fatal(err)
			}
			setShareGroupConfigs(t, brokers, group, map[string]string{"share.record.lock.duration.ms": "1000"})
			return brokers
		}})
	}
	for _, tg := range targets {
		t.Run(tg.name, func(t *testing.T) {
			topic := fmt.Sprintf("share-backoff-%d", time.Now().UnixNano())
			group := topic + "-g"
			brokers := tg.setup(t, topic, group)
			cl, err := kgo.NewClient(kgo.SeedBrokers(brokers...), kgo.DefaultProduceTopic(topic))
			if err != nil {
				t.Fatal(err)
			}
			defer cl.Close()
			ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
			defer cancel()
			for i := range 20 {
				if err := cl.ProduceSync(ctx, kgo.StringRecord(fmt.Sprint(i))).FirstErr(); err != nil {
					t.Fatal(err)
				}
			}
			const backoff = 2500 * time.Millisecond
			var (
				mu    sync.Mutex
				times = map[int64][]time.Time{}
			)
			proc, err := stream.NewProcessor(stream.PerRecord(func(_ context.Context, r *stream.Record) error {
				mu.Lock()
				defer mu.Unlock()
				times[r.Offset] = append(times[r.Offset], time.Now())
				if r.Offset == 3 && len(times[r.Offset]) == 1 {
					return errors.New("later")
				}
				return nil
			}), stream.WithPolicy(checkpoint.Policy{MaxRetries: 2, Backoff: checkpoint.Fixed(backoff)}))
			if err != nil {
				t.Fatal(err)
			}
			var hist streamtest.ShareHistory
			c, err := share.New(proc, share.WithKgoOptions(kgo.SeedBrokers(brokers...), kgo.ShareGroup(group), kgo.ConsumeTopics(topic), kgo.FetchMaxWait(100*time.Millisecond)),
				share.WithResetEarliest(), share.WithEvents(func(e share.Event) { hist.Add(toShareEvent(e)) }))
			if err != nil {
				t.Fatal(err)
			}
			rctx, stop := context.WithCancel(ctx)
			done := make(chan error, 1)
			go func() { done <- c.Run(rctx) }()
			for {
				mu.Lock()
				ok := len(times) == 20 && len(times[3]) == 2
				mu.Unlock()
				if ok {
					break
				}
				if ctx.Err() != nil {
					t.Fatalf("timed out: %d records handled", len(times))
				}
				time.Sleep(20 * time.Millisecond)
			}
			stop()
			<-done
			gap := times[3][1].Sub(times[3][0])
			if gap < backoff {
				t.Errorf("offset 3 came back after %v, before its backoff of %v", gap, backoff)
			}
			t.Logf("offset 3 came back after %v (backoff %v, lateness %v)", gap, backoff, gap-backoff)
			for off, ts := range times {
				if off != 3 && ts[0].After(times[3][1]) {
					t.Errorf("offset %d was handled after offset 3's retry", off)
				}
			}
			r := hist.Check(map[streamtest.TopicPartition]int64{{Topic: topic, Partition: 0}: 20})
			for _, v := range r.Violations {
				t.Error(v)
			}
			for _, e := range hist.Events() {
				if e.Kind == streamtest.ShareAcquired && e.DeliveryCount != 1 {
					t.Errorf("offset %d acquired with delivery count %d: the broker handed it out again (lock not renewed?)", e.Offset, e.DeliveryCount)
				}
			}
		})
	}
}

// A per-record handler in a share group whose records each fail once
// under a policy of one retry: nothing is given up but the one poison
// record, whose dead letter counts its own deliveries (2, in memory: the
// broker counted 1), on kfake and, when REDELIVER_KAFKA_BROKERS is set,
// on the real broker.
func TestShareRecordsCountTheirOwnDeliveries(t *testing.T) {
	type target struct {
		name  string
		setup func(t *testing.T, topic, dlq string) []string
	}
	targets := []target{{"kfake", func(t *testing.T, topic, dlq string) []string {
		c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(2, topic), kfake.SeedTopics(1, dlq))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(c.Close)
		return c.ListenAddrs()
	}}}
	if b := os.Getenv("REDELIVER_KAFKA_BROKERS"); b != "" {
		targets = append(targets, target{"broker", func(t *testing.T, topic, dlq string) []string {
			brokers := strings.Split(b, ",")
			cl, err := kgo.NewClient(kgo.SeedBrokers(brokers...))
			if err != nil {
				t.Fatal(err)
			}
			defer cl.Close()
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			adm := kadm.NewClient(cl)
			if _, err := adm.CreateTopic(ctx, 2, 1, nil, topic); err != nil {
				t.Fatal(err)
			}
			if _, err := adm.CreateTopic(ctx, 1, 1, nil, dlq); err != nil {
				t.Fatal(err)
			}
			return brokers
		}})
	}
	for _, tg := range targets {
		t.Run(tg.name, func(t *testing.T) {
			topic := fmt.Sprintf("share-records-%d", time.Now().UnixNano())
			group, dlq := topic+"-g", topic+"-dlq"
			brokers := tg.setup(t, topic, dlq)
			const perPartition = 30
			produceShare(t, brokers, topic, perPartition)
			pcl, err := kgo.NewClient(kgo.SeedBrokers(brokers...))
			if err != nil {
				t.Fatal(err)
			}
			defer pcl.Close()
			pub, err := franz.NewPublisher(pcl)
			if err != nil {
				t.Fatal(err)
			}
			dl, err := stream.DeadLetter(pub, dlq)
			if err != nil {
				t.Fatal(err)
			}
			var (
				mu    sync.Mutex
				calls = map[[2]int64]int{}
				first time.Time
			)
			proc, err := stream.NewProcessor(stream.PerRecord(func(_ context.Context, r *stream.Record) error {
				mu.Lock()
				defer mu.Unlock()
				k := [2]int64{int64(r.Partition), r.Offset}
				calls[k]++
				switch {
				case k == [2]int64{0, 7}:
					if calls[k] == 1 {
						first = time.Now()
					}
					return errors.New("poison")
				case calls[k] == 1:
					return errors.New("once")
				}
				return nil
			}), stream.WithPolicy(checkpoint.Policy{MaxRetries: 1, Backoff: checkpoint.Fixed(100 * time.Millisecond)}),
				stream.WithExhaustionAction(dl))
			if err != nil {
				t.Fatal(err)
			}
			var hist streamtest.ShareHistory
			c, err := share.New(proc, share.WithKgoOptions(kgo.SeedBrokers(brokers...), kgo.ShareGroup(group), kgo.ConsumeTopics(topic), kgo.FetchMaxWait(100*time.Millisecond)),
				share.WithResetEarliest(), share.WithEvents(func(e share.Event) { hist.Add(toShareEvent(e)) }))
			if err != nil {
				t.Fatal(err)
			}
			ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
			defer cancel()
			rctx, stop := context.WithCancel(ctx)
			done := make(chan error, 1)
			go func() { done <- c.Run(rctx) }()
			dcl, err := kgo.NewClient(kgo.SeedBrokers(brokers...), kgo.ConsumeTopics(dlq), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
			if err != nil {
				t.Fatal(err)
			}
			defer dcl.Close()
			var got []*kgo.Record
			for len(got) == 0 && ctx.Err() == nil {
				got = append(got, dcl.PollFetches(ctx).Records()...)
			}
			for {
				mu.Lock()
				n := len(calls)
				mu.Unlock()
				r := hist.Check(map[streamtest.TopicPartition]int64{{Topic: topic, Partition: 0}: perPartition, {Topic: topic, Partition: 1}: perPartition})
				if n == 2*perPartition && r.Lost == 0 || ctx.Err() != nil {
					break
				}
				time.Sleep(50 * time.Millisecond)
			}
			stop()
			if err := <-done; err != nil {
				t.Fatal(err)
			}
			// Anything more would be in the topic by now: every record is done.
			pctx, pcancel := context.WithTimeout(ctx, 2*time.Second)
			got = append(got, dcl.PollFetches(pctx).Records()...)
			pcancel()
			r := hist.Check(map[streamtest.TopicPartition]int64{{Topic: topic, Partition: 0}: perPartition, {Topic: topic, Partition: 1}: perPartition})
			for _, v := range r.Violations {
				t.Error(v)
			}
			if len(got) != 1 {
				t.Fatalf("%d records dead-lettered, want the poison record alone: the others failed once under a policy of one retry", len(got))
			}
			hs := map[string]string{}
			for _, h := range got[0].Headers {
				hs[h.Key] = string(h.Value)
			}
			at, err := time.Parse(time.RFC3339Nano, hs[stream.HeaderFirstFailure])
			mu.Lock()
			firstCall := first
			mu.Unlock()
			if hs[stream.HeaderOffset] != "7" || hs[stream.HeaderDeliveries] != "2" || hs[stream.HeaderDLQDeliveryCount] != "2" ||
				hs[stream.HeaderError] != "poison" || err != nil || at.Before(firstCall) || at.Sub(firstCall) > time.Second {
				t.Fatalf("dead letter headers %v (first call at %v), want record 7 with its own 2 deliveries, first failure and error", hs, firstCall)
			}
		})
	}
}

// A record given up under MaxRetries 0 whose exhaustion action keeps
// failing until its consumer stops is released; the next consumer gets it
// with the broker's delivery count 2 and gives it up at once, to its
// action, without handing it to its handler (issue 47: the count a record
// comes back with goes through the engine's bound check). On kfake and,
// when REDELIVER_KAFKA_BROKERS is set, on the real broker.
func TestShareReacquiredRecordKeepsItsBound(t *testing.T) {
	type target struct {
		name  string
		setup func(t *testing.T, topic string) []string
	}
	targets := []target{{"kfake", func(t *testing.T, topic string) []string {
		c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(2, topic), kfake.BrokerConfigs(map[string]string{
			"group.share.heartbeat.interval.ms": "100",
		}))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(c.Close)
		return c.ListenAddrs()
	}}}
	if b := os.Getenv("REDELIVER_KAFKA_BROKERS"); b != "" {
		targets = append(targets, target{"broker", func(t *testing.T, topic string) []string {
			brokers := strings.Split(b, ",")
			cl, err := kgo.NewClient(kgo.SeedBrokers(brokers...))
			if err != nil {
				t.Fatal(err)
			}
			defer cl.Close()
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			if _, err := kadm.NewClient(cl).CreateTopic(ctx, 2, 1, nil, topic); err != nil {
				t.Fatal(err)
			}
			return brokers
		}})
	}
	for _, tg := range targets {
		t.Run(tg.name, func(t *testing.T) {
			topic := fmt.Sprintf("share-bound-%d", time.Now().UnixNano())
			group := topic + "-g"
			brokers := tg.setup(t, topic)
			const perPartition = 5
			produceShare(t, brokers, topic, perPartition)
			var (
				mu     sync.Mutex
				calls  = map[[2]int64]int{}
				givenB = map[[2]int64]checkpoint.Reason{}
				triedA atomic.Int32
			)
			consumer := func(name string, action stream.ExhaustionAction) (stop func()) {
				proc, err := stream.NewProcessor(stream.PerRecord(func(_ context.Context, r *stream.Record) error {
					mu.Lock()
					defer mu.Unlock()
					k := [2]int64{int64(r.Partition), r.Offset}
					calls[k]++
					if k == [2]int64{1, 3} {
						return errors.New("poison")
					}
					return nil
				}), stream.WithExhaustionAction(action), stream.WithOperationBackoff(checkpoint.Fixed(50*time.Millisecond)))
				if err != nil {
					t.Fatal(err)
				}
				c, err := share.New(proc, share.WithKgoOptions(kgo.SeedBrokers(brokers...), kgo.ShareGroup(group), kgo.ConsumeTopics(topic), kgo.FetchMaxWait(100*time.Millisecond)),
					share.WithResetEarliest(), share.WithMember(name))
				if err != nil {
					t.Fatal(err)
				}
				ctx, cancel := context.WithCancel(context.Background())
				done := make(chan error, 1)
				go func() { done <- c.Run(ctx) }()
				return func() {
					cancel()
					select {
					case err := <-done:
						if err != nil {
							t.Error(err)
						}
					case <-time.After(30 * time.Second):
						t.Error("Run did not return")
					}
				}
			}
			waitUntil := func(what string, cond func() bool) {
				t.Helper()
				deadline := time.Now().Add(60 * time.Second)
				for !cond() {
					if time.Now().After(deadline) {
						t.Fatalf("timed out waiting for %s", what)
					}
					time.Sleep(20 * time.Millisecond)
				}
			}
			stopA := consumer("a", func(context.Context, *stream.Batch, *checkpoint.ExhaustedError) error {
				triedA.Add(1)
				return errors.New("dead letter topic unreachable")
			})
			waitUntil("A's action tried and every record handled", func() bool {
				mu.Lock()
				defer mu.Unlock()
				return triedA.Load() > 0 && len(calls) == 2*perPartition
			})
			stopA()
			stopB := consumer("b", func(_ context.Context, b *stream.Batch, xerr *checkpoint.ExhaustedError) error {
				mu.Lock()
				defer mu.Unlock()
				givenB[[2]int64{int64(b.Partition), b.FirstOffset()}] = xerr.Reason
				return nil
			})
			defer stopB()
			waitUntil("B's action", func() bool {
				mu.Lock()
				defer mu.Unlock()
				return len(givenB) > 0
			})
			mu.Lock()
			defer mu.Unlock()
			if n := calls[[2]int64{1, 3}]; n != 1 {
				t.Errorf("the poison record was handed to a handler %d times, want once (MaxRetries 0)", n)
			}
			if len(givenB) != 1 || givenB[[2]int64{1, 3}] != checkpoint.RetriesSpent {
				t.Errorf("B gave up %v, want record 1/3 with retries spent", givenB)
			}
		})
	}
}
