package tests

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/segmentio/kafka-go"

	"github.com/redeliver-go/redeliver/adapters/internal/kafkatest"
)

// The throughput benchmarks run the shared harness (kafkatest.RunLeaves):
// the Processor and this adapter ("redeliver") against raw kafka-go loops
// with the same commit policy, on the same cluster in the same run. Every
// raw loop joins the group with kafka-go's ConsumerGroup, reads each
// assigned partition in a goroutine of its own, touches every record, and
// commits each batch of at most kafkatest.BenchBatch records of a partition
// synchronously with Client.OffsetCommit under the generation:
//
//   - raw: a kafka.Reader per partition (Partition set, no GroupID), read
//     with FetchMessage, the way kafka-go's docs read one partition;
//   - rawconn: a kafka.Conn per partition, read a fetch answer at a time
//     with ReadBatchWith (the adapter's fetch path until it read record
//     batches itself, for their control flags, aborted transactions and
//     leader epochs, which kafka.Conn drops); a failing batch is handled
//     again in place after its delay.

// BenchmarkSuccessPath: every batch succeeds.
func BenchmarkSuccessPath(b *testing.B) {
	loops := []kafkatest.Loop{{Name: "raw", Run: rawReaderLoop}, {Name: "rawconn", Run: rawConnLoop}, kafkatest.RedeliverLoop(adapter)}
	kafkatest.RunLeaves(b, loops, []int32{1, 8}, false, kafkatest.Success)
}

// BenchmarkFailurePath: every 10th batch (counting first deliveries) fails
// once and succeeds on a retry 1ms later; the rawconn loop sleeps 1ms and
// handles the batch again.
func BenchmarkFailurePath(b *testing.B) {
	loops := []kafkatest.Loop{{Name: "rawconn", Run: rawConnLoop}, kafkatest.RedeliverLoop(adapter)}
	kafkatest.RunLeaves(b, loops, []int32{1, 8}, false, kafkatest.FailEveryTenth)
}

// BenchmarkPoison: one record, in the middle of partition 0, always fails
// and is given up after 5 retries 10ms apart; the rawconn loop retries its
// batch in place. others-done-ms is the time from the first record until
// every record of the other partitions was handled, others-during-retries
// how many of those were handled while the poison record was retried.
func BenchmarkPoison(b *testing.B) {
	loops := []kafkatest.Loop{{Name: "rawconn", Run: rawConnLoop}, kafkatest.RedeliverLoop(adapter)}
	kafkatest.RunLeaves(b, loops, []int32{8}, false, kafkatest.PoisonInTheMiddle)
}

// BenchmarkRedeliveryLateness measures, through the adapter, how late a
// redelivery starts; see kafkatest.BenchLateness.
func BenchmarkRedeliveryLateness(b *testing.B) { kafkatest.BenchLateness(b, adapter) }

// rawRun is what the raw loops share: the group's generation and a client
// to commit with.
type rawRun struct {
	l      *kafkatest.Leaf
	gen    *kafka.Generation
	client *kafka.Client
}

