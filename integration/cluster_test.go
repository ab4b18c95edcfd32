package integration_test

import (
	"os"
	"slices"
	"testing"
	"time"

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
//
// REDELIVER_ORDERING=key runs the scenarios in key ordering
// (conformance.RunClusterVariant).
//
// With REDELIVER_CLUSTER_CI=1 (scripts/test.sh's cluster step) it and
// TestClusterShare run one scenario per adapter, the pairs of
// conformance.ClusterCI: every adapter meets a fault and every scenario
// runs once.
func TestCluster(t *testing.T) {
	if testing.Short() {
		t.Skip("the cluster scenarios are long")
	}
	for _, a := range clusterAdapters {
		if !anyClusterRuns(t, a.Name(), conformance.ClusterScenarios) {
			continue
		}
		t.Run(a.Name(), func(t *testing.T) {
			conformance.RunCluster(t, provider.Cluster(), a)
		})
	}
}

// clusterAdapters are the adapters TestCluster runs, the share consumer
// aside (TestClusterShare).
var clusterAdapters = []conformance.Adapter{franzAdapter{}, franzAdapter{kip848: true}, kafkagoAdapter{}, saramaAdapter{}, confluentAdapter{}}

// anyClusterRuns reports whether any of the scenarios runs for the adapter
// (conformance.ClusterRuns).
func anyClusterRuns(t *testing.T, adapter string, scenarios []string) bool {
	for _, s := range scenarios {
		if conformance.ClusterRuns(t, adapter, s) {
			return true
		}
	}
	return false
}

// TestClusterCIPairs checks that CI's cluster step (conformance.ClusterCI)
// gives every adapter of TestCluster and TestClusterShare one scenario
// that exists, and runs every scenario (a)-(f), so that a new adapter or
// scenario cannot leave it without saying so. It needs no cluster.
func TestClusterCIPairs(t *testing.T) {
	names := map[string]bool{shareClusterAdapter: true}
	for _, a := range clusterAdapters {
		names[a.Name()] = true
	}
	// The share consumer's (b) has a name of its own.
	scenario := func(adapter, s string) string {
		if adapter == shareClusterAdapter && s == "CoordinatorKilledDuringRetry" {
			return "CoordinatorKilledDuringRetryCommit"
		}
		return s
	}
	covered := map[string]string{}
	for a, s := range conformance.ClusterCI {
		if !names[a] {
			t.Errorf("conformance.ClusterCI names %q, which is no adapter of TestCluster or TestClusterShare", a)
		}
		has := slices.Contains(conformance.ClusterScenarios, s)
		if a == shareClusterAdapter {
			has = slices.ContainsFunc(shareClusterCases, func(c shareClusterCase) bool { return c.name == s })
		}
		if !has {
			t.Errorf("conformance.ClusterCI gives %q the scenario %q, which it does not have", a, s)
		}
		if prev, ok := covered[scenario(a, s)]; ok {
			t.Errorf("conformance.ClusterCI runs %s twice (%q and %q) in CI's one-per-adapter step", s, prev, a)
		}
		covered[scenario(a, s)] = a
	}
	for a := range names {
		if _, ok := conformance.ClusterCI[a]; !ok {
			t.Errorf("conformance.ClusterCI gives %q no scenario: CI's cluster step would not run it", a)
		}
	}
	for _, s := range conformance.ClusterScenarios {
		if _, ok := covered[s]; !ok {
			t.Errorf("conformance.ClusterCI runs no %s: CI's cluster step would miss it", s)
		}
	}
}

// TestClusterChaos runs every adapter's cluster scenario at once (franz-go
// cooperative-sticky and KIP-848, kafka-go, sarama, confluent and the
// share consumer, each with its own topic, group, producer, handler faults
// and poison records, plus two more franz-go members: one whose consumer b
// runs in a child process, one that parks what it gives up in PostgreSQL
// and re-drives it with a redrive.Scheduler when REDELIVER_POSTGRES_URL is
// set) while, for the duration REDELIVER_CHAOS gives (a Go duration such
// as 30m), one random fault at a time hits the cluster or a member:
// SIGKILL then restart of a broker, SIGSTOP then SIGCONT, cut off from the
// consumers then healed, a clean restart, a leader moved (of a partition
// of a topic or of a group's __consumer_offsets partition, which moves its
// coordinator), a handler fault burst, a SIGKILL of the child consumer, or
// a PostgreSQL restart. After each fault it measures how long until every
// partition of every member moved on; at the end each member's history is
// checked as in TestCluster, and a summary is logged and written to
// REDELIVER_FIGURES. scripts/chaos.sh runs it in one command:
//
//	scripts/chaos.sh 30m
//
// The members run as parallel subtests, all at once (-parallel 8 or more).
// REDELIVER_CHAOS_SEED repeats a run's choice of faults,
// REDELIVER_CHAOS_KINDS limits it to some kinds, REDELIVER_CHAOS_MEMBERS=share
// runs the share consumer alone (under the broker faults), and
// REDELIVER_CHAOS_DUMPS is where a stall's goroutine dump goes.
func TestClusterChaos(t *testing.T) {
	raw := os.Getenv("REDELIVER_CHAOS")
	if raw == "" {
		t.Skip("set REDELIVER_CHAOS to a duration (and start the cluster) to run the chaos run")
	}
	d, err := time.ParseDuration(raw)
	if err != nil || d <= 0 {
		t.Fatalf("REDELIVER_CHAOS=%q: want a positive Go duration such as 30m (%v)", raw, err)
	}
	switch m := os.Getenv("REDELIVER_CHAOS_MEMBERS"); m {
	case "":
		conformance.RunChaos(t, provider.Cluster(),
			clusterAdapters,
			d, conformance.ChaosOptions{Child: "franz", Postgres: os.Getenv("REDELIVER_POSTGRES_URL")}, shareInChaos)
	case "share":
		// The share consumer alone: the broker faults only.
		conformance.RunChaos(t, provider.Cluster(), nil, d, conformance.ChaosOptions{}, shareInChaos)
	default:
		t.Fatalf("REDELIVER_CHAOS_MEMBERS=%q: want share (the share consumer alone) or nothing (every member)", m)
	}
}
