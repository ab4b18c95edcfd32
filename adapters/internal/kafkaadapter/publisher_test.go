package kafkaadapter

import (
	"errors"
	"strings"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"
)

// producer stands for a client's producer type given as a pointer
// (confluent's *kafka.Producer).
type producer struct{ closed atomic.Int32 }

// sliceProducer stands for a producer behind an interface (sarama's
// SyncProducer) whose dynamic type is not comparable: comparing it with
// the interface's nil must not panic.
type sliceProducer []int

func (sliceProducer) Close() error { return nil }

type closer interface{ Close() error }

var errNotPublisher = errors.New("pkg: the Publisher has no producer")

// A Binding is bound to nothing until Bind, refuses a publisher with a
// producer of its own and one bound to another consumer, in the words the
// adapters' errors have used; Unbind undoes only its own binding.
func TestBindingRefusals(t *testing.T) {
	var b Binding[*producer]
	var o1, o2 Owned[*producer]
	if b.Owned() != nil {
		t.Fatal("a zero Binding is bound")
	}
	if err := b.Bind("pkg", &producer{}, &o1); err == nil ||
		err.Error() != "pkg: WithPublisher: the publisher has a producer of its own (made by NewPublisher): give WithPublisher a new(pkg.Publisher)" {
		t.Fatalf("Bind of a publisher with a producer of its own: %v", err)
	}
	if b.Owned() != nil {
		t.Fatal("a refused Bind bound the publisher")
	}
	if err := b.Bind("pkg", nil, &o1); err != nil {
		t.Fatal(err)
	}
	if err := b.Bind("pkg", nil, &o1); err != nil {
		t.Fatalf("Bind to the same consumer again: %v", err)
	}
	if err := b.Bind("pkg", nil, &o2); err == nil || err.Error() != "pkg: WithPublisher: the publisher is bound to another consumer already" {
		t.Fatalf("Bind to another consumer: %v", err)
	}
	b.Unbind(&o2)
	if b.Owned() != &o1 {
		t.Fatal("Unbind of another consumer unbound the publisher")
	}
	b.Unbind(&o1)
	if b.Owned() != nil {
		t.Fatal("Unbind left the publisher bound")
	}
	if err := b.Bind("pkg", nil, &o2); err != nil {
		t.Fatalf("Bind after Unbind: %v", err)
	}
}

// Producer gives the publisher's own producer when it has one; a bound
// publisher's before Run has made it, while Run runs, and after Run has
// ended; and notPublisher for one bound to nothing.
func TestBindingProducer(t *testing.T) {
	var b Binding[*producer]
	if _, _, err := b.Producer("pkg", "when Run starts", nil, errNotPublisher); err != errNotPublisher {
		t.Fatalf("Producer of a publisher bound to nothing: %v", err)
	}
	own := &producer{}
	if p, release, err := b.Producer("pkg", "when Run starts", own, errNotPublisher); err != nil || p != own || release == nil {
		t.Fatalf("Producer of a publisher with its own: %v, %v", p, err)
	} else {
		release()
	}

	var o Owned[*producer]
	if err := b.Bind("pkg", nil, &o); err != nil {
		t.Fatal(err)
	}
	if _, _, err := b.Producer("pkg", "when Run starts", nil, errNotPublisher); err == nil ||
		err.Error() != "pkg: the publisher's consumer is not running yet: its producer is made when Run starts" {
		t.Fatalf("Producer before Run: %v", err)
	}
	made := &producer{}
	if !o.Start(made) {
		t.Fatal("Start refused before Stop")
	}
	p, release, err := b.Producer("pkg", "when Run starts", nil, errNotPublisher)
	if err != nil || p != made {
		t.Fatalf("Producer while Run runs: %v, %v", p, err)
	}
	release()
	if !o.Stop(time.Second, func(p *producer) { p.closed.Add(1) }) || made.closed.Load() != 1 {
		t.Fatalf("Stop with no send in flight: closed %d times", made.closed.Load())
	}
	if _, _, err := b.Producer("pkg", "when Run starts", nil, errNotPublisher); err == nil ||
		err.Error() != "pkg: the publisher's consumer has stopped: its producer is closed (a Publisher given with WithPublisher publishes while the consumer's Run runs)" {
		t.Fatalf("Producer after Run: %v", err)
	}
	if o.Start(&producer{}) {
		t.Fatal("Start after Stop took the producer")
	}
}

// Stop closes the producer only once the sends in flight have returned:
// within its wait if they return in time, after it otherwise, when it
// reports false.
func TestOwnedStopWaitsForSends(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var b Binding[*producer]
		var o Owned[*producer]
		if err := b.Bind("pkg", nil, &o); err != nil {
			t.Fatal(err)
		}
		made := &producer{}
		o.Start(made)
		_, release, err := b.Producer("pkg", "when Run starts", nil, errNotPublisher)
		if err != nil {
			t.Fatal(err)
		}
		go func() {
			time.Sleep(time.Second)
			release()
		}()
		began := time.Now()
		if o.Stop(400*time.Millisecond, func(p *producer) { p.closed.Add(1) }) {
			t.Fatal("Stop reports the producer closed with a send in flight past its wait")
		}
		if took := time.Since(began); took != 400*time.Millisecond {
			t.Errorf("Stop returned after %v, want its wait, 400ms", took)
		}
		if made.closed.Load() != 0 {
			t.Fatal("the producer was closed under a send in flight")
		}
		synctest.Wait()
		time.Sleep(time.Second)
		synctest.Wait()
		if made.closed.Load() != 1 {
			t.Fatalf("the producer was closed %d times after the send returned, want once", made.closed.Load())
		}

		// A send that returns within the wait: Stop reports the producer
		// closed.
		var o2 Owned[*producer]
		var b2 Binding[*producer]
		_ = b2.Bind("pkg", nil, &o2)
		made2 := &producer{}
		o2.Start(made2)
		_, release2, _ := b2.Producer("pkg", "when Run starts", nil, errNotPublisher)
		go func() {
			time.Sleep(100 * time.Millisecond)
			release2()
		}()
		if !o2.Stop(400*time.Millisecond, func(p *producer) { p.closed.Add(1) }) || made2.closed.Load() != 1 {
			t.Fatalf("Stop with a send returning within its wait: closed %d times", made2.closed.Load())
		}
	})
}

// A producer behind an interface, whose dynamic type is not comparable,
// goes through Bind, Start, Producer and Stop without a panic.
func TestOwnedInterfaceProducer(t *testing.T) {
	var b Binding[closer]
	var o Owned[closer]
	if err := b.Bind("pkg", sliceProducer{1}, &o); err == nil || !strings.Contains(err.Error(), "a producer of its own") {
		t.Fatalf("Bind with a producer of its own: %v", err)
	}
	if err := b.Bind("pkg", nil, &o); err != nil {
		t.Fatal(err)
	}
	o.Start(sliceProducer{1})
	p, release, err := b.Producer("pkg", "when Run starts", nil, errNotPublisher)
	if err != nil || p == nil {
		t.Fatalf("Producer: %v, %v", p, err)
	}
	release()
	closed := false
	if !o.Stop(time.Second, func(p closer) { closed = p.Close() == nil }) || !closed {
		t.Fatal("Stop did not close the producer")
	}
}
