package engine

import (
	"context"
	"errors"
	"slices"
	"time"

	"github.com/segmentio/kafka-go"
	"github.com/segmentio/kafka-go/protocol/metadata"

	"github.com/redeliver-go/redeliver/adapters/internal/kafkaadapter"
	"github.com/redeliver-go/redeliver/internal/health"
)

// How Run checks at start that the brokers answer and the topics exist:
// each check waits at most checkTimeout, and checks follow every
// checkInterval until one finds nothing wrong.
const (
	checkTimeout  = 5 * time.Second
	checkInterval = 2 * time.Second
)

// Health reports what the consumer knows to be wrong now, or nil; see the
// kafkago package's Health.
func (c *Consumer) Health() error {
	return errors.Join(append([]error{c.checks.Err()}, c.fetchProblems.Errs(time.Now(), "kafkago", "fetching")...)...)
}

// check is the start check: one metadata request for the group's topics,
// to the first broker that answers, and beside it the check of the
// dead-letter topic, through its publisher (which may write to another
// cluster).
func (c *Consumer) check(ctx context.Context) []health.Problem {
	return kafkaadapter.CheckBeside(ctx, c.checkTopics, c.cfg.DeadLetterCheck)
}

// checkTopics checks the group's topics.
func (c *Consumer) checkTopics(ctx context.Context) []health.Problem {
	topics := slices.Sorted(slices.Values(c.cfg.Group.Topics))
	f := &fetcher{dialer: c.dialer}
	var err error
	for _, broker := range c.brokers {
		var res *metadata.Response
		res, err = f.metadataFrom(ctx, broker, topics)
		if err != nil {
			if ctx.Err() != nil {
				break
			}
			continue
		}
		var ps []health.Problem
		for _, name := range topics {
			found := false
			for _, t := range res.Topics {
				if t.Name != name {
					continue
				}
				found = true
				if t.ErrorCode != 0 {
					ps = append(ps, health.Topic("kafkago", name, "consumed", kafka.Error(t.ErrorCode)))
				}
			}
			if !found {
				ps = append(ps, health.Topic("kafkago", name, "consumed", kafka.UnknownTopicOrPartition))
			}
		}
		return ps
	}
	return []health.Problem{health.Unreachable("kafkago", err)}
}
