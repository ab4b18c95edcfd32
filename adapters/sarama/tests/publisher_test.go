package tests

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/redeliver-go/redeliver/adapters/internal/kafkatest"
	rdsarama "github.com/redeliver-go/redeliver/adapters/sarama"
	"github.com/redeliver-go/redeliver/stream"
)

// owned describes the sarama adapter's WithPublisher to the publisher
// tests it shares with the confluent adapter.
var owned = kafkatest.Owned{
	Adapter: adapter,
	WithPublisher: func(pub kafkatest.OwnedPublisher) any {
		p, _ := pub.(*rdsarama.Publisher)
		return rdsarama.WithPublisher(p)
	},
	ProducerFrames: []string{"sarama.(*asyncProducer)", "sarama.(*syncProducer)"},
	ProducerEnds:   5 * time.Second,
}

// TestWithPublisherRefusals: see kafkatest.WithPublisherRefusals.
func TestWithPublisherRefusals(t *testing.T) { kafkatest.WithPublisherRefusals(t, owned) }

// TestBoundPublisherLivesWithRun: see kafkatest.BoundPublisherLivesWithRun.
func TestBoundPublisherLivesWithRun(t *testing.T) { kafkatest.BoundPublisherLivesWithRun(t, owned) }

// A publish in flight when Run ends: Run returns without waiting for it
// beyond its bound, saying so at Warn; the publish goes on, and the
// producer is closed once it has returned, not under it (sarama's producer
// panics on a send after its Close).
func TestBoundPublisherCloseWaitsForSendInFlight(t *testing.T) {
	c, addrs := kafkatest.NewCluster(t, "t", 1)
	kafkatest.CreateTopics(t, addrs, "t.dlq")
	held, release := make(chan struct{}), make(chan struct{})
	var once sync.Once
	c.ControlKey(int16(kmsg.Produce), func(req kmsg.Request) (kmsg.Response, error, bool) {
		c.KeepControl()
		for _, tp := range req.(*kmsg.ProduceRequest).Topics {
			if tp.Topic == "t.dlq" {
				once.Do(func() { close(held) })
				c.SleepControl(func() { <-release })
			}
		}
		return nil, nil, false
	})
	before := owned.ProducerGoroutines()
	pub := new(rdsarama.Publisher)
	var logs kafkatest.LogBuffer
	cons, err := adapter.New(kafkatest.Config{Addrs: addrs, Group: "g", Topic: "t", Processor: kafkatest.DeadLetterProcessor(t, pub, "t.dlq"),
		Logger: logs.Logger(), Options: []any{rdsarama.WithPublisher(pub)}})
	if err != nil {
		t.Fatal(err)
	}
	r := kafkatest.StartConsumer(t, cons)
	// Records large enough that sarama's pipeline fills while the broker
	// holds the first request: the send is still handing records to the
	// producer when Run ends.
	recs := make([]stream.Record, 3000)
	for i := range recs {
		recs[i] = stream.Record{Value: make([]byte, 10<<10)}
	}
	published := make(chan error, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), kafkatest.Wait)
		defer cancel()
		for {
			err := pub.Publish(ctx, "t.dlq", recs)
			if err == nil || !strings.Contains(err.Error(), "not running yet") || ctx.Err() != nil {
				published <- err
				return
			}
			time.Sleep(20 * time.Millisecond)
		}
	}()
	select {
	case <-held:
	case <-time.After(kafkatest.Wait):
		t.Fatal("no produce request to t.dlq")
	}
	time.Sleep(100 * time.Millisecond) // the pipeline fills behind the held request
	began := time.Now()
	if err := r.Stop(t); err != nil {
		t.Fatalf("Run: %v", err)
	}
	if took := time.Since(began); took > 3*time.Second {
		t.Errorf("Run returned %v after its context ended, with a send in flight", took)
	}
	logs.WaitFor(t, "the dead-letter producer did not close in time", time.Second)
	close(release)
	if err := <-published; err != nil {
		t.Errorf("the publish in flight when Run ended: %v", err)
	}
	owned.WaitProducersEnd(t, before, 10*time.Second, "the send returned")
}

// A producer the brokers refuse (here its idempotence: InitProducerID
// refused) holds the consumer, which says so at Warn, with the broker's
// error, not only at Debug.
func TestBoundPublisherRefusedProducerIsWarned(t *testing.T) {
	c, addrs := kafkatest.NewCluster(t, "t", 1)
	kafkatest.RefuseInitProducerID(c)
	pub := new(rdsarama.Publisher)
	var logs kafkatest.LogBuffer
	kafkatest.Start(t, adapter, kafkatest.Config{Addrs: addrs, Group: "g", Topic: "t", Processor: kafkatest.DeadLetterProcessor(t, pub, "t.dlq"),
		Logger: logs.Logger(), Options: []any{rdsarama.WithPublisher(pub)}})
	logs.WaitFor(t, `level=WARN msg="redeliver: the dead-letter producer of WithPublisher was not made`, 5*time.Second)
	if !strings.Contains(logs.String(), `error="kafka server: The client is not authorized to send this request type"`) {
		t.Errorf("the Warn line does not give the broker's error: %s", logs.String())
	}
}

// A dead-letter producer the brokers keep refusing holds the consumer back
// as a problem that stops all consumption does: Run ends with the broker's
// error after WithFailAfter, instead of waiting for it for ever.
func TestBoundPublisherRefusedProducerEndsRun(t *testing.T) {
	c, addrs := kafkatest.NewCluster(t, "t", 1)
	kafkatest.RefuseInitProducerID(c)
	pub := new(rdsarama.Publisher)
	var logs kafkatest.LogBuffer
	const failAfter = 2 * time.Second
	r := kafkatest.Start(t, adapter, kafkatest.Config{Addrs: addrs, Group: "g", Topic: "t", Processor: kafkatest.DeadLetterProcessor(t, pub, "t.dlq"),
		Logger: logs.Logger(), FailAfter: failAfter, Options: []any{rdsarama.WithPublisher(pub)}})
	start := time.Now()
	select {
	case <-r.Done():
	case <-time.After(failAfter + 15*time.Second):
		t.Fatalf("Run still runs %v after the start, with the dead-letter producer refused and WithFailAfter(%v):\n%s", time.Since(start), failAfter, logs.String())
	}
	if err := r.Err(); err == nil || !strings.Contains(err.Error(), "dead-letter producer") || !strings.Contains(err.Error(), "not authorized") {
		t.Errorf("Run = %v, want the refused producer's error", err)
	}
	if took := time.Since(start); took < failAfter {
		t.Errorf("Run ended after %v, before WithFailAfter's %v", took, failAfter)
	}
}
