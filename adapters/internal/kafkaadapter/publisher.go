package kafkaadapter

import (
	"fmt"
	"sync"
	"time"
)

// Owned is the producer a consumer makes for the publishers given to it
// with WithPublisher (adapters/sarama's sarama.SyncProducer,
// adapters/confluent's *kafka.Producer): given by [Owned.Start] once Run
// has made it, taken away and closed by [Owned.Stop] when Run ends, once
// the sends in flight have returned (closing a client's producer under a
// send would make sarama's panic, and librdkafka's use freed memory).
// Its zero value has no producer yet.
type Owned[P comparable] struct {
	mu       sync.Mutex
	producer P              // while Run runs
	stopped  bool           // Run has ended: no producer again
	sends    sync.WaitGroup // sends in flight through the producer
}

// Start gives o its producer p; it returns false (and o takes nothing)
// when Run has ended meanwhile: the caller then closes p.
func (o *Owned[P]) Start(p P) bool {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.stopped {
		return false
	}
	o.producer = p
	return true
}

// acquire returns the producer and counts a send in flight, which the
// caller ends with o.sends.Done. pkg names the adapter and made says when
// Run makes the producer, in the error before it.
func (o *Owned[P]) acquire(pkg, made string) (P, error) {
	o.mu.Lock()
	defer o.mu.Unlock()
	var none P
	switch {
	case o.stopped:
		return none, fmt.Errorf("%s: the publisher's consumer has stopped: its producer is closed (a Publisher given with WithPublisher publishes while the consumer's Run runs)", pkg)
	case o.producer == none:
		return none, fmt.Errorf("%s: the publisher's consumer is not running yet: its producer is made %s", pkg, made)
	}
	o.sends.Add(1)
	return o.producer, nil
}

// Stop takes the producer away, so that no send starts again, and once
// the sends in flight have returned closes it with closeProducer, waiting
// for that at most wait. It reports whether the producer was closed within
// wait (true when there was none); if not, closeProducer runs when the
// last send returns.
func (o *Owned[P]) Stop(wait time.Duration, closeProducer func(P)) bool {
	o.mu.Lock()
	p := o.producer
	var none P
	o.producer, o.stopped = none, true
	o.mu.Unlock()
	if p == none {
		return true
	}
	closed := make(chan struct{})
	go func() {
		defer close(closed)
		o.sends.Wait()
		closeProducer(p)
	}()
	t := time.NewTimer(wait)
	defer t.Stop()
	select {
	case <-closed:
		return true
	case <-t.C:
		return false
	}
}

// Binding is the part of an adapter's Publisher made unbound
// (new(pkg.Publisher)) that WithPublisher binds to the [Owned] producer of
// a consumer; beside it the Publisher keeps the producer of its own that
// NewPublisher gives it. Its zero value is bound to nothing. It is safe
// for concurrent use.
type Binding[P comparable] struct {
	mu    sync.Mutex
	owned *Owned[P] // the producer of the consumer WithPublisher bound it to
}

// Bind binds b to the producer o of a consumer, unless the publisher has a
// producer of its own (own, NewPublisher's) or b is bound to another
// consumer; pkg names the adapter in the error.
func (b *Binding[P]) Bind(pkg string, own P, o *Owned[P]) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	var none P
	switch {
	case own != none:
		return fmt.Errorf("%s: WithPublisher: the publisher has a producer of its own (made by NewPublisher): give WithPublisher a new(%s.Publisher)", pkg, pkg)
	case b.owned != nil && b.owned != o:
		return fmt.Errorf("%s: WithPublisher: the publisher is bound to another consumer already", pkg)
	}
	b.owned = o
	return nil
}

// Unbind undoes Bind, for a New that fails after it.
func (b *Binding[P]) Unbind(o *Owned[P]) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.owned == o {
		b.owned = nil
	}
}

// Owned returns the consumer's producer b is bound to, or nil.
func (b *Binding[P]) Owned() *Owned[P] {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.owned
}

// Producer returns the producer a publish goes through, and release, to
// call once the publish's sends have returned: own, the publisher's
// producer of its own (NewPublisher's), when it has one; otherwise the
// producer of the consumer b is bound to, while that consumer's Run runs
// (release then lets Run close the producer). It returns notPublisher
// for a publisher bound to nothing, and an error that says so before Run
// has made the producer (made says when it does, as "when the consumer's
// Run starts") and after Run has ended; pkg names the adapter.
func (b *Binding[P]) Producer(pkg, made string, own P, notPublisher error) (producer P, release func(), err error) {
	var none P
	if own != none {
		return own, func() {}, nil
	}
	o := b.Owned()
	if o == nil {
		return none, nil, notPublisher
	}
	if producer, err = o.acquire(pkg, made); err != nil {
		return none, nil, err
	}
	return producer, o.sends.Done, nil
}
