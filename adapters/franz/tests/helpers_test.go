package franz_test

import (
	"testing"

	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/redeliver-go/redeliver/adapters/franz"
	"github.com/redeliver-go/redeliver/adapters/internal/kafkatest"
	"github.com/redeliver-go/redeliver/stream"
)

// The shared helpers, under the names these tests use.
const wait = kafkatest.Wait

var (
	produce       = kafkatest.Produce
	produceEach   = kafkatest.ProduceEach
	committed     = kafkatest.Committed
	waitCommitted = kafkatest.WaitCommitted
	offsetsOf     = kafkatest.OffsetsOf
	checkHistory  = kafkatest.CheckHistory
	startConsumer = kafkatest.StartConsumer
)

// newCluster starts an in-process kfake cluster with one topic of the given
// partitions and returns its addresses.
func newCluster(t testing.TB, topic string, partitions int32, opts ...kfake.Opt) []string {
	t.Helper()
	_, addrs := kafkatest.NewCluster(t, topic, partitions, opts...)
	return addrs
}

// start runs a consumer of topic in group over proc and stops it at the end
// of the test; opts are kgo.Opt and franz.Option values.
func start(t testing.TB, addrs []string, group, topic string, proc *stream.Processor, opts ...any) *kafkatest.Running {
	t.Helper()
	return kafkatest.Start(t, adapter, kafkatest.Config{Addrs: addrs, Group: group, Topic: topic, Processor: proc, Options: opts})
}

// boundClient returns a client of group "g" on topic "t" for
// franz.WithClient (with franz.ClientOptions) and opts, closed at the end
// of the test.
func boundClient(t testing.TB, addrs []string, opts ...kgo.Opt) *kgo.Client {
	t.Helper()
	cl, err := kgo.NewClient(append(append([]kgo.Opt{kgo.SeedBrokers(addrs...), kgo.ConsumerGroup("g"), kgo.ConsumeTopics("t")}, opts...), franz.ClientOptions()...)...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cl.Close)
	return cl
}

func values(b *stream.Batch) []string {
	vs := make([]string, len(b.Records))
	for i, r := range b.Records {
		vs[i] = string(r.Value)
	}
	return vs
}
