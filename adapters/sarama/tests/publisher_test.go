package tests

import (
	"context"
	"errors"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/IBM/sarama"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/redeliver-go/redeliver/adapters/internal/kafkatest"
	rdsarama "github.com/redeliver-go/redeliver/adapters/sarama"
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
	group := func(g string) rdsarama.Option { return rdsarama.WithGroup([]string{"127.0.0.1:1"}, g, "t") }
	_, addrs := kafkatest.NewCluster(t, "t", 1)
	sc := saramaConfig()
	sc.Producer.Return.Successes = true
	client, err := sarama.NewClient(addrs, sc)
	if err != nil {
		t.Fatal(err)
	}
	defer client.Close()
	own, err := rdsarama.NewPublisher(client)
	if err != nil {
		t.Fatal(err)
	}
	defer own.Close()

	unbound := new(rdsarama.Publisher)
	if unbound.Bound() {
		t.Fatal("a new(sarama.Publisher) says it is bound")
	}
	proc := deadLetterProcessor(t, unbound, "t.dlq")
	if c, err := rdsarama.New(proc, group("g")); err == nil || c != nil ||
		!strings.Contains(err.Error(), `dead-letters to "t.dlq" through a sarama.Publisher bound to nothing`) || !strings.Contains(err.Error(), "WithPublisher(pub)") {
		t.Fatalf("New with a processor that dead-letters through an unbound publisher: %v, %v; want an error naming WithPublisher", c, err)
	}
	if unbound.Bound() {
		t.Fatal("a refused New bound the publisher")
	}
	c1, err := rdsarama.New(proc, group("g"), rdsarama.WithPublisher(unbound))
	if err != nil || c1 == nil {
		t.Fatalf("New with WithPublisher: %v", err)
	}
	if !unbound.Bound() {
		t.Fatal("WithPublisher did not bind the publisher")
	}
	defer c1.Close()
	// The processor's publisher is bound (to c1): another consumer of the
	// same processor may publish through it.
	if c, err := rdsarama.New(proc, group("g2")); err != nil {
		t.Fatalf("New of a processor whose publisher another consumer binds: %v", err)
	} else {
		c.Close()
	}
	for _, tc := range []struct {
		name string
		pub  *rdsarama.Publisher
		want string
	}{
		{"nil", nil, "WithPublisher: nil publisher"},
		{"made by NewPublisher", own, "has a producer of its own (made by NewPublisher)"},
		{"bound to another consumer", unbound, "bound to another consumer already"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			fresh := new(rdsarama.Publisher)
			c, err := rdsarama.New(kafkatest.NewProcessor(t, streamtest.Succeed), group("g3"), rdsarama.WithPublisher(fresh), rdsarama.WithPublisher(tc.pub))
			if err == nil || c != nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("New: %v, %v; want an error saying %q", c, err, tc.want)
			}
			if fresh.Bound() {
				t.Error("a refused New left another publisher bound")
			}
		})
	}
	if err := unbound.Close(); err == nil || !strings.Contains(err.Error(), "the consumer closes its producer") {
		t.Errorf("Close of a publisher bound with WithPublisher: %v", err)
	}
}

// producerGoroutines counts the goroutines of sarama's producers.
func producerGoroutines() int {
	buf := make([]byte, 1<<22)
	buf = buf[:runtime.Stack(buf, true)]
	n := 0
	for _, g := range strings.Split(string(buf), "\n\n") {
		if strings.Contains(g, "sarama.(*asyncProducer)") || strings.Contains(g, "sarama.(*syncProducer)") {
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
				mu          sync.Mutex
				acks        []int16
				idempotent  []bool
				initProducs int
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
				initProducs++
				mu.Unlock()
				return nil, nil, false
			})
			before := producerGoroutines()
			pub := new(rdsarama.Publisher)
			proc := deadLetterProcessor(t, pub, "t.dlq")
			recs := []stream.Record{{Key: []byte("k"), Value: []byte("v")}}
			ctx, cancel := context.WithTimeout(context.Background(), kafkatest.Wait)
			defer cancel()
			cons, err := adapter.New(kafkatest.Config{Addrs: addrs, Group: "g", Topic: "t", Processor: proc, Options: []any{rdsarama.WithPublisher(pub)}})
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
			if len(acks) == 0 || len(idempotent) == 0 || initProducs == 0 {
				t.Errorf("produce requests seen: acks %v, idempotent batches %v, InitProducerID requests %d", acks, idempotent, initProducs)
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
				t.Fatalf("%d goroutines of sarama's producers while Run runs, %d before: the producer is not there", n, before)
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
			// The producer's goroutines end with its Close.
			deadline := time.Now().Add(5 * time.Second)
			for producerGoroutines() > before {
				if time.Now().After(deadline) {
					t.Fatalf("%d goroutines of sarama's producers 5s after Run returned, %d before: the producer was not closed", producerGoroutines(), before)
				}
				time.Sleep(20 * time.Millisecond)
			}
		})
	}
}

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
	before := producerGoroutines()
	pub := new(rdsarama.Publisher)
	var logs kafkatest.LogBuffer
	cons, err := adapter.New(kafkatest.Config{Addrs: addrs, Group: "g", Topic: "t", Processor: deadLetterProcessor(t, pub, "t.dlq"),
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
	deadline := time.Now().Add(10 * time.Second)
	for producerGoroutines() > before {
		if time.Now().After(deadline) {
			t.Fatalf("%d goroutines of sarama's producers 10s after the send returned, %d before: the producer was not closed", producerGoroutines(), before)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// A producer the brokers refuse (here its idempotence: InitProducerID
// refused) holds the consumer, which says so at Warn, with the broker's
// error, not only at Debug.
func TestBoundPublisherRefusedProducerIsWarned(t *testing.T) {
	c, addrs := kafkatest.NewCluster(t, "t", 1)
	c.ControlKey(int16(kmsg.InitProducerID), func(req kmsg.Request) (kmsg.Response, error, bool) {
		c.KeepControl()
		resp := req.ResponseKind().(*kmsg.InitProducerIDResponse)
		resp.ErrorCode = kerr.ClusterAuthorizationFailed.Code
		return resp, nil, true
	})
	pub := new(rdsarama.Publisher)
	var logs kafkatest.LogBuffer
	kafkatest.Start(t, adapter, kafkatest.Config{Addrs: addrs, Group: "g", Topic: "t", Processor: deadLetterProcessor(t, pub, "t.dlq"),
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
	c.ControlKey(int16(kmsg.InitProducerID), func(req kmsg.Request) (kmsg.Response, error, bool) {
		c.KeepControl()
		resp := req.ResponseKind().(*kmsg.InitProducerIDResponse)
		resp.ErrorCode = kerr.ClusterAuthorizationFailed.Code
		return resp, nil, true
	})
	pub := new(rdsarama.Publisher)
	var logs kafkatest.LogBuffer
	const failAfter = 2 * time.Second
	r := kafkatest.Start(t, adapter, kafkatest.Config{Addrs: addrs, Group: "g", Topic: "t", Processor: deadLetterProcessor(t, pub, "t.dlq"),
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
