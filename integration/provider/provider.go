// Package provider gives the conformance suite its brokers: an in-process
// kfake cluster, an external broker named by an environment variable, or a
// Kafka or Redpanda container run through testcontainers-go.
package provider

import (
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"

	"github.com/redeliver-go/redeliver/integration/conformance"
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
