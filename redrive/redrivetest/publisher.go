package redrivetest

import (
	"context"
	"fmt"
	"slices"
	"sync"

	"github.com/redeliver-go/redeliver/stream"
)

// Publisher is an in-memory [stream.Publisher] that records what it is
// given, for tests of a scheduler's decisions without a broker. Fail makes
// a topic refuse records. It is safe for concurrent use.
type Publisher struct {
	mu      sync.Mutex
	records []stream.Record
	failing map[string]error
	refuse  func(stream.Record) error
}

// Publish records recs, or returns the error set for topic by Fail.
func (p *Publisher) Publish(ctx context.Context, topic string, recs []stream.Record) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if err := p.failing[topic]; err != nil {
		return err
	}
	for _, r := range recs {
		if r.Topic != topic {
			return fmt.Errorf("redrivetest: record for %q published to %q", r.Topic, topic)
		}
	}
	var errs []error
	if p.refuse != nil {
		errs = make([]error, len(recs))
	}
	for i, r := range recs {
		if p.refuse != nil {
			if errs[i] = p.refuse(r); errs[i] != nil {
				continue
			}
		}
		r.Headers = slices.Clone(r.Headers)
		p.records = append(p.records, r)
	}
	for _, err := range errs {
		if err != nil {
			return &stream.PublishError{Errs: errs}
		}
	}
	return nil
}

// FailRecords makes Publish refuse the records for which refuse returns an
// error and publish the others, as a broker that wrote part of a batch
// (one partition's leader away): Publish then returns a
// [*stream.PublishError] that says which. A nil refuse ends it.
func (p *Publisher) FailRecords(refuse func(stream.Record) error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.refuse = refuse
}

// Fail makes Publish to topic return err from now on; a nil err lets it
// succeed again.
func (p *Publisher) Fail(topic string, err error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.failing == nil {
		p.failing = map[string]error{}
	}
	p.failing[topic] = err
}

// Records returns the records published so far, in order.
func (p *Publisher) Records() []stream.Record {
	p.mu.Lock()
	defer p.mu.Unlock()
	return slices.Clone(p.records)
}

// Topic returns the records published to topic so far, in order.
func (p *Publisher) Topic(topic string) []stream.Record {
	p.mu.Lock()
	defer p.mu.Unlock()
	var out []stream.Record
	for _, r := range p.records {
		if r.Topic == topic {
			out = append(out, r)
		}
	}
	return out
}

// Header returns the value of the last header called key, and whether
// there is one.
func Header(r stream.Record, key string) (string, bool) {
	for i := len(r.Headers) - 1; i >= 0; i-- {
		if r.Headers[i].Key == key {
			return string(r.Headers[i].Value), true
		}
	}
	return "", false
}
