package engine

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/segmentio/kafka-go"
	"github.com/segmentio/kafka-go/protocol/metadata"

	"github.com/redeliver-go/redeliver/internal/health"
)

// How Run checks at start that the brokers answer and the topics exist:
// each check waits at most checkTimeout, and checks follow every
// checkInterval until one finds nothing wrong.
const (
	checkTimeout  = 5 * time.Second
	checkInterval = 2 * time.Second
)

// fetchProblems are the partitions whose fetches fail, for Health.
type fetchProblems struct {
	mu sync.Mutex
	m  map[tp]fetchProblem
}

type fetchProblem struct {
	err   error
	since time.Time
}

func (fp *fetchProblems) set(key tp, err error, since time.Time) {
	fp.mu.Lock()
	defer fp.mu.Unlock()
	if fp.m == nil {
		fp.m = make(map[tp]fetchProblem)
	}
	fp.m[key] = fetchProblem{err, since}
}

func (fp *fetchProblems) clear(key tp) {
	fp.mu.Lock()
	defer fp.mu.Unlock()
	delete(fp.m, key)
}

func (fp *fetchProblems) errs(now time.Time) []error {
	fp.mu.Lock()
	defer fp.mu.Unlock()
	keys := make([]tp, 0, len(fp.m))
	for k := range fp.m {
		keys = append(keys, k)
	}
	slices.SortFunc(keys, func(a, b tp) int {
		if a.topic != b.topic {
			if a.topic < b.topic {
				return -1
			}
			return 1
		}
		return int(a.partition - b.partition)
	})
	out := make([]error, 0, len(keys))
	for _, k := range keys {
		p := fp.m[k]
		out = append(out, fmt.Errorf("kafkago: fetching %s/%d fails since %v ago: %w", k.topic, k.partition, now.Sub(p.since).Round(time.Second), p.err))
	}
	return out
}

// Health reports what the consumer knows to be wrong now, or nil; see the
// kafkago package's Health.
func (c *Consumer) Health() error {
	return errors.Join(append([]error{c.checks.Err()}, c.fetchProblems.errs(time.Now())...)...)
}

// check is the start check: one metadata request for the group's topics,
// to the first broker that answers, and beside it the check of the
// dead-letter topic, through its publisher (which may write to another
// cluster).
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
