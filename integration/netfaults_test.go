package integration_test

import (
	"testing"

	"github.com/redeliver-go/redeliver/integration/conformance"
	"github.com/redeliver-go/redeliver/integration/provider"
)

// TestNetworkFaults runs the network-fault scenarios (toxiproxy between the
// consumers and the broker) for the franz-go, kafka-go, sarama and
// confluent-kafka-go adapters, on kfake and on the external broker.
// librdkafka dials the brokers itself, with no dial function to give it:
// its connections cross the faulty network through a conformance.Front.
func TestNetworkFaults(t *testing.T) {
	if testing.Short() {
		t.Skip("the network-fault scenarios are long")
	}
	for _, p := range []conformance.Provider{provider.Kfake(), provider.External()} {
		for _, a := range []conformance.Adapter{franzAdapter{}, kafkagoAdapter{}, saramaAdapter{}, confluentAdapter{}} {
			t.Run(p.Name()+"/"+a.Name(), func(t *testing.T) {
				conformance.RunNetworkFaults(t, p, a)
			})
		}
	}
}
