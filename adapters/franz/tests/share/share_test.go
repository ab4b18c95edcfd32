package share_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/redeliver-go/redeliver/adapters/franz"
	"github.com/redeliver-go/redeliver/adapters/franz/share"
	"github.com/redeliver-go/redeliver/adapters/internal/kafkatest"
	"github.com/redeliver-go/redeliver/checkpoint"
	"github.com/redeliver-go/redeliver/stream"
	"github.com/redeliver-go/redeliver/stream/streamtest"
)

const wait = kafkatest.Wait

// cluster starts kfake with one topic and short share-group locks: lock
// seconds, swept every 50ms.
func cluster(t *testing.T, topic string, partitions int32, lock time.Duration, limit int, opts ...kfake.Opt) []string {
	t.Helper()
	_, addrs := kafkatest.NewCluster(t, topic, partitions, append(opts, kfake.BrokerConfigs(map[string]string{
		"group.share.record.lock.duration.ms": fmt.Sprint(lock.Milliseconds()),
		"share.record.lock.sweep.interval.ms": "50",
		"group.share.delivery.count.limit":    fmt.Sprint(limit),
		"group.share.heartbeat.interval.ms":   "100",
	}))...)
	return addrs
}

// delivery is one record handed to the handler.
type delivery struct {
	offset    int64
	partition int32
	at        time.Time
	retry     int
	value     string
}

// log records deliveries and the records that were accepted.
type log struct {
	mu         sync.Mutex
	deliveries []delivery
}

func (l *log) add(d delivery) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.deliveries = append(l.deliveries, d)
}

func (l *log) snapshot() []delivery {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]delivery(nil), l.deliveries...)
}

// run starts a share consumer over proc and stops it at the end of the test.
func run(t *testing.T, addrs []string, group, topic string, proc *stream.Processor, opts ...share.Option) (stop func() error) {
	t.Helper()
	kopts := []kgo.Opt{kgo.SeedBrokers(addrs...), kgo.ShareGroup(group), kgo.ConsumeTopics(topic), kgo.FetchMaxWait(100 * time.Millisecond)}
	first := []share.Option{share.WithKgoOptions(kopts...), share.WithResetEarliest()}
	if testing.Verbose() {
		// Before opts: a test's own logger wins.
		first = append(first, share.WithLogger(slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug}))))
	}
	opts = append(first, opts...)
	c, err := share.New(proc, opts...)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- c.Run(ctx) }()
	var once sync.Once
	var rerr error
	stop = func() error {
		once.Do(func() {
			cancel()
			select {
			case rerr = <-done:
			case <-time.After(wait):
				rerr = errors.New("Run did not return")
			}
		})
		return rerr
	}
	t.Cleanup(func() { _ = stop() })
	return stop
}

// recordTo feeds the consumer's events to h.
func recordTo(h *streamtest.ShareHistory, member string) []share.Option {
	kinds := map[share.EventKind]streamtest.ShareKind{
		share.Acquired: streamtest.ShareAcquired, share.Handled: streamtest.ShareHandled, share.Held: streamtest.ShareRetryAt,
		share.ActionDone: streamtest.ShareActionDone, share.Accepted: streamtest.ShareAccepted,
		share.Rejected: streamtest.ShareRejected, share.Released: streamtest.ShareReleased,
	}
	return []share.Option{share.WithMember(member), share.WithEvents(func(e share.Event) {
		h.Add(streamtest.ShareEvent{Kind: kinds[e.Kind], Member: e.Member, Topic: e.Topic, Partition: e.Partition,
			Offset: e.Offset, DeliveryCount: e.DeliveryCount, OK: e.OK, Start: e.Start, At: e.At})
	})}
}

