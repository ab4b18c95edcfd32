// Command sharegroup runs redeliver on a Kafka share group (KIP-932,
// "queues for Kafka") through franz-go, on an embedded, in-process Kafka
// (kfake).
//
// It produces 200 records to one partition, then consumes them through the
// share consumer (adapters/franz/share) with a policy of 3 retries, 1.5s
// apart: longer than the group's 1s record lock, so the consumer renews the
// locks of the records it holds. The downstream refuses record 20 twice,
// and record 50 is poison (a Permanent error): it goes to a dead-letter
// topic with KIP-1191's headers. The other records flow while record 20
// waits: they are all done before its first retry.
//
// At the end the program checks itself: every good record handled once,
// record 20 three times with at least the backoff between deliveries,
// record 50 once and dead-lettered with its headers. It exits non-zero when
// a check fails.
package main

import (
	"bytes"
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/redeliver-go/redeliver/adapters/franz"
	"github.com/redeliver-go/redeliver/adapters/franz/share"
	"github.com/redeliver-go/redeliver/checkpoint"
	"github.com/redeliver-go/redeliver/stream"
)

const (
	topic, dlq, group = "orders", "orders.dlq", "billing"
	records           = 200
	flaky, poison     = 20, 50
	backoff           = 1500 * time.Millisecond
)

func main() {
	timeout := flag.Duration("timeout", 60*time.Second, "give up after this long")
	flag.Parse()
	ctx, cancel := context.WithTimeout(context.Background(), *timeout)
	defer cancel()
	if err := run(ctx); err != nil {
		fmt.Fprintln(os.Stderr, "sharegroup:", err)
		os.Exit(1)
	}
	fmt.Println("sharegroup: ok")
}

