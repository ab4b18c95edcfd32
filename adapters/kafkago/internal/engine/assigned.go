package engine

import (
	"slices"

	"github.com/segmentio/kafka-go"
)

// assigned calls the WithOnAssigned function with gen's assignment.
func (c *Consumer) assigned(gen *kafka.Generation) {
	if c.cfg.OnAssigned == nil {
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
	c.cfg.OnAssigned(parts)
}
