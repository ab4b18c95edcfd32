package integration_test

import (
	"testing"

	"github.com/redeliver-go/redeliver/integration/conformance"
	"github.com/redeliver-go/redeliver/integration/provider"
)

// TestCluster runs the cluster scenarios (a leader killed during a
// backoff, the group coordinator killed during a retry-state commit, a
// broker paused past the session timeout, a broker cut off from the
// consumers, a rolling restart, the dead-letter topic's leader killed
// during a dead-letter publish) for the franz-go adapter
// (cooperative-sticky) and the kafka-go adapter, on the three-broker
// cluster of integration/kafka-cluster.sh. It runs only when
// REDELIVER_KAFKA_CLUSTER is set:
//
//	b=$(integration/kafka-cluster.sh start) && export "$b"
//	cd integration && go test -run TestCluster -timeout 60m -v .
func TestCluster(t *testing.T) {
	if testing.Short() {
		t.Skip("the cluster scenarios are long")
	}
	for _, a := range []conformance.Adapter{franzAdapter{}, kafkagoAdapter{}} {
		t.Run(a.Name(), func(t *testing.T) {
			conformance.RunCluster(t, provider.Cluster(), a)
		})
	}
}
