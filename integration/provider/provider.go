// Package provider gives the conformance suite its brokers: an in-process
// kfake cluster, an external broker named by an environment variable, or a
// Kafka or Redpanda container run through testcontainers-go.
package provider

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"

	"github.com/redeliver-go/redeliver/integration/conformance"
	"github.com/redeliver-go/redeliver/integration/kcluster"
)

// sessionTimeout is the short session timeout the kfake provider allows and
// gives KIP-848 groups. It is short, not tiny: a heartbeat every 100ms must
// not miss it on a loaded machine under the race detector.
const sessionTimeout = time.Second

// Kfake returns a provider that starts a new in-process kfake cluster (one
// broker) for every test. It accepts session timeouts down to 100ms, and its
// KIP-848 groups have a 1s session timeout.
func Kfake() conformance.Provider { return kfakeProvider{} }

type kfakeProvider struct{}

func (kfakeProvider) Name() string { return "kfake" }

func (kfakeProvider) Start(t *testing.T) conformance.Broker {
	c, err := kfake.NewCluster(
		kfake.NumBrokers(1),
		kfake.GroupMinSessionTimeout(100*time.Millisecond),
		kfake.BrokerConfigs(map[string]string{
			"group.consumer.session.timeout.ms":    strconv.Itoa(int(sessionTimeout / time.Millisecond)),
			"group.consumer.heartbeat.interval.ms": strconv.Itoa(int(sessionTimeout / 10 / time.Millisecond)),
		}),
	)
	if err != nil {
		t.Fatalf("kfake: %v", err)
	}
	t.Cleanup(c.Close)
	return conformance.Broker{Addrs: c.ListenAddrs(), SessionTimeout: sessionTimeout, KIP848: true, Control: c}
}

// EnvBrokers is the environment variable naming an external broker's
// bootstrap addresses, comma separated, for [External].
const EnvBrokers = "REDELIVER_KAFKA_BROKERS"

// External returns a provider for a broker that runs already, named by
// REDELIVER_KAFKA_BROKERS; it skips every test when the variable is unset.
// REDELIVER_KAFKA_SESSION_TIMEOUT (a Go duration, default 6s, Kafka's
// group.min.session.timeout.ms) is the short session timeout the suite may
// use, and REDELIVER_KAFKA_KIP848=1 says the broker runs the KIP-848
// protocol with that session timeout.
func External() conformance.Provider { return externalProvider{} }

type externalProvider struct{}

func (externalProvider) Name() string { return "external" }

func (externalProvider) Start(t *testing.T) conformance.Broker {
	addrs := os.Getenv(EnvBrokers)
	if addrs == "" {
		t.Skipf("no external broker: set %s to run against one", EnvBrokers)
	}
	b := conformance.Broker{Addrs: strings.Split(addrs, ","), SessionTimeout: 6 * time.Second}
	if s := os.Getenv("REDELIVER_KAFKA_SESSION_TIMEOUT"); s != "" {
		d, err := time.ParseDuration(s)
		if err != nil {
			t.Fatalf("REDELIVER_KAFKA_SESSION_TIMEOUT: %v", err)
		}
		b.SessionTimeout = d
	}
	b.KIP848 = os.Getenv("REDELIVER_KAFKA_KIP848") == "1"
	return b
}

// Cluster returns a provider for the three-broker cluster of
// integration/kafka-cluster.sh, named by REDELIVER_KAFKA_CLUSTER (its
// proxied client addresses) with its run directory in
// REDELIVER_KAFKA_CLUSTER_DIR (default /tmp/redeliver-kafka-cluster); it
// skips every test when REDELIVER_KAFKA_CLUSTER is unset. The consumers
// reach the brokers through the fault proxies, the suite's own client
// directly; the suite's topics are replicated three times; the session
// timeout is 6s. The cluster runs Kafka 4, whose brokers run the KIP-848
// protocol.
func Cluster() conformance.Provider { return clusterProvider{} }

type clusterProvider struct{}

func (clusterProvider) Name() string { return "cluster" }

func (clusterProvider) Start(t *testing.T) conformance.Broker {
	addrs := os.Getenv(kcluster.EnvCluster)
	if addrs == "" {
		t.Skipf("no three-broker cluster: start one with integration/kafka-cluster.sh start and set %s", kcluster.EnvCluster)
	}
	dir := os.Getenv(kcluster.EnvDir)
	if dir == "" {
		dir = kcluster.DefaultDir
	}
	script, err := filepath.Abs(filepath.Join(moduleDir(t), "kafka-cluster.sh"))
	if err != nil {
		t.Fatal(err)
	}
	c, err := kcluster.Load(dir, script)
	if err != nil {
		t.Fatal(err)
	}
	if strings.Join(c.Clients, ",") != addrs {
		t.Fatalf("%s=%s, but the cluster in %s serves %s", kcluster.EnvCluster, addrs, dir, strings.Join(c.Clients, ","))
	}
	return conformance.Broker{Addrs: c.Clients, AdminAddrs: c.Direct, Replication: -1,
		SessionTimeout: 6 * time.Second, KIP848: true, Cluster: c}
}

// moduleDir returns the integration module's directory, where
// kafka-cluster.sh lives: the test's working directory or one of its
// parents.
func moduleDir(t *testing.T) string {
	dir, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	for d := dir; ; d = filepath.Dir(d) {
		if _, err := os.Stat(filepath.Join(d, "kafka-cluster.sh")); err == nil {
			return d
		}
		if filepath.Dir(d) == d {
			t.Fatalf("kafka-cluster.sh not found in %s or its parents", dir)
		}
	}
}
