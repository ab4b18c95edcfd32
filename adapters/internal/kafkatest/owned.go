package kafkatest

import (
	"context"
	"errors"
	"runtime"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/redeliver-go/redeliver/stream"
	"github.com/redeliver-go/redeliver/stream/streamtest"
)

// Owned describes to [WithPublisherRefusals] and
// [BoundPublisherLivesWithRun] an adapter whose WithPublisher binds an
// unbound Publisher (new(pkg.Publisher), its [Adapter.BoundPublisher]) to
// a producer its consumer makes when Run starts and closes when Run ends:
// sarama's and confluent's. Their publishers are [OwnedPublisher]s.
type Owned struct {
	// Adapter is the adapter: its Name, New, NewPublisher and
	// BoundPublisher.
	Adapter Adapter
	// WithPublisher returns the adapter's WithPublisher(pub) (of its nil
	// *Publisher when pub is nil), an option for [Config.Options].
	WithPublisher func(pub OwnedPublisher) any
	// ProducerFrames name functions of the client's producers: a goroutine
	// with one of them on its stack is a producer's.
	ProducerFrames []string
	// ProducerEnds is how long the producer's goroutines may take to end
	// once Run has returned; 0: they have ended when it returns.
	ProducerEnds time.Duration
}

// OwnedPublisher is an adapter's *Publisher, for [Owned].
type OwnedPublisher interface {
	stream.Publisher
	// Bound reports whether the publisher produces through a producer:
	// made by NewPublisher, or bound to a consumer by WithPublisher.
	Bound() bool
}

// unbound returns a new unbound publisher of the adapter.
func (o Owned) unbound() OwnedPublisher {
	pub, _ := o.Adapter.BoundPublisher()
	return pub.(OwnedPublisher)
}

// ProducerGoroutines counts the goroutines of the client's producers.
func (o Owned) ProducerGoroutines() int {
	buf := make([]byte, 1<<22)
	buf = buf[:runtime.Stack(buf, true)]
	n := 0
	for _, g := range strings.Split(string(buf), "\n\n") {
		if slices.ContainsFunc(o.ProducerFrames, func(f string) bool { return strings.Contains(g, f) }) {
			n++
		}
	}
	return n
}

// DeadLetterProcessor returns a processor that dead-letters to topic
// through pub, its handler a success.
func DeadLetterProcessor(t testing.TB, pub stream.Publisher, topic string) *stream.Processor {
	t.Helper()
	dl, err := stream.DeadLetter(pub, topic)
	if err != nil {
		t.Fatal(err)
	}
	return NewProcessor(t, streamtest.Succeed, stream.WithExhaustionAction(dl))
}

// RefuseInitProducerID makes c refuse every InitProducerID request (the
// producer's idempotence) with ClusterAuthorizationFailed.
func RefuseInitProducerID(c *kfake.Cluster) {
	c.ControlKey(int16(kmsg.InitProducerID), func(req kmsg.Request) (kmsg.Response, error, bool) {
		c.KeepControl()
		resp := req.ResponseKind().(*kmsg.InitProducerIDResponse)
		resp.ErrorCode = kerr.ClusterAuthorizationFailed.Code
		return resp, nil, true
	})
}

