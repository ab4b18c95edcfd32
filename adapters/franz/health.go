package franz

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

// Health reports what the consumer knows to be wrong now, or nil: for a
// host's readiness, say. Run checks at start, and again every 2s until the
// checks pass, that the brokers answer (within 5s) and that the topics it
// consumes and the dead-letter topics of its publishers ([WithPublisher],
// as [stream.DeadLetter] names them) exist and may be used; it logs each
// problem when it finds it, at Error for brokers that do not answer and at
// Warn for a topic, and at Info when it is gone. While Run runs, a
// partition whose fetches fail is reported too (see the package doc). The
// error joins one error per problem. Health is safe for concurrent use.
func (c *Consumer) Health() error {
	if c == nil || c.life == nil {
		return errNotMade
	}
	return errors.Join(append([]error{c.checks.Err()}, c.fetchErrs.Problems(time.Now())...)...)
}

// check is the start check: one metadata request for the consumed topics
// and the dead-letter topics.
func (c *Consumer) check(ctx context.Context) []health.Problem {
	topics := kcheck.Consumed(c.cl)
	for _, pub := range c.cfg.publishers {
		for _, name := range pub.deadLetterTopics() {
			topics = append(topics, kcheck.Topic{Name: name, Role: "dead-letter"})
		}
	}
	return kcheck.Check(ctx, c.cl, "franz", topics)
}
