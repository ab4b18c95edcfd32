package integration_test

import (
	"testing"

	"github.com/redeliver-go/redeliver/integration/conformance"
	"github.com/redeliver-go/redeliver/integration/provider"
)

// TestRebalanceWaitsForAHeldHandler runs conformance.RunHeldRebalance (a
// handler holding past the session timeout during a rebalance or a stop
// keeps its partitions) for the four Kafka adapters, franz-go in both
// group protocols, on kfake and on the external broker, whose own session
// handling is what the scenario is about. The cases run in parallel: each
// waits out twice the session timeout with little else to do.
func TestRebalanceWaitsForAHeldHandler(t *testing.T) {
	for _, p := range []conformance.Provider{provider.Kfake(), provider.External()} {
		for _, a := range []conformance.Adapter{franzAdapter{}, franzAdapter{kip848: true}, kafkagoAdapter{}, saramaAdapter{}, confluentAdapter{}} {
			t.Run(p.Name()+"/"+a.Name(), func(t *testing.T) {
				t.Parallel()
				conformance.RunHeldRebalance(t, p, a)
			})
		}
	}
}