// WaitProducersEnd waits at most within for the goroutines of the
// client's producers (o.ProducerGoroutines) to be no more than before,
// and fails t otherwise, saying after what.
func (o Owned) WaitProducersEnd(t testing.TB, before int, within time.Duration, after string) {
	t.Helper()
	deadline := time.Now().Add(within)
	for o.ProducerGoroutines() > before {
		if time.Now().After(deadline) {
			when := "when " + after
			if within > 0 {
				when = within.String() + " after " + after
			}
			t.Fatalf("%d goroutines of %s's producers %s, %d before: the producer was not closed", o.ProducerGoroutines(), o.Adapter.Name, when, before)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// WithPublisherRefusals: WithPublisher refuses, with an error that says
// what to do, a nil publisher, one with a producer of its own, and one
// bound to another consumer, and a refused New leaves no publisher bound;
// without it, a processor that dead-letters through a Publisher bound to
// nothing is refused (it would fail every record given up), while one
// whose publisher another consumer binds is not. A bound publisher that
// has a Close method refuses it: the consumer closes its producer.
func WithPublisherRefusals(t *testing.T, o Owned) {
	name := o.Adapter.Name
	newConsumer := func(proc *stream.Processor, group string, pubs ...OwnedPublisher) (Consumer, error) {
		cfg := Config{Addrs: []string{"127.0.0.1:1"}, Group: group, Topic: "t", Processor: proc}
		for _, pub := range pubs {
			cfg.Options = append(cfg.Options, o.WithPublisher(pub))
		}
		return o.Adapter.New(cfg)
	}
	_, addrs := NewCluster(t, "t", 1)
	own := o.Adapter.NewPublisher(t, addrs).(OwnedPublisher)

	unbound := o.unbound()
	if unbound.Bound() {
		t.Fatalf("a new(%s.Publisher) says it is bound", name)
	}
	proc := DeadLetterProcessor(t, unbound, "t.dlq")
	if c, err := newConsumer(proc, "g"); err == nil || c != nil ||
		!strings.Contains(err.Error(), `dead-letters to "t.dlq" through a `+name+`.Publisher bound to nothing`) || !strings.Contains(err.Error(), "WithPublisher(pub)") {
		t.Fatalf("New with a processor that dead-letters through an unbound publisher: %v, %v; want an error naming WithPublisher", c, err)
	}
	if unbound.Bound() {
		t.Fatal("a refused New bound the publisher")
	}
	c1, err := newConsumer(proc, "g", unbound)
	if err != nil || c1 == nil {
		t.Fatalf("New with WithPublisher: %v", err)
	}
	if !unbound.Bound() {
		t.Fatal("WithPublisher did not bind the publisher")
	}
	defer c1.Close()
	// The processor's publisher is bound (to c1): another consumer of the
	// same processor may publish through it.
	if c, err := newConsumer(proc, "g2"); err != nil {
		t.Fatalf("New of a processor whose publisher another consumer binds: %v", err)
	} else {
		c.Close()
	}
	for _, tc := range []struct {
		name string
		pub  OwnedPublisher
		want string
	}{
		{"nil", nil, "WithPublisher: nil publisher"},
		{"made by NewPublisher", own, "has a producer of its own (made by NewPublisher): give WithPublisher a new(" + name + ".Publisher)"},
		{"bound to another consumer", unbound, "bound to another consumer already"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			fresh := o.unbound()
			c, err := newConsumer(NewProcessor(t, streamtest.Succeed), "g3", fresh, tc.pub)
			if err == nil || c != nil || !strings.HasPrefix(err.Error(), name+": ") || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("New: %v, %v; want an error of %s saying %q", c, err, name, tc.want)
			}
			if fresh.Bound() {
				t.Error("a refused New left another publisher bound")
			}
		})
	}
	if closer, ok := unbound.(interface{ Close() error }); ok {
		if err := closer.Close(); err == nil || !strings.Contains(err.Error(), "the consumer closes its producer") {
			t.Errorf("Close of a publisher bound with WithPublisher: %v", err)
		}
	}
}

// BoundPublisherLivesWithRun: a Publisher bound with WithPublisher
// publishes while Run runs, through a producer that waits for every
// in-sync replica and is idempotent, and says so before and after; the
// producer is closed when Run returns, whether its context ended or Close
// was called.
func BoundPublisherLivesWithRun(t *testing.T, o Owned) {
	for _, stop := range []string{"context", "Close"} {
		t.Run(stop, func(t *testing.T) {
			c, addrs := NewCluster(t, "t", 1)
			CreateTopics(t, addrs, "t.dlq")
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
			before := o.ProducerGoroutines()
			pub := o.unbound()
			proc := DeadLetterProcessor(t, pub, "t.dlq")
			recs := []stream.Record{{Key: []byte("k"), Value: []byte("v")}}
			ctx, cancel := context.WithTimeout(context.Background(), Wait)
			defer cancel()
			cons, err := o.Adapter.New(Config{Addrs: addrs, Group: "g", Topic: "t", Processor: proc, Options: []any{o.WithPublisher(pub)}})
			if err != nil {
				t.Fatal(err)
			}
			if err := pub.Publish(ctx, "t.dlq", recs); err == nil || !strings.Contains(err.Error(), "not running yet") {
				t.Fatalf("Publish before Run: %v, want an error saying the consumer is not running yet", err)
			}
			r := StartConsumer(t, cons)
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
			if n := o.ProducerGoroutines(); n <= before {
				t.Fatalf("%d goroutines of %s's producers while Run runs, %d before: the producer is not there", n, o.Adapter.Name, before)
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
			o.WaitProducersEnd(t, before, o.ProducerEnds, "Run returned")
		})
	}
}

// CommitError answers req with code for every partition: a broker's
// refusal of a commit, for a kfake control function.
func CommitError(req *kmsg.OffsetCommitRequest, code int16) *kmsg.OffsetCommitResponse {
	return CommitErrors(req, func(int32) int16 { return code })
}

// CommitErrors answers req with codeOf(partition) for every partition.
func CommitErrors(req *kmsg.OffsetCommitRequest, codeOf func(partition int32) int16) *kmsg.OffsetCommitResponse {
	resp := req.ResponseKind().(*kmsg.OffsetCommitResponse)
	for _, rt := range req.Topics {
		t := kmsg.NewOffsetCommitResponseTopic()
		t.Topic = rt.Topic
		for _, rp := range rt.Partitions {
			p := kmsg.NewOffsetCommitResponseTopicPartition()
			p.Partition = rp.Partition
			p.ErrorCode = codeOf(rp.Partition)
			t.Partitions = append(t.Partitions, p)
		}
		resp.Topics = append(resp.Topics, t)
	}
	return resp
}
