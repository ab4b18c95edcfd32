package franz_test

import (
	"context"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/redeliver-go/redeliver/adapters/internal/kafkatest"
)

// The throughput benchmarks run the shared harness (kafkatest.RunLeaves)
// over two loops given the same kgo options (group, start offset, 500ms
// fetch max wait):
//
//   - raw: a plain franz-go group consumer with autocommit off and
//     BlockRebalanceOnPoll: PollRecords(ctx, 500), handle each record,
//     CommitUncommittedOffsets (synchronous), AllowRebalance, again. A
//     failing poll is retried in place: sleep, handle again.
//   - redeliver: the Processor run by this adapter, batches of up to 500
//     records of a partition, success commits coalesced (the adapter's
//     default commit window), a retry state written before its retry.
var loops = []kafkatest.Loop{{Name: "raw", Run: rawLoop}, kafkatest.RedeliverLoop(adapter)}

// BenchmarkSuccessPath: every batch succeeds. The partitions=8-snappy leaves
// produce compressed records: 100 zero bytes compress so well that one
// fetch answer holds almost a whole partition, which fills the adapter's
// buffers at once.
func BenchmarkSuccessPath(b *testing.B) {
	b.Run("plain", func(b *testing.B) { kafkatest.RunLeaves(b, loops, []int32{1, 8}, false, kafkatest.Success) })
	b.Run("snappy", func(b *testing.B) { kafkatest.RunLeaves(b, loops, []int32{8}, true, kafkatest.Success) })
}

// BenchmarkFailurePath: every 10th batch fails once and succeeds on a retry
// 1ms later. The raw loop sleeps 1ms and handles the poll again.
func BenchmarkFailurePath(b *testing.B) {
	kafkatest.RunLeaves(b, loops, []int32{1, 8}, false, kafkatest.FailEveryTenth)
}

// BenchmarkPoison: one record, in the middle of partition 0, always fails
// and is given up after 5 retries 10ms apart. others-done-ms is the time
// from the first record until every record of the other partitions was
// handled; others-during-retries how many of those were handled while the
// poison record was retried. The raw loop retries the whole poll in place.
func BenchmarkPoison(b *testing.B) {
	kafkatest.RunLeaves(b, loops, []int32{8}, false, kafkatest.PoisonInTheMiddle)
}

// BenchmarkRedeliveryLateness measures, through the adapter, how late a
// redelivery starts; see kafkatest.BenchLateness.
func BenchmarkRedeliveryLateness(b *testing.B) { kafkatest.BenchLateness(b, adapter) }

// benchOpts are the kgo options of the raw loops: those the adapter's
// consumer gets from kafkatest.BenchConfig.
func benchOpts(addrs []string, topic string) []kgo.Opt {
	return []kgo.Opt{
		kgo.SeedBrokers(addrs...),
		kgo.ConsumerGroup(kafkatest.BenchGroup(topic)),
		kgo.ConsumeTopics(topic),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()),
		kgo.FetchMaxWait(kafkatest.BenchMaxWait),
	}
}

// rawLoop is the baseline: poll at most benchBatch records, handle them,
// commit what was polled synchronously, allow rebalances, again. A poll
// that fails is handled again in place after the scenario's delay.
func rawLoop(l *kafkatest.Leaf, addrs []string, topic string) time.Duration {
	b := l.B
	cl, err := kgo.NewClient(append(benchOpts(addrs, topic), kgo.DisableAutoCommit(), kgo.BlockRebalanceOnPoll())...)
	if err != nil {
		b.Fatal(err)
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	var seen int
	for seen < b.N {
		fs := cl.PollRecords(ctx, kafkatest.BenchBatch)
		if err := ctx.Err(); err != nil {
			b.Fatalf("raw loop: %d of %d records: %v", seen, b.N, err)
		}
		fs.EachError(func(t string, p int32, err error) { b.Fatalf("fetch %s/%d: %v", t, p, err) })
		n := fs.NumRecords()
		if n == 0 {
			continue
		}
		l.Started()
		// The poll is the batch: it fails as a whole.
		fail := l.FailsFirst()
		poisoned := false
		fs.EachPartition(func(p kgo.FetchTopicPartition) {
			if len(p.Records) > 0 && l.Poisoned(p.Partition, p.Records[0].Offset, p.Records[len(p.Records)-1].Offset) {
				poisoned = true
			}
		})
		switch {
		case poisoned:
			for retry := 0; ; retry++ {
				l.PoisonFailed(retry == kafkatest.PoisonRetries)
				if retry == kafkatest.PoisonRetries {
					break
				}
				time.Sleep(kafkatest.PoisonDelay)
			}
		case fail:
			time.Sleep(kafkatest.FailDelay)
		}
		fs.EachPartition(func(p kgo.FetchTopicPartition) {
			if len(p.Records) == 0 {
				return
			}
			n := 0
			for _, r := range p.Records {
				n += len(r.Value)
			}
			l.Handled(p.Partition, p.Records[0].Offset, p.Records[len(p.Records)-1].Offset, n)
		})
		if err := cl.CommitUncommittedOffsets(ctx); err != nil {
			b.Fatalf("commit: %v", err)
		}
		l.Committed()
		cl.AllowRebalance()
		seen += n
	}
	return time.Since(l.Start())
}

// BenchmarkKeyOrdering: one partition, records over 1,000 keys, a handler
// that waits 2ms per record, in partition ordering and in key ordering at
// concurrency 16, 64 and 256, with a poison key, and without the wait;
// see kafkatest.BenchKeyed.
func BenchmarkKeyOrdering(b *testing.B) { kafkatest.BenchKeyed(b, adapter) }
