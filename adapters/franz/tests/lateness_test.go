package franz_test

import (
	"fmt"
	"os"
	"testing"

	"github.com/redeliver-go/redeliver/adapters/internal/kafkatest"
	"github.com/redeliver-go/redeliver/stream"
)

// BenchmarkRedeliveryLateness measures, through the adapter, how late a
// redelivery starts (from its due time to the handler's call) with 1, 8 or
// 100 partitions in backoff at once; see kafkatest.Lateness. b.N is the
// number of redeliveries.
func BenchmarkRedeliveryLateness(b *testing.B) {
	for _, partitions := range []int32{1, 8, 100} {
		b.Run(fmt.Sprintf("partitions=%d", partitions), func(b *testing.B) {
			addrs := benchAddrs(b)
			topic := fmt.Sprintf("late-%d-%d", os.Getpid(), benchRun.Add(1))
			benchProduce(b, addrs, topic, partitions, int(partitions)*10, false)
			kafkatest.Lateness(b, partitions, func(proc *stream.Processor) func() error {
				stop := runFranz(b, proc, addrs, topic)
				return func() error { stop(); return nil }
			})
			benchDelete(b, addrs, topic)
		})
	}
}
