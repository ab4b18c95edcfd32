package engine

import (
	"context"
	"errors"
	"time"

	"github.com/redeliver-go/redeliver/adapters/franz/internal/kcheck"
	"github.com/redeliver-go/redeliver/internal/health"
)

// How Run checks at start that the brokers answer and the topics exist:
// each check waits at most checkTimeout, and checks follow every
// checkInterval until one finds nothing wrong.
const (
	checkTimeout  = 5 * time.Second
	checkInterval = 2 * time.Second
)

// Health reports what the consumer knows to be wrong now, or nil; see
// the franz package's Health.
func (c *Consumer) Health() error {
	return errors.Join(append([]error{c.checks.Err()}, c.fetchErrs.Problems(time.Now())...)...)
}

// check is the start check: one metadata request for the consumed topics
// and the dead-letter topics, and beside it the check of the dead-letter
// topic of a publisher of its own.
func (c *Consumer) check(ctx context.Context) []health.Problem {
	if c.cfg.DeadLetterCheck == nil {
		return c.checkTopics(ctx)
	}
	var dl []health.Problem
	done := make(chan struct{})
	go func() {
		defer close(done)
		dl = c.cfg.DeadLetterCheck(ctx)
	}()
	ps := c.checkTopics(ctx)
	<-done
	return append(ps, dl...)
}

// checkTopics checks the consumed topics and those of the publishers bound
// to the consumer's client.
func (c *Consumer) checkTopics(ctx context.Context) []health.Problem {
	topics := kcheck.Consumed(c.cl)
	for _, pub := range c.cfg.Publishers {
		for _, name := range pub.DeadLetterTopics() {
			topics = append(topics, kcheck.Topic{Name: name, Role: "dead-letter"})
		}
	}
	return kcheck.Check(ctx, c.cl, "franz", topics)
}
