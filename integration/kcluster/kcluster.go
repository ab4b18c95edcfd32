// Package kcluster drives the three-broker Kafka cluster of
// integration/kafka-cluster.sh from Go: it reads the cluster's addresses,
// kills, pauses and restarts brokers through the script, cuts a broker off
// from the clients through its fault proxy, and names the leader of a
// partition and the coordinator of a group. The script's helper
// (integration/cmd/kafkacluster) and the cluster tests share it.
//
// Each broker has two client listeners: INTERNAL, which the brokers use
// between themselves and the tests' admin client uses, and EXTERNAL, which
// clients reach through a toxiproxy proxy of its own (the address the
// broker advertises on that listener). A consumer bootstrapped from
// [EnvCluster] talks to every broker through its proxy; cutting a proxy
// cuts that broker off from the consumers while replication and the
// controller quorum go on.
package kcluster

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	toxiclient "github.com/Shopify/toxiproxy/v2/client"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
)

// EnvCluster names the environment variable that holds the cluster's
// client addresses (through the proxies), comma-separated; the cluster
// tests run only when it is set.
const EnvCluster = "REDELIVER_KAFKA_CLUSTER"

// EnvDir names the environment variable that holds the cluster's run
// directory (default [DefaultDir]).
const EnvDir = "REDELIVER_KAFKA_CLUSTER_DIR"

// DefaultDir is the cluster's run directory when [EnvDir] is not set.
const DefaultDir = "/tmp/redeliver-kafka-cluster"

// Nodes is the number of brokers in the cluster (node ids 1..Nodes).
const Nodes = 3

// Cluster is a running cluster as kafka-cluster.sh describes it in its
// run directory's cluster.env.
type Cluster struct {
	Dir      string   // run directory
	Script   string   // path of kafka-cluster.sh
	Clients  []string // node i's proxied client address at index i-1
	Direct   []string // node i's INTERNAL address at index i-1
	ProxyAPI string   // the toxiproxy API address
}

// Load reads the cluster's description from dir/cluster.env. script is
// the path of kafka-cluster.sh (for kill, pause, restart).
func Load(dir, script string) (*Cluster, error) {
	f, err := os.Open(filepath.Join(dir, "cluster.env"))
	if err != nil {
		return nil, fmt.Errorf("kcluster: %w (is the cluster running? integration/kafka-cluster.sh start)", err)
	}
	defer f.Close()
	c := &Cluster{Dir: dir, Script: script}
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		k, v, ok := strings.Cut(strings.TrimPrefix(sc.Text(), "export "), "=")
		if !ok {
			continue
		}
		switch k {
		case EnvCluster:
			c.Clients = strings.Split(v, ",")
		case "REDELIVER_KAFKA_CLUSTER_DIRECT":
			c.Direct = strings.Split(v, ",")
		case "REDELIVER_KAFKA_CLUSTER_PROXY_API":
			c.ProxyAPI = v
		}
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("kcluster: %s: %w", f.Name(), err)
	}
	if len(c.Clients) != Nodes || len(c.Direct) != Nodes || c.ProxyAPI == "" {
		return nil, fmt.Errorf("kcluster: %s: want %d client and %d direct addresses and a proxy API, got %q %q %q",
			f.Name(), Nodes, Nodes, c.Clients, c.Direct, c.ProxyAPI)
	}
	return c, nil
}

// Admin returns an admin client on the brokers' INTERNAL listeners, which
// a partition through the proxies does not touch. Close it with
// [kadm.Client.Close].
func (c *Cluster) Admin(opts ...kgo.Opt) (*kadm.Client, error) {
	cl, err := kgo.NewClient(append([]kgo.Opt{kgo.SeedBrokers(c.Direct...),
		kgo.RequestTimeoutOverhead(5 * time.Second), kgo.RetryTimeout(60 * time.Second)}, opts...)...)
	if err != nil {
		return nil, err
	}
	return kadm.NewClient(cl), nil
}

// Run runs kafka-cluster.sh with args (e.g. "kill", "2") and returns its
// standard output; ctx bounds it.
func (c *Cluster) Run(ctx context.Context, args ...string) (string, error) {
	cmd := exec.CommandContext(ctx, "bash", append([]string{c.Script}, args...)...)
	cmd.Env = append(os.Environ(), EnvDir+"="+c.Dir)
	var out, errb strings.Builder
	cmd.Stdout, cmd.Stderr = &out, &errb
	if err := cmd.Run(); err != nil {
		return out.String(), fmt.Errorf("kafka-cluster.sh %s: %w\n%s", strings.Join(args, " "), err, errb.String())
	}
	return out.String(), nil
}

// Leader returns the node id of the leader of topic's partition, or -1
// when it has none.
func Leader(ctx context.Context, adm *kadm.Client, topic string, partition int32) (int32, error) {
	td, err := adm.ListTopics(ctx, topic)
	if err != nil {
		return -1, err
	}
	t, ok := td[topic]
	if !ok || t.Err != nil {
		return -1, fmt.Errorf("kcluster: topic %s: %v", topic, t.Err)
	}
	p, ok := t.Partitions[partition]
	if !ok {
		return -1, fmt.Errorf("kcluster: topic %s has no partition %d", topic, partition)
	}
	if p.Err != nil {
		return p.Leader, fmt.Errorf("kcluster: %s/%d: %w", topic, partition, p.Err)
	}
	return p.Leader, nil
}

// Coordinator returns the node id of the group's coordinator.
func Coordinator(ctx context.Context, adm *kadm.Client, group string) (int32, error) {
	for _, r := range adm.FindGroupCoordinators(ctx, group) {
		if r.Err != nil {
			return -1, fmt.Errorf("kcluster: coordinator of %s: %w", group, r.Err)
		}
		return r.NodeID, nil
	}
	return -1, fmt.Errorf("kcluster: no coordinator for %s", group)
}