// checkHistory runs the share-history checker and fails on a violation.
func checkHistory(t *testing.T, h *streamtest.ShareHistory, ends map[streamtest.TopicPartition]int64) streamtest.ShareReport {
	t.Helper()
	r := h.Check(ends)
	for _, v := range r.Violations {
		t.Error(v)
	}
	if len(r.Violations) > 0 {
		for i, e := range h.Events() {
			t.Logf("event %d: %s %v %s/%d@%d count %d ok %v", i, e.Member, e.Kind, e.Topic, e.Partition, e.Offset, e.DeliveryCount, e.OK)
		}
	}
	t.Logf("history: %d records, %d deliveries, max %d per record, %d lost, %d duplicates", r.Records, r.Deliveries, r.MaxDeliveries, r.Lost, r.Duplicates)
	return r
}

// waitFor polls cond until it holds or the test's wait runs out.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(wait)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// The backoff holds: a failed record comes back no earlier than its due
// time, its lock renewed meanwhile (the broker's delivery count stays 1, so
// it never went back to the broker, although the backoff is longer than the
// lock), and records behind it on the same partition are handled while it
// waits.
func TestBackoffHeldWithRenewalWhileOthersFlow(t *testing.T) {
	const topic, group = "orders", "g"
	const lock = time.Second
	const backoff = 2500 * time.Millisecond
	addrs := cluster(t, topic, 1, lock, 5)
	kafkatest.Produce(t, addrs, topic, 0, 0, 10)

	var l log
	var mu sync.Mutex
	counts := map[int64]int32{}
	proc, err := stream.NewProcessor(stream.PerRecord(func(ctx context.Context, r *stream.Record) error {
		l.add(delivery{offset: r.Offset, at: time.Now(), value: string(r.Value)})
		if r.Offset == 3 {
			mu.Lock()
			counts[r.Offset]++
			n := counts[r.Offset]
			mu.Unlock()
			if n <= 2 {
				return fmt.Errorf("downstream refused %d", n)
			}
		}
		return nil
	}), stream.WithPolicy(checkpoint.Policy{MaxRetries: 5, Backoff: checkpoint.Fixed(backoff)}))
	if err != nil {
		t.Fatal(err)
	}
	var h streamtest.ShareHistory
	stop := run(t, addrs, group, topic, proc, recordTo(&h, "a")...)

	// Once offset 3 failed for the first time, produce more: they must be
	// handled before its first retry is due.
	waitFor(t, "the first failure", func() bool {
		for _, d := range l.snapshot() {
			if d.offset == 3 {
				return true
			}
		}
		return false
	})
	kafkatest.Produce(t, addrs, topic, 0, 10, 10)
	waitFor(t, "all 20 records handled", func() bool {
		seen := map[int64]bool{}
		for _, d := range l.snapshot() {
			seen[d.offset] = true
		}
		mu.Lock()
		defer mu.Unlock()
		return len(seen) == 20 && counts[3] == 3
	})

	var tries []time.Time
	var laterDone time.Time
	for _, d := range l.snapshot() {
		switch {
		case d.offset == 3:
			tries = append(tries, d.at)
		case d.offset >= 10 && d.at.After(laterDone):
			laterDone = d.at
		}
	}
	if len(tries) != 3 {
		t.Fatalf("offset 3 delivered %d times, want 3", len(tries))
	}
	for i := 1; i < len(tries); i++ {
		gap := tries[i].Sub(tries[i-1])
		if gap < backoff {
			t.Errorf("retry %d came %v after the previous delivery, before its backoff of %v", i, gap, backoff)
		}
		t.Logf("retry %d: %v after the previous delivery (backoff %v, lateness %v)", i, gap, backoff, gap-backoff)
	}
	if !laterDone.Before(tries[1]) {
		t.Errorf("the records produced after the failure were done at %v, not before the retry at %v", laterDone, tries[1])
	}
	// Every record once, but offset 3: nothing was redelivered by the
	// broker (its locks were renewed and every success accepted).
	n := map[int64]int{}
	for _, d := range l.snapshot() {
		n[d.offset]++
	}
	for off, c := range n {
		if off != 3 && c != 1 {
			t.Errorf("offset %d delivered %d times, want 1", off, c)
		}
	}
	_ = stop()
	if r := checkHistory(t, &h, map[streamtest.TopicPartition]int64{{Topic: topic, Partition: 0}: 20}); r.MaxDeliveries != 3 {
		t.Errorf("at most %d deliveries of a record, want 3", r.MaxDeliveries)
	}
}

