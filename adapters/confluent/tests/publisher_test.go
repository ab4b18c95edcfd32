package tests

import (
	"strings"
	"testing"
	"time"

	"github.com/redeliver-go/redeliver/adapters/confluent"
	"github.com/redeliver-go/redeliver/adapters/internal/kafkatest"
)

// owned describes the confluent adapter's WithPublisher to the publisher
// tests it shares with the sarama adapter.
var owned = kafkatest.Owned{
	Adapter: adapter,
	WithPublisher: func(pub kafkatest.OwnedPublisher) any {
		p, _ := pub.(*confluent.Publisher)
		return confluent.WithPublisher(p)
	},
	ProducerFrames: []string{"kafka.poller(", "kafka.channelProducer("},
}

// TestWithPublisherRefusals: see kafkatest.WithPublisherRefusals.
func TestWithPublisherRefusals(t *testing.T) { kafkatest.WithPublisherRefusals(t, owned) }

// TestBoundPublisherLivesWithRun: see kafkatest.BoundPublisherLivesWithRun.
func TestBoundPublisherLivesWithRun(t *testing.T) { kafkatest.BoundPublisherLivesWithRun(t, owned) }

// A producer the brokers refuse (here its idempotence: InitProducerID
// refused, fatal to librdkafka) is said at Error, with librdkafka's error:
// its publishes fail from then on.
func TestBoundPublisherFatalErrorIsLogged(t *testing.T) {
	c, addrs := kafkatest.NewCluster(t, "t", 1)
	kafkatest.RefuseInitProducerID(c)
	pub := new(confluent.Publisher)
	var logs kafkatest.LogBuffer
	kafkatest.Start(t, adapter, kafkatest.Config{Addrs: addrs, Group: "g", Topic: "t", Processor: kafkatest.DeadLetterProcessor(t, pub, "t.dlq"),
		Logger: logs.Logger(), Options: []any{confluent.WithPublisher(pub)}})
	logs.WaitFor(t, `level=ERROR msg="redeliver: the dead-letter producer of WithPublisher failed`, 10*time.Second)
	if !strings.Contains(logs.String(), "uthoriz") {
		t.Errorf("the Error line does not give librdkafka's error: %s", logs.String())
	}
}
