package share_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/redeliver-go/redeliver/adapters/franz/share"
	"github.com/redeliver-go/redeliver/checkpoint"
	"github.com/redeliver-go/redeliver/stream"
)

// A share group on an in-process Kafka (kfake): record 1 fails once and is
// held by the consumer for its backoff, then delivered again, alone, while
// the other records are accepted. In a program, give your brokers to
// kgo.SeedBrokers instead.
func Example() {
	cluster, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(1, "orders"))
	if err != nil {
		fmt.Println(err)
		return
	}
	defer cluster.Close()
	if err := produce(cluster.ListenAddrs(), "orders", "apple", "pear", "plum"); err != nil {
		fmt.Println(err)
		return
	}

	ctx, stop := context.WithCancel(context.Background())
	defer stop()
	var (
		mu    sync.Mutex // the consumer's lanes call the handler concurrently
		calls = map[int64]int{}
	)
	handler := stream.PerRecord(func(ctx context.Context, r *stream.Record) error {
		mu.Lock()
		defer mu.Unlock()
		calls[r.Offset]++
		if r.Offset == 1 && calls[r.Offset] == 1 {
			fmt.Printf("%s: failed\n", r.Value)
			return errors.New("warehouse unavailable")
		}
		fmt.Printf("%s: handled on delivery %d\n", r.Value, calls[r.Offset])
		if r.Offset == 1 {
			stop() // the others were handled before it: done with the example
		}
		return nil
	})
	proc, err := stream.NewProcessor(handler,
		stream.WithPolicy(checkpoint.Policy{MaxRetries: 3, Backoff: checkpoint.Fixed(200 * time.Millisecond)}))
	if err != nil {
		fmt.Println(err)
		return
	}
	consumer, err := share.New(proc,
		share.WithKgoOptions(kgo.SeedBrokers(cluster.ListenAddrs()...), kgo.ShareGroup("billing"), kgo.ConsumeTopics("orders")),
		share.WithResetEarliest()) // the records were produced before the group first read them
	if err != nil {
		fmt.Println(err)
		return
	}
	err = consumer.Run(ctx) // nil after a clean shutdown
	fmt.Println("stopped, error:", err)
	// Output:
	// apple: handled on delivery 1
	// pear: failed
	// plum: handled on delivery 1
	// pear: handled on delivery 2
	// stopped, error: <nil>
}

// produce writes values to topic, in order, in one batch.
func produce(brokers []string, topic string, values ...string) error {
	cl, err := kgo.NewClient(kgo.SeedBrokers(brokers...), kgo.DefaultProduceTopic(topic))
	if err != nil {
		return err
	}
	defer cl.Close()
	recs := make([]*kgo.Record, len(values))
	for i, v := range values {
		recs[i] = kgo.StringRecord(v)
	}
	return cl.ProduceSync(context.Background(), recs...).FirstErr()
}