func run(ctx context.Context) error {
	cluster, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(1, topic, dlq), kfake.BrokerConfigs(map[string]string{
		"group.share.record.lock.duration.ms": "1000", // short, to show the renewals
		"share.record.lock.sweep.interval.ms": "100",
	}))
	if err != nil {
		return err
	}
	defer cluster.Close()
	seeds := cluster.ListenAddrs()

	cl, err := kgo.NewClient(kgo.SeedBrokers(seeds...), kgo.DefaultProduceTopic(topic))
	if err != nil {
		return err
	}
	defer cl.Close()
	recs := make([]*kgo.Record, records)
	for i := range recs {
		recs[i] = kgo.StringRecord(fmt.Sprintf("order-%d", i))
	}
	if err := cl.ProduceSync(ctx, recs...).FirstErr(); err != nil {
		return err
	}
	pub, err := franz.NewPublisher(cl)
	if err != nil {
		return err
	}

	tl := &timeline{start: time.Now(), deliveries: map[int64][]time.Duration{}}
	handle := func(_ context.Context, r *stream.Record) error {
		n := tl.delivered(r.Offset)
		switch {
		case r.Offset == flaky && n <= 2:
			tl.printf("record %d: downstream busy (delivery %d), retry in %v", r.Offset, n, backoff)
			return errors.New("downstream busy")
		case r.Offset == poison:
			tl.printf("record %d: poison, to the dead-letter topic", r.Offset)
			return checkpoint.Permanent(errors.New("cannot parse order"))
		case r.Offset == flaky:
			tl.printf("record %d: done on delivery %d", r.Offset, n)
		}
		return nil
	}
	dl, err := stream.DeadLetter(pub, dlq)
	if err != nil {
		return err
	}
	proc, err := stream.NewProcessor(stream.PerRecord(handle),
		stream.WithPolicy(checkpoint.Policy{MaxRetries: 3, Backoff: checkpoint.Fixed(backoff)}),
		stream.WithExhaustionAction(dl), stream.WithLogger(tl.logger()))
	if err != nil {
		return err
	}
	consumer, err := share.New(proc,
		share.WithKgoOptions(kgo.SeedBrokers(seeds...), kgo.ShareGroup(group), kgo.ConsumeTopics(topic), kgo.FetchMaxWait(100*time.Millisecond)),
		share.WithResetEarliest()) // the records were produced before the group first joined
	if err != nil {
		return err
	}
	rctx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- consumer.Run(rctx) }()

	// Wait until every record is handled, record 20 three times.
	for {
		tl.mu.Lock()
		handled, ready := len(tl.deliveries), len(tl.deliveries) == records && len(tl.deliveries[flaky]) == 3
		tl.mu.Unlock()
		if ready {
			break
		}
		select {
		case <-ctx.Done():
			stop()
			<-done
			return fmt.Errorf("timed out: %d of %d records handled", handled, records)
		case <-time.After(20 * time.Millisecond):
		}
	}
	stop()
	if err := <-done; err != nil { // nil after a clean shutdown
		return fmt.Errorf("consumer: %w", err)
	}
	// The consumer has stopped: what follows reads tl.deliveries alone.
	deliveries := tl.deliveries

	// Check.
	var problems []error
	var lastGood time.Duration
	for off, ds := range deliveries {
		switch off {
		case flaky:
			for i := 1; i < len(ds); i++ {
				if gap := ds[i] - ds[i-1]; gap < backoff {
					problems = append(problems, fmt.Errorf("record %d came back after %v, before its backoff of %v", off, gap, backoff))
				}
			}
		default:
			if len(ds) != 1 {
				problems = append(problems, fmt.Errorf("record %d handled %d times, want once", off, len(ds)))
			}
			lastGood = max(lastGood, ds[0])
		}
	}
	if first := deliveries[flaky][1]; lastGood >= first {
		problems = append(problems, fmt.Errorf("the other records were done at %v, not before record %d's first retry at %v", lastGood, flaky, first))
	}
	fmt.Printf("\nevery other record was done at %.2fs, while record %d waited for its first retry at %.2fs\n",
		lastGood.Seconds(), flaky, deliveries[flaky][1].Seconds())

	dctx, dcancel := context.WithTimeout(ctx, 10*time.Second)
	defer dcancel()
	rd, err := kgo.NewClient(kgo.SeedBrokers(seeds...), kgo.ConsumeTopics(dlq), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	if err != nil {
		return err
	}
	defer rd.Close()
	var dead []*kgo.Record
	for len(dead) < 1 && dctx.Err() == nil {
		dead = append(dead, rd.PollFetches(dctx).Records()...)
	}
	if len(dead) != 1 {
		problems = append(problems, fmt.Errorf("%d dead-lettered records, want 1", len(dead)))
	} else {
		h := map[string]string{}
		for _, x := range dead[0].Headers {
			h[x.Key] = string(x.Value)
		}
		fmt.Printf("dead letter: %s, headers %s=%s %s=%s %s=%s %s=%s %s=%q\n", dead[0].Value,
			stream.HeaderDLQTopic, h[stream.HeaderDLQTopic], stream.HeaderDLQOffset, h[stream.HeaderDLQOffset],
			stream.HeaderDLQGroup, h[stream.HeaderDLQGroup], stream.HeaderDLQDeliveryCount, h[stream.HeaderDLQDeliveryCount],
			stream.HeaderDLQMessage, h[stream.HeaderDLQMessage])
		if h[stream.HeaderDLQOffset] != fmt.Sprint(poison) || h[stream.HeaderDLQGroup] != group || h[stream.HeaderDLQTopic] != topic {
			problems = append(problems, fmt.Errorf("dead letter headers %v", h))
		}
	}
	return errors.Join(problems...)
}

// timeline counts each record's deliveries and prints the events, each
// line stamped with the time since the start under mu, so that lines come
// out in the order their stamps say, whichever lane prints them.
type timeline struct {
	start      time.Time
	mu         sync.Mutex
	deliveries map[int64][]time.Duration // by offset: when each delivery began
}

// delivered counts a delivery of the record at off and returns its number.
func (tl *timeline) delivered(off int64) int {
	tl.mu.Lock()
	defer tl.mu.Unlock()
	tl.deliveries[off] = append(tl.deliveries[off], time.Since(tl.start))
	return len(tl.deliveries[off])
}

func (tl *timeline) printf(format string, args ...any) {
	tl.mu.Lock()
	defer tl.mu.Unlock()
	fmt.Printf("%6.2fs  "+format+"\n", append([]any{time.Since(tl.start).Seconds()}, args...)...)
}

// logger returns a logger whose warnings and errors (the consumer's: a
// record given up) are lines of the timeline, stamped and printed in their
// place among the events.
func (tl *timeline) logger() *slog.Logger {
	return slog.New(slog.NewTextHandler(tl, &slog.HandlerOptions{
		Level: slog.LevelWarn,
		ReplaceAttr: func(groups []string, a slog.Attr) slog.Attr {
			if a.Key == slog.TimeKey && len(groups) == 0 {
				return slog.Attr{} // the timeline stamps the line
			}
			return a
		},
	}))
}

// Write prints a log line as a line of the timeline.
func (tl *timeline) Write(p []byte) (int, error) {
	tl.printf("%s", bytes.TrimRight(p, "\n"))
	return len(p), nil
}