// InSync reports nil when n brokers are registered and every partition
// of every topic (internal ones too) has a leader and all its replicas in
// sync; otherwise an error saying what is missing.
func InSync(ctx context.Context, adm *kadm.Client, n int) error {
	m, err := adm.Metadata(ctx)
	if err != nil {
		return err
	}
	if len(m.Brokers) != n {
		return fmt.Errorf("%d brokers registered, want %d", len(m.Brokers), n)
	}
	for _, t := range m.Topics {
		if t.Err != nil {
			return fmt.Errorf("topic %s: %w", t.Topic, t.Err)
		}
		for _, p := range t.Partitions {
			if p.Leader < 0 || p.Err != nil {
				return fmt.Errorf("%s/%d: no leader (%v)", t.Topic, p.Partition, p.Err)
			}
			if len(p.ISR) < len(p.Replicas) {
				return fmt.Errorf("%s/%d: in sync %v of %v", t.Topic, p.Partition, p.ISR, p.Replicas)
			}
		}
	}
	return nil
}

// The toxic that cuts a broker off: a timeout of 0 holds every byte in
// both directions until it is removed, as a dropped network does (the
// connections stay open, nothing answers).
var cutToxics = []struct{ name, stream string }{{"cut-up", "upstream"}, {"cut-down", "downstream"}}

// ProxyName is the name of node's proxy in the toxiproxy API.
func ProxyName(node int) string { return "broker" + strconv.Itoa(node) }

// Cut cuts node off from the clients that reach it through its proxy:
// open connections and new ones stay up but carry nothing.
func Cut(api string, node int) error {
	p, err := toxiclient.NewClient(api).Proxy(ProxyName(node))
	if err != nil {
		return fmt.Errorf("kcluster: proxy of node %d: %w", node, err)
	}
	for _, t := range cutToxics {
		if _, err := p.AddToxic(t.name, "timeout", t.stream, 1, toxiclient.Attributes{"timeout": 0}); err != nil {
			return fmt.Errorf("kcluster: cut node %d: %w", node, err)
		}
	}
	return nil
}

// Heal undoes [Cut]; healing a node that is not cut is not an error.
func Heal(api string, node int) error {
	p, err := toxiclient.NewClient(api).Proxy(ProxyName(node))
	if err != nil {
		return fmt.Errorf("kcluster: proxy of node %d: %w", node, err)
	}
	var errs []error
	for _, t := range cutToxics {
		if err := p.RemoveToxic(t.name); err != nil && !strings.Contains(err.Error(), "not found") {
			errs = append(errs, err)
		}
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("kcluster: heal node %d: %w", node, err)
	}
	return nil
}

// SetReachable opens (up) or closes (down) node's proxy: a closed proxy
// listens no more, so a client's connection to it is refused, as it is
// by a broker that is down. kafka-cluster.sh closes a node's proxy while
// the node is killed or restarting: an open proxy in front of a dead
// broker would accept a connection and reset it, which a client takes for
// a broker that answers badly, not for one that is gone (kafka-go, for
// one, then never tries the next bootstrap address).
func SetReachable(api string, node int, up bool) error {
	p, err := toxiclient.NewClient(api).Proxy(ProxyName(node))
	if err != nil {
		return fmt.Errorf("kcluster: proxy of node %d: %w", node, err)
	}
	if up {
		err = p.Enable()
	} else {
		err = p.Disable()
	}
	if err != nil {
		return fmt.Errorf("kcluster: proxy of node %d (up %v): %w", node, up, err)
	}
	return nil
}

// MoveLeader moves the leadership of topic's partition to another of its
// in-sync replicas, as a preferred-leader election after a reassignment
// does in a real cluster: it reorders the partition's replicas so that
// the new leader comes first (the same replicas, so nothing is copied) and
// elects the preferred replica. It returns the old and the new leader.
func MoveLeader(ctx context.Context, adm *kadm.Client, topic string, partition int32) (from, to int32, err error) {
	td, err := adm.ListTopics(ctx, topic)
	if err != nil {
		return -1, -1, err
	}
	p, ok := td[topic].Partitions[partition]
	if !ok || p.Err != nil {
		return -1, -1, fmt.Errorf("kcluster: %s/%d: no such partition (%v)", topic, partition, p.Err)
	}
	from, to = p.Leader, -1
	for _, r := range p.ISR {
		if r != from {
			to = r
			break
		}
	}
	if to < 0 {
		return from, -1, fmt.Errorf("kcluster: %s/%d: no other replica in sync (ISR %v)", topic, partition, p.ISR)
	}
	order := []int32{to}
	for _, r := range p.Replicas {
		if r != to {
			order = append(order, r)
		}
	}
	var req kadm.AlterPartitionAssignmentsReq
	req.Assign(topic, partition, order)
	resp, err := adm.AlterPartitionAssignments(ctx, req)
	if err != nil {
		return from, to, fmt.Errorf("kcluster: reorder %s/%d: %w", topic, partition, err)
	}
	if r := resp[topic][partition]; r.Err != nil {
		return from, to, fmt.Errorf("kcluster: reorder %s/%d: %w %s", topic, partition, r.Err, r.ErrMessage)
	}
	res, err := adm.ElectLeaders(ctx, kadm.ElectPreferredReplica, kadm.TopicsSet{topic: {partition: {}}})
	if err != nil {
		return from, to, fmt.Errorf("kcluster: elect %s/%d: %w", topic, partition, err)
	}
	if r := res[topic][partition]; r.Err != nil {
		return from, to, fmt.Errorf("kcluster: elect %s/%d: %w %s", topic, partition, r.Err, r.ErrMessage)
	}
	return from, to, nil
}
