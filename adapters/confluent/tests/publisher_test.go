package tests

import (
	"context"
	"errors"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/confluentinc/confluent-kafka-go/v2/kafka"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/redeliver-go/redeliver/adapters/confluent"
	"github.com/redeliver-go/redeliver/adapters/internal/kafkatest"
	"github.com/redeliver-go/redeliver/stream"
	"github.com/redeliver-go/redeliver/stream/streamtest"
)

// deadLetterProcessor returns a processor that dead-letters to topic
// through pub.
func deadLetterProcessor(t *testing.T, pub stream.Publisher, topic string) *stream.Processor {
	t.Helper()
	dl, err := stream.DeadLetter(pub, topic)
	if err != nil {
		t.Fatal(err)
	}
	return kafkatest.NewProcessor(t, streamtest.Succeed, stream.WithExhaustionAction(dl))
}

// WithPublisher refuses, with an error that says what to do, a nil
// publisher, one with a producer of its own, and one bound to another
// consumer; without it, a processor that dead-letters through a Publisher
// bound to nothing is refused (it would fail every record given up).
func TestWithPublisherRefusals(t *testing.T) {
	group := func(g string) confluent.Option {
		return confluent.WithGroup(kafka.ConfigMap{"bootstrap.servers": "127.0.0.1:1", "group.id": g}, "t")
	}
	p, err := kafka.NewProducer(&kafka.ConfigMap{"bootstrap.servers": "127.0.0.1:1", "log_level": 0})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	own, err := confluent.NewPublisher(p)
	if err != nil {
		t.Fatal(err)
	}

	unbound := new(confluent.Publisher)
	if unbound.Bound() {
		t.Fatal("a new(confluent.Publisher) says it is bound")
	}
	proc := deadLetterProcessor(t, unbound, "t.dlq")
	if c, err := confluent.New(proc, group("g")); err == nil || c != nil ||
		!strings.Contains(err.Error(), `dead-letters to "t.dlq" through a confluent.Publisher bound to nothing`) || !strings.Contains(err.Error(), "WithPublisher(pub)") {
		t.Fatalf("New with a processor that dead-letters through an unbound publisher: %v, %v; want an error naming WithPublisher", c, err)
	}
	if unbound.Bound() {
		t.Fatal("a refused New bound the publisher")
	}
	c1, err := confluent.New(proc, group("g"), confluent.WithPublisher(unbound))
	if err != nil || c1 == nil {
		t.Fatalf("New with WithPublisher: %v", err)
	}
	if !unbound.Bound() {
		t.Fatal("WithPublisher did not bind the publisher")
	}
	defer c1.Close()
	// The processor's publisher is bound (to c1): another consumer of the
	// same processor may publish through it.
	if c, err := confluent.New(proc, group("g2")); err != nil {
		t.Fatalf("New of a processor whose publisher another consumer binds: %v", err)
	} else {
		c.Close()
	}
	for _, tc := range []struct {
		name string
		pub  *confluent.Publisher
		want string
	}{
		{"nil", nil, "WithPublisher: nil publisher"},
		{"made by NewPublisher", own, "has a producer of its own (made by NewPublisher)"},
		{"bound to another consumer", unbound, "bound to another consumer already"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			fresh := new(confluent.Publisher)
			c, err := confluent.New(kafkatest.NewProcessor(t, streamtest.Succeed), group("g3"), confluent.WithPublisher(fresh), confluent.WithPublisher(tc.pub))
			if err == nil || c != nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("New: %v, %v; want an error saying %q", c, err, tc.want)
			}
			if fresh.Bound() {
				t.Error("a refused New left another publisher bound")
			}
		})
	}
}

// producerGoroutines counts the goroutines of confluent-kafka-go's
// producers.
func producerGoroutines() int {
	buf := make([]byte, 1<<22)
	buf = buf[:runtime.Stack(buf, true)]
	n := 0
	for _, g := range strings.Split(string(buf), "\n\n") {
		if strings.Contains(g, "kafka.poller(") || strings.Contains(g, "kafka.channelProducer(") {
			n++
		}
	}
	return n
}