// consumeAll reads every record of topic from the start with a plain
// consumer, until it has n or the wait runs out.
func consumeAll(t *testing.T, addrs []string, topic string, n int) []*kgo.Record {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(addrs...), kgo.ConsumeTopics(topic), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), wait)
	defer cancel()
	var out []*kgo.Record
	for len(out) < n && ctx.Err() == nil {
		cl.PollFetches(ctx).EachRecord(func(r *kgo.Record) { out = append(out, r) })
	}
	return out
}

// A record the handler rejects for good (Permanent) and one whose retries
// are spent go to the dead-letter topic with KIP-1191's headers and a
// reason, once each; the others are accepted at once, and nothing comes
// back from the broker (the given-up records were rejected after the
// produce was acknowledged).
func TestExhaustionToDeadLetterTopic(t *testing.T) {
	const topic, group, dlq = "orders", "billing", "orders.dlq"
	addrs := cluster(t, topic, 2, time.Second, 5, kfake.SeedTopics(1, dlq))
	pubcl, err := kgo.NewClient(kgo.SeedBrokers(addrs...))
	if err != nil {
		t.Fatal(err)
	}
	defer pubcl.Close()
	fp, err := franz.NewPublisher(pubcl)
	if err != nil {
		t.Fatal(err)
	}
	// The first three produces fail: the given-up records are held, not
	// rejected, until the produce succeeds.
	pub := &flaky{p: fp, fail: 3}
	kafkatest.Produce(t, addrs, topic, 0, 0, 5)
	kafkatest.Produce(t, addrs, topic, 1, 0, 5)

	var l log
	proc, err := stream.NewProcessor(stream.PerRecord(func(ctx context.Context, r *stream.Record) error {
		l.add(delivery{offset: r.Offset, partition: r.Partition, at: time.Now()})
		switch {
		case r.Partition == 0 && r.Offset == 2:
			return checkpoint.Permanent(errors.New("schema mismatch"))
		case r.Partition == 1 && r.Offset == 4:
			return errors.New("timeout")
		}
		return nil
	}), stream.WithPolicy(checkpoint.Policy{MaxRetries: 2, Backoff: checkpoint.Fixed(100 * time.Millisecond)}),
		stream.WithExhaustionAction(mustDeadLetter(pub, dlq)))
	if err != nil {
		t.Fatal(err)
	}
	var h streamtest.ShareHistory
	stop := run(t, addrs, group, topic, proc, recordTo(&h, "a")...)
	got := consumeAll(t, addrs, dlq, 2)
	if len(got) != 2 {
		t.Fatalf("%d dead-lettered records, want 2", len(got))
	}
	byOffset := map[string]map[string]string{}
	for _, r := range got {
		h := map[string]string{}
		for _, x := range r.Headers {
			h[x.Key] = string(x.Value)
		}
		byOffset[h[stream.HeaderDLQPartition]+"/"+h[stream.HeaderDLQOffset]] = h
	}
	for key, want := range map[string]map[string]string{
		"0/2": {stream.HeaderDLQTopic: topic, stream.HeaderDLQGroup: group, stream.HeaderDLQDeliveryCount: "1", stream.HeaderDeliveries: "1"},
		// Held in memory for its retries: the broker counted one
		// delivery, the record had three.
		"1/4": {stream.HeaderDLQTopic: topic, stream.HeaderDLQGroup: group, stream.HeaderDLQDeliveryCount: "3", stream.HeaderDeliveries: "3"},
	} {
		h, ok := byOffset[key]
		if !ok {
			t.Fatalf("no dead-lettered record for %s among %v", key, byOffset)
		}
		for k, v := range want {
			if h[k] != v {
				t.Errorf("%s: header %s = %q, want %q", key, k, h[k], v)
			}
		}
		if h[stream.HeaderDLQMessage] == "" {
			t.Errorf("%s: no reason in %s", key, stream.HeaderDLQMessage)
		}
	}
	// Let the broker time out any lock that was not acknowledged: a record
	// not rejected or accepted would come back with a delivery count of 2.
	time.Sleep(1500 * time.Millisecond) //nolint:forbidigo // a real broker's lock has to run out
	if err := stop(); err != nil {
		t.Fatalf("Run returned %v, want nil after a clean shutdown", err)
	}
	n := map[string]int{}
	for _, d := range l.snapshot() {
		n[fmt.Sprintf("%d/%d", d.partition, d.offset)]++
	}
	for k, c := range n {
		want := 1
		if k == "1/4" {
			want = 3
		}
		if c != want {
			t.Errorf("%s delivered %d times, want %d", k, c, want)
		}
	}
	if len(n) != 10 {
		t.Errorf("%d records delivered, want 10", len(n))
	}
	checkHistory(t, &h, map[streamtest.TopicPartition]int64{{Topic: topic, Partition: 0}: 5, {Topic: topic, Partition: 1}: 5})
}

