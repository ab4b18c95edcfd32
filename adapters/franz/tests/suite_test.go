package franz_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kversion"

	"github.com/redeliver-go/redeliver/adapters/franz"
	"github.com/redeliver-go/redeliver/adapters/internal/kafkatest"
	"github.com/redeliver-go/redeliver/stream"
)

// adapter describes the franz-go adapter to the tests every Kafka adapter
// runs. Options of a Config are kgo.Opt and franz.Option values.
var adapter = kafkatest.Adapter{
	Name: "franz",
	CommitHoldsRebalance: "franz-go joins the group and syncs only once no commit is in flight " +
		"(kgo's noCommitDuringJoinAndSync): a member learns that it lost a partition once its commit " +
		"has had an answer or the commit timeout (10s); in this test the first worker stops 19.95s after " +
		"the second consumer joins, whether or not the commit's wait ends at the revocation (issue 51)",
	Throughput: []any{franz.WithCommitWindow(500*time.Millisecond, 50000)},

	New: func(cfg kafkatest.Config) (kafkatest.Consumer, error) {
		kopts := []kgo.Opt{kgo.SeedBrokers(cfg.Addrs...), kgo.ConsumerGroup(cfg.Group), kgo.ConsumeTopics(cfg.Topic),
			kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()), kgo.FetchMaxWait(cfg.FetchWait())}
		if cfg.ReadCommitted {
			kopts = append(kopts, kgo.FetchIsolationLevel(kgo.ReadCommitted()))
		}
		var fopts []franz.Option
		if cfg.MaxBatch > 0 {
			fopts = append(fopts, franz.WithMaxBatch(cfg.MaxBatch))
		}
		if cfg.MaxWait > 0 {
			fopts = append(fopts, franz.WithMaxWait(cfg.MaxWait))
		}
		if cfg.Logger != nil {
			fopts = append(fopts, franz.WithLogger(cfg.Logger))
		}
		if cfg.OnAssigned != nil {
			fopts = append(fopts, franz.WithOnAssigned(cfg.OnAssigned))
		}
		if cfg.Drain != 0 {
			fopts = append(fopts, franz.WithDrain(cfg.Drain))
		}
		if cfg.FailAfter != 0 {
			fopts = append(fopts, franz.WithFailAfter(cfg.FailAfter))
		}
		for _, o := range cfg.Options {
			switch o := o.(type) {
			case kgo.Opt:
				kopts = append(kopts, o)
			case franz.Option:
				fopts = append(fopts, o)
			default:
				return nil, fmt.Errorf("franz tests: option %T", o)
			}
		}
		c, err := franz.New(cfg.Processor, append(fopts, franz.WithKgoOptions(kopts...))...)
		if err != nil {
			return nil, err
		}
		return c, nil
	},
	BoundPublisher: func() (stream.Publisher, any) {
		pub := new(franz.Publisher)
		return pub, franz.WithPublisher(pub)
	},
	NewPublisher: func(t testing.TB, addrs []string) stream.Publisher {
		cl, err := kgo.NewClient(kgo.SeedBrokers(addrs...), kgo.RecordPartitioner(kgo.RoundRobinPartitioner()), kgo.UnknownTopicRetries(0))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(cl.Close)
		pub, err := franz.NewPublisher(cl)
		if err != nil {
			t.Fatal(err)
		}
		return pub
	},
	// franz-go fetches by topic ID from brokers of 2.8 and later, under
	// which a topic created again is another topic.
	FetchByName: []any{kgo.MaxVersions(kversion.V2_7_0())},
}

// TestAdapter runs the tests every Kafka adapter passes.
func TestAdapter(t *testing.T) { kafkatest.Run(t, adapter) }

// TestCoalesce runs the shared checks of coalesced success commits.
func TestCoalesce(t *testing.T) {
	kafkatest.RunCoalesce(t, adapter, func(d time.Duration, n int) any { return franz.WithCommitWindow(d, n) })
}
