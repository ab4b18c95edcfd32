package integration_test

import (
	"testing"

	"github.com/redeliver-go/redeliver/integration/conformance"
	"github.com/redeliver-go/redeliver/integration/provider"
)

// TestOutage runs the outage case (a downstream outage across 8 partitions
// longer than the policy's worst-case retry time, and a poison record) for
// both Kafka adapters, on kfake and on the external and testcontainers
// brokers when they are configured.
func TestOutage(t *testing.T) {
	for _, p := range []conformance.Provider{provider.Kfake(), provider.External(), provider.TestcontainersKafka()} {
		for _, a := range []conformance.Adapter{franzAdapter{}, kafkagoAdapter{}} {
			t.Run(p.Name()+"/"+a.Name(), func(t *testing.T) {
				conformance.RunOutage(t, p, a)
			})
		}
	}
}