// flaky fails its first fail publishes.
type flaky struct {
	mu   sync.Mutex
	p    stream.Publisher
	fail int
}

func (f *flaky) Publish(ctx context.Context, topic string, recs []stream.Record) error {
	f.mu.Lock()
	fail := f.fail > 0
	f.fail--
	f.mu.Unlock()
	if fail {
		return errors.New("broker unreachable")
	}
	return f.p.Publish(ctx, topic, recs)
}

// FailedAt(i, err): the records before i are accepted, the one at i is
// retried alone, and the ones after it are delivered again at once.
func TestFailedAtRetriesOnlyTheFailedRecord(t *testing.T) {
	const topic, group = "orders", "g"
	addrs := cluster(t, topic, 1, time.Second, 5)
	kafkatest.Produce(t, addrs, topic, 0, 0, 6)
	var l log
	var mu sync.Mutex
	failed := false
	proc, err := stream.NewProcessor(stream.HandlerFunc(func(ctx context.Context, b *stream.Batch) error {
		for i, r := range b.Records {
			l.add(delivery{offset: r.Offset, at: time.Now(), retry: b.Attempt.Retries})
			mu.Lock()
			first := r.Offset == 2 && !failed
			if first {
				failed = true
			}
			mu.Unlock()
			if first {
				return stream.FailedAt(i, errors.New("busy"))
			}
		}
		return nil
	}), stream.WithPolicy(checkpoint.Policy{MaxRetries: 3, Backoff: checkpoint.Fixed(300 * time.Millisecond)}))
	if err != nil {
		t.Fatal(err)
	}
	run(t, addrs, group, topic, proc, share.WithLanes(1))
	waitFor(t, "all six records handled, offset 2 twice", func() bool {
		n := map[int64]int{}
		for _, d := range l.snapshot() {
			n[d.offset]++
		}
		return len(n) == 6 && n[2] == 2
	})
	n := map[int64]int{}
	var retry int
	for _, d := range l.snapshot() {
		n[d.offset]++
		if d.offset == 2 && d.retry > 0 {
			retry = d.retry
		}
	}
	for off, c := range n {
		if want := map[bool]int{true: 2, false: 1}[off == 2]; c != want {
			t.Errorf("offset %d delivered %d times, want %d", off, c, want)
		}
	}
	if retry != 1 {
		t.Errorf("offset 2's second delivery has Attempt.Retries %d, want 1", retry)
	}
}

