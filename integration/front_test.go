package integration_test

import (
	"context"
	"fmt"
	"net"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/confluentinc/confluent-kafka-go/v2/kafka"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/redeliver-go/redeliver/integration/conformance"
)

// TestFrontCarriesEveryBroker: librdkafka, bootstrapped from a
// conformance.Front on one broker of three, learns only the front's
// addresses for all three and reaches each through the front's dial
// function, so the network-fault scenarios' faults reach every connection
// of the confluent adapter's consumers. Without the front's rewriting of
// the brokers' addresses, librdkafka's metadata names kfake's own ports,
// and the dial function sees the bootstrap broker alone.
func TestFrontCarriesEveryBroker(t *testing.T) {
	const topic, parts, perPart = "front", 6, 20
	c, err := kfake.NewCluster(kfake.NumBrokers(3), kfake.SeedTopics(parts, topic))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	brokers := c.ListenAddrs()
	// kfake picks each partition's leader at random, and a broker that
	// leads none may never be dialed: every broker leads two.
	for p := range int32(parts) {
		if err := c.MoveTopicPartition(topic, p, p%3); err != nil {
			t.Fatal(err)
		}
	}

	prod, err := kgo.NewClient(kgo.SeedBrokers(brokers...), kgo.RecordPartitioner(kgo.ManualPartitioner()))
	if err != nil {
		t.Fatal(err)
	}
	defer prod.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for p := range int32(parts) {
		for i := range perPart {
			r := &kgo.Record{Topic: topic, Partition: p, Value: fmt.Appendf(nil, "%d-%d", p, i)}
			if err := prod.ProduceSync(ctx, r).FirstErr(); err != nil {
				t.Fatal(err)
			}
		}
	}

	var (
		mu     sync.Mutex
		dialed = map[string]int{}
	)
	front := conformance.NewFront(t, func(ctx context.Context, network, address string) (net.Conn, error) {
		mu.Lock()
		dialed[address]++
		mu.Unlock()
		var d net.Dialer
		return d.DialContext(ctx, network, address)
	})
	boot, err := front.Bootstrap(brokers[:1])
	if err != nil {
		t.Fatal(err)
	}
	cons, err := kafka.NewConsumer(&kafka.ConfigMap{
		"bootstrap.servers": boot[0],
		"group.id":          "front-group",
		"auto.offset.reset": "earliest",
		"log_level":         3,
	})
	if err != nil {
		t.Fatal(err)
	}
	defer cons.Close()
	if err := cons.Subscribe(topic, nil); err != nil {
		t.Fatal(err)
	}
	got := 0
	for deadline := time.Now().Add(30 * time.Second); got < parts*perPart; {
		if time.Now().After(deadline) {
			t.Fatalf("consumed %d of %d records in 30s through the front", got, parts*perPart)
		}
		if m, err := cons.ReadMessage(100 * time.Millisecond); err == nil && m.TopicPartition.Error == nil {
			got++
		}
	}

	md, err := cons.GetMetadata(nil, true, 10_000)
	if err != nil {
		t.Fatal(err)
	}
	for _, b := range md.Brokers {
		addr := net.JoinHostPort(b.Host, strconv.Itoa(b.Port))
		if slices.Contains(brokers, addr) {
			t.Errorf("librdkafka knows broker %d by its own address %s, not the front's", b.ID, addr)
		}
	}
	if len(md.Brokers) != len(brokers) {
		t.Errorf("librdkafka knows %d brokers, want %d", len(md.Brokers), len(brokers))
	}
	mu.Lock()
	defer mu.Unlock()
	for _, b := range brokers {
		if dialed[b] == 0 {
			t.Errorf("no connection to broker %s went through the front's dial function (dialed: %v)", b, dialed)
		}
	}
}
