// Package conformance is the suite every redeliver adapter passes, against
// every broker provider: seed 004's four scenarios end to end through a
// broker, whole-batch redelivery, order within a partition, partitions that
// keep flowing while another waits out a backoff, a backoff longer than the
// session timeout, a graceful shutdown during a backoff, and a consumer
// joining during a retry. Committed offsets are read back through the
// broker's own offset fetch.
//
// An adapter's test runs it, as Watermill's pubsub tests do:
//
//	func TestFranz(t *testing.T) {
//		conformance.Run(t, provider.Kfake(), franzAdapter{})
//	}
//
// Every wait of the suite is bounded; with short backoffs (tens of
// milliseconds) it runs in seconds on an in-process broker.
package conformance

import (
	"context"
	"net"
	"slices"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/redeliver-go/redeliver/integration/kcluster"
	"github.com/redeliver-go/redeliver/stream"
)

// Provider starts brokers for the suite.
type Provider interface {
	// Name names the provider in test names.
	Name() string
	// Start returns a broker for one test, and ends it (if it started
	// one) when the test ends. It skips t when the provider cannot run
	// here.
	Start(t *testing.T) Broker
}

// Broker is a running Kafka-compatible broker. The suite names its topics
// and groups uniquely, so one broker may serve many tests.
type Broker struct {
	// Addrs are the bootstrap addresses.
	Addrs []string
	// SessionTimeout is a short group session timeout the broker accepts
	// (at least its group.min.session.timeout.ms), and the session timeout
	// of KIP-848 groups (group.consumer.session.timeout.ms). The suite
	// uses it for the case of a backoff longer than the session timeout.
	SessionTimeout time.Duration
	// KIP848 reports whether the broker runs the KIP-848 consumer group
	// protocol.
	KIP848 bool
	// Control, when not nil, answers requests in the broker's place (an
	// in-process kfake cluster); fault-injection scenarios need it.
	Control Controller
	// Backend, when not nil, is a service other than Kafka (an in-memory
	// Event Hubs) that the suite drives instead of a broker at Addrs.
	Backend Backend
	// AdminAddrs, when set, are the addresses the suite's own client
	// (topics, producing, reading commits) uses instead of Addrs: on the
	// three-broker cluster they bypass the fault proxies the consumers
	// go through.
	AdminAddrs []string
	// Replication is the replication factor of the topics the suite
	// creates: 0 means 1, -1 the broker's default.
	Replication int16
	// Cluster, when not nil, is the three-broker cluster of
	// integration/kafka-cluster.sh, which the cluster scenarios drive.
	Cluster *kcluster.Cluster
}

// Controller lets a test answer a broker's requests itself, as
// kfake.Cluster does.
type Controller interface {
	ControlKey(key int16, fn func(kmsg.Request) (kmsg.Response, error, bool))
	KeepControl()
}

// Adapter builds consumers of one adapter for the suite.
type Adapter interface {
	// Name names the adapter in test names.
	Name() string
	// NeedsKIP848 reports whether the adapter's consumers use the KIP-848
	// protocol; the suite skips such an adapter on brokers without it.
	NeedsKIP848() bool
	// NewConsumer returns a consumer, not yet running, that joins
	// cfg.Group, consumes cfg.Topic from its start when the group has no
	// commit, and runs cfg.Processor over each assigned partition.
	NewConsumer(t *testing.T, cfg Config) (Consumer, error)
}

// LeaseAdapter is an [Adapter] whose consumers take partitions from each
// other by leases, with no rebalance between them (Event Hubs' processors
// steal a partition at once). When LeaseOwnership reports true, the
// suites check its histories with [streamtest.History.LeaseOwnership].
type LeaseAdapter interface {
	Adapter
	LeaseOwnership() bool
}

// Config describes one consumer for [Adapter.NewConsumer].
type Config struct {
	Brokers   []string
	Group     string
	Topic     string
	Processor *stream.Processor
	// MaxBatch is the most records a batch holds.
	MaxBatch int
	// SessionTimeout and HeartbeatInterval are the group timings to ask
	// for; 0 means the adapter's default.
	SessionTimeout    time.Duration
	HeartbeatInterval time.Duration
	// Dial, when not nil, makes every connection the consumer opens, to
	// any broker address (the network-fault scenarios pass connections
	// through a proxy).
	Dial func(ctx context.Context, network, address string) (net.Conn, error)
	// Backend is the Broker's, for adapters of a non-Kafka service.
	Backend Backend
	// CommitWindow, when above 0, is the adapter's commit window
	// (WithCommitWindow(CommitWindow, 50000)): success commits coalesced.
	// 0 is the adapter's default, where every commit is written before
	// the next batch.
	CommitWindow time.Duration
}

// Consumer is a consumer an adapter built.
type Consumer interface {
	// Run consumes until ctx is done. When it returns, every worker it
	// started has stopped and the consumer has left the group.
	Run(ctx context.Context) error
}

// Run runs every case of the suite as a subtest of t, in the variant
// [VariantFromEnv] reads (REDELIVER_ORDERING=key: in key ordering).
func Run(t *testing.T, p Provider, a Adapter) {
	v, err := VariantFromEnv()
	if err != nil {
		t.Fatal(err)
	}
	RunVariant(t, p, a, v)
}

// partitionOnly names the cases whose assertions hold in partition
// ordering only, and why: RunVariant skips them in key ordering.
var partitionOnly = map[string]string{
	"OrderWithinPartition":          "it checks that a partition's records are handled in offset order; in key ordering only a key's are",
	"GracefulShutdownDuringBackoff": "it checks that the next owner starts with the batch in backoff; in key ordering the other keys' records are delivered too",
	"PartialSuccess":                "it needs a batch of several records; in key ordering each record is a batch of its own",
}

// RunVariant is [Run] in the given variant: in key ordering, the records
// carry keys and every case's history is checked with
// [streamtest.History.CheckKeys]; the cases whose assertions are about
// partition ordering (whole batches, one batch at a time) skip then, with
// the reason.
func RunVariant(t *testing.T, p Provider, a Adapter, v Variant) {
	for _, c := range cases {
		if len(v.Only) > 0 && !slices.Contains(v.Only, c.name) {
			continue
		}
		t.Run(c.name, func(t *testing.T) {
			b := p.Start(t)
			if a.NeedsKIP848() && !b.KIP848 {
				t.Skipf("%s needs the KIP-848 protocol; the %s broker does not run it", a.Name(), p.Name())
			}
			e := newVariantEnv(t, b, a, v)
			if why := partitionOnly[c.name]; e.keyed() && why != "" {
				t.Skipf("partition ordering only: %s", why)
			}
			if e.keyed() {
				e.hist.keys = func(p int32) []string { return e.keys[p] }
			}
			c.run(t, e)
		})
	}
}