// Shutdown with a record in a handler (offset 2) and one held in backoff
// (offset 0): neither is
// accepted; the broker gives both to the next member, with a delivery count
// of 2, and the first retry counts that delivery (so the next member's
// policy must allow a retry: under MaxRetries 0 it gives them up).
func TestShutdownReleasesRecordsInFlight(t *testing.T) {
	const topic, group = "orders", "g"
	addrs := cluster(t, topic, 1, 5*time.Second, 5)
	kafkatest.Produce(t, addrs, topic, 0, 0, 3)
	entered := make(chan struct{}, 3)
	var l log
	proc, err := stream.NewProcessor(stream.PerRecord(func(ctx context.Context, r *stream.Record) error {
		l.add(delivery{offset: r.Offset, at: time.Now()})
		switch r.Offset {
		case 0:
			return errors.New("later") // held in backoff
		case 2:
			entered <- struct{}{}
			<-ctx.Done() // in the handler at shutdown
			return nil   // returns nil after cancellation: still not accepted
		}
		return nil
	}), stream.WithPolicy(checkpoint.Policy{MaxRetries: 3, Backoff: checkpoint.Fixed(time.Minute)}))
	if err != nil {
		t.Fatal(err)
	}
	stop := run(t, addrs, group, topic, proc, share.WithLanes(1), share.WithDrain(shortDrain))
	select {
	case <-entered:
	case <-time.After(wait):
		t.Fatal("the handler never got offset 2")
	}
	begin := time.Now()
	if err := stop(); err != nil {
		t.Fatalf("Run returned %v, want nil after a clean shutdown", err)
	}
	if d := time.Since(begin); d > time.Second {
		t.Errorf("shutdown took %v, want under 1s", d)
	}

	// The next member gets offsets 0 and 2 again (1 was accepted).
	var again log
	proc2, err := stream.NewProcessor(stream.HandlerFunc(func(ctx context.Context, b *stream.Batch) error {
		for _, r := range b.Records {
			again.add(delivery{offset: r.Offset, retry: b.Attempt.Retries})
		}
		return nil
	}), stream.WithPolicy(checkpoint.Policy{MaxRetries: 3, Backoff: checkpoint.Fixed(time.Minute)}))
	if err != nil {
		t.Fatal(err)
	}
	run(t, addrs, group, topic, proc2, share.WithLanes(1))
	waitFor(t, "offsets 0 and 2 delivered again", func() bool { return len(again.snapshot()) >= 2 })
	time.Sleep(300 * time.Millisecond) //nolint:forbidigo // would offset 1 come back too?
	got := map[int64]int{}
	for _, d := range again.snapshot() {
		got[d.offset] = d.retry
	}
	if len(got) != 2 || got[0] != 1 || got[2] != 1 {
		t.Fatalf("redelivered %v (offset -> Attempt.Retries), want 0 and 2 with Retry 1 (broker delivery count 2)", got)
	}
}

// Renewals refused: a handler that runs past its record's lock has its
// context cancelled and the record is not acknowledged by this consumer
// (the broker gives it out again); once the consumer knows renewals are
// refused, a retry due after the record's lock runs out is released to the
// broker at once, which delivers it again at once, instead of being held.
func TestLockLostWhenRenewalRefused(t *testing.T) {
	const topic, group = "orders", "g"
	c, addrs := kafkatest.NewCluster(t, topic, 1, kfake.BrokerConfigs(map[string]string{
		"group.share.record.lock.duration.ms": "1000",
		"share.record.lock.sweep.interval.ms": "50",
		"group.share.heartbeat.interval.ms":   "100",
	}))
	c.ControlKey(kmsg.ShareAcknowledge.Int16(), func(r kmsg.Request) (kmsg.Response, error, bool) {
		c.KeepControl()
		req := r.(*kmsg.ShareAcknowledgeRequest)
		if !req.IsRenewAck {
			return nil, nil, false
		}
		resp := req.ResponseKind().(*kmsg.ShareAcknowledgeResponse)
		for _, rt := range req.Topics {
			st := kmsg.NewShareAcknowledgeResponseTopic()
			st.TopicID = rt.TopicID
			for _, rp := range rt.Partitions {
				sp := kmsg.NewShareAcknowledgeResponseTopicPartition()
				sp.Partition = rp.Partition
				sp.ErrorCode = kerr.InvalidRequest.Code
				st.Partitions = append(st.Partitions, sp)
			}
			resp.Topics = append(resp.Topics, st)
		}
		return resp, nil, true
	})
	kafkatest.Produce(t, addrs, topic, 0, 0, 2)

	var l log
	cancelled := make(chan struct{}, 1)
	var mu sync.Mutex
	seen := map[int64]int{}
	proc, err := stream.NewProcessor(stream.PerRecord(func(ctx context.Context, r *stream.Record) error {
		mu.Lock()
		seen[r.Offset]++
		n := seen[r.Offset]
		mu.Unlock()
		l.add(delivery{offset: r.Offset, at: time.Now(), retry: n})
		if r.Offset != 1 {
			return nil
		}
		switch n {
		case 1:
			select {
			case <-ctx.Done():
				cancelled <- struct{}{}
				return nil // too late: not accepted
			case <-time.After(wait):
				return nil
			}
		case 2:
			return errors.New("come back in 5s")
		}
		return nil
	}), stream.WithPolicy(checkpoint.Policy{MaxRetries: 3, Backoff: checkpoint.Fixed(5 * time.Second)}))
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	run(t, addrs, group, topic, proc, share.WithLanes(1))
	select {
	case <-cancelled:
		if d := time.Since(start); d > 3*time.Second {
			t.Errorf("the handler was cancelled after %v, want within about the 1s lock", d)
		}
	case <-time.After(wait):
		t.Fatal("the handler's context was never cancelled")
	}
	waitFor(t, "offset 1 delivered three times", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return seen[1] == 3
	})
	var at [4]time.Time
	for _, d := range l.snapshot() {
		if d.offset == 1 {
			at[d.retry] = d.at
		}
	}
	if gap := at[3].Sub(at[2]); gap >= 5*time.Second {
		t.Errorf("offset 1 came back %v after its failure: held although its lock could not be renewed", gap)
	}
	mu.Lock()
	defer mu.Unlock()
	if seen[0] != 1 {
		t.Errorf("offset 0 delivered %d times, want 1", seen[0])
	}
}

