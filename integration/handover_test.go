package integration_test

import (
	"testing"

	"github.com/redeliver-go/redeliver/integration/conformance"
	"github.com/redeliver-go/redeliver/integration/provider"
)

// TestClientsHandOver moves a withheld batch between every two Kafka
// clients (conformance.RunHandOver): the retry state one client's adapter
// commits is continued by another's, on kfake and on the external broker
// when one is given.
func TestClientsHandOver(t *testing.T) {
	adapters := []conformance.Adapter{franzAdapter{}, kafkagoAdapter{}, saramaAdapter{}, confluentAdapter{}}
	for _, p := range []conformance.Provider{provider.Kfake(), provider.External()} {
		t.Run(p.Name(), func(t *testing.T) {
			for _, from := range adapters {
				for _, to := range adapters {
					if from.Name() == to.Name() {
						continue // each adapter's own suite hands over to itself
					}
					t.Run(from.Name()+" to "+to.Name(), func(t *testing.T) {
						conformance.RunHandOver(t, p, from, to)
					})
				}
			}
		})
	}
}