// A Publisher bound with WithPublisher publishes while Run runs, through a
// producer that waits for every in-sync replica and is idempotent, and
// says so before and after; the producer is closed when Run returns,
// whether its context ended or Close was called.
func TestBoundPublisherLivesWithRun(t *testing.T) {
	for _, stop := range []string{"context", "Close"} {
		t.Run(stop, func(t *testing.T) {
			c, addrs := kafkatest.NewCluster(t, "t", 1)
			kafkatest.CreateTopics(t, addrs, "t.dlq")
			var (
				mu         sync.Mutex
				acks       []int16
				idempotent []bool
				inits      int
			)
			c.ControlKey(int16(kmsg.Produce), func(req kmsg.Request) (kmsg.Response, error, bool) {
				c.KeepControl()
				pr := req.(*kmsg.ProduceRequest)
				mu.Lock()
				defer mu.Unlock()
				for _, tp := range pr.Topics {
					if tp.Topic != "t.dlq" {
						continue
					}
					acks = append(acks, pr.Acks)
					for _, p := range tp.Partitions {
						var b kmsg.RecordBatch
						if err := b.ReadFrom(p.Records); err == nil {
							idempotent = append(idempotent, b.ProducerID >= 0)
						}
					}
				}
				return nil, nil, false
			})
			c.ControlKey(int16(kmsg.InitProducerID), func(kmsg.Request) (kmsg.Response, error, bool) {
				c.KeepControl()
				mu.Lock()
				inits++
				mu.Unlock()
				return nil, nil, false
			})
			before := producerGoroutines()
			pub := new(confluent.Publisher)
			proc := deadLetterProcessor(t, pub, "t.dlq")
			recs := []stream.Record{{Key: []byte("k"), Value: []byte("v")}}
			ctx, cancel := context.WithTimeout(context.Background(), kafkatest.Wait)
			defer cancel()
			cons, err := adapter.New(kafkatest.Config{Addrs: addrs, Group: "g", Topic: "t", Processor: proc, Options: []any{confluent.WithPublisher(pub)}})
			if err != nil {
				t.Fatal(err)
			}
			if err := pub.Publish(ctx, "t.dlq", recs); err == nil || !strings.Contains(err.Error(), "not running yet") {
				t.Fatalf("Publish before Run: %v, want an error saying the consumer is not running yet", err)
			}
			r := kafkatest.StartConsumer(t, cons)
			for {
				err := pub.Publish(ctx, "t.dlq", recs)
				if err == nil {
					break
				}
				if !strings.Contains(err.Error(), "not running yet") || ctx.Err() != nil {
					t.Fatalf("Publish while Run runs: %v", err)
				}
				time.Sleep(20 * time.Millisecond)
			}
			mu.Lock()
			if len(acks) == 0 || len(idempotent) == 0 || inits == 0 {
				t.Errorf("produce requests seen: acks %v, idempotent batches %v, InitProducerID requests %d", acks, idempotent, inits)
			}
			for i, a := range acks {
				if a != -1 {
					t.Errorf("produce request %d asks acks %d, want -1 (all in-sync replicas)", i, a)
				}
			}
			for i, ok := range idempotent {
				if !ok {
					t.Errorf("produce batch %d has no producer ID: the producer is not idempotent", i)
				}
			}
			mu.Unlock()
			if n := producerGoroutines(); n <= before {
				t.Fatalf("%d goroutines of producers while Run runs, %d before: the producer is not there", n, before)
			}
			if stop == "Close" {
				if err := cons.Close(); err != nil {
					t.Fatal(err)
				}
				<-r.Done()
			}
			if err := r.Stop(t); err != nil && !errors.Is(err, stream.ErrClosed) {
				t.Fatalf("Run: %v", err)
			}
			if err := pub.Publish(ctx, "t.dlq", recs); err == nil || !strings.Contains(err.Error(), "has stopped: its producer is closed") {
				t.Fatalf("Publish after Run: %v, want an error saying the consumer has stopped", err)
			}
			if n := producerGoroutines(); n > before {
				t.Fatalf("%d goroutines of producers after Run returned, %d before: the producer was not closed", n, before)
			}
		})
	}
}

// A producer the brokers refuse (here its idempotence: InitProducerID
// refused, fatal to librdkafka) is said at Error, with librdkafka's error:
// its publishes fail from then on.
func TestBoundPublisherFatalErrorIsLogged(t *testing.T) {
	c, addrs := kafkatest.NewCluster(t, "t", 1)
	c.ControlKey(int16(kmsg.InitProducerID), func(req kmsg.Request) (kmsg.Response, error, bool) {
		c.KeepControl()
		resp := req.ResponseKind().(*kmsg.InitProducerIDResponse)
		resp.ErrorCode = kerr.ClusterAuthorizationFailed.Code
		return resp, nil, true
	})
	pub := new(confluent.Publisher)
	var logs kafkatest.LogBuffer
	kafkatest.Start(t, adapter, kafkatest.Config{Addrs: addrs, Group: "g", Topic: "t", Processor: deadLetterProcessor(t, pub, "t.dlq"),
		Logger: logs.Logger(), Options: []any{confluent.WithPublisher(pub)}})
	logs.WaitFor(t, `level=ERROR msg="redeliver: the dead-letter producer of WithPublisher failed`, 10*time.Second)
	if !strings.Contains(logs.String(), "uthoriz") {
		t.Errorf("the Error line does not give librdkafka's error: %s", logs.String())
	}
}
