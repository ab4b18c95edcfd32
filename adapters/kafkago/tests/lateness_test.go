package tests

import (
	"context"
	"fmt"
	"os"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/twmb/franz-go/pkg/kfake"

	"github.com/redeliver-go/redeliver/adapters/internal/kafkatest"
	"github.com/redeliver-go/redeliver/adapters/kafkago"
	"github.com/redeliver-go/redeliver/stream"
)

// BenchmarkRedeliveryLateness measures, through the adapter, how late a
// redelivery starts (from its due time to the handler's call) with 1, 8 or
// 100 partitions in backoff at once; see kafkatest.Lateness. b.N is the
// number of redeliveries.
func BenchmarkRedeliveryLateness(b *testing.B) {
	addrs := strings.Split(os.Getenv("REDELIVER_KAFKA_BROKERS"), ",")
	if addrs[0] == "" {
		cluster, err := kfake.NewCluster(kfake.NumBrokers(1))
		if err != nil {
			b.Fatal(err)
		}
		defer cluster.Close()
		addrs = cluster.ListenAddrs()
	}
	var run atomic.Int64
	for _, partitions := range []int32{1, 8, 100} {
		b.Run(fmt.Sprintf("partitions=%d", partitions), func(b *testing.B) {
			topic := fmt.Sprintf("late-%d-%d", os.Getpid(), run.Add(1))
			benchProduce(b, addrs, topic, partitions, int(partitions)*10)
			kafkatest.Lateness(b, partitions, func(proc *stream.Processor) func() error {
				c, err := kafkago.New(proc, kafkago.WithGroupConfig(benchGroup(addrs, topic)))
				if err != nil {
					b.Fatal(err)
				}
				ctx, cancel := context.WithCancel(context.Background())
				ran := make(chan error, 1)
				go func() { ran <- c.Run(ctx) }()
				return func() error { cancel(); return <-ran }
			})
			benchDelete(b, addrs, topic)
		})
	}
}