// rawJoin joins the benchmark's group and runs part for each assigned
// partition in a goroutine of its own, with the partition's record count;
// it returns the time from the first record read to the last commit.
func rawJoin(l *kafkatest.Leaf, addrs []string, topic string,
	part func(ctx context.Context, r *rawRun, partition int, start int64, want int) error) time.Duration {
	b, partitions := l.B, len(l.Per)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	cg, err := kafka.NewConsumerGroup(kafka.ConsumerGroupConfig{ID: kafkatest.BenchGroup(topic), Brokers: addrs, Topics: []string{topic}})
	if err != nil {
		b.Fatal(err)
	}
	defer cg.Close()
	gen, err := cg.Next(ctx)
	if err != nil {
		b.Fatal(err)
	}
	// A real broker can still answer "not leader" for a new topic's
	// partitions for a moment after the records were produced: wait until
	// each leader answers, as a consumer would retry (the adapter does).
	for p := range int(partitions) {
		for {
			conn, err := kafka.DefaultDialer.DialLeader(ctx, "tcp", addrs[0], topic, p)
			if err == nil {
				_, err = conn.ReadLastOffset()
				conn.Close()
			}
			if err == nil {
				break
			}
			if ctx.Err() != nil {
				b.Fatalf("partition %d: no leader: %v", p, err)
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
	r := &rawRun{l: l, gen: gen, client: &kafka.Client{Addr: kafka.TCP(addrs...)}}
	var (
		wg   sync.WaitGroup
		errs = make(chan error, partitions)
	)
	for _, a := range gen.Assignments[topic] {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := part(ctx, r, a.ID, a.Offset, int(l.Per[a.ID])); err != nil {
				errs <- fmt.Errorf("partition %d: %w", a.ID, err)
			}
		}()
	}
	wg.Wait()
	end := time.Now()
	close(errs)
	for err := range errs {
		b.Fatal(err)
	}
	return end.Sub(l.Start())
}

// commit commits next for the partition under the generation, as the
// adapter does.
func (r *rawRun) commit(ctx context.Context, topic string, partition int, next int64) error {
	r.l.Committed()
	resp, err := r.client.OffsetCommit(ctx, &kafka.OffsetCommitRequest{
		GroupID: r.gen.GroupID, GenerationID: int(r.gen.ID), MemberID: r.gen.MemberID,
		Topics: map[string][]kafka.OffsetCommit{topic: {{Partition: partition, Offset: next}}},
	})
	if err != nil {
		return err
	}
	for _, p := range resp.Topics[topic] {
		if p.Error != nil {
			return p.Error
		}
	}
	return nil
}

// rawReaderLoop reads each partition with a kafka.Reader.
func rawReaderLoop(l *kafkatest.Leaf, addrs []string, topic string) time.Duration {
	return rawJoin(l, addrs, topic, func(ctx context.Context, r *rawRun, partition int, start int64, want int) error {
		rd := kafka.NewReader(kafka.ReaderConfig{Brokers: addrs, Topic: topic, Partition: partition,
			MaxWait: kafkatest.BenchMaxWait, ReadLagInterval: -1})
		defer rd.Close()
		if err := rd.SetOffset(start); err != nil {
			return err
		}
		for seen := 0; seen < want; {
			n := min(kafkatest.BenchBatch, want-seen)
			var first, last kafka.Message
			bytes := 0
			for i := range n {
				m, err := rd.FetchMessage(ctx)
				if err != nil {
					return err
				}
				r.l.Started()
				bytes += len(m.Value)
				if i == 0 {
					first = m
				}
				last = m
			}
			r.l.Handled(int32(partition), first.Offset, last.Offset, bytes)
			if err := r.commit(ctx, topic, partition, last.Offset+1); err != nil {
				return err
			}
			seen += n
		}
		return nil
	})
}

// rawConnLoop reads each partition with a kafka.Conn, a fetch answer at a
// time, and handles and commits each answer in batches; a failing batch
// is handled again in place after the scenario's delay, then committed.
func rawConnLoop(l *kafkatest.Leaf, addrs []string, topic string) time.Duration {
	return rawJoin(l, addrs, topic, func(ctx context.Context, r *rawRun, partition int, start int64, want int) error {
		conn, err := kafka.DefaultDialer.DialLeader(ctx, "tcp", addrs[0], topic, partition)
		if err != nil {
			return err
		}
		defer conn.Close()
		if start < 0 {
			if start, err = conn.ReadFirstOffset(); err != nil {
				return err
			}
		}
		if _, err := conn.Seek(start, kafka.SeekAbsolute); err != nil {
			return err
		}
		var msgs []kafka.Message
		for seen := 0; seen < want; {
			conn.SetReadDeadline(time.Now().Add(kafkatest.BenchMaxWait + 10*time.Second))
			batch := conn.ReadBatchWith(kafka.ReadBatchConfig{MinBytes: 1, MaxBytes: 1e6, MaxWait: kafkatest.BenchMaxWait})
			msgs = msgs[:0]
			for {
				m, err := batch.ReadMessage()
				if err != nil {
					break
				}
				msgs = append(msgs, m)
			}
			if err := batch.Close(); err != nil {
				return err
			}
			for i := 0; i < len(msgs); {
				n := min(kafkatest.BenchBatch, len(msgs)-i)
				l.Started()
				first, last := msgs[i].Offset, msgs[i+n-1].Offset
				switch {
				case l.Poisoned(int32(partition), first, last):
					for retry := 0; ; retry++ {
						l.PoisonFailed(retry == kafkatest.PoisonRetries)
						if retry == kafkatest.PoisonRetries {
							break
						}
						time.Sleep(kafkatest.PoisonDelay)
					}
				case l.FailsFirst():
					time.Sleep(kafkatest.FailDelay)
				}
				bytes := 0
				for _, m := range msgs[i : i+n] {
					bytes += len(m.Value)
				}
				l.Handled(int32(partition), first, last, bytes)
				if err := r.commit(ctx, topic, partition, last+1); err != nil {
					return err
				}
				i += n
				seen += n
			}
			clear(msgs)
		}
		return nil
	})
}

// BenchmarkKeyOrdering: one partition, records over 1,000 keys, a handler
// that waits 2ms per record, in partition ordering and in key ordering at
// concurrency 16, 64 and 256, with a poison key, and without the wait;
// see kafkatest.BenchKeyed.
func BenchmarkKeyOrdering(b *testing.B) { kafkatest.BenchKeyed(b, adapter) }