func mustDeadLetter(pub stream.Publisher, topic string) stream.ExhaustionAction {
	dl, err := stream.DeadLetter(pub, topic)
	if err != nil {
		panic(err)
	}
	return dl
}

// A poll whose records go to several handler calls sends its
// acknowledgements with the next fetch, not in a round trip of their own
// after each call: a ShareAcknowledge request per call cost a broker round
// trip each, and held the lane's next poll back by as many.
func TestAcknowledgementsRideTheNextFetch(t *testing.T) {
	const topic, group = "orders", "g"
	c, addrs := kafkatest.NewCluster(t, topic, 1, kfake.BrokerConfigs(map[string]string{
		"group.share.record.lock.duration.ms": "30000",
		"group.share.heartbeat.interval.ms":   "100",
	}))
	var acks, fetches atomic.Int64 // requests from members
	c.ControlKey(int16(kmsg.ShareAcknowledge), func(req kmsg.Request) (kmsg.Response, error, bool) {
		c.KeepControl()
		if r := req.(*kmsg.ShareAcknowledgeRequest); r.MemberID != nil {
			acks.Add(1)
		}
		return nil, nil, false
	})
	c.ControlKey(int16(kmsg.ShareFetch), func(req kmsg.Request) (kmsg.Response, error, bool) {
		c.KeepControl()
		if r := req.(*kmsg.ShareFetchRequest); r.MemberID != nil {
			fetches.Add(1)
		}
		return nil, nil, false
	})
	kafkatest.Produce(t, addrs, topic, 0, 0, 20)
	var mu sync.Mutex
	accepted := 0
	proc, err := stream.NewProcessor(stream.HandlerFunc(func(context.Context, *stream.Batch) error { return nil }))
	if err != nil {
		t.Fatal(err)
	}
	run(t, addrs, group, topic, proc, share.WithLanes(1), share.WithMaxBatch(2), share.WithEvents(func(e share.Event) {
		if e.Kind == share.Accepted {
			mu.Lock()
			accepted++
			mu.Unlock()
		}
	}))
	waitFor(t, "20 records accepted", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return accepted == 20
	})
	if n := acks.Load(); n != 0 {
		t.Errorf("%d ShareAcknowledge requests while the lane handled a poll in 10 calls, want none: the acknowledgements go with the next fetch", n)
	}
	if fetches.Load() == 0 {
		t.Error("no ShareFetch seen: the test counts nothing")
	}
}
