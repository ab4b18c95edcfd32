package kafkago

import (
	"slices"

	"github.com/segmentio/kafka-go"
)

// WithOnAssigned sets a function the consumer calls each time it has joined
// a generation of its group, with the partitions assigned to it (none is
// possible: a group may have more members than partitions), before their
// workers start. A functions host uses it to report readiness. fn runs on
// the consumer's goroutine and must be quick. The default is none.
func WithOnAssigned(fn func(assigned map[string][]int32)) Option {
	return optionFunc(func(c *config) { c.onAssigned = fn })
}

// assigned calls the WithOnAssigned function with gen's assignment.
func (c *Consumer) assigned(gen *kafka.Generation) {
	if c.cfg.onAssigned == nil {
		return
	}
	parts := make(map[string][]int32, len(gen.Assignments))
	for topic, as := range gen.Assignments {
		ps := make([]int32, len(as))
		for i, a := range as {
			ps[i] = int32(a.ID)
		}
		slices.Sort(ps)
		parts[topic] = ps
	}
	c.cfg.onAssigned(parts)
}
